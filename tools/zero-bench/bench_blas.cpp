#include "tools/zero-bench/bench_blas.h"

#include <chrono>
#include <cstdint>
#include <fstream>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>

#include "base/error.h"
#include "models/blas/openblas.h"
#include "tools/zero-bench/bench_stats.h"

namespace zero::bench {
namespace {

// One product of the CPU layers (models/layers/layers.cpp's gemm calls), row-major:
// C[M,N] (+)= op(A) op(B) over K.
struct Product {
  std::string name;
  bool trans_a, trans_b;
  int M, N, K;
  float beta;
};

// A linear layer in->out over N rows: the forward (out = x W^T) and the backward's two
// products (dx += dout W, dW += dout^T x), as matmul_forward and matmul_backward run them.
void add_linear(std::vector<Product>& products, const std::string& name, int N, int in, int out) {
  products.push_back({name + " forward", false, true, N, out, in, 0.0f});
  products.push_back({name + " dinp", false, false, N, in, out, 1.0f});
  products.push_back({name + " dweight", true, false, out, in, N, 1.0f});
}

std::vector<Product> gpt2_products(int N, int C, int V) {
  std::vector<Product> products;
  add_linear(products, "qkv", N, C, 3 * C);
  add_linear(products, "attn proj", N, C, C);
  add_linear(products, "fc", N, C, 4 * C);
  add_linear(products, "fc proj", N, 4 * C, C);
  add_linear(products, "head", N, C, V);
  return products;
}

std::vector<float> filled(std::size_t n, std::uint32_t seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = static_cast<float>(seed >> 8) / static_cast<float>(1u << 24) - 0.5f;
  }
  return v;
}

}  // namespace

CLI::App* add_blas_command(CLI::App& app, BlasBenchOptions& options) {
  CLI::App* command = app.add_subcommand(
      "blas",
      "The CPU layers' BLAS: which library, threading and kernel set run their matrix products "
      "and who chose the kernels (zero from cpuid, or OPENBLAS_CORETYPE), with a warning when "
      "they are a fallback below what the CPU runs; then GFLOP/s of each product of a GPT-2 "
      "block and its head, forward and backward, per thread count.");
  command->add_flag("--info", options.info, "Only say what runs the products, and the CPU");
  command->add_option("--rows", options.rows, "Rows N of every product: micro-batch x sequence")
      ->capture_default_str();
  command->add_option("--channels", options.channels, "The model's width C")->capture_default_str();
  command->add_option("--vocab", options.vocab, "The head's vocabulary V")->capture_default_str();
  command->add_option("--threads", options.threads, "OpenMP thread counts to measure")
      ->capture_default_str();
  command->add_option("--repeats", options.repeats, "Timed calls per product (median)")
      ->capture_default_str();
  command->add_option("--json", options.json, "Append one JSON line per measurement to FILE");
  return command;
}

int run_blas_bench(const BlasBenchOptions& options) {
  if (options.rows < 1 || options.channels < 1 || options.vocab < 1) {
    throw make_error(ErrorCategory::usage, "--rows, --channels and --vocab must be at least 1");
  }
  if (options.repeats < 1) throw make_error(ErrorCategory::usage, "--repeats must be at least 1");
  for (int t : options.threads) {
    if (t < 1) throw make_error(ErrorCategory::usage, "--threads: {} is not a thread count", t);
  }
  const blas::Info& info = blas::load();
  fmt::print("zero-bench blas: {}\n  library: {}\n  CPU: {}, {} kernels at best\n", info.line(),
             info.library, info.cpu, blas::kernel_set_name(info.cpu_set));
  if (const auto warning = info.warning()) fmt::print("warning: {}\n", *warning);
  const nlohmann::json about{{"library", info.library},
                             {"config", info.config},
                             {"core", info.core},
                             {"threading", info.threading},
                             {"chosen_by", info.chosen_by},
                             {"kernel_set", blas::kernel_set_name(info.core_set)},
                             {"cpu", info.cpu},
                             {"cpu_kernel_set", blas::kernel_set_name(info.cpu_set)}};
  std::ofstream json;
  if (!options.json.empty()) json.open(options.json, std::ios::app);
  if (options.info) {
    if (json.is_open())
      json << nlohmann::json{{"bench", "blas_info"}, {"blas", about}}.dump() << "\n";
    return 0;
  }

  const std::vector<Product> products =
      gpt2_products(options.rows, options.channels, options.vocab);
  std::size_t largest = 0;
  for (const Product& p : products) {
    largest = std::max({largest, static_cast<std::size_t>(p.M) * p.K,
                        static_cast<std::size_t>(p.K) * p.N, static_cast<std::size_t>(p.M) * p.N});
  }
  const std::vector<float> a = filled(largest, 1), b = filled(largest, 2);
  std::vector<float> c(largest, 0.0f);
  fmt::print("\n{:<18} {:>22} {:>7} {:>10} {:>10}\n", "product", "M x N x K", "threads", "ms",
             "GFLOP/s");
  for (int threads : options.threads) {
    omp_set_num_threads(threads);
    double total_s = 0, total_flops = 0;
    for (const Product& p : products) {
      const int lda = p.trans_a ? p.M : p.K, ldb = p.trans_b ? p.K : p.N;
      const auto call = [&] {
        blas::sgemm(blas::Order::row_major, p.trans_a ? blas::Trans::yes : blas::Trans::no,
                    p.trans_b ? blas::Trans::yes : blas::Trans::no, p.M, p.N, p.K, 1.0f, a.data(),
                    lda, b.data(), ldb, p.beta, c.data(), p.N);
      };
      call();  // warm-up: OpenBLAS's buffers, the pages of C
      std::vector<double> times;
      for (int r = 0; r < options.repeats; ++r) {
        const auto start = std::chrono::steady_clock::now();
        call();
        times.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      const double seconds = median(times);
      const double flops = 2.0 * p.M * p.N * p.K;
      total_s += seconds;
      total_flops += flops;
      fmt::print("{:<18} {:>22} {:>7} {:>10.3f} {:>10.1f}\n", p.name,
                 fmt::format("{} x {} x {}", p.M, p.N, p.K), threads, seconds * 1e3,
                 flops / seconds / 1e9);
      if (json.is_open()) {
        json << nlohmann::json{{"bench", "blas"},    {"product", p.name},
                               {"M", p.M},           {"N", p.N},
                               {"K", p.K},           {"threads", threads},
                               {"seconds", seconds}, {"gflops", flops / seconds / 1e9},
                               {"blas", about}}
                    .dump()
             << "\n";
      }
    }
    fmt::print("{:<18} {:>22} {:>7} {:>10.3f} {:>10.1f}\n", "all of the above", "", threads,
               total_s * 1e3, total_flops / total_s / 1e9);
    if (json.is_open()) {
      json << nlohmann::json{{"bench", "blas_total"},
                             {"threads", threads},
                             {"rows", options.rows},
                             {"channels", options.channels},
                             {"vocab", options.vocab},
                             {"seconds", total_s},
                             {"gflops", total_flops / total_s / 1e9},
                             {"blas", about}}
                  .dump()
           << "\n";
    }
  }
  return 0;
}

}  // namespace zero::bench

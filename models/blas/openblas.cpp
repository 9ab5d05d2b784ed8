// OpenBLAS loaded at run time with the kernel set chosen first (openblas.h).
#include "models/blas/openblas.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <vector>

#include <dlfcn.h>
#include <fmt/format.h>

namespace zero::blas {
namespace {

using DgemmFunction = void (*)(int, int, int, int, int, int, double, const double*, int,
                               const double*, int, double, double*, int);

// The library the build was configured with (cmake/ZeroDependencies.cmake), then the one the
// dynamic loader finds by its soname (a bundle's, on LD_LIBRARY_PATH).
#ifndef ZERO_OPENBLAS_LIBRARY
#define ZERO_OPENBLAS_LIBRARY "libopenblas.so.0"
#endif
constexpr const char* kCandidates[] = {ZERO_OPENBLAS_LIBRARY, "libopenblas.so.0"};
constexpr const char* kCoreVariable = "OPENBLAS_CORETYPE";

struct Library {
  Info info;
  SgemmFunction sgemm = nullptr;
  DgemmFunction dgemm = nullptr;
};

// The file a handle was loaded from.
std::string loaded_path(void* handle, const char* fallback) {
  void* symbol = dlsym(handle, "openblas_get_config");
  Dl_info where{};
  if (symbol != nullptr && dladdr(symbol, &where) != 0 && where.dli_fname != nullptr) {
    return where.dli_fname;
  }
  return fallback;
}

// An OpenBLAS the program already holds (linked, or loaded by another part of it).
void* already_loaded(std::string& path) {
  for (const char* candidate : kCandidates) {
    if (void* handle = dlopen(candidate, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD)) {
      path = loaded_path(handle, candidate);
      return handle;
    }
  }
  return nullptr;
}

// Loads the first candidate that opens, with OPENBLAS_CORETYPE set to `core` for the load when
// given (the variable is restored after it).
void* open_library(const std::optional<std::string>& core, std::string& path) {
  if (core) setenv(kCoreVariable, core->c_str(), 1);
  std::string errors;
  void* handle = nullptr;
  for (const char* candidate : kCandidates) {
    handle = dlopen(candidate, RTLD_NOW | RTLD_GLOBAL);
    if (handle != nullptr) {
      path = loaded_path(handle, candidate);
      break;
    }
    const char* why = dlerror();
    errors += fmt::format("{}{}: {}", errors.empty() ? "" : "; ", candidate,
                          why != nullptr ? why : "not found");
  }
  if (core) unsetenv(kCoreVariable);
  if (handle == nullptr) {
    throw std::runtime_error(fmt::format(
        "the CPU layers' BLAS: cannot load OpenBLAS ({}); install it (Debian: apt install "
        "libopenblas0-openmp; scripts/install-deps.sh does)",
        errors));
  }
  return handle;
}

template <class F>
F symbol(void* handle, const char* name, const std::string& path) {
  void* found = dlsym(handle, name);
  if (found == nullptr) {
    throw std::runtime_error(fmt::format(
        "the CPU layers' BLAS: {} has no {}: it is not OpenBLAS, or too old a one", path, name));
  }
  return reinterpret_cast<F>(found);
}

std::string threading_name(int parallel) {
  switch (parallel) {
    case 0:
      return "sequential";
    case 1:
      return "pthreads";
    case 2:
      return "OpenMP";
  }
  return fmt::format("threading {}", parallel);
}

Library load_library() {
  const CpuTraits& cpu = cpu_traits();
  Library lib;
  Info& info = lib.info;
  info.cpu = cpu.describe();
  info.cpu_set = best_kernel_set(cpu);
  const char* user = std::getenv(kCoreVariable);
  void* handle = already_loaded(info.library);
  const bool handle_was_ours = handle == nullptr;
  if (handle != nullptr) {
    info.chosen_by = "the program, which loaded OpenBLAS before the CPU layers";
  } else if (user != nullptr && *user != '\0') {
    if (const auto problem = core_problem(user, cpu)) {
      throw std::runtime_error(fmt::format(
          "{}={}: {}: the program would stop with an illegal instruction; unset it (zero then "
          "chooses {}) or name a core this CPU runs",
          kCoreVariable, user, *problem, preferred_core(cpu).value_or("with OpenBLAS")));
    }
    handle = open_library(std::nullopt, info.library);
    info.chosen_by = fmt::format("{}={}", kCoreVariable, user);
  } else {
    const std::optional<std::string> core = preferred_core(cpu);
    handle = open_library(core, info.library);
    info.chosen_by = core ? "zero, from cpuid" : "OpenBLAS, from the CPU's model";
  }
  using Text = char* (*)();
  using Number = int (*)();
  info.config = symbol<Text>(handle, "openblas_get_config", info.library)();
  info.core = symbol<Text>(handle, "openblas_get_corename", info.library)();
  info.threading = threading_name(symbol<Number>(handle, "openblas_get_parallel", info.library)());
  info.core_set = core_kernel_set(info.core);
  if (user != nullptr && *user != '\0' && handle_was_ours && !same_core(user, info.core)) {
    info.chosen_by += fmt::format(", which this OpenBLAS does not have: it chose {}", info.core);
  }
  lib.sgemm = symbol<SgemmFunction>(handle, "cblas_sgemm", info.library);
  lib.dgemm = symbol<DgemmFunction>(handle, "cblas_dgemm", info.library);
  if (const auto wrong = check_products(lib.sgemm)) {
    throw std::runtime_error(fmt::format(
        "the CPU layers' BLAS: OpenBLAS's {} kernels ({}) computed a wrong product on this CPU "
        "({}): {}; name another core in {} (e.g. {}) and report it",
        info.core, info.library, info.cpu, *wrong, kCoreVariable,
        info.core_set == KernelSet::avx512 ? "Haswell" : "Prescott"));
  }
  return lib;
}

const Library& library() {
  static const Library lib = load_library();
  return lib;
}

// A fixed pseudo-random value in [-1, 1).
float draw(std::uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<float>(static_cast<std::int64_t>(state >> 40) - (1 << 23)) / (1 << 23);
}

// Element (i, j) of a matrix stored with leading dimension ld, in `order`, transposed or not.
std::size_t at(Order order, bool trans, int i, int j, int ld) {
  if (trans) std::swap(i, j);
  return order == Order::row_major ? static_cast<std::size_t>(i) * ld + j
                                   : static_cast<std::size_t>(j) * ld + i;
}

}  // namespace

std::string Info::line() const {
  return fmt::format("{} ({}), core {}: {} kernels, chosen by {}",
                     config.substr(0, config.find(" NO_")), threading, core,
                     kernel_set_name(core_set), chosen_by);
}

std::optional<std::string> Info::warning() const {
  if (!is_fallback(core_set, cpu_set)) return std::nullopt;
  return fmt::format(
      "OpenBLAS runs its {} kernels ({}) on a CPU that runs {} ({}): the CPU layers' matrix "
      "products run several times slower than they could; {}",
      core, kernel_set_name(core_set), kernel_set_name(cpu_set), cpu,
      chosen_by.rfind(kCoreVariable, 0) == 0
          ? fmt::format("unset {} to let zero choose", kCoreVariable)
          : fmt::format("the program loaded OpenBLAS before zero could choose; set {}={} "
                        "before it starts",
                        kCoreVariable, preferred_core(cpu_traits()).value_or("?")));
}

const Info& load() {
  return library().info;
}

void sgemm(Order order, Trans trans_a, Trans trans_b, int M, int N, int K, float alpha,
           const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  library().sgemm(static_cast<int>(order), static_cast<int>(trans_a), static_cast<int>(trans_b), M,
                  N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void dgemm(Order order, Trans trans_a, Trans trans_b, int M, int N, int K, double alpha,
           const double* A, int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  library().dgemm(static_cast<int>(order), static_cast<int>(trans_a), static_cast<int>(trans_b), M,
                  N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

std::optional<std::string> check_products(SgemmFunction sgemm) {
  struct Shape {
    int M, N, K;
    float alpha, beta;
  };
  // Small products (OpenBLAS's small-matrix kernels), a K past its blocking, and beta 0 over a
  // C of NaN (which must be overwritten, not scaled: the layers rely on it).
  const Shape shapes[] = {
      {3, 5, 7, 1.0f, 0.0f}, {33, 17, 65, 0.75f, 0.5f}, {40, 50, 400, 1.0f, 1.0f}};
  std::uint64_t state = 20261206;
  for (const Shape& s : shapes) {
    for (Order order : {Order::row_major, Order::column_major}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          const bool row = order == Order::row_major;
          // Stored dimensions of A (M x K, or K x M transposed) and B, padded leading dimensions.
          const int a_rows = ta ? s.K : s.M, a_cols = ta ? s.M : s.K;
          const int b_rows = tb ? s.N : s.K, b_cols = tb ? s.K : s.N;
          const int lda = (row ? a_cols : a_rows) + 1, ldb = (row ? b_cols : b_rows) + 2;
          const int ldc = (row ? s.N : s.M) + 3;
          std::vector<float> a(static_cast<std::size_t>(lda) * (row ? a_rows : a_cols));
          std::vector<float> b(static_cast<std::size_t>(ldb) * (row ? b_rows : b_cols));
          std::vector<float> c(static_cast<std::size_t>(ldc) * (row ? s.M : s.N));
          for (float& v : a) v = draw(state);
          for (float& v : b) v = draw(state);
          for (float& v : c) {
            v = s.beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : draw(state);
          }
          const std::vector<float> c0 = c;
          sgemm(static_cast<int>(order), static_cast<int>(ta ? Trans::yes : Trans::no),
                static_cast<int>(tb ? Trans::yes : Trans::no), s.M, s.N, s.K, s.alpha, a.data(),
                lda, b.data(), ldb, s.beta, c.data(), ldc);
          for (int i = 0; i < s.M; ++i) {
            for (int j = 0; j < s.N; ++j) {
              double sum = 0, scale = 0;
              for (int l = 0; l < s.K; ++l) {
                const double p =
                    static_cast<double>(a[at(order, ta, i, l, lda)]) * b[at(order, tb, l, j, ldb)];
                sum += p;
                scale += std::fabs(p);
              }
              const std::size_t ij = at(order, false, i, j, ldc);
              double expected = s.alpha * sum;
              if (s.beta != 0.0f) expected += static_cast<double>(s.beta) * c0[ij];
              scale =
                  std::fabs(s.alpha) * scale + (s.beta != 0.0f ? std::fabs(s.beta * c0[ij]) : 0);
              if (!(std::fabs(c[ij] - expected) <= 1e-4 * scale + 1e-30)) {
                return fmt::format(
                    "{} {}x{}x{} product (A{}, B{}, alpha {}, beta {}): C[{},{}] = {} where a "
                    "plain loop gives {}",
                    row ? "row-major" : "column-major", s.M, s.N, s.K, ta ? " transposed" : "",
                    tb ? " transposed" : "", s.alpha, s.beta, i, j, c[ij], expected);
              }
            }
          }
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace zero::blas

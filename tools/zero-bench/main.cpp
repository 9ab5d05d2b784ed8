// zero-bench: benchmarks of zero's parts, one subcommand each (one file each).
//
//   zero-bench comm [OPTIONS]   collectives: algbw and busbw per size, or --overlap
//   zero-bench adam [OPTIONS]   the fused CPU optimizer step against its bandwidth floor
//   zero-bench aio PATH         direct I/O read and write GB/s against fio's io_uring engine
//   zero-bench offload PATH     the NVMe-offloaded optimizer step against its I/O and its Adam
//   zero-bench checkpoint PATH  a GPT-2-sized checkpoint: save, load, inspect and export
//   zero-bench speculate        super_offload's overlapped step against the step after backward
//   zero-bench offload-step     the offloaded step on the timed CPU device against its floor
//   zero-bench blas             the CPU layers' BLAS: what runs, and GFLOP/s of a GPT-2 block's
//                               products
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "base/error.h"
#include "tools/zero-bench/bench_adam.h"
#include "tools/zero-bench/bench_aio.h"
#include "tools/zero-bench/bench_blas.h"
#include "tools/zero-bench/bench_checkpoint.h"
#include "tools/zero-bench/bench_comm.h"
#include "tools/zero-bench/bench_offload.h"
#include "tools/zero-bench/bench_offload_step.h"
#include "tools/zero-bench/bench_speculate.h"

namespace {

constexpr int kUsage = 2;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "zero-bench: benchmarks of zero's parts. Multi-rank ones run on every rank of a job:\n"
      "  zero-run -n 2 -- zero-bench comm\n"
      "Rank 0 prints the results. Exit status: 0, 1 on a failure, 2 on a usage error.",
      "zero-bench"};
  app.require_subcommand(1);

  zero::bench::CommBenchOptions comm_options;
  CLI::App* comm_command = zero::bench::add_comm_command(app, comm_options);
  zero::bench::AdamBenchOptions adam_options;
  CLI::App* adam_command = zero::bench::add_adam_command(app, adam_options);
  zero::bench::AioBenchOptions aio_options;
  CLI::App* aio_command = zero::bench::add_aio_command(app, aio_options);
  zero::bench::OffloadBenchOptions offload_options;
  CLI::App* offload_command = zero::bench::add_offload_command(app, offload_options);
  zero::bench::CheckpointBenchOptions checkpoint_options;
  CLI::App* checkpoint_command = zero::bench::add_checkpoint_command(app, checkpoint_options);
  zero::bench::SpeculateBenchOptions speculate_options;
  CLI::App* speculate_command = zero::bench::add_speculate_command(app, speculate_options);
  zero::bench::OffloadStepBenchOptions offload_step_options;
  CLI::App* offload_step_command = zero::bench::add_offload_step_command(app, offload_step_options);
  zero::bench::BlasBenchOptions blas_options;
  CLI::App* blas_command = zero::bench::add_blas_command(app, blas_options);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : kUsage;
  }

  try {
    if (*comm_command) return zero::bench::run_comm_bench(comm_options);
    if (*adam_command) return zero::bench::run_adam_bench(adam_options);
    if (*aio_command) return zero::bench::run_aio_bench(aio_options);
    if (*offload_command) return zero::bench::run_offload_bench(offload_options);
    if (*checkpoint_command) return zero::bench::run_checkpoint_bench(checkpoint_options);
    if (*speculate_command) return zero::bench::run_speculate_bench(speculate_options);
    if (*offload_step_command) return zero::bench::run_offload_step_bench(offload_step_options);
    if (*blas_command) return zero::bench::run_blas_bench(blas_options);
    return kUsage;
  } catch (const zero::Error& error) {
    std::cerr << "zero-bench: " << error.what() << "\n";
    return error.category() == zero::ErrorCategory::usage ? kUsage : 1;
  } catch (const std::exception& error) {
    std::cerr << "zero-bench: " << error.what() << "\n";
    return 1;
  }
}

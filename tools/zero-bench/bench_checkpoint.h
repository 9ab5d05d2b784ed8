// zero-bench checkpoint: a GPT-2-shaped model's checkpoint on one rank: the engine's save and
// load (GB/s), zero-ckpt inspect (verifying every checksum) and zero-ckpt export, each export
// and inspect a child process whose peak resident memory is reported: the export streams, so
// its peak stays far below the model's size.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace zero::bench {

struct CheckpointBenchOptions {
  std::string path;                 // a directory on the disk to save to
  std::string model = "gpt2-124m";  // gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b
  std::string zero_ckpt;            // the zero-ckpt program; empty: beside zero-bench
  bool keep = false;                // keep the checkpoint and the export
  std::string json;                 // JSON lines file, empty: none
};

CLI::App* add_checkpoint_command(CLI::App& app, CheckpointBenchOptions& options);

// Returns the exit status; throws zero::Error.
int run_checkpoint_bench(const CheckpointBenchOptions& options);

}  // namespace zero::bench

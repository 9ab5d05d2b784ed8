// zero-bench offload-step: the optimizer-offloaded step (stage 3, the optimizer on the CPU) on
// the timed CPU device (device/device.h, CpuDeviceMode::timed), the engine's real schedule with
// its real host work (CPU optimizer, host adds, norm) and a GPU's time for every copy and
// kernel (timing only: the device's copies and kernels move no data, so this machine's cores
// are left to the host's work as beside a GPU; the stand-in's values do not matter), against
// the step's floor: max(compute, the CPU optimizer alone, the gradients down
// the link, the parameters up it). The compute is a stand-in on a stream of the device (each
// module's forward and backward a timed task there), so the host runs ahead of it as it runs
// ahead of a GPU. By default the stand-in model has gpt2-1.5b-on-an-H200's proportions scaled
// to this machine: compute 0.45 and each direction of the link 0.2 of the CPU optimizer's step
// (measured first), which is what the H200 run's 0.16 s of compute, 0.35 s of CPU Adam and 3.1
// GB each way at about 50 GB/s give. Each mode reports the step, the ratio to its floor (paired:
// per block of a few steps, against the optimizer alone measured right after the block, as this
// machine's speed drifts within seconds; the median over the blocks) and
// where the time went: the compute stream, the link in each direction, the host adds and the
// engine's step call, from the device's trace (--trace writes it as a Chrome trace).
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace zero::bench {

struct OffloadStepBenchOptions {
  double params = 40e6;       // trainable elements, split evenly over the modules
  int modules = 16;           // one parameter each
  double bucket = 0;          // reduce bucket and step group elements; 0: params / 32
  double compute_ms = 0;      // forward + backward per step; 0: 0.45 x the optimizer alone
  double link_gbps = 0;       // each direction; 0: one direction's bytes in 0.2 x the optimizer
  double kernel_gbps = 2500;  // the device memory's
  int threads = 2;            // the CPU optimizer's threads
  int steps = 24;             // measured steps per mode
  int block = 2;              // measured steps between measurements of the optimizer alone
  int accumulation = 1;       // gradient_accumulation_steps
  // offload_optimizer.accumulate_on_device: a window's gradients summed on the device, down once
  bool accumulate_on_device = false;
  std::vector<std::string> modes = {"pinned", "super_offload"};  // which configurations run
  std::string trace;  // Chrome trace of the last mode's last step, empty: none
  std::string json;   // JSON lines file, empty: none
};

CLI::App* add_offload_step_command(CLI::App& app, OffloadStepBenchOptions& options);

// Returns the exit status; throws zero::Error (usage errors for bad values).
int run_offload_step_bench(const OffloadStepBenchOptions& options);

}  // namespace zero::bench

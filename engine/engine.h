// The Engine: one rank's share of a ZeRO data-parallel training run. A model registers its
// parameter groups, modules and parameters, calls init, then drives training through the four
// module hooks and step(); the engine owns every byte of model state and places it by the ZeRO
// stage (docs/design.md, "The model of state"):
//
//   stage 0  everything replicated; gradients all-reduced in buckets at the boundary
//   stage 1  masters and moments sharded; gradients reduce-scattered at the boundary
//   stage 2  as 1, and a module's full gradients live only from its pre_backward to its
//            post_backward; reduced into the owned shard every micro-step
//   stage 3  as 2, and the compute parameters sharded too: gathered for a module's hooks
//
// Collective order: every collective the engine issues follows the registration (buckets in
// plan order, gathers in hook order), never timing, so ranks that call the same hooks in the
// same order issue the same collectives. The hooks, step() and read_param() are collective over
// the engine's communicator in that sense: every rank calls them in the same order.
//
// Not thread-safe: one thread drives an engine.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "config/config.h"
#include "device/memory.h"
#include "engine/plan/registry.h"

namespace zero {
class Communicator;
class Device;
class Stream;
}  // namespace zero

namespace zero::engine {

// How a parameter gets its first value.
//   from_rank0: rank 0's `values` (numel floats) are broadcast; other ranks' are not read.
//   initializer: called with (global element offset, count, out) for the ranges this rank
//     needs, so the values do not depend on the world size.
//   zeros: neither given.
using Initializer = std::function<void(std::uint64_t offset, std::size_t count, float* out)>;
struct InitialValue {
  const float* values = nullptr;
  Initializer initializer;
};

struct StepStats {
  bool stepped = false;  // this call was an accumulation boundary and ran the optimizer
  bool skipped = false;  // non-finite gradients (fp16, bf16 checked): optimizer and schedule held
  double loss_scale = 1.0;  // the scale the boundary's gradients were computed with
  double grad_norm = 0.0;   // global norm of the unscaled gradients (0 when not stepped or skipped)
  double lr = 0.0;          // the optimizer step's learning rate (before lr_scale); when
                            // skipped, the one the schedule still holds
  std::int64_t global_steps = 0;  // optimizer steps taken so far, skipped ones included
  std::int64_t micro_steps = 0;   // step() calls so far
  // The boundary's verdict is still on the device (step(false) with the verdict there): skipped
  // and grad_norm are not known yet; last_step_stats() waits for them.
  bool verdict_pending = false;
  // zero_quantized_error_check, at a boundary: the relative L2 error of this window's quantized
  // stage-3 gathers and reduced gradients against exact ones, over every rank (-1: not measured)
  double quantization_error_weights = -1;
  double quantization_error_gradients = -1;
};

// Bytes this rank holds, by tier and kind: live now and the most there ever were.
struct MemoryUsage {
  Tier tier = Tier::device;
  MemoryKind kind = MemoryKind::param;
  std::size_t live = 0;
  std::size_t peak = 0;
};

// One arena of this rank: what it reserved and, by kind (kAllMemoryKinds order), the bytes of
// its blocks live now and the most there ever were.
struct ArenaUsage {
  std::string name;
  Tier tier = Tier::device;
  std::size_t capacity = 0;
  std::array<std::size_t, kAllMemoryKinds.size()> live{};
  std::array<std::size_t, kAllMemoryKinds.size()> peak{};
};

// Stage 3: what the parameter fetcher has done since init (zeros at other stages).
struct FetchStats {
  std::int64_t gathers = 0;            // all-gathers issued
  std::int64_t prefetches = 0;         // of them, issued ahead by the recorded order
  std::int64_t secondary_gathers = 0;  // of them, from hpZ's secondary partition
  std::int64_t hits = 0;               // a hook's parameter already there or on its way
  std::int64_t invalidations = 0;      // recorded orders a pass did not follow
  std::size_t train_hooks = 0;         // length of the recorded training order (0: none)
  std::size_t eval_hooks = 0;          // and of the evaluation order
  std::size_t live_elements = 0;       // gathered now, persistent parameters aside
  std::size_t peak_live_elements = 0;  // the most there were at once
};

struct SaveOptions {
  std::string tag;        // empty: "global_step<N>"
  std::string user_data;  // opaque bytes kept with the checkpoint (e.g. the data position)
};

struct LoadOptions {
  std::string tag;           // empty: the one DIR/latest names
  bool module_only = false;  // the values only: no moments, counters or loss-scale state
};

struct LoadResult {
  std::string directory;  // DIR/<tag>
  std::string tag;
  std::string user_data;
  std::int64_t global_steps = 0;  // of the checkpoint
};

// How load_pretrained maps the files' tensors onto the registered parameters.
struct PretrainedOptions {
  // A parameter's tensor name in the files, where it differs from the parameter's name.
  std::vector<std::pair<std::string, std::string>> names;
  // Parameters stored transposed: a 2-D [rows, cols] parameter whose tensor is [cols, rows]
  // (Hugging Face GPT-2's Conv1D weights).
  std::vector<std::string> transposed;
  // The files' tensors no parameter takes (buffers such as attention masks): not an error.
  std::vector<std::string> ignore;
  // Parameters the files do not hold: they keep their values.
  std::vector<std::string> skip;
};

struct EngineOptions {
  // OpenMP threads of the CPU optimizer; 0: one.
  int optimizer_threads = 0;
  // Seed of bf16 optimizer state's stochastic rounding.
  std::uint64_t seed = 0;
};

struct FaultHooks;

class Engine {
 public:
  Engine(config::Config config, std::unique_ptr<Device> device, std::unique_ptr<Communicator> comm,
         EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  friend void set_fault_hooks(Engine& engine, FaultHooks hooks);  // tests (fault_hooks.h)
  Engine& operator=(const Engine&) = delete;

  const config::Config& config() const noexcept;
  int rank() const noexcept;
  int world_size() const noexcept;
  // The dtype of param_data and grad_buffer: fp32, bf16 or fp16 by the config's precision.
  DType compute_dtype() const noexcept;
  const Registry& registry() const noexcept;
  Device& device() noexcept;
  const Device& device() const noexcept;
  Communicator& communicator() noexcept;

  // Registration (before init). Group 0 is "default" with the optimizer's weight decay.
  std::size_t add_group(std::string name, double weight_decay, double lr_scale);
  std::size_t add_module(std::string name);
  std::size_t add_param(std::string name, std::vector<std::int64_t> shape, bool trainable,
                        std::size_t group, std::vector<std::size_t> modules,
                        InitialValue initial = {});

  // Memory the program will hold beside the engine from now on (its model's activations and
  // workspaces), in `tier` (device, pinned or host), described by `what`: init counts it in its
  // check that the run fits the machine (memory_fit.h). Before init.
  void declare_memory(Tier tier, std::uint64_t bytes, std::string what);

  // Collective. Checks that every rank registered the same thing (naming the first difference),
  // lays out the model state, checks that it and the declared memory fit what the machine had
  // free at creation (an out_of_memory Error naming each pool that is short and what to lower,
  // before anything is reserved), allocates the state, and fills in the initial values.
  void init();
  bool initialized() const noexcept;

  // The module hooks. `stream` is the caller's (nullptr: the calling thread on the CPU, the
  // legacy default stream on CUDA): a hook's work comes after the caller's work already there,
  // and the caller's later work there after what the hook provides (gathered parameters,
  // zeroed gradient buffers), through events (zero.h, "Streams").
  void pre_forward(std::size_t module, Stream* stream = nullptr);
  void post_forward(std::size_t module, Stream* stream = nullptr);
  void pre_backward(std::size_t module, Stream* stream = nullptr);
  void post_backward(std::size_t module, Stream* stream = nullptr);
  // The Stream over a caller's native stream (a cudaStream_t), kept for the engine's life;
  // nullptr for nullptr.
  Stream* caller_stream(void* native);

  // The compute copy of a parameter (compute_dtype, numel elements, row-major). Stages 0-2:
  // valid from init to destruction, changed only by step(). Stage 3: valid between a
  // pre_forward/pre_backward and the matching post hook of a module that uses it.
  void* param_data(std::size_t param);
  // The gradient a module's backward adds into (compute_dtype, numel elements). Valid between
  // pre_backward and post_backward of the modules that use the parameter; zero at the first of
  // them in an accumulation window (stages 0-1) or micro-step (stages 2-3). The model adds
  // (+=) its contribution, so tied parameters sum over their uses.
  void* grad_buffer(std::size_t param);
  // Whether grad_buffer(param) still holds zeros (zero_grad_is_zero); its validity.
  bool grad_is_zero(std::size_t param);

  // The factor to multiply the micro-batch's mean loss by before backward: the fp16 loss scale
  // divided by gradient_accumulation_steps (DeepSpeed scales the loss by 1/steps too).
  double loss_factor() const;
  double loss_scale() const;

  void set_train(bool train);
  bool training() const noexcept;
  // True when the next step() call ends an accumulation window and runs the optimizer.
  bool is_accumulation_boundary() const noexcept;
  // Optimizer steps so far, skipped ones included (StepStats::global_steps); a checkpoint load
  // restores it.
  std::int64_t global_steps() const noexcept;
  // The learning rate the next optimizer step uses, before any group's lr_scale: the schedule
  // at that step's iteration (the first value before any step; after a load, the resumed
  // schedule's). What DeepSpeed's get_lr() returns between steps.
  double next_learning_rate() const;
  // The learning rate of every optimizer step from the next on, before any group's lr_scale,
  // in place of the schedule (a schedule the caller runs: a torch scheduler given to
  // zero.initialize). Refused (usage) when the config has a scheduler section, before
  // init, or for a negative or non-finite value. Not saved in checkpoints.
  void set_learning_rate(double lr);
  // The last boundary's StepStats::quantization_error_weights and _gradients (-1: none).
  std::array<double, 2> last_quantization_error() const noexcept;

  // Called after every micro-batch's backward (DeepSpeed's engine.step()). Finishes this
  // micro-step's gradient reductions; at the boundary, runs the optimizer step. Where the
  // step's verdict stays on the device (the optimizer not offloaded, no fp16 loss scale), the
  // host waits for it only with `verdict_now`; without, the boundary's skipped and grad_norm
  // are pending (StepStats::verdict_pending) until last_step_stats() or the next boundary.
  StepStats step(bool verdict_now = true);
  // The StepStats of the last step() call, waiting for the device's verdict where it is pending
  // (a default StepStats before any step).
  StepStats last_step_stats();

  // Collective: the full current value of a parameter as fp32 on every rank: the master for
  // trainable parameters in mixed precision, else the compute copy.
  std::vector<float> read_param(std::size_t param);
  // With no hook open (between passes, or after a backward and before its step but for
  // super_offload), on every rank with the same `values` (numel floats; not collective: each
  // rank writes the part it keeps): sets a parameter's full value, its compute copy (or shard)
  // and a trainable parameter's fp32 master, wherever they live; the optimizer's moments and
  // the step counters are kept (DeepSpeed's safe_set_full_fp32_param).
  void write_param(std::size_t param, const float* values, std::size_t count);

  // Collective. Writes DIR/<tag>/: one safetensors file per rank with its shards of every
  // parameter's state (trainable: fp32 master and the optimizer's moments; frozen: the value)
  // and meta.json; then DIR/latest names the tag. Atomic: a failure or crash at any point leaves
  // the previous checkpoints and `latest` as they were. At an accumulation boundary only, with
  // no pass open. Throws an io Error naming the rank, file and offset when a write fails.
  void save_checkpoint(const std::string& dir, const SaveOptions& options = {});

  // Collective. Sets the state from DIR/<tag> (saved at any world size and stage): values,
  // masters and moments, step counters, loss-scale state and the rounding seed. Refuses a
  // checkpoint of another model, naming the first difference, before changing anything; a
  // failure while reading (a damaged file) leaves the engine unusable for steps.
  LoadResult load_checkpoint(const std::string& dir, const LoadOptions& options = {});

  // Collective. Sets the parameters' values from safetensors files, each rank reading only the
  // byte ranges it keeps (stage 3 never holds a whole model on one rank), converting F64, F32,
  // F16 and BF16 to the engine's dtypes. `path` is a .safetensors file, an index JSON as Hugging
  // Face writes it (model.safetensors.index.json, its "weight_map" naming each tensor's file),
  // or a directory holding either. The optimizer's moments are zeroed; counters stay. A tensor
  // missing, unused or of another shape is refused before anything changes, naming it.
  void load_pretrained(const std::string& path, const PretrainedOptions& options = {});

  // Collective: each value replaced by its mean over the ranks (in fp32), e.g. a trainer's loss.
  void mean_across_ranks(double* values, std::size_t count);
  // Collective: `bytes` of host memory from rank `root` into every rank's `data`.
  void broadcast(void* data, std::size_t bytes, int root);
  // Ends the job (every rank) with `exit_code`: this rank's NVMe swap directories are removed
  // first (kept and named after a failure), the communicator aborts the others, whose swap
  // directories go with the SIGTERM that ends them.
  [[noreturn]] void abort(int exit_code, std::string_view reason) noexcept;

  FetchStats fetch_stats() const;

  std::vector<MemoryUsage> memory_usage() const;
  // Every arena the engine made, in memory_plan.h's order.
  std::vector<ArenaUsage> arena_usage() const;
  // What the engine reserved in a tier: its arenas' capacities and its scratch, as zero-mem
  // predicts it (MemoryPlan::reserved).
  std::size_t reserved_bytes(Tier tier) const;
  // Lines for people: each tier and kind with live and peak bytes.
  std::string memory_report() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace zero::engine

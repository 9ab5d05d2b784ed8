// The Engine's state, shared by the translation units that each implement one concern of it:
// engine.cpp (registration, init, layout, accessors), initial_values.cpp (the first values),
// pretrained.cpp (safetensors weights). The parts with state of their own:
// the ModelState (model_state.h: the state's memory, placement and swaps), the Stepper
// (stepper.h: the optimizer step, the loss scaler and the step counters), the GradReducer
// (grad_reducer.h: gradients, buckets and their reductions), the ParamFetcher
// (param_fetcher.h: stage-3 gathers, plans and reads of swapped shards, through the ModelState
// as its ShardStore), the Agreement (agreement.h: outcomes every rank must share) and the
// CheckpointState (checkpoint_state.h: save and load, an operation over the others).
// Internal to engine/.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/timer.h"
#include "comm/communicator.h"
#include "comm/work.h"
#include "device/arena.h"
#include "device/device.h"
#include "device/device_scratch.h"
#include "engine/collectives/agreement.h"
#include "engine/collectives/overlap_timeline.h"
#include "engine/collectives/quantization_error.h"
#include "engine/engine.h"
#include "engine/fault_hooks.h"
#include "engine/fetching/fetch_plan.h"
#include "engine/fetching/param_fetcher.h"
#include "engine/gradients/grad_reducer.h"
#include "engine/hooks/caller_order.h"
#include "engine/hooks/pass_tracker.h"
#include "engine/plan/memory_fit.h"
#include "engine/plan/memory_plan.h"
#include "engine/plan/partition.h"
#include "engine/plan/registry.h"
#include "engine/state/checkpoint_state.h"
#include "engine/state/model_state.h"
#include "engine/state/optimizer_swap.h"
#include "engine/state/value_source.h"
#include "engine/stepping/loss_scaler.h"
#include "engine/stepping/stepper.h"
#include "optim/optimizer.h"

namespace zero::engine {

struct Engine::Impl {
  Impl(config::Config config, std::unique_ptr<Device> device, std::unique_ptr<Communicator> comm,
       EngineOptions options);
  ~Impl();

  // ---- engine.cpp ----
  void check_same_registration();
  void check_same_config();
  void require_initialized(const char* call) const;
  // Initialised and not failed: the hooks (after a failure the state may be half updated).
  void require_running(const char* call) const;
  // Initialised, not failed, no pass open, at an accumulation boundary: checkpoints and
  // pretrained weights happen only there.
  void require_quiet(const char* call) const;
  std::size_t require_module(std::size_t module, const char* call) const;
  std::size_t require_param(std::size_t param, const char* call) const;
  // A trainable parameter's gradient buffer, handed out to the backward of a module using it
  // (grad_buffer, grad_is_zero): else a usage error naming `call`.
  void* require_handed_grad(std::size_t param, const char* call) const;
  Stream& stream_of(Stream* stream);
  void poll_outstanding();
  void print_breakdowns();
  std::vector<MemoryUsage> usage() const;
  std::array<const Arena*, 7> arenas() const;  // every arena (null where not made)
  std::string memory_text() const;

  // ---- engine.cpp: init ----
  void lay_out();
  void allocate();
  void attach_quantization_error();
  void fill_initial_values();
  // A job id every rank shares, for the swap directory: rank 0's process id and clock.
  std::string agree_job_id();

  // What the parts read and call (engine_context.h).
  EngineContext context() {
    return {config,
            registry,
            layout,
            *device,
            *comm,
            shard_comm.get(),
            replica_comm.get(),
            secondary_comm.get()};
  }
  // The ranks the state is partitioned over (engine_context.h).
  Communicator& shards() { return shard_comm ? *shard_comm : *comm; }

  config::Config config;
  EngineOptions options;
  FaultHooks faults;  // tests only (fault_hooks.h)
  std::unique_ptr<Device> device;
  // wall_clock_breakdown: the communication and copies that ran while the caller computed
  // (overlap_timeline.h); on a communicator with its own stream, comm is a TimedCommunicator
  // over it. Declared before comm, which records into it.
  std::unique_ptr<OverlapTimeline> timeline;
  std::unique_ptr<Communicator> comm;
  // Hybrid sharding: this rank's shard group and its replicas (engine_context.h), split from
  // comm at construction; null without it.
  std::unique_ptr<Communicator> shard_comm;
  std::unique_ptr<Communicator> replica_comm;
  std::unique_ptr<Communicator> secondary_comm;  // hpZ's secondary group (engine_context.h)
  std::unique_ptr<CallerOrder> order;  // the caller's streams and the engine's (caller_order.h)
  Agreement agreement;                 // outcomes agreed across ranks (agreement.h)
  MemoryFit fit;  // what the machine had free at creation, checked at init (memory_fit.h)
  Registry registry;
  int rank = 0;
  int world = 1;
  int shard_rank = 0;  // this rank's place in its shard group: rank without hybrid sharding
  // How the config places the state (memory_plan.h): the layout's, set from the config and the
  // world at construction, the one copy every part reads.
  const StateModes& modes() const noexcept { return layout.modes; }
  bool initialized = false;
  bool train = true;
  PassTracker pass;  // the hooks' order within a micro-step (pass_tracker.h)

  // Per parameter, the first value its registration gave, kept until init (where its state
  // lives is the layout's ParamPlacement).
  std::vector<InitialValue> initial;
  // The layout (memory_plan.h): its modes from construction, the rest fixed at init; the same
  // on every rank.
  Layout layout;

  // Memory: the plan its arenas are sized by (memory_plan.h), and the arenas.
  MemoryPlan memory_plan;
  // The model state and where it lives (model_state.h); made by lay_out. Declared before the
  // parts that use its memory, so it outlives them.
  std::unique_ptr<ModelState> model_state;
  bool failed = false;  // a step or a load threw: no more steps; swap files kept for inspection
  std::string failure;  // what failed
  // Marks the engine failed (`what` failed): no more steps, and the NVMe swap files, whose
  // state may be half updated, are kept for inspection on every way the process ends.
  void fail(std::string what);
  // super_offload: the step's last groups, where step() left them to the optimizer's worker
  // (Stepper::await_param), stepped and placed before anything else reads or writes the state,
  // the gradients or the counters; the fetcher no longer paced. A failure there fails the
  // engine.
  void drain_steps();
  // offload_optimizer.super_offload unset ("auto"): decided from the device and the memory fit
  // before the layout (memory_plan.h, super_offload_auto_unused). Collective.
  void resolve_super_offload();
  // With the verdict on the device: waits for the last boundary's, where pending, and completes
  // last_stats with it. Before anything reads the optimizer's count or saves or loads.
  void settle_verdict();
  StepStats last_stats;  // of the last step() call

  // zero_quantized_error_check: ZeRO++'s error measured (quantization_error.h); made by
  // allocate. Declared before the reducer and the fetcher, which add to it until they are gone.
  std::unique_ptr<QuantizationError> quantization_error;
  std::array<double, 2> last_quantization_error{-1.0, -1.0};  // weights, gradients

  // Gradients, buckets and their reductions (grad_reducer.h); made by lay_out. Declared after
  // the arenas its buffers come from, so it is gone (its reductions finished) before them.
  std::unique_ptr<GradReducer> reducer;

  // Stage 3: gathers, plans and reads of swapped shards (param_fetcher.h); made by lay_out.
  // Declared after the swap file, the I/O and the arenas its reads and gathers use, so it is
  // gone (its reads and gathers finished) before them.
  std::unique_ptr<ParamFetcher> fetcher;

  // Seconds spent, summed since the last wall_clock_breakdown line.
  struct Timings {
    double forward = 0, backward = 0;          // first pre hook of the phase to its end
    double reduce_wait = 0;                    // blocked on gradient reductions
    double gather_issue = 0, gather_wait = 0;  // stage 3 all-gathers: issuing, blocked on
    double step = 0;                           // the boundary step, all of it
    double optimizer = 0;                      // the optimizer kernels within it
    double speculation = 0;                    // super_offload: the optimizer in backward
    double allgather = 0;                      // stages 1-2: the updated shards back out
    std::int64_t micro_steps = 0;
  } timers;
  Timer phase_timer;  // since the current phase began

  // The optimizer step, its scaler and counters (stepper.h); made by lay_out.
  std::unique_ptr<Stepper> stepper;
  // Save and load (checkpoint_state.h); made by lay_out.
  std::unique_ptr<CheckpointState> checkpoints;
  LossScaler initial_scaler = LossScaler::fixed(1.0);  // the loss scale before init
  std::int64_t micro_steps = 0;
  // Device scratch: [0] sum of squares, [1] non-finite flag; from byte kAgreementScratch on, the
  // agreement's.
  float* scalars = nullptr;
};

}  // namespace zero::engine

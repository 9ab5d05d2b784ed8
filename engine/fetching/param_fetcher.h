// The stage-3 fetcher. A module's parameters are all-gathered from every rank's shard for its
// hooks and released after. The first pass of each kind (training micro-step, evaluation
// forward) records the module order; later passes replay it: at each pre hook the parameters
// of the modules ahead are gathered asynchronously (up to stage3_prefetch_bucket_size elements
// ahead and stage3_max_live_parameters live), and at each post hook a parameter the plan uses
// again within stage3_max_reuse_distance elements is kept. Every decision is a function of the
// plan and the hooks so far, never of timing, so every rank issues the same gathers in the
// same order. Small (persistent) parameters stay gathered until a step changes them. With
// ZeRO++ hpZ, the first gather of a parameter after a step is over the shard group and leaves
// this rank's part of it in a secondary partition over a smaller group (a node's ranks); its
// later gathers until the next step (backward, recomputation, the next micro-steps) are over
// that group. With ZeRO++ qwZ, the gathers over the shard group move each rank's shard as
// block int8 chunks (base/block_quant.h), packed behind the gathered copy in its arena block,
// and dequantized into the copy on the default stream before anything reads it; every rank
// computes with the same dequantized values, its own part included. hpZ's secondary gathers
// stay exact. After a super_offload step that left groups to its worker the fetcher is paced
// (set_paced): no gather ahead, each waits for its shard's update.
//
// Owns: each parameter's gathered copy (from its own gather arena) and the gather in flight,
// the traces and plans, the reads of swapped shards queued ahead of their gathers, and the
// fetch statistics. Calls: the ShardStore for shards, the device's copies, the communicator's
// all-gathers. Streams: the device's default stream for copies and as the all-gathers' order;
// the caller's stream waits for a module's gathers (Work::block: an event on NCCL, the host
// on MPI). Released memory is reused after the caller's reads because the engine orders its
// default stream after the caller's at every post hook (caller_order.h). At stages 0-2 every
// call does nothing.
// Internal to engine/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/timer.h"
#include "comm/communicator.h"
#include "comm/work.h"
#include "config/config.h"
#include "device/arena.h"
#include "device/device.h"
#include "engine/collectives/agreement.h"
#include "engine/collectives/quantization_error.h"
#include "engine/engine.h"
#include "engine/engine_context.h"
#include "engine/fetching/fetch_plan.h"
#include "engine/plan/memory_plan.h"
#include "engine/plan/registry.h"
#include "engine/state/shard_store.h"

namespace zero::engine {

class ParamFetcher {
 public:
  explicit ParamFetcher(const EngineContext& context);
  // Waits for gathers and reads in flight (they use the arena and the read buffers), unless
  // the communicator is broken.
  ~ParamFetcher();
  ParamFetcher(const ParamFetcher&) = delete;
  ParamFetcher& operator=(const ParamFetcher&) = delete;

  // At init (stage 3): the gather arena, and where the shards are.
  void attach(std::unique_ptr<Arena> gather_arena, ShardStore& shards);
  // qwZ with zero_quantized_error_check: each gather's quantization measured there.
  void set_error(QuantizationError* error) noexcept { error_ = error; }
  // Called before a gather reads a parameter's shard, with the stream the read goes on: where
  // the last step's updates may still be landing (super_offload's tail, Stepper::await_param).
  void set_before_shard_read(std::function<void(std::size_t param, Stream& stream)> wait) {
    before_shard_read_ = std::move(wait);
  }
  // Paced (between a step that left its last groups to the optimizer's worker and the next
  // backward): a shard is gathered only when a hook of a module using it comes, since each
  // gather waits on the host for its shard's update (the callback above) and a gather ahead
  // would hold back the caller's work on the modules before it. No prefetch; the persistent
  // parameters' places are still taken together at the first hook, each gathered at its
  // module's. A function of the step's configuration, so the same on every rank.
  void set_paced(bool paced) noexcept { paced_ = paced; }

  // A pre hook: where the pass is in its plan, the module's own gathers (the caller's later
  // work on `caller` ordered after them), and the prefetch the plan allows from here. `top`:
  // no other hook is open.
  void enter(std::size_t module, bool backward, bool train, bool top, Stream& caller);
  // A post hook: the module's parameters released, unless the plan uses one again soon.
  void leave(std::size_t module, bool train);
  // The end of a pass: a recording becomes the plan (checked across ranks at the next step),
  // and what was gathered ahead or kept and not used is released.
  void end_pass(bool train_pass);
  // Every rank must have recorded the same orders (collective).
  void check_plans(Agreement& agreement);
  // Waits for every gather and read in flight, then releases every gathered parameter no hook
  // holds: those kept or fetched ahead, and with `stale` (the shards are changing) the
  // persistent ones.
  void release_unheld(bool stale);
  void poll();  // lets gathers in flight progress
  // The shard of `param` into `place` (device memory), after the queued reads' gathers are
  // issued: for callers whose collectives follow (read_param, checkpoints).
  void copy_shard(std::size_t param, void* place);

  // The gathered copy while it exists (null otherwise).
  void* data(std::size_t param) const {
    // A deferred persistent parameter holds its place only, not its values.
    return params_[param].deferred ? nullptr : params_[param].full;
  }
  FetchStats stats() const;
  const Arena* gather_arena() const noexcept { return gather_arena_.get(); }
  // Seconds spent issuing gathers and blocked on them since the last call.
  double take_issue_seconds() { return issue_seconds_.take(); }
  double take_wait_seconds() { return wait_seconds_.take(); }

 private:
  struct Gathered {
    void* full = nullptr;  // the gathered copy (padded to the world shard shape)
    Block block;           // the gather arena's block
    int holds = 0;         // hooks between pre and post that use it now
    Work gathering;        // the all-gather into `full`, while in_flight
    bool in_flight = false;
    bool reading = false;  // its shard is being read from NVMe; gathered after
    // hpZ: gathered over the world; this rank's secondary shard is taken from it once complete
    bool fill_secondary = false;
    // qwZ: the gather moves packed chunks, still to be dequantized into `full`
    bool packed = false;
    bool deferred = false;  // paced: its place taken, its gather not issued yet
  };
  // One trace per kind of pass, [0] training micro-steps, [1] evaluation.
  struct Trace {
    std::vector<TraceEvent> recording;  // this pass's hooks, while there is no plan
    FetchPlan plan;
    bool have_plan = false;
    std::size_t pos = 0;     // the plan's next hook
    bool unchecked = false;  // a plan recorded since the last step's cross-rank check
    int invalidations = 0;
    bool off = false;  // the order kept changing: neither recorded nor replayed
  };
  // A read of a swapped shard ahead of its gather: completed, and its all-gather issued, in the
  // order the reads were started, at the next hook or when the shard is needed: points every
  // rank reaches in the same order.
  struct PendingRead {
    std::size_t param;
    offload::Ticket ticket;
    std::size_t buffer;
  };

  // `defer`: its place only (Gathered::deferred); the next gather() of it for its module
  // issues it.
  bool gather(std::size_t param, bool own, bool defer = false);
  // The gather into `param`'s place (taken) from its shard, issued.
  void issue(std::size_t param);
  // Every persistent parameter not there, in registration order (see enter()).
  void gather_persistent();
  bool fits(std::size_t bytes) const;
  void wait(std::size_t param);
  void order_before(std::size_t param, Stream& caller);
  void release(std::size_t param);
  // hpZ: once `param`'s gather over the world is complete on the default stream, this rank's
  // part of it becomes its secondary shard, gathered from then on within the secondary group.
  void keep_secondary(std::size_t param);
  // The gather of `param` over the shard group from this rank's shard at `source` (device
  // memory, complete in the default stream's order), issued on the default stream: with qwZ
  // the shard is quantized into this rank's packed chunk and the chunks are gathered.
  Work gather_shards(std::size_t param, const void* source);
  // qwZ: once the packed chunks are gathered (on the default stream), dequantized into the
  // gathered copy there. Does nothing for a parameter without packed chunks in flight.
  void dequantize(std::size_t param);
  void start_read(std::size_t param);
  // Completes the pending reads in order, issuing their all-gathers, through `param` (all of
  // them for kNone).
  void finish_reads(std::size_t param);
  void diverge(Trace& t, const TraceEvent* event, bool train_pass);
  std::size_t gathered_elements(std::size_t param) const;
  std::string describe(const TraceEvent& event) const;

  const EngineContext ctx_;
  bool active_;              // stage 3
  int rank_;                 // in the shard group (EngineContext::shards)
  const StateModes& modes_;  // the layout's
  ShardStore* shards_ = nullptr;
  std::unique_ptr<Arena> gather_arena_;
  std::vector<Gathered> params_;
  std::vector<std::size_t> open_event_;  // per module: its pre hook's place in the plan, or kNone
  Trace traces_[2];
  std::size_t gathers_in_flight_ = 0;
  std::size_t persistent_missing_ = 0;  // persistent parameters not gathered now
  std::vector<bool> read_busy_;
  std::vector<std::unique_ptr<Event>> read_copied_;  // per read buffer: its shard copied out
  std::deque<PendingRead> reads_;
  // hpZ (EngineContext::secondary): the secondary partition (the layout's `secondary` flat
  // buffer, held in the gather arena), this rank's place in its group, and per parameter
  // whether its secondary shard holds the current values (until a step or a load).
  Block secondary_block_;
  char* secondary_ = nullptr;
  int secondary_rank_ = 0;
  std::vector<bool> secondary_valid_;
  std::unique_ptr<Event> dequantized_;  // qwZ: recorded after a dequantization, for the caller
  QuantizationError* error_ = nullptr;
  std::function<void(std::size_t, Stream&)> before_shard_read_;  // set_before_shard_read's
  bool paced_ = false;                                           // set_paced's
  FetchStats stats_;  // live_elements: gathered, not persistent
  SecondsSum issue_seconds_, wait_seconds_;
};

}  // namespace zero::engine

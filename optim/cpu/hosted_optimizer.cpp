// The CPU optimizer as work on a device stream (create_hosted_cpu_optimizer, optimizer.h):
// each step is a host task in the stream's order, over the device's host aliases of the
// slices' pointers, so it reads gradients after the work that made them and the work after
// it reads the parameters it wrote.
#include <memory>
#include <vector>

#include "optim/optimizer.h"

namespace zero::optim {
namespace {

class HostedOptimizer final : public Optimizer {
 public:
  HostedOptimizer(Device& device, std::shared_ptr<Optimizer> inner)
      : device_(device), inner_(std::move(inner)) {}

  const OptimizerSpec& spec() const noexcept override { return inner_->spec(); }
  const Formats& formats() const noexcept override { return inner_->formats(); }
  std::string description() const override { return inner_->description(); }

  void step(std::span<const Slice> slices, const StepHyper& hyper, Stream& stream) override {
    StepHyper hosted = hyper;
    hosted.verdict = static_cast<const float*>(alias(hyper.verdict));  // read when the task runs
    device_.launch_host_task(stream, [inner = inner_, aliased = aliases(slices), hosted, &stream] {
      inner->step(aliased, hosted, stream);
    });
  }

  void write_param_out(std::span<const Slice> slices, Stream& stream) override {
    device_.launch_host_task(stream, [inner = inner_, aliased = aliases(slices), &stream] {
      inner->write_param_out(aliased, stream);
    });
  }

 private:
  // The slices as the host task sees them (a copy: the task may run after the call returns).
  std::vector<Slice> aliases(std::span<const Slice> slices) {
    std::vector<Slice> out(slices.begin(), slices.end());
    for (Slice& s : out) {
      s.master = static_cast<float*>(alias(s.master));
      s.grad = alias(s.grad);
      s.state[0] = alias(s.state[0]);
      s.state[1] = alias(s.state[1]);
      s.param_out = alias(s.param_out);
      s.master_from = static_cast<const float*>(alias(s.master_from));
      s.state_from[0] = alias(s.state_from[0]);
      s.state_from[1] = alias(s.state_from[1]);
    }
    return out;
  }
  void* alias(const void* pointer) {
    return pointer != nullptr ? device_.host_alias(pointer) : nullptr;
  }

  Device& device_;
  std::shared_ptr<Optimizer> inner_;
};

}  // namespace

std::unique_ptr<Optimizer> create_hosted_cpu_optimizer(Device& device, const OptimizerSpec& spec,
                                                       const Formats& formats,
                                                       const CpuOptimizerOptions& options) {
  return std::make_unique<HostedOptimizer>(device, create_cpu_optimizer(spec, formats, options));
}

}  // namespace zero::optim

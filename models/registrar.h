// Registers a reference model's groups, modules and parameters with the engine (before
// zero_init), and remembers each parameter's name and size: what the CPU and CUDA models of one
// family share, so that both register exactly the same model.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "models/param_init.h"
#include "zero/zero.h"

namespace zero::models {

class Registrar {
 public:
  // Initial values come from `init` (normal or constant per parameter, param_init.h).
  Registrar(zero_engine* engine, ParamInit& init) : engine_(engine), init_(init) {}

  int group(const char* name, double weight_decay, double lr_scale);
  int module(const std::string& name);
  // A trainable parameter in `group`, used by `modules`, drawn normal(0, stddev) (or
  // `constant` where stddev is 0). Returns its id.
  int param(const std::string& name, const std::vector<long long>& shape, int group,
            const std::vector<int>& modules, double stddev, float constant);

  const std::vector<std::string>& names() const noexcept { return names_; }
  const std::vector<std::size_t>& numels() const noexcept { return numels_; }

 private:
  zero_engine* engine_;
  ParamInit& init_;
  std::vector<std::string> names_;   // by parameter id
  std::vector<std::size_t> numels_;  // by parameter id
};

// Throws std::runtime_error("<call>: <status>: <zero_last_error()>") unless status is ZERO_OK.
void check(zero_status status, const char* call);

}  // namespace zero::models

// Registration of the reference models (registrar.h).
#include "models/registrar.h"

#include <stdexcept>

namespace zero::models {

void check(zero_status status, const char* call) {
  if (status != ZERO_OK) {
    throw std::runtime_error(std::string(call) + ": " + zero_status_string(status) + ": " +
                             zero_last_error());
  }
}

int Registrar::group(const char* name, double weight_decay, double lr_scale) {
  int id = 0;
  check(zero_add_group(engine_, name, weight_decay, lr_scale, &id), "zero_add_group");
  return id;
}

int Registrar::module(const std::string& name) {
  int id = 0;
  check(zero_add_module(engine_, name.c_str(), &id), "zero_add_module");
  return id;
}

int Registrar::param(const std::string& name, const std::vector<long long>& shape, int group,
                     const std::vector<int>& modules, double stddev, float constant) {
  zero_param_desc desc{};
  desc.name = name.c_str();
  desc.shape = shape.data();
  desc.ndim = static_cast<int>(shape.size());
  desc.trainable = 1;
  desc.group = group;
  desc.modules = modules.data();
  desc.module_count = static_cast<int>(modules.size());
  desc.initializer = &ParamInit::initialize;
  desc.initializer_user = &init_;
  int id = -1;
  check(zero_add_param(engine_, &desc, &id), "zero_add_param");
  std::size_t numel = 1;
  for (long long d : shape) numel *= static_cast<std::size_t>(d);
  names_.resize(static_cast<std::size_t>(id) + 1);
  numels_.resize(static_cast<std::size_t>(id) + 1);
  names_[static_cast<std::size_t>(id)] = name;
  numels_[static_cast<std::size_t>(id)] = numel;
  init_.set(id, stddev, constant);
  return id;
}

}  // namespace zero::models

// The C API's engine functions (include/zero/zero.h): each checks its handle and arguments,
// calls the C++ Engine inside zero::guard (exceptions become a status and the thread's last
// error), and does nothing else.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "comm/create.h"
#include "config/config.h"
#include "config/json_text.h"
#include "device/device.h"
#include "engine/api/c_status.h"
#include "engine/engine.h"
#include "zero/zero.h"

struct zero_engine {
  std::unique_ptr<zero::engine::Engine> engine;
  std::string loaded_user_data;  // of the last checkpoint loaded
};

namespace {

using zero::ErrorCategory;
using zero::make_error;

template <class T>
T* require(T* pointer, const char* call, const char* what) {
  if (pointer == nullptr) throw make_error(ErrorCategory::usage, "{}: {} is NULL", call, what);
  return pointer;
}

zero::engine::Engine& engine_of(zero_engine* handle, const char* call) {
  require(handle, call, "the engine");
  return *handle->engine;
}

const zero::engine::Engine& engine_of(const zero_engine* handle, const char* call) {
  require(handle, call, "the engine");
  return *handle->engine;
}

std::size_t index_of(int index, const char* call, const char* what) {
  if (index < 0)
    throw make_error(ErrorCategory::usage, "{}: {} index {} is negative", call, what, index);
  return static_cast<std::size_t>(index);
}

// Text into a caller's buffer, cut to size - 1 bytes and NUL-terminated; *needed gets the full
// length + 1.
void copy_text(const std::string& text, char* buffer, unsigned long long size,
               unsigned long long* needed, const char* call) {
  if (needed != nullptr) *needed = text.size() + 1;
  if (size == 0) return;
  require(buffer, call, "buffer");
  const std::size_t n = std::min<std::size_t>(text.size(), size - 1);
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
}

using ConfigReader = std::function<zero::config::Config(const zero::config::ReadOptions&)>;

// The caller's options as this library's struct: the first `size` bytes (a caller's older header
// had fewer fields: the rest keep their defaults); a newer header's fields this library does not
// know must be zero.
zero_create_options read_options(const zero_create_options* options) {
  zero_create_options o = ZERO_CREATE_OPTIONS_INIT;
  if (options == nullptr) return o;
  const std::size_t size = options->size;
  if (size == 0) {
    throw make_error(ErrorCategory::usage,
                     "zero_create: options->size is 0: initialise the options with "
                     "ZERO_CREATE_OPTIONS_INIT (zero.h), which sets it to "
                     "sizeof(zero_create_options)");
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(options);
  const std::size_t known = std::min(size, sizeof o);
  std::memcpy(&o, bytes, known);
  for (std::size_t i = sizeof o; i < size; ++i) {
    if (bytes[i] != 0) {
      throw make_error(ErrorCategory::usage,
                       "zero_create: options->size is {} and byte {} of the options is set, "
                       "past the {} bytes of this libzero's zero_create_options: a field from a "
                       "newer zero.h that this library does not know; link the libzero of that "
                       "header, or leave the field zero",
                       size, i, sizeof o);
    }
  }
  o.size = sizeof o;
  return o;
}

zero_engine* create(const ConfigReader& read_config, const zero_create_options* options) {
  const zero_create_options o = read_options(options);
  zero::config::ReadOptions read;
  if (o.override_count < 0) {
    throw make_error(ErrorCategory::usage, "zero_create: override_count {} is negative",
                     o.override_count);
  }
  for (int i = 0; i < o.override_count; ++i) {
    require(o.overrides, "zero_create", "options->overrides");
    read.overrides.push_back(
        zero::config::parse_override(require(o.overrides[i], "zero_create", "an override string")));
  }

  if (o.mpi_comm != nullptr && o.nccl_comm != nullptr) {
    throw make_error(ErrorCategory::usage,
                     "zero_create: options->mpi_comm and options->nccl_comm are both set; give "
                     "the one communicator the engine should run on");
  }
  zero::DeviceOptions device_options;
  switch (o.device) {
    case ZERO_DEVICE_AUTO:
      device_options.preference = zero::DevicePreference::automatic;
      break;
    case ZERO_DEVICE_CPU:
      device_options.preference = zero::DevicePreference::cpu;
      break;
    case ZERO_DEVICE_CUDA:
      device_options.preference = zero::DevicePreference::cuda;
      break;
    default:
      throw make_error(ErrorCategory::usage,
                       "zero_create: options->device {} is not ZERO_DEVICE_AUTO (0), "
                       "ZERO_DEVICE_CPU (1) or ZERO_DEVICE_CUDA (2)",
                       o.device);
  }
  switch (o.cpu_device) {
    case ZERO_CPU_DEVICE_FROM_ENV:
      break;  // ZERO_CPU_DEVICE
    case ZERO_CPU_DEVICE_SYNC:
      device_options.cpu_mode = zero::CpuDeviceMode::sync;
      break;
    case ZERO_CPU_DEVICE_ASYNC:
      device_options.cpu_mode = zero::CpuDeviceMode::async;
      break;
    case ZERO_CPU_DEVICE_GUARDED:
      device_options.cpu_mode = zero::CpuDeviceMode::guarded;
      break;
    case ZERO_CPU_DEVICE_TIMED:
      device_options.cpu_mode = zero::CpuDeviceMode::timed;
      break;
    default:
      throw make_error(ErrorCategory::usage,
                       "zero_create: options->cpu_device {} is not ZERO_CPU_DEVICE_FROM_ENV (0), "
                       "_SYNC (1), _ASYNC (2), _GUARDED (3) or _TIMED (4)",
                       o.cpu_device);
  }
  const zero::comm::LaunchInfo launch = zero::comm::detect_launch();
  device_options.local_rank = launch.local_rank;
  // Log lines say which rank wrote them from the first (the device's choice, the config's
  // notes), not only once the communicator exists.
  zero::log::set_rank(launch.rank);

  // The world size resolves the batch keys, and the config sets the collective timeout: read
  // it for the launcher's world, and again if the communicator turns out to differ.
  read.world_size = launch.world_size;
  // hybrid_shard's node: the launcher's count of this node's ranks (the engine checks it).
  read.ranks_per_node = launch.local_size;
  zero::config::Config config = read_config(read);
  auto device = zero::create_device(device_options);
  zero::comm::CommOptions comm_options;
  comm_options.device = device.get();
  comm_options.timeout = std::chrono::milliseconds(std::llround(config.comm_timeout_s * 1000.0));
  std::unique_ptr<zero::Communicator> comm;
  if (o.nccl_comm != nullptr) {
    if (device->type() != zero::DeviceType::cuda) {
      throw make_error(ErrorCategory::usage,
                       "zero_create: options->nccl_comm needs the CUDA device (options->device "
                       "2, or 0 with a GPU present); this engine's device is {}",
                       device->description());
    }
    comm = zero::comm::wrap_nccl_communicator(o.nccl_comm, comm_options);
  } else if (o.mpi_comm != nullptr) {
    comm = zero::comm::wrap_mpi_communicator(o.mpi_comm, comm_options);
  } else {
    comm_options.launch = launch;
    comm = zero::comm::create_communicator(comm_options);
  }
  zero::log::set_rank(comm->rank());
  if (comm->size() != config.world_size) {
    read.world_size = comm->size();
    config = read_config(read);
  }
  zero::config::log_notes(config);
  zero::engine::EngineOptions engine_options;
  engine_options.optimizer_threads = std::max(o.optimizer_threads, 0);
  engine_options.seed = o.seed;
  auto handle = std::make_unique<zero_engine>();
  handle->engine = std::make_unique<zero::engine::Engine>(std::move(config), std::move(device),
                                                          std::move(comm), engine_options);
  return handle.release();
}

}  // namespace

extern "C" {

zero_status zero_create(const char* config_json, const zero_create_options* options,
                        zero_engine** engine) {
  if (engine != nullptr) *engine = nullptr;
  return zero::guard([&] {
    require(engine, "zero_create", "the engine output pointer");
    require(config_json, "zero_create", "the config text");
    const std::string text = config_json;
    *engine = create(
        [&](const zero::config::ReadOptions& read) {
          zero::config::ReadOptions named = read;
          named.source = "<zero_create>";
          return zero::config::read_config_text(text, named);
        },
        options);
  });
}

zero_status zero_create_from_file(const char* path, const zero_create_options* options,
                                  zero_engine** engine) {
  if (engine != nullptr) *engine = nullptr;
  return zero::guard([&] {
    require(engine, "zero_create_from_file", "the engine output pointer");
    require(path, "zero_create_from_file", "the path");
    const std::string file = path;
    *engine = create(
        [&](const zero::config::ReadOptions& read) {
          return zero::config::read_config_file(file, read);
        },
        options);
  });
}

zero_status zero_destroy(zero_engine* engine) {
  return zero::guard([&] { delete engine; });
}

zero_status zero_rank(const zero_engine* engine, int* rank) {
  return zero::guard(
      [&] { *require(rank, "zero_rank", "rank") = engine_of(engine, "zero_rank").rank(); });
}

zero_status zero_world_size(const zero_engine* engine, int* world_size) {
  return zero::guard([&] {
    *require(world_size, "zero_world_size", "world_size") =
        engine_of(engine, "zero_world_size").world_size();
  });
}

zero_status zero_data_location(const zero_engine* engine, zero_memory_kind* kind, int* ordinal) {
  return zero::guard([&] {
    const zero::Device& device = engine_of(engine, "zero_data_location").device();
    if (kind != nullptr) {
      *kind = device.type() == zero::DeviceType::cuda ? ZERO_MEMORY_CUDA : ZERO_MEMORY_HOST;
    }
    if (ordinal != nullptr) *ordinal = device.ordinal();
  });
}

zero_status zero_compute_dtype(const zero_engine* engine, zero_dtype* dtype) {
  return zero::guard([&] {
    require(dtype, "zero_compute_dtype", "dtype");
    switch (engine_of(engine, "zero_compute_dtype").compute_dtype()) {
      case zero::DType::f16:
        *dtype = ZERO_FP16;
        break;
      case zero::DType::bf16:
        *dtype = ZERO_BF16;
        break;
      default:
        *dtype = ZERO_FP32;
        break;
    }
  });
}

zero_status zero_config_value(const zero_engine* engine, const char* key, char* buffer,
                              unsigned long long size, unsigned long long* needed) {
  return zero::guard([&] {
    const auto& e = engine_of(engine, "zero_config_value");
    require(key, "zero_config_value", "key");
    const std::optional<zero::config::json> value = zero::config::resolved_value(e.config(), key);
    if (!value) {
      throw make_error(ErrorCategory::usage,
                       "zero_config_value: the config resolves no key '{}' (see zero-config keys)",
                       key);
    }
    copy_text(value->dump(), buffer, size, needed, "zero_config_value");
  });
}

zero_status zero_read_config_text(const char* text, const char* source, char* buffer,
                                  unsigned long long size, unsigned long long* needed) {
  return zero::guard([&] {
    require(text, "zero_read_config_text", "text");
    const nlohmann::ordered_json parsed =
        zero::config::parse_json_text(text, source != nullptr ? source : "<string>");
    copy_text(parsed.dump(), buffer, size, needed, "zero_read_config_text");
  });
}

zero_status zero_add_group(zero_engine* engine, const char* name, double weight_decay,
                           double lr_scale, int* group) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_add_group");
    require(name, "zero_add_group", "the name");
    const std::size_t index = e.add_group(name, weight_decay, lr_scale);
    if (group != nullptr) *group = static_cast<int>(index);
  });
}

zero_status zero_add_module(zero_engine* engine, const char* name, int* module) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_add_module");
    require(name, "zero_add_module", "the name");
    const std::size_t index = e.add_module(name);
    if (module != nullptr) *module = static_cast<int>(index);
  });
}

zero_status zero_add_param(zero_engine* engine, const zero_param_desc* desc, int* param) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_add_param");
    require(desc, "zero_add_param", "the parameter description");
    require(desc->name, "zero_add_param", "desc->name");
    if (desc->ndim < 0) {
      throw make_error(ErrorCategory::usage, "zero_add_param '{}': ndim {} is negative", desc->name,
                       desc->ndim);
    }
    if (desc->ndim > 0) require(desc->shape, "zero_add_param", "desc->shape");
    if (desc->module_count < 0 || (desc->module_count > 0 && desc->modules == nullptr)) {
      throw make_error(ErrorCategory::usage,
                       "zero_add_param '{}': modules must point at module_count (>= 1) indices",
                       desc->name);
    }
    if (desc->initial != nullptr && desc->initializer != nullptr) {
      throw make_error(ErrorCategory::usage,
                       "zero_add_param '{}': give an initial value or an initializer, not both",
                       desc->name);
    }
    std::vector<std::int64_t> shape(desc->shape, desc->shape + desc->ndim);
    std::vector<std::size_t> modules;
    for (int i = 0; i < desc->module_count; ++i) {
      modules.push_back(index_of(desc->modules[i], "zero_add_param", "module"));
    }
    if (desc->group < 0) {
      throw make_error(ErrorCategory::usage, "zero_add_param '{}': group {} is negative",
                       desc->name, desc->group);
    }
    zero::engine::InitialValue initial;
    initial.values = desc->initial;
    if (desc->initializer != nullptr) {
      const zero_initializer fn = desc->initializer;
      void* user = desc->initializer_user;
      // The index is known once add_param returns; the initializer runs only at init.
      auto index = std::make_shared<int>(-1);
      initial.initializer = [fn, user, index](std::uint64_t offset, std::size_t count, float* out) {
        fn(user, *index, offset, count, out);
      };
      const std::size_t added = e.add_param(desc->name, std::move(shape), desc->trainable != 0,
                                            static_cast<std::size_t>(desc->group),
                                            std::move(modules), std::move(initial));
      *index = static_cast<int>(added);
      if (param != nullptr) *param = *index;
      return;
    }
    const std::size_t added =
        e.add_param(desc->name, std::move(shape), desc->trainable != 0,
                    static_cast<std::size_t>(desc->group), std::move(modules), std::move(initial));
    if (param != nullptr) *param = static_cast<int>(added);
  });
}

zero_status zero_init(zero_engine* engine) {
  return zero::guard([&] { engine_of(engine, "zero_init").init(); });
}

zero_status zero_pre_forward(zero_engine* engine, int module, void* stream) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_pre_forward");
    e.pre_forward(index_of(module, "zero_pre_forward", "module"), e.caller_stream(stream));
  });
}

zero_status zero_post_forward(zero_engine* engine, int module, void* stream) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_post_forward");
    e.post_forward(index_of(module, "zero_post_forward", "module"), e.caller_stream(stream));
  });
}

zero_status zero_pre_backward(zero_engine* engine, int module, void* stream) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_pre_backward");
    e.pre_backward(index_of(module, "zero_pre_backward", "module"), e.caller_stream(stream));
  });
}

zero_status zero_post_backward(zero_engine* engine, int module, void* stream) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_post_backward");
    e.post_backward(index_of(module, "zero_post_backward", "module"), e.caller_stream(stream));
  });
}

zero_status zero_param_data(zero_engine* engine, int param, void** data) {
  return zero::guard([&] {
    require(data, "zero_param_data", "data");
    *data = nullptr;
    *data = engine_of(engine, "zero_param_data")
                .param_data(index_of(param, "zero_param_data", "parameter"));
  });
}

zero_status zero_grad_buffer(zero_engine* engine, int param, void** data) {
  return zero::guard([&] {
    require(data, "zero_grad_buffer", "data");
    *data = nullptr;
    *data = engine_of(engine, "zero_grad_buffer")
                .grad_buffer(index_of(param, "zero_grad_buffer", "parameter"));
  });
}

zero_status zero_grad_is_zero(zero_engine* engine, int param, int* zero) {
  return zero::guard([&] {
    require(zero, "zero_grad_is_zero", "zero");
    *zero = 0;
    *zero = engine_of(engine, "zero_grad_is_zero")
                    .grad_is_zero(index_of(param, "zero_grad_is_zero", "parameter"))
                ? 1
                : 0;
  });
}

zero_status zero_loss_factor(const zero_engine* engine, double* factor) {
  return zero::guard([&] {
    *require(factor, "zero_loss_factor", "factor") =
        engine_of(engine, "zero_loss_factor").loss_factor();
  });
}

zero_status zero_loss_scale(const zero_engine* engine, double* scale) {
  return zero::guard([&] {
    *require(scale, "zero_loss_scale", "scale") = engine_of(engine, "zero_loss_scale").loss_scale();
  });
}

zero_status zero_set_train(zero_engine* engine, int train) {
  return zero::guard([&] { engine_of(engine, "zero_set_train").set_train(train != 0); });
}

zero_status zero_is_accumulation_boundary(const zero_engine* engine, int* boundary) {
  return zero::guard([&] {
    *require(boundary, "zero_is_accumulation_boundary", "boundary") =
        engine_of(engine, "zero_is_accumulation_boundary").is_accumulation_boundary() ? 1 : 0;
  });
}

namespace {

void fill_step_stats(const zero::engine::StepStats& s, zero_step_stats* stats) {
  stats->stepped = s.stepped ? 1 : 0;
  stats->skipped = s.skipped ? 1 : 0;
  stats->loss_scale = s.loss_scale;
  stats->grad_norm = s.grad_norm;
  stats->lr = s.lr;
  stats->global_steps = s.global_steps;
  stats->micro_steps = s.micro_steps;
}

}  // namespace

zero_status zero_step(zero_engine* engine, zero_step_stats* stats) {
  return zero::guard([&] {
    // Without stats to fill, a verdict on the device stays there (Engine::step).
    const zero::engine::StepStats s =
        engine_of(engine, "zero_step").step(/*verdict_now=*/stats != nullptr);
    if (stats != nullptr) fill_step_stats(s, stats);
  });
}

zero_status zero_last_step_stats(zero_engine* engine, zero_step_stats* stats) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_last_step_stats");
    require(stats, "zero_last_step_stats", "stats");
    fill_step_stats(e.last_step_stats(), stats);
  });
}

zero_status zero_read_param(zero_engine* engine, int param, float* out, unsigned long long count) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_read_param");
    require(out, "zero_read_param", "out");
    const std::size_t index = index_of(param, "zero_read_param", "parameter");
    const std::vector<float> values = e.read_param(index);
    if (count != values.size()) {
      throw make_error(ErrorCategory::usage,
                       "zero_read_param '{}': count {} but the parameter has {} elements",
                       e.registry().param(index).name, count, values.size());
    }
    std::copy(values.begin(), values.end(), out);
  });
}

zero_status zero_write_param(zero_engine* engine, int param, const float* values,
                             unsigned long long count) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_write_param");
    require(values, "zero_write_param", "values");
    const std::size_t index = index_of(param, "zero_write_param", "parameter");
    e.write_param(index, values, static_cast<std::size_t>(count));
  });
}

zero_status zero_mean_across_ranks(zero_engine* engine, double* values, int count) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_mean_across_ranks");
    if (count > 0) require(values, "zero_mean_across_ranks", "values");
    e.mean_across_ranks(values, index_of(count, "zero_mean_across_ranks", "count"));
  });
}

zero_status zero_broadcast(zero_engine* engine, void* data, unsigned long long bytes, int root) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_broadcast");
    if (bytes > 0) require(data, "zero_broadcast", "data");
    e.broadcast(data, static_cast<std::size_t>(bytes), root);
  });
}

zero_status zero_memory_bytes(const zero_engine* engine, zero_tier tier, zero_kind kind,
                              unsigned long long* live, unsigned long long* peak) {
  return zero::guard([&] {
    const auto& e = engine_of(engine, "zero_memory_bytes");
    if (static_cast<int>(tier) < 0 || static_cast<int>(tier) > 3 || static_cast<int>(kind) < 0 ||
        static_cast<int>(kind) > 4) {
      throw make_error(ErrorCategory::usage,
                       "zero_memory_bytes: tier {} or kind {} is out of range",
                       static_cast<int>(tier), static_cast<int>(kind));
    }
    unsigned long long l = 0, p = 0;
    for (const auto& u : e.memory_usage()) {
      if (static_cast<int>(u.tier) == static_cast<int>(tier) &&
          static_cast<int>(u.kind) == static_cast<int>(kind)) {
        l += u.live;
        p += u.peak;
      }
    }
    if (live != nullptr) *live = l;
    if (peak != nullptr) *peak = p;
  });
}

zero_status zero_memory_reserved(const zero_engine* engine, zero_tier tier,
                                 unsigned long long* bytes) {
  return zero::guard([&] {
    const auto& e = engine_of(engine, "zero_memory_reserved");
    if (static_cast<int>(tier) < 0 || static_cast<int>(tier) > 3) {
      throw make_error(ErrorCategory::usage, "zero_memory_reserved: tier {} is out of range",
                       static_cast<int>(tier));
    }
    if (bytes == nullptr) {
      throw make_error(ErrorCategory::usage, "zero_memory_reserved: bytes is NULL");
    }
    *bytes = e.reserved_bytes(static_cast<zero::Tier>(tier));
  });
}

zero_status zero_declare_memory(zero_engine* engine, zero_tier tier, unsigned long long bytes,
                                const char* what) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_declare_memory");
    if (static_cast<int>(tier) < 0 || static_cast<int>(tier) > 2) {
      throw make_error(ErrorCategory::usage,
                       "zero_declare_memory: tier {} is not memory (device 0, pinned 1 or host 2)",
                       static_cast<int>(tier));
    }
    e.declare_memory(static_cast<zero::Tier>(tier), bytes,
                     what != nullptr ? std::string(what) : std::string("declared memory"));
  });
}

zero_status zero_memory_report(const zero_engine* engine, char* buffer, unsigned long long size,
                               unsigned long long* needed) {
  return zero::guard([&] {
    copy_text(engine_of(engine, "zero_memory_report").memory_report(), buffer, size, needed,
              "zero_memory_report");
  });
}

zero_status zero_save_checkpoint(zero_engine* engine, const char* dir, const char* tag,
                                 const void* user_data, unsigned long long user_bytes) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_save_checkpoint");
    require(dir, "zero_save_checkpoint", "dir");
    if (user_bytes > 0) require(user_data, "zero_save_checkpoint", "user_data");
    zero::engine::SaveOptions options;
    if (tag != nullptr) options.tag = tag;
    if (user_bytes > 0) options.user_data.assign(static_cast<const char*>(user_data), user_bytes);
    e.save_checkpoint(dir, options);
  });
}

zero_status zero_load_checkpoint(zero_engine* engine, const char* dir, const char* tag,
                                 unsigned flags) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_load_checkpoint");
    require(dir, "zero_load_checkpoint", "dir");
    if ((flags & ~ZERO_LOAD_MODULE_ONLY) != 0) {
      throw make_error(ErrorCategory::usage, "zero_load_checkpoint: unknown flags {:#x}",
                       flags & ~ZERO_LOAD_MODULE_ONLY);
    }
    zero::engine::LoadOptions options;
    if (tag != nullptr) options.tag = tag;
    options.module_only = (flags & ZERO_LOAD_MODULE_ONLY) != 0;
    engine->loaded_user_data = e.load_checkpoint(dir, options).user_data;
  });
}

zero_status zero_checkpoint_user_data(const zero_engine* engine, void* buffer,
                                      unsigned long long size, unsigned long long* bytes) {
  return zero::guard([&] {
    engine_of(engine, "zero_checkpoint_user_data");
    const std::string& data = engine->loaded_user_data;
    if (bytes != nullptr) *bytes = data.size();
    if (size == 0) return;
    require(buffer, "zero_checkpoint_user_data", "buffer");
    std::memcpy(buffer, data.data(), std::min<std::size_t>(data.size(), size));
  });
}

zero_status zero_global_steps(const zero_engine* engine, long long* steps) {
  return zero::guard([&] {
    const auto& e = engine_of(engine, "zero_global_steps");
    require(steps, "zero_global_steps", "steps");
    *steps = e.global_steps();
  });
}

zero_status zero_learning_rate(const zero_engine* engine, double* lr) {
  return zero::guard([&] {
    const auto& e = engine_of(engine, "zero_learning_rate");
    require(lr, "zero_learning_rate", "lr");
    *lr = e.next_learning_rate();
  });
}

zero_status zero_set_learning_rate(zero_engine* engine, double lr) {
  return zero::guard([&] { engine_of(engine, "zero_set_learning_rate").set_learning_rate(lr); });
}

zero_status zero_quantization_error(const zero_engine* engine, double* weights, double* gradients) {
  return zero::guard([&] {
    const auto& e = engine_of(engine, "zero_quantization_error");
    const auto last = e.last_quantization_error();
    if (weights != nullptr) *weights = last[0];
    if (gradients != nullptr) *gradients = last[1];
  });
}

zero_status zero_load_pretrained(zero_engine* engine, const char* path,
                                 const zero_pretrained_options* options) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_load_pretrained");
    require(path, "zero_load_pretrained", "path");
    zero::engine::PretrainedOptions mapped;
    if (options != nullptr) {
      auto list = [](const char* const* items, int count, const char* what) {
        if (count < 0 || (count > 0 && items == nullptr)) {
          throw make_error(ErrorCategory::usage, "zero_load_pretrained: {} has count {} and {}",
                           what, count, items == nullptr ? "no array" : "an array");
        }
        std::vector<std::string> out;
        for (int i = 0; i < count; ++i) {
          if (items[i] == nullptr) {
            throw make_error(ErrorCategory::usage, "zero_load_pretrained: {}[{}] is NULL", what, i);
          }
          out.emplace_back(items[i]);
        }
        return out;
      };
      const std::vector<std::string> names = list(options->names, options->name_pairs * 2, "names");
      for (std::size_t i = 0; i + 1 < names.size(); i += 2)
        mapped.names.emplace_back(names[i], names[i + 1]);
      mapped.transposed = list(options->transposed, options->transposed_count, "transposed");
      mapped.ignore = list(options->ignore, options->ignore_count, "ignore");
      mapped.skip = list(options->skip, options->skip_count, "skip");
    }
    e.load_pretrained(path, mapped);
  });
}

zero_status zero_abort(zero_engine* engine, int exit_code, const char* reason) {
  return zero::guard([&] {
    auto& e = engine_of(engine, "zero_abort");
    e.abort(exit_code, reason != nullptr ? reason : "zero_abort");
  });
}

}  // extern "C"

// CheckpointState: save and load (see checkpoint_state.h).
#include "engine/state/checkpoint_state.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>

#include <fmt/chrono.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "base/log.h"
#include "base/version.h"
#include "checkpoint/durable.h"
#include "checkpoint/manifest.h"
#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"
#include "device/device_scratch.h"
#include "optim/spec.h"

namespace zero::engine {
namespace fs = std::filesystem;
using checkpoint::kMaster;
using checkpoint::kParam;

namespace {

constexpr std::size_t kPieceBytes = std::size_t{16} << 20;  // staging per copy while saving

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}",
                     fmt::gmtime(std::chrono::system_clock::to_time_t(now)));
}

void check_tag(const std::string& tag) {
  if (const std::string problem = checkpoint::tag_problem(tag); !problem.empty()) {
    throw make_error(ErrorCategory::usage,
                     "checkpoint tag \"{}\" cannot name a directory of its own: {}; use a name "
                     "of at most 200 characters without '/', not starting with '.' and not "
                     "\"latest\"",
                     tag, problem);
  }
}

// Where save_checkpoint's reads are: the swap group last read, this rank's stage-3 compute
// shard of the parameter last fetched.
struct SaveCursor {
  std::vector<std::string> names;  // the moments
  std::size_t group = kNone;
  GroupView view;
  std::size_t shard_param = kNone;
  std::unique_ptr<DeviceScratch> shard;

  int moment_index(std::string_view kind) const {
    for (std::size_t k = 0; k < names.size(); ++k) {
      if (names[k] == kind) return static_cast<int>(k);
    }
    return -1;
  }
};

// The values of a checkpoint, re-split for this rank.
class CheckpointSource final : public ValueSource {
 public:
  CheckpointSource(checkpoint::CheckpointReader& reader,
                   std::vector<const checkpoint::ParamEntry*> entries, bool module_only)
      : reader_(reader), entries_(std::move(entries)), module_only_(module_only) {}

  void values(std::size_t p, std::uint64_t first, std::size_t count, float* out) override {
    if (count == 0) return;
    const checkpoint::ParamEntry& entry = *entries_[p];
    reader_.read(entry.trainable ? kMaster : kParam, entry, first, count, DType::f32, out);
  }

  bool moment(std::size_t p, int m, std::uint64_t first, std::size_t count, DType dtype,
              void* out) override {
    if (module_only_) return false;
    const checkpoint::ParamEntry& entry = *entries_[p];
    if (count > 0) {
      reader_.read(reader_.manifest().state_names[static_cast<std::size_t>(m)], entry, first, count,
                   dtype, out);
    }
    return true;
  }

 private:
  checkpoint::CheckpointReader& reader_;
  std::vector<const checkpoint::ParamEntry*> entries_;
  bool module_only_;
};

}  // namespace

// ---- save ----

namespace {

// Elements [first, first + count) of `kind` of parameter p, of this rank's saved range, into
// host memory.
void read_saved(const EngineContext& e, const CheckpointState::Parts& parts, std::string_view kind,
                std::size_t p, std::uint64_t first, std::size_t count, void* out,
                SaveCursor& cursor) {
  if (count == 0) return;
  const ParamPlacement& state = e.layout.params[p];
  Device* device = &e.device;
  const DType compute = e.layout.modes.compute;
  // A writer's rank in its shard group (the first group, under hybrid sharding).
  const int stage = e.layout.modes.stage, rank = e.shards().rank();
  const std::size_t csize = dtype_size(compute);
  if (kind == kParam) {
    if (stage <= 2) {
      device->copy(out, static_cast<const char*>(parts.state.full(p)) + first * csize,
                   count * csize);
      return;
    }
    // Stage 3: this rank's compute shard, wherever it lives, through device memory.
    const ShardShape& shape = state.shape;
    if (cursor.shard_param != p) {
      cursor.shard.reset();
      cursor.shard = std::make_unique<DeviceScratch>(*device, shape.shard * csize);
      parts.fetcher.copy_shard(p, cursor.shard->data());
      cursor.shard_param = p;
    }
    device->copy(out, cursor.shard->data() + (first - shape.begin(rank)) * csize, count * csize);
    return;
  }
  const int m = kind == kMaster ? -1 : cursor.moment_index(kind);
  ModelState& model = parts.state;
  model.unify();  // every group's values where master() and moment() read them
  if (m < 0 && model.master_is_param()) {
    device->copy(out, static_cast<const float*>(model.full(p)) + first, count * sizeof(float));
    return;
  }
  const std::size_t size = m < 0 ? sizeof(float) : dtype_size(e.config.optimizer_state_dtype);
  std::size_t flat = state.flat + (first - state.shape.begin(stage == 0 ? 0 : rank));
  char* to = static_cast<char*>(out);
  while (count > 0) {
    if (flat < e.layout.resident_end) {
      const std::size_t n = std::min(count, e.layout.resident_end - flat);
      const char* from = m < 0 ? reinterpret_cast<const char*>(model.master() + flat)
                               : static_cast<const char*>(model.moment(m)) + flat * size;
      device->copy(to, from, n * size);
      flat += n, to += n * size, count -= n;
      continue;
    }
    const std::size_t g = model.group_at(flat);
    if (cursor.group != g) {
      cursor.view = model.swap()->peek(g - e.layout.resident_groups);
      cursor.group = g;
    }
    const std::size_t n =
        std::min(count, e.layout.group_lo[g] + e.layout.step_groups[g].block - flat);
    const std::size_t at = flat - e.layout.group_lo[g];
    const char* from = m < 0 ? reinterpret_cast<const char*>(cursor.view.master + at)
                             : static_cast<const char*>(cursor.view.state[m]) + at * size;
    std::memcpy(to, from, n * size);
    flat += n, to += n * size, count -= n;
  }
}

}  // namespace

std::vector<std::string> CheckpointState::state_names() const {
  const config::Config& config = ctx_.config;
  std::vector<std::string> names;
  for (int k = 0; k < config.optimizer.state_buffers(); ++k) {
    names.emplace_back(optim::state_name(config.optimizer.type, k));
  }
  return names;
}

int CheckpointState::saving_ranks() const noexcept {
  return ctx_.layout.world / ctx_.layout.modes.replicas;
}

std::string CheckpointState::write_rank_file(const std::string& staging) {
  const config::Config& config = ctx_.config;
  const Registry& registry = ctx_.registry;
  const DType compute = ctx_.layout.modes.compute;
  // The first shard group's ranks are world ranks 0..saving_ranks()-1, in the same order.
  const int rank = ctx_.comm.rank(), world = saving_ranks();
  if (rank >= world) return {};
  const std::string name = checkpoint::rank_file_name(rank, world);
  const std::string final_path = (fs::path(staging) / name).string();
  const std::string temporary = final_path + ".tmp";
  const std::vector<std::string> moments_names = state_names();
  checkpoint::claim_temporary(temporary);  // made new: never through a link or over a file

  // What this rank's file holds, in order: per parameter, its kinds of state.
  struct Part {
    std::size_t param;
    std::string kind;
    DType dtype;
  };
  std::vector<Part> parts;
  std::vector<checkpoint::TensorDecl> decls;
  for (std::size_t p = 0; p < registry.param_count(); ++p) {
    const ParamSpec& spec = registry.param(p);
    std::vector<std::pair<std::string, DType>> kinds;
    if (spec.trainable) {
      kinds.emplace_back(kMaster, DType::f32);
      for (const std::string& s : moments_names)
        kinds.emplace_back(s, config.optimizer_state_dtype);
    } else {
      kinds.emplace_back(kParam, compute);
    }
    const auto count = checkpoint::saved_range(spec.numel, world, rank).count;
    for (auto& [kind, dtype] : kinds) {
      decls.push_back({checkpoint::tensor_name(kind, spec.name),
                       std::string(checkpoint::safetensors_dtype(dtype)),
                       {static_cast<std::int64_t>(count)}});
      parts.push_back({p, kind, dtype});
    }
  }
  checkpoint::SafetensorsWriter writer(temporary, std::move(decls),
                                       {{"format", "zero-checkpoint-shard"},
                                        {"rank", std::to_string(rank)},
                                        {"world_size", std::to_string(world)}},
                                       checkpoint::SafetensorsWriter::kDefaultChunkBytes, 0644,
                                       /*direct=*/true);
  SaveCursor cursor;
  cursor.names = moments_names;
  std::vector<char> host(kPieceBytes);
  for (const Part& part : parts) {
    const auto range = checkpoint::saved_range(registry.param(part.param).numel, world, rank);
    const std::size_t size = dtype_size(part.dtype);
    const std::size_t step = kPieceBytes / size;
    for (std::size_t done = 0; done < range.count; done += step) {
      const std::size_t n = std::min(step, range.count - done);
      read_saved(ctx_, parts_, part.kind, part.param, range.begin + done, n, host.data(), cursor);
      writer.write(host.data(), n * size);
    }
  }
  writer.finish();
  if (::rename(temporary.c_str(), final_path.c_str()) != 0) {
    throw make_error(ErrorCategory::io, "cannot rename {} to {}: {}", temporary, final_path,
                     std::strerror(errno));
  }
  checkpoint::FileEntry entry;
  entry.name = name;
  entry.rank = rank;
  entry.bytes = writer.file_bytes();
  entry.header_hash = writer.header_hash();
  for (std::size_t i = 0; i < writer.tensors().size(); ++i) {
    entry.sums.emplace(writer.tensors()[i].name, writer.sums()[i].hashes);
  }
  return checkpoint::to_json(entry).dump();
}

checkpoint::Manifest CheckpointState::make_manifest(const std::string& tag,
                                                    const std::string& user_data,
                                                    const std::vector<std::string>& records,
                                                    std::int64_t micro_steps) const {
  const config::Config& config = ctx_.config;
  const Registry& registry = ctx_.registry;
  const Stepper& stepper = parts_.stepper;
  checkpoint::Manifest m;
  m.tag = tag;
  m.created = utc_now();
  m.library_version = ZERO_BUILD_VERSION_STRING;
  m.world_size = saving_ranks();
  m.stage = ctx_.layout.modes.stage;
  m.precision = std::string(config::precision_name(config.precision));
  m.compute_dtype = ctx_.layout.modes.compute;
  m.optimizer = std::string(optim::optimizer_key(config.optimizer.type));
  m.state_dtype = config.optimizer_state_dtype;
  m.state_names = state_names();
  m.config = nlohmann::json::object();
  for (const config::ResolvedValue& value : config.resolved) m.config[value.path] = value.value;
  m.global_steps = stepper.global_steps();
  m.micro_steps = micro_steps;
  m.optimizer_steps = stepper.optimizer_steps();
  const LossScalerState& s = stepper.scaler().state();
  m.scaler = {s.scale, s.hysteresis_left, s.iteration, s.last_overflow_iteration};
  m.seed = stepper.seed();
  m.user_data = user_data;
  for (const GroupSpec& g : registry.groups())
    m.groups.push_back({g.name, g.weight_decay, g.lr_scale});
  for (const ParamSpec& p : registry.params()) {
    m.params.push_back({p.name, p.shape, p.numel, p.trainable, p.group});
  }
  m.chunk_bytes = checkpoint::SafetensorsWriter::kDefaultChunkBytes;
  for (std::size_t q = 0; q < records.size(); ++q) {
    m.files.push_back(checkpoint::file_entry_from_json(nlohmann::json::parse(records[q]),
                                                       fmt::format("rank {}'s file record", q)));
  }
  return m;
}

void CheckpointState::prune(const std::string& dir, const std::string& keep) const {
  const auto keep_last = ctx_.config.checkpoint.keep_last;
  if (keep_last <= 0) return;
  struct Tag {
    std::string name;
    std::int64_t steps;
    std::string created;
  };
  std::vector<Tag> tags;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.front() == '.' || name == keep) continue;
    const fs::path meta = entry.path() / checkpoint::kManifestName;
    if (!fs::exists(meta)) continue;
    try {
      const checkpoint::Manifest m = checkpoint::read_manifest(meta.string());
      tags.push_back({name, m.global_steps, m.created});
    } catch (const Error& error) {
      log::warn("checkpoint.keep_last: leaving {} alone: {}", entry.path().string(), error.what());
    }
  }
  std::sort(tags.begin(), tags.end(), [](const Tag& a, const Tag& b) {
    return std::tie(a.steps, a.created, a.name) > std::tie(b.steps, b.created, b.name);
  });
  // The tag just saved counts as the newest. Each old tag leaves the checkpoint namespace in
  // one rename (to a hidden name, never a tag) before its files go, so a crash part way
  // through leaves no tag directory with some rank files missing.
  for (std::size_t i = static_cast<std::size_t>(keep_last) - 1; i < tags.size(); ++i) {
    const std::string path = (fs::path(dir) / tags[i].name).string();
    const std::string doomed = (fs::path(dir) / fmt::format(".{}.deleting", tags[i].name)).string();
    checkpoint::remove_tree(doomed);
    if (::rename(path.c_str(), doomed.c_str()) != 0) {
      throw make_error(ErrorCategory::io, "checkpoint.keep_last: cannot rename {} to {}: {}", path,
                       doomed, std::strerror(errno));
    }
    checkpoint::sync_directory(dir);
    if (faults_.save) faults_.save("pruning");
    checkpoint::remove_tree(doomed);
    log::info("checkpoint.keep_last = {}: removed {}", keep_last, path);
  }
  checkpoint::sync_directory(dir);
}

CheckpointState::CheckpointState(const EngineContext& context, Parts parts,
                                 const FaultHooks& faults)
    : ctx_(context), parts_(parts), faults_(faults) {}

void CheckpointState::save(const std::string& dir, const SaveOptions& save,
                           std::int64_t micro_steps) {
  const int rank = ctx_.comm.rank();
  Agreement& agreement = parts_.agreement;
  if (dir.empty())
    throw make_error(ErrorCategory::usage, "save_checkpoint: the directory is empty");
  const std::string tag =
      save.tag.empty() ? fmt::format("global_step{}", parts_.stepper.global_steps()) : save.tag;
  check_tag(tag);
  const Timer timer;
  const std::string staging = (fs::path(dir) / fmt::format(".{}.saving", tag)).string();
  const std::string target = (fs::path(dir) / tag).string();
  auto inject = [&](const char* point) {
    if (faults_.save) faults_.save(point);
  };
  const std::string what = fmt::format("saving checkpoint {}", target);
  try {
    agreement.agree(what, [&] {
      if (rank != 0) return;
      checkpoint::make_directories(dir);
      // What earlier saves or prunes that did not finish left (this tag's staging among them).
      checkpoint::remove_leftovers(dir);
      checkpoint::make_directories(staging);
    });
    parts_.fetcher.release_unheld(
        /*stale=*/false);  // gathers in flight finish before shards are read
    std::string record;
    agreement.agree(what, [&] {
      record = write_rank_file(staging);
      inject("rank_file_written");
    });
    std::vector<std::string> records = agreement.all_gather_text(record);
    records.resize(static_cast<std::size_t>(saving_ranks()));  // the writers'
    agreement.agree(what, [&] {
      if (rank != 0) return;
      const checkpoint::Manifest manifest =
          make_manifest(tag, save.user_data, records, micro_steps);
      checkpoint::write_file_durably((fs::path(staging) / checkpoint::kManifestName).string(),
                                     checkpoint::to_json(manifest).dump(1));
      inject("manifest_written");
      checkpoint::replace_directory(staging, target);
      inject("tag_in_place");
      checkpoint::write_file_durably((fs::path(dir) / checkpoint::kLatestName).string(),
                                     tag + "\n");
      prune(dir, tag);
    });
  } catch (...) {
    if (rank == 0) {
      std::error_code ignored;
      fs::remove_all(staging, ignored);
    }
    throw;
  }
  if (rank == 0) {
    log::info("checkpoint {} saved: {} rank file(s), step {}, {:.2f} s", target, saving_ranks(),
              parts_.stepper.global_steps(), timer.seconds());
  }
}

// ---- load ----

std::vector<const checkpoint::ParamEntry*> CheckpointState::match(const checkpoint::Manifest& m,
                                                                  const std::string& where,
                                                                  bool module_only) const {
  const config::Config& config = ctx_.config;
  const Registry& registry = ctx_.registry;
  std::vector<const checkpoint::ParamEntry*> entries;
  for (std::size_t p = 0; p < registry.param_count(); ++p) {
    const ParamSpec& spec = registry.param(p);
    const checkpoint::ParamEntry* entry = m.find(spec.name);
    if (entry == nullptr) {
      throw make_error(ErrorCategory::usage,
                       "checkpoint {} has no parameter '{}' (this model's parameter {}, shape {}): "
                       "it was saved from a different model",
                       where, spec.name, p, shape_text(spec.shape));
    }
    if (entry->shape != spec.shape) {
      throw make_error(ErrorCategory::usage,
                       "checkpoint {}: parameter '{}' has shape {} there and {} in this model",
                       where, spec.name, shape_text(entry->shape), shape_text(spec.shape));
    }
    if (entry->trainable != spec.trainable && !module_only) {
      throw make_error(ErrorCategory::usage,
                       "checkpoint {}: parameter '{}' is {} there and {} in this model; load the "
                       "values alone (module_only, ZERO_LOAD_MODULE_ONLY) to start the optimizer "
                       "state afresh",
                       where, spec.name, entry->trainable ? "trainable" : "frozen",
                       spec.trainable ? "trainable" : "frozen");
    }
    entries.push_back(entry);
  }
  for (const checkpoint::ParamEntry& entry : m.params) {
    if (!registry.find_param(entry.name)) {
      throw make_error(ErrorCategory::usage,
                       "checkpoint {} has parameter '{}' (shape {}) that this model does not "
                       "register: it was saved from a different model",
                       where, entry.name, shape_text(entry.shape));
    }
  }
  if (!module_only && m.state_names != state_names()) {
    throw make_error(
        ErrorCategory::usage,
        "checkpoint {} holds the state of optimizer {} ({}), this run's {} keeps ({}): "
        "load the values alone (module_only, ZERO_LOAD_MODULE_ONLY) to start the "
        "optimizer state afresh",
        where, m.optimizer, fmt::join(m.state_names, ", "),
        optim::optimizer_key(config.optimizer.type), fmt::join(state_names(), ", "));
  }
  return entries;
}

LoadResult CheckpointState::load(const std::string& dir, const LoadOptions& load,
                                 const std::function<void(std::string)>& partly) {
  const config::Config& config = ctx_.config;
  Agreement& agreement = parts_.agreement;
  Stepper& stepper = parts_.stepper;
  const Timer timer;
  std::unique_ptr<checkpoint::CheckpointReader> reader;
  std::vector<const checkpoint::ParamEntry*> entries;
  LossScaler next_scaler = stepper.scaler();
  // Everything that can refuse the checkpoint comes before the state changes.
  agreement.agree(
      fmt::format("loading checkpoint {}{}{}", dir, load.tag.empty() ? "" : "/", load.tag), [&] {
        reader = std::make_unique<checkpoint::CheckpointReader>(
            checkpoint::resolve_tag_directory(dir, load.tag));
        const checkpoint::Manifest& m = reader->manifest();
        entries = match(m, reader->directory(), load.module_only);
        if (!load.module_only && config.precision == config::Precision::fp16 &&
            m.precision == "fp16") {
          next_scaler.restore({m.scaler.scale, m.scaler.hysteresis_left, m.scaler.iteration,
                               m.scaler.last_overflow_iteration});
        }
      });
  const checkpoint::Manifest& m = reader->manifest();
  const std::string what = fmt::format("loading checkpoint {}", reader->directory());

  parts_.fetcher.release_unheld(/*stale=*/true);
  CheckpointSource source(*reader, std::move(entries), load.module_only);
  try {
    agreement.agree(what, [&] { parts_.state.assign(source); });
  } catch (const Error& error) {
    partly(fmt::format("a checkpoint load failed part way, so the state is partly replaced: {}",
                       error.what()));
    throw;
  }
  if (!load.module_only) stepper.restore(m.global_steps, m.optimizer_steps, next_scaler, m.seed);
  stepper.zero_grads();
  parts_.fetcher.release_unheld(/*stale=*/true);
  if (ctx_.comm.rank() == 0) {
    log::info("checkpoint {} loaded{}: saved by {} rank(s) at stage {}, step {}, {:.2f} s",
              reader->directory(), load.module_only ? " (values only)" : "", m.world_size, m.stage,
              m.global_steps, timer.seconds());
  }
  return {reader->directory(), m.tag, m.user_data, m.global_steps};
}

}  // namespace zero::engine

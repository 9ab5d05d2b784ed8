// A checkpoint's description, DIR/<tag>/meta.json: what was saved (the model's parameters,
// groups and config), by how many ranks at which stage, the counters, loss-scaler and RNG
// state a resumed run needs, the caller's opaque data, and each rank file's size and checksums.
// Rank 0 writes it last, so a tag directory with a meta.json is complete.
//
// Every tensor in a checkpoint is split the way the engine splits parameters
// (engine/plan/partition): with W saving ranks, rank r's file holds elements [r*s, min(numel,
// (r+1)*s)) of each tensor, s = ceil(numel / W), whatever the stage was. Reading at another world
// size is re-splitting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/dtype.h"

namespace zero::checkpoint {

inline constexpr int kFormatVersion = 1;
inline constexpr std::string_view kFormatName = "zero-checkpoint";
inline constexpr std::string_view kManifestName = "meta.json";
inline constexpr std::string_view kLatestName = "latest";
// meta.json's key for the XXH3-64 of the rest of it (serialised compactly, keys sorted).
inline constexpr std::string_view kManifestHashKey = "meta_xxh3";

// What a rank file holds for a parameter: trainable ones their fp32 master and the optimizer's
// moments (named as PyTorch names them: exp_avg, exp_avg_sq, sum, momentum_buffer), frozen
// ones their value in the compute dtype.
inline constexpr std::string_view kMaster = "master";
inline constexpr std::string_view kParam = "param";

struct ParamEntry {
  std::string name;
  std::vector<std::int64_t> shape;
  std::uint64_t numel = 0;
  bool trainable = true;
  std::size_t group = 0;
};

struct GroupEntry {
  std::string name;
  double weight_decay = 0.0;
  double lr_scale = 1.0;
};

struct FileEntry {
  std::string name;  // relative to the tag directory
  int rank = 0;
  std::uint64_t bytes = 0;
  std::uint64_t header_hash = 0;                           // XXH3-64 of the safetensors header
  std::map<std::string, std::vector<std::uint64_t>> sums;  // tensor -> chunk hashes
};

struct ScalerEntry {
  double scale = 1.0;
  std::int64_t hysteresis_left = 1;
  std::int64_t iteration = 0;
  std::int64_t last_overflow_iteration = -1;
};

struct Manifest {
  int version = kFormatVersion;
  std::string tag;
  std::string created;          // UTC, ISO 8601
  std::string library_version;  // zero's, at save
  int world_size = 1;
  int stage = 0;
  std::string precision;  // fp32, bf16, fp16
  DType compute_dtype = DType::f32;
  std::string optimizer;  // the config's optimizer.type, lower case
  DType state_dtype = DType::f32;
  std::vector<std::string> state_names;  // the moments, in order
  nlohmann::json config;  // the config the run was created with, "auto" values filled
  std::int64_t global_steps = 0;
  std::int64_t micro_steps = 0;
  std::int64_t optimizer_steps = 0;  // steps not skipped: the schedule's and the optimizer's count
  ScalerEntry scaler;
  std::uint64_t seed = 0;  // of stochastic rounding
  std::string user_data;   // the caller's bytes (stored as hex)
  std::vector<GroupEntry> groups;
  std::vector<ParamEntry> params;
  std::uint64_t chunk_bytes = 0;  // the checksum chunk
  std::vector<FileEntry> files;   // by rank
  bool self_verified = false;     // read back: meta.json's own checksum was there and matched

  // The parameter by name, or nullptr.
  const ParamEntry* find(std::string_view name) const noexcept;
};

// With kManifestHashKey set to manifest_hash of the rest.
nlohmann::json to_json(const Manifest& manifest);
// The XXH3-64 of `document` without kManifestHashKey.
std::uint64_t manifest_hash(const nlohmann::json& document);
// One rank file's entry alone: each rank describes its file, rank 0 collects them.
nlohmann::json to_json(const FileEntry& file);
FileEntry file_entry_from_json(const nlohmann::json& json, const std::string& where);
// Checks the checksum of meta.json itself (kManifestHashKey; a warning when a checkpoint saved
// by an older zero has none), the format, version and every field's type and range (files one
// per rank, counts consistent); throws an io Error naming `where` (the file) and the key at
// fault.
Manifest manifest_from_json(const nlohmann::json& json, const std::string& where);
// Reads and checks DIR/<tag>/meta.json.
Manifest read_manifest(const std::string& path);

// "rank00003-of-00008.safetensors"
std::string rank_file_name(int rank, int world);
// "master/<param>", "exp_avg/<param>", "param/<param>"
std::string tensor_name(std::string_view kind, std::string_view param);

// The part of elements [first, first + count) of a tensor of `numel` elements that rank
// `rank` of `world` saved: `offset` into that rank's tensor, `count` elements, landing at
// `out` in the caller's range.
struct SavedPiece {
  int rank = 0;
  std::uint64_t offset = 0;
  std::size_t count = 0;
  std::size_t out = 0;
};
// The pieces, in increasing order of rank; empty when count is 0. Throws a usage Error when
// the range is past numel or world < 1.
std::vector<SavedPiece> saved_pieces(std::uint64_t numel, int world, std::uint64_t first,
                                     std::size_t count);

// The saved range of rank `rank`: [begin, begin + count).
struct SavedRange {
  std::uint64_t begin = 0;
  std::size_t count = 0;
};
SavedRange saved_range(std::uint64_t numel, int world, int rank);

std::string to_hex(std::string_view bytes);
// Throws a usage Error naming `what` when `hex` is not an even-length hex string.
std::string from_hex(std::string_view hex, std::string_view what);

}  // namespace zero::checkpoint

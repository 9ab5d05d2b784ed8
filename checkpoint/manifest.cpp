// meta.json: the checkpoint's description to and from JSON, checked field by field on the way
// in so that a damaged or foreign file is refused with the key at fault, and the arithmetic of
// which rank saved which elements.
#include "checkpoint/manifest.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <xxhash.h>

#include "base/error.h"
#include "base/log.h"

namespace zero::checkpoint {
namespace {

using nlohmann::json;

std::string hash_text(std::uint64_t hash) {
  return fmt::format("{:016x}", hash);
}

// Reads the members of one JSON object, naming the file and the key path in every error.
class Fields {
 public:
  Fields(const json& object, std::string where, std::string path)
      : object_(object), where_(std::move(where)), path_(std::move(path)) {
    if (!object_.is_object()) fail("", "is not a JSON object");
  }

  [[noreturn]] void fail(std::string_view key, std::string_view what) const {
    const std::string at = key.empty()     ? path_
                           : path_.empty() ? std::string(key)
                                           : fmt::format("{}.{}", path_, key);
    throw make_error(ErrorCategory::io,
                     "checkpoint {}: {} {}: the file is damaged or was not written by zero", where_,
                     at.empty() ? "the document" : at, what);
  }

  const json& at(std::string_view key) const {
    const auto it = object_.find(std::string(key));
    if (it == object_.end()) fail(key, "is missing");
    return *it;
  }
  bool has(std::string_view key) const { return object_.contains(std::string(key)); }

  std::string text(std::string_view key) const {
    const json& v = at(key);
    if (!v.is_string()) fail(key, "is not a string");
    return v.get<std::string>();
  }
  std::int64_t integer(std::string_view key, std::int64_t lo, std::int64_t hi) const {
    const json& v = at(key);
    if (!v.is_number_integer()) fail(key, "is not an integer");
    const auto value = v.get<std::int64_t>();
    if (value < lo || value > hi) fail(key, fmt::format("is {}, outside [{}, {}]", value, lo, hi));
    return value;
  }
  std::uint64_t unsigned_integer(std::string_view key) const {
    const json& v = at(key);
    // Parsed text gives unsigned numbers; a document built in memory may hold signed ones.
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
      fail(key, "is not a non-negative integer");
    }
    return v.get<std::uint64_t>();
  }
  double real(std::string_view key) const {
    const json& v = at(key);
    if (!v.is_number()) fail(key, "is not a number");
    return v.get<double>();
  }
  bool boolean(std::string_view key) const {
    const json& v = at(key);
    if (!v.is_boolean()) fail(key, "is not true or false");
    return v.get<bool>();
  }
  std::uint64_t hash(std::string_view key) const { return parse_hash(text(key), key); }
  std::uint64_t parse_hash(const std::string& text, std::string_view key) const {
    if (text.size() != 16 ||
        !std::all_of(text.begin(), text.end(), [](char c) { return std::isxdigit(c) != 0; })) {
      fail(key, fmt::format("\"{}\" is not a 16-digit hex hash", text));
    }
    return std::stoull(text, nullptr, 16);
  }
  DType dtype(std::string_view key) const {
    const std::string name = text(key);
    const auto parsed = parse_dtype(name);
    if (!parsed || !is_floating(*parsed))
      fail(key, fmt::format("\"{}\" is not fp32, fp16 or bf16", name));
    return *parsed;
  }
  const json& array(std::string_view key) const {
    const json& v = at(key);
    if (!v.is_array()) fail(key, "is not an array");
    return v;
  }
  Fields child(std::string_view key) const {
    return Fields(at(key), where_,
                  path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key));
  }
  Fields element(const json& value, std::string_view key, std::size_t i) const {
    return Fields(value, where_, fmt::format("{}{}[{}]", path_.empty() ? "" : path_ + ".", key, i));
  }
  const std::string& where() const { return where_; }

 private:
  const json& object_;
  std::string where_;
  std::string path_;
};

}  // namespace

const ParamEntry* Manifest::find(std::string_view name) const noexcept {
  for (const ParamEntry& p : params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

json to_json(const FileEntry& f) {
  json sums = json::object();
  for (const auto& [tensor, hashes] : f.sums) {
    json list = json::array();
    for (const std::uint64_t h : hashes) list.push_back(hash_text(h));
    sums[tensor] = std::move(list);
  }
  return {{"name", f.name},
          {"rank", f.rank},
          {"bytes", f.bytes},
          {"header_xxh3", hash_text(f.header_hash)},
          {"chunk_xxh3", std::move(sums)}};
}

namespace {

FileEntry read_file_entry(const Fields& f) {
  FileEntry entry;
  entry.name = f.text("name");
  entry.rank = static_cast<int>(f.integer("rank", 0, INT32_MAX));
  entry.bytes = f.unsigned_integer("bytes");
  entry.header_hash = f.hash("header_xxh3");
  const Fields sums = f.child("chunk_xxh3");
  for (const auto& [tensor, list] : f.at("chunk_xxh3").items()) {
    if (!list.is_array()) sums.fail(tensor, "is not an array");
    std::vector<std::uint64_t> hashes;
    for (const json& h : list) {
      if (!h.is_string()) sums.fail(tensor, "holds a non-string hash");
      hashes.push_back(sums.parse_hash(h.get<std::string>(), tensor));
    }
    entry.sums.emplace(tensor, std::move(hashes));
  }
  return entry;
}

}  // namespace

FileEntry file_entry_from_json(const json& document, const std::string& where) {
  return read_file_entry(Fields(document, where, ""));
}

json to_json(const Manifest& m) {
  json params = json::array();
  for (const ParamEntry& p : m.params) {
    params.push_back({{"name", p.name},
                      {"shape", p.shape},
                      {"numel", p.numel},
                      {"trainable", p.trainable},
                      {"group", p.group}});
  }
  json groups = json::array();
  for (const GroupEntry& g : m.groups) {
    groups.push_back(
        {{"name", g.name}, {"weight_decay", g.weight_decay}, {"lr_scale", g.lr_scale}});
  }
  json files = json::array();
  for (const FileEntry& f : m.files) files.push_back(to_json(f));
  json document{
      {"format", kFormatName},
      {"version", m.version},
      {"tag", m.tag},
      {"created", m.created},
      {"library_version", m.library_version},
      {"world_size", m.world_size},
      {"stage", m.stage},
      {"precision", m.precision},
      {"compute_dtype", dtype_name(m.compute_dtype)},
      {"optimizer",
       {{"type", m.optimizer},
        {"state_dtype", dtype_name(m.state_dtype)},
        {"states", m.state_names}}},
      {"counters",
       {{"global_steps", m.global_steps},
        {"micro_steps", m.micro_steps},
        {"optimizer_steps", m.optimizer_steps}}},
      {"loss_scaler",
       {{"scale", m.scaler.scale},
        {"hysteresis_left", m.scaler.hysteresis_left},
        {"iteration", m.scaler.iteration},
        {"last_overflow_iteration", m.scaler.last_overflow_iteration}}},
      {"rng", {{"seed", m.seed}}},
      {"user_data_hex", to_hex(m.user_data)},
      {"sharding",
       "rank r of world_size holds elements [r*s, min(numel, (r+1)*s)) of each "
       "tensor, s = ceil(numel / world_size)"},
      {"checksum", {{"algorithm", "xxh3-64"}, {"chunk_bytes", m.chunk_bytes}}},
      {"groups", std::move(groups)},
      {"params", std::move(params)},
      {"files", std::move(files)},
      {"config", m.config},
  };
  document[kManifestHashKey] = hash_text(manifest_hash(document));
  return document;
}

std::uint64_t manifest_hash(const json& document) {
  json copy = document;
  copy.erase(std::string(kManifestHashKey));
  const std::string text = copy.dump();  // keys sorted, numbers in their shortest exact form
  return XXH3_64bits(text.data(), text.size());
}

Manifest manifest_from_json(const json& document, const std::string& where) {
  const Fields root(document, where, "");
  if (root.text("format") != kFormatName) {
    root.fail("format", fmt::format("is \"{}\", not \"{}\"", root.text("format"), kFormatName));
  }
  Manifest m;
  m.version = static_cast<int>(root.integer("version", 1, 1000));
  if (m.version > kFormatVersion) {
    throw make_error(ErrorCategory::io,
                     "checkpoint {}: format version {} is newer than this zero reads ({}); load "
                     "it with a newer zero",
                     where, m.version, kFormatVersion);
  }
  m.tag = root.text("tag");
  m.created = root.text("created");
  m.library_version = root.text("library_version");
  m.world_size = static_cast<int>(root.integer("world_size", 1, 1 << 20));
  m.stage = static_cast<int>(root.integer("stage", 0, 3));
  m.precision = root.text("precision");
  m.compute_dtype = root.dtype("compute_dtype");

  const Fields optimizer = root.child("optimizer");
  m.optimizer = optimizer.text("type");
  m.state_dtype = optimizer.dtype("state_dtype");
  const json& states = optimizer.array("states");
  if (states.size() > 2) optimizer.fail("states", "has more than 2 entries");
  for (const json& s : states) {
    if (!s.is_string() || s.get<std::string>().empty())
      optimizer.fail("states", "holds a non-name");
    m.state_names.push_back(s.get<std::string>());
  }

  const Fields counters = root.child("counters");
  m.global_steps = counters.integer("global_steps", 0, INT64_MAX);
  m.micro_steps = counters.integer("micro_steps", 0, INT64_MAX);
  m.optimizer_steps = counters.integer("optimizer_steps", 0, m.global_steps);

  const Fields scaler = root.child("loss_scaler");
  m.scaler.scale = scaler.real("scale");
  m.scaler.hysteresis_left = scaler.integer("hysteresis_left", 0, INT64_MAX);
  m.scaler.iteration = scaler.integer("iteration", 0, INT64_MAX);
  m.scaler.last_overflow_iteration = scaler.integer("last_overflow_iteration", -1, INT64_MAX);

  m.seed = root.child("rng").unsigned_integer("seed");
  try {
    m.user_data = from_hex(root.text("user_data_hex"), "user_data_hex");
  } catch (const Error& e) {
    root.fail("user_data_hex", e.what());
  }

  const Fields checksum = root.child("checksum");
  if (checksum.text("algorithm") != "xxh3-64") checksum.fail("algorithm", "is not \"xxh3-64\"");
  m.chunk_bytes = checksum.unsigned_integer("chunk_bytes");
  if (m.chunk_bytes == 0) checksum.fail("chunk_bytes", "is 0");

  const json& groups = root.array("groups");
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const Fields g = root.element(groups[i], "groups", i);
    m.groups.push_back({g.text("name"), g.real("weight_decay"), g.real("lr_scale")});
  }
  const json& params = root.array("params");
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Fields p = root.element(params[i], "params", i);
    ParamEntry entry;
    entry.name = p.text("name");
    std::uint64_t numel = 1;
    for (const json& d : p.array("shape")) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 0) {
        p.fail("shape", "holds a negative or non-integer dimension");
      }
      entry.shape.push_back(d.get<std::int64_t>());
      numel *= d.get<std::uint64_t>();
    }
    entry.numel = p.unsigned_integer("numel");
    if (entry.numel != numel)
      p.fail("numel", fmt::format("is {}, the shape says {}", entry.numel, numel));
    entry.trainable = p.boolean("trainable");
    entry.group = static_cast<std::size_t>(
        p.integer("group", 0, static_cast<std::int64_t>(m.groups.size()) - 1));
    if (m.find(entry.name) != nullptr)
      p.fail("name", fmt::format("\"{}\" appears twice", entry.name));
    m.params.push_back(std::move(entry));
  }

  const json& files = root.array("files");
  if (files.size() != static_cast<std::size_t>(m.world_size)) {
    root.fail("files",
              fmt::format("has {} entries for a world size of {}", files.size(), m.world_size));
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    const Fields f = root.element(files[i], "files", i);
    FileEntry entry = read_file_entry(f);
    if (entry.rank != static_cast<int>(i)) f.fail("rank", "is out of order");
    if (entry.name != rank_file_name(entry.rank, m.world_size)) {
      f.fail("name", fmt::format("is \"{}\", expected \"{}\"", entry.name,
                                 rank_file_name(entry.rank, m.world_size)));
    }
    m.files.push_back(std::move(entry));
  }
  m.config = root.has("config") ? root.at("config") : json::object();
  // meta.json's own numbers (counters, seed, loss scale, the user's data) are checksummed too:
  // checked last, so that a malformed field is named as such first.
  if (root.has(std::string(kManifestHashKey))) {
    const std::string saved = root.text(std::string(kManifestHashKey));
    const std::string now = hash_text(manifest_hash(document));
    if (saved != now) {
      throw make_error(ErrorCategory::io,
                       "checkpoint {}: {} is {}, but the file's content hashes to {}: meta.json "
                       "was changed after the save (its counters, seed, loss scale or user data "
                       "cannot be trusted); restore it from a copy, or load another tag",
                       where, kManifestHashKey, saved, now);
    }
    m.self_verified = true;
  } else {
    log::warn(
        "checkpoint {}: meta.json has no {} (saved by a zero before it checksummed its own "
        "fields): its counters and user data are taken unverified",
        where, kManifestHashKey);
  }
  return m;
}

Manifest read_manifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw make_error(ErrorCategory::io,
                     "cannot open {}: {}; a tag directory without its meta.json is an unfinished "
                     "save, not a checkpoint",
                     path, std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  json document;
  try {
    document = json::parse(text.str());
  } catch (const json::parse_error& e) {
    throw make_error(ErrorCategory::io, "checkpoint {}: not valid JSON ({})", path, e.what());
  }
  return manifest_from_json(document, path);
}

std::string rank_file_name(int rank, int world) {
  return fmt::format("rank{:05d}-of-{:05d}.safetensors", rank, world);
}

std::string tensor_name(std::string_view kind, std::string_view param) {
  return fmt::format("{}/{}", kind, param);
}

SavedRange saved_range(std::uint64_t numel, int world, int rank) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw make_error(ErrorCategory::usage, "saved_range: rank {} of a world of {}", rank, world);
  }
  const std::uint64_t shard =
      (numel + static_cast<std::uint64_t>(world) - 1) / static_cast<std::uint64_t>(world);
  const std::uint64_t begin = std::min(numel, shard * static_cast<std::uint64_t>(rank));
  const std::uint64_t end = std::min(numel, begin + shard);
  return {begin, static_cast<std::size_t>(end - begin)};
}

std::vector<SavedPiece> saved_pieces(std::uint64_t numel, int world, std::uint64_t first,
                                     std::size_t count) {
  if (world < 1) throw make_error(ErrorCategory::usage, "saved_pieces: a world of {}", world);
  if (first > numel || count > numel - first) {
    throw make_error(ErrorCategory::usage,
                     "saved_pieces: elements [{}, {}) are outside a tensor of {}", first,
                     first + count, numel);
  }
  std::vector<SavedPiece> pieces;
  if (count == 0) return pieces;
  const std::uint64_t shard =
      (numel + static_cast<std::uint64_t>(world) - 1) / static_cast<std::uint64_t>(world);
  std::uint64_t at = first;
  const std::uint64_t end = first + count;
  while (at < end) {
    const auto rank = static_cast<int>(at / shard);
    const std::uint64_t rank_end = std::min(end, shard * (static_cast<std::uint64_t>(rank) + 1));
    pieces.push_back({rank, at - shard * static_cast<std::uint64_t>(rank),
                      static_cast<std::size_t>(rank_end - at),
                      static_cast<std::size_t>(at - first)});
    at = rank_end;
  }
  return pieces;
}

std::string to_hex(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return out;
}

std::string from_hex(std::string_view hex, std::string_view what) {
  auto digit = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw make_error(ErrorCategory::usage, "{}: '{}' is not a hex digit", what, c);
  };
  if (hex.size() % 2 != 0) {
    throw make_error(ErrorCategory::usage, "{}: odd number of hex digits", what);
  }
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<char>(digit(hex[2 * i]) * 16 + digit(hex[2 * i + 1]));
  }
  return out;
}

}  // namespace zero::checkpoint

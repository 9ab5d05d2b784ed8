// zero-ckpt: look into checkpoints and turn them into one model file, without an engine, an
// MPI job or the memory of the model.
//
//   zero-ckpt inspect DIR[/TAG] [--no-verify] [--params] [--json]
//   zero-ckpt export DIR[/TAG] --out model.safetensors|OUTDIR [--dtype fp32|bf16|fp16]
//                    [--layout auto|hf|saved]
// An --out that does not end in .safetensors is a Hugging Face model directory:
// OUTDIR/model.safetensors, OUTDIR/config.json and, where the source had one,
// OUTDIR/generation_config.json (the files zero-train kept in the checkpoint). The export
// replaces the whole model there: an earlier sharded model's index and shards go.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/bytes.h"
#include "base/error.h"
#include "base/timer.h"
#include "checkpoint/durable.h"
#include "checkpoint/manifest.h"
#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"
#include "models/gpt/hf_layout.h"

namespace {

namespace fs = std::filesystem;
using zero::DType;
using zero::checkpoint::CheckpointReader;
using zero::checkpoint::Manifest;
using zero::checkpoint::ParamEntry;

// DIR (its latest), DIR/TAG, or a tag directory.
std::string tag_directory(const std::string& path) {
  return zero::checkpoint::resolve_tag_directory(path, "");
}

std::uint64_t saved_bytes(const Manifest& m) {
  std::uint64_t bytes = 0;
  for (const auto& f : m.files) bytes += f.bytes;
  return bytes;
}

int inspect(const std::string& path, bool verify, bool list_params, bool as_json) {
  CheckpointReader reader(tag_directory(path));
  const Manifest& m = reader.manifest();
  std::uint64_t elements = 0, trainable = 0;
  for (const ParamEntry& p : m.params) {
    elements += p.numel;
    if (p.trainable) trainable += p.numel;
  }
  std::uint64_t verified = 0;
  double seconds = 0;
  if (verify) {
    const zero::Timer timer;
    verified = reader.verify_all();
    seconds = timer.seconds();
  }
  if (as_json) {
    nlohmann::json out = zero::checkpoint::to_json(m);
    out.erase("files");
    out["directory"] = reader.directory();
    out["bytes"] = saved_bytes(m);
    out["elements"] = elements;
    out["trainable_elements"] = trainable;
    out["verified"] = verify;
    out["meta_verified"] = m.self_verified;
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("checkpoint {}\n", reader.directory());
  std::cout << fmt::format("  tag {}, saved {} by zero {}\n", m.tag, m.created, m.library_version);
  std::cout << fmt::format("  world size {}, ZeRO stage {}, {} ({} compute)\n", m.world_size,
                           m.stage, m.precision, zero::dtype_name(m.compute_dtype));
  std::cout << fmt::format("  step {} ({} optimizer steps taken, {} skipped), micro-step {}\n",
                           m.global_steps, m.optimizer_steps, m.global_steps - m.optimizer_steps,
                           m.micro_steps);
  std::cout << fmt::format("  optimizer {} with {} in {}; loss scale {}\n", m.optimizer,
                           m.state_names.empty()
                               ? std::string("no moments")
                               : fmt::format("{}", fmt::join(m.state_names, ", ")),
                           zero::dtype_name(m.state_dtype), m.scaler.scale);
  std::cout << fmt::format("  {} parameters, {} elements ({} trainable), {} in {} file(s)\n",
                           m.params.size(), elements, trainable, zero::format_bytes(saved_bytes(m)),
                           m.files.size());
  if (!m.user_data.empty()) std::cout << fmt::format("  user data: {} bytes\n", m.user_data.size());
  if (list_params) {
    std::size_t width = 0;
    for (const ParamEntry& p : m.params) width = std::max(width, p.name.size());
    for (const ParamEntry& p : m.params) {
      std::cout << fmt::format("    {:<{}}  [{}]  {}  group {}\n", p.name, width,
                               fmt::join(p.shape, ", "), p.trainable ? "trainable" : "frozen",
                               m.groups[p.group].name);
    }
  }
  std::cout << (m.self_verified ? "  meta.json: its checksum verified\n"
                                : "  meta.json: no checksum of its own (saved by an older zero)\n");
  if (verify) {
    std::cout << fmt::format("  checksums: all verified ({} of tensor data, {:.2f} s)\n",
                             zero::format_bytes(verified), seconds);
  } else {
    std::cout << "  checksums: not verified (--no-verify)\n";
  }
  return 0;
}

// Where the export's layout differs from the checkpoint's: Hugging Face GPT-2's Conv1D weights.
bool transposed_on_export(const ParamEntry& p, bool hf) {
  return hf && p.shape.size() == 2 && zero::gpt::is_hf_conv1d_weight(p.name);
}

// transformers' name of a dtype, for config.json's "dtype" (transformers 4.56 and later read
// it; "torch_dtype", its older name, makes transformers 5 warn).
const char* torch_dtype(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return "bfloat16";
    case DType::f16:
      return "float16";
    default:
      return "float32";
  }
}

// A Hugging Face file zero-train keeps in a checkpoint's user data ("hf_config": config.json,
// "hf_generation_config": generation_config.json), or null when the checkpoint holds none.
nlohmann::json kept_hf_file(const Manifest& m, const char* key) {
  const nlohmann::json data =
      nlohmann::json::parse(m.user_data, nullptr, /*allow_exceptions=*/false);
  if (!data.is_object() || !data.contains(key) || !data[key].is_object()) return nullptr;
  return data[key];
}

// Writes `value` to `path`.tmp (made new), for commit_directory to rename.
void write_json_temporary(const std::string& path, const nlohmann::json& value) {
  const std::string temporary = path + ".tmp";
  zero::checkpoint::claim_temporary(temporary);
  std::ofstream file(temporary);
  file << value.dump(2) << "\n";
  if (!file.flush()) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw zero::make_error(zero::ErrorCategory::io, "cannot write {}", temporary);
  }
}

// The weight files of an earlier export or download in `dir` that the new model.safetensors
// replaces: a sharded model's index and the shards it names (plain names inside `dir` only).
std::vector<std::string> stale_weights(const fs::path& dir) {
  std::vector<std::string> stale;
  const fs::path index = dir / "model.safetensors.index.json";
  std::error_code error;
  if (!fs::exists(fs::symlink_status(index, error))) return stale;
  stale.push_back(index.filename().string());
  if (!fs::is_regular_file(index, error)) return stale;
  std::ifstream in(index);
  const nlohmann::json data = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!data.is_object() || !data.contains("weight_map") || !data["weight_map"].is_object()) {
    return stale;
  }
  for (const auto& [tensor, file] : data["weight_map"].items()) {
    if (!file.is_string()) continue;
    const std::string name = file.get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name.starts_with(".") ||
        name == "model.safetensors" || std::find(stale.begin(), stale.end(), name) != stale.end()) {
      continue;
    }
    stale.push_back(name);
  }
  return stale;
}

// Puts the new model in `dir` in place of whatever model was there, so that no reader ever
// takes old weights for new: the old index goes first (durably: until then a reader finds the
// old model whole, after it the new weights or none), then the new files (written as .tmp) are
// renamed in, then the old shards and an old generation_config.json the new model lacks are
// removed. Returns what was removed.
std::vector<std::string> commit_directory(const fs::path& dir, bool generation) {
  const std::vector<std::string> stale = stale_weights(dir);
  std::vector<std::string> removed;
  std::error_code error;
  if (!stale.empty()) {
    fs::remove(dir / stale.front(), error);
    if (error) {
      throw zero::make_error(zero::ErrorCategory::io, "cannot remove the old {}: {}",
                             (dir / stale.front()).string(), error.message());
    }
    removed.push_back(stale.front());
    zero::checkpoint::sync_directory(dir.string());
  }
  for (const char* name : {"model.safetensors", "config.json", "generation_config.json"}) {
    if (std::string(name) == "generation_config.json" && !generation) continue;
    fs::rename(dir / (std::string(name) + ".tmp"), dir / name);  // a link there is replaced
  }
  std::vector<std::string> leftovers(stale.begin() + (stale.empty() ? 0 : 1), stale.end());
  if (!generation) leftovers.push_back("generation_config.json");
  for (const std::string& name : leftovers) {
    if (fs::remove(dir / name, error)) removed.push_back(name);
  }
  zero::checkpoint::sync_directory(dir.string());
  return removed;
}

// Which layouts the checkpoint's names allow: Hugging Face GPT-2's, the Llama family's.
struct Naming {
  bool gpt2 = false;
  bool llama = false;
};

Naming naming_of(const Manifest& m) {
  std::vector<std::string> names;
  for (const ParamEntry& p : m.params) names.push_back(p.name);
  return {zero::gpt::is_gpt2_naming(names),
          std::find(names.begin(), names.end(), "model.embed_tokens.weight") != names.end()};
}

// A model directory's config.json and generation_config.json, from the checkpoint, the dtype
// set; the directory made. Refuses a checkpoint that keeps no config.json, and --layout saved.
std::pair<nlohmann::json, nlohmann::json> directory_files(const Manifest& m,
                                                          const std::string& checkpoint,
                                                          const std::string& out_arg,
                                                          const std::string& layout, DType dtype) {
  nlohmann::json config = kept_hf_file(m, "hf_config");
  nlohmann::json generation = kept_hf_file(m, "hf_generation_config");
  if (config.is_null()) {
    throw zero::make_error(
        zero::ErrorCategory::usage,
        "--out {}: a model directory needs the model's config.json, and {} keeps none (it was "
        "not saved by zero-train, or by an older one); export to a file instead (--out "
        "{}/model.safetensors) and write config.json yourself",
        out_arg, checkpoint, out_arg);
  }
  if (layout == "saved") {
    throw zero::make_error(zero::ErrorCategory::usage,
                           "--out {}: a model directory is for transformers, which reads "
                           "Hugging Face's layout; use --layout auto or hf, or --out "
                           "FILE.safetensors",
                           out_arg);
  }
  config.erase("torch_dtype");
  config["dtype"] = torch_dtype(dtype);
  std::error_code error;
  fs::create_directories(out_arg, error);
  if (error || !fs::is_directory(out_arg)) {
    throw zero::make_error(zero::ErrorCategory::io, "--out {}: cannot create the directory: {}",
                           out_arg, error ? error.message() : "a file is in the way");
  }
  return {std::move(config), std::move(generation)};
}

// The consolidated weights into `temporary` (made new; removed when the writing fails): each
// parameter whole under its name, streamed in pieces of 4 Mi elements so that memory does not
// grow with the model; a transposed weight is read whole (GPT-2's largest, c_fc of gpt2-1.5b,
// is 10M elements).
void write_weights(CheckpointReader& reader, const std::string& temporary, DType dtype, bool hf) {
  const Manifest& m = reader.manifest();
  std::vector<zero::checkpoint::TensorDecl> decls;
  for (const ParamEntry& p : m.params) {
    std::vector<std::int64_t> shape = p.shape;
    if (transposed_on_export(p, hf)) std::swap(shape[0], shape[1]);
    decls.push_back({p.name, std::string(zero::checkpoint::safetensors_dtype(dtype)), shape});
  }
  zero::checkpoint::claim_temporary(temporary);
  try {
    zero::checkpoint::SafetensorsWriter writer(
        temporary, std::move(decls),
        {{"format", "pt"},
         {"zero_checkpoint", reader.directory()},
         {"zero_step", std::to_string(m.global_steps)},
         {"zero_layout", hf ? "huggingface" : "zero"}},
        zero::checkpoint::SafetensorsWriter::kDefaultChunkBytes, 0644, /*direct=*/true);
    constexpr std::size_t kPiece = std::size_t{1} << 22;
    const std::size_t size = zero::dtype_size(dtype);
    std::vector<char> buffer(kPiece * size);
    for (const ParamEntry& p : m.params) {
      const std::string_view kind =
          p.trainable ? zero::checkpoint::kMaster : zero::checkpoint::kParam;
      if (transposed_on_export(p, hf)) {
        const auto rows = static_cast<std::size_t>(p.shape[0]);
        const auto cols = static_cast<std::size_t>(p.shape[1]);
        std::vector<char> whole(p.numel * size), turned(p.numel * size);
        reader.read(kind, p, 0, p.numel, dtype, whole.data());
        for (std::size_t r = 0; r < rows; ++r) {
          for (std::size_t c = 0; c < cols; ++c) {
            std::memcpy(turned.data() + (c * rows + r) * size, whole.data() + (r * cols + c) * size,
                        size);
          }
        }
        writer.write(turned.data(), turned.size());
        continue;
      }
      for (std::uint64_t done = 0; done < p.numel; done += kPiece) {
        const std::size_t n =
            static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, p.numel - done));
        reader.read(kind, p, done, n, dtype, buffer.data());
        writer.write(buffer.data(), n * size);
      }
    }
    writer.finish();
  } catch (...) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw;
  }
}

// A model directory: config.json and generation_config.json written whole beside the new
// weights, then the whole model put in place of the old one (commit_directory). Returns what
// was removed.
std::vector<std::string> finish_directory(const fs::path& dir, const nlohmann::json& config,
                                          const nlohmann::json& generation) {
  try {
    write_json_temporary((dir / "config.json").string(), config);
    if (!generation.is_null()) {
      write_json_temporary((dir / "generation_config.json").string(), generation);
    }
    return commit_directory(dir, !generation.is_null());
  } catch (...) {
    std::error_code ignored;
    for (const char* name :
         {"model.safetensors.tmp", "config.json.tmp", "generation_config.json.tmp"}) {
      fs::remove(dir / name, ignored);
    }
    throw;
  }
}

int export_model(const std::string& path, const std::string& out_arg, const std::string& dtype_text,
                 const std::string& layout) {
  const auto dtype = zero::parse_dtype(dtype_text);
  if (!dtype || !zero::is_floating(*dtype)) {
    throw zero::make_error(zero::ErrorCategory::usage, "--dtype {}: use fp32, bf16 or fp16",
                           dtype_text);
  }
  const zero::Timer timer;
  CheckpointReader reader(tag_directory(path));
  const Manifest& m = reader.manifest();
  const Naming naming = naming_of(m);
  if (layout == "hf" && !naming.gpt2 && !naming.llama) {
    throw zero::make_error(zero::ErrorCategory::usage,
                           "--layout hf: {} holds neither a GPT-2 (wte.weight, wpe.weight and "
                           "h.<n>.attn/mlp weights) nor a Llama-family model "
                           "(model.embed_tokens.weight, model.layers.<n>...); export it with "
                           "--layout saved",
                           reader.directory());
  }
  // A directory for transformers: the weights in Hugging Face's layout, and config.json.
  const bool directory = !out_arg.ends_with(".safetensors");
  nlohmann::json config, generation;
  if (directory) {
    std::tie(config, generation) = directory_files(m, reader.directory(), out_arg, layout, *dtype);
  }
  const std::string out = directory ? (fs::path(out_arg) / "model.safetensors").string() : out_arg;
  // The Llama family is registered in Hugging Face's layout: nothing turns.
  const bool hf = layout == "hf" || (layout == "auto" && (naming.gpt2 || naming.llama));
  // Written beside the target and renamed at the end: a failed export leaves no partial file
  // under the name asked for.
  write_weights(reader, out + ".tmp", *dtype, hf);
  std::vector<std::string> removed;
  if (directory) {
    removed = finish_directory(fs::path(out_arg), config, generation);
  } else {
    fs::rename(out + ".tmp", out);  // a link at `out` is replaced, not followed
  }
  std::uint64_t elements = 0;
  for (const ParamEntry& p : m.params) elements += p.numel;
  std::cout << fmt::format("{}: {} parameters, {} elements as {}, {} layout, {} ({:.2f} s)\n", out,
                           m.params.size(), elements, zero::dtype_name(*dtype),
                           !hf           ? "zero's"
                           : naming.gpt2 ? "Hugging Face GPT-2 (Conv1D weights [in, out])"
                                         : "Hugging Face",
                           zero::format_bytes(fs::file_size(out)), timer.seconds());
  if (!removed.empty()) {
    std::cout << fmt::format("{}: removed the earlier model's {}\n", out_arg,
                             fmt::join(removed, ", "));
  }
  if (directory) {
    std::cout << fmt::format(
        "{}/config.json: {} ({}); load it with transformers' "
        "AutoModelForCausalLM.from_pretrained(\"{}\")\n",
        out_arg, config.value("model_type", "?"),
        config.value("architectures", nlohmann::json::array()).dump(), out_arg);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "zero-ckpt: inspect zero checkpoints and export them as one safetensors model file or a\n"
      "Hugging Face model directory.\n"
      "A checkpoint is DIR/<tag>/ (meta.json and one safetensors file per rank); DIR/latest\n"
      "names the newest tag. Loading at another world size or stage needs no conversion: the\n"
      "engine re-splits each parameter as it loads."};
  app.require_subcommand(1);

  auto* inspect_command = app.add_subcommand(
      "inspect",
      "Describe a checkpoint (world size, stage, step, parameters, sizes) and verify "
      "every checksum of every rank file. Exits 1 naming the first damaged file.");
  std::string inspect_path;
  bool no_verify = false, list_params = false, as_json = false;
  inspect_command->add_option("CHECKPOINT", inspect_path, "DIR (its latest tag) or DIR/TAG")
      ->required();
  inspect_command->add_flag("--no-verify", no_verify, "skip reading the data to check it");
  inspect_command->add_flag("--params", list_params, "list every parameter");
  inspect_command->add_flag("--json", as_json, "print meta.json's description as JSON");

  auto* export_command = app.add_subcommand(
      "export",
      "Write the consolidated model (each parameter whole, under its name: fp32 "
      "masters of trainable parameters, values of frozen ones) as one safetensors file, "
      "streamed so that memory stays small whatever the model's size; or, with --out "
      "DIR, a Hugging Face model directory (DIR/model.safetensors, the config.json and, "
      "where the source had one, the generation_config.json zero-train kept in the "
      "checkpoint) that transformers' from_pretrained loads. The export replaces the whole "
      "model in DIR: an earlier sharded model's index and shards are removed, and said so; "
      "other files (the tokenizer's) stay.");
  std::string export_path, out, dtype = "fp32";
  export_command->add_option("CHECKPOINT", export_path, "DIR (its latest tag) or DIR/TAG")
      ->required();
  export_command
      ->add_option("-o,--out", out,
                   "FILE.safetensors, or a directory for transformers (model.safetensors, "
                   "config.json, generation_config.json)")
      ->required();
  export_command->add_option("--dtype", dtype, "fp32, bf16 or fp16 (round to nearest even)")
      ->capture_default_str();
  std::string layout = "auto";
  export_command
      ->add_option("--layout", layout,
                   "hf: as Hugging Face stores the model (GPT-2: Conv1D weights [in, out]; the "
                   "Llama family as registered), so transformers and zero-train --init read the "
                   "file; saved: zero's own layout; auto: hf for a GPT-2 or a Llama-family model, "
                   "else saved")
      ->check(CLI::IsMember({"auto", "hf", "saved"}))
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*inspect_command) return inspect(inspect_path, !no_verify, list_params, as_json);
    return export_model(export_path, out, dtype, layout);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "zero-ckpt: %s\n", error.what());
    return 1;
  }
}

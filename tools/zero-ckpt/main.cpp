// zero-ckpt: look into checkpoints and turn them into one model file, without an engine, an
// MPI job or the memory of the model.
//
//   zero-ckpt inspect DIR[/TAG] [--no-verify] [--params] [--json]
//   zero-ckpt export DIR[/TAG] --out model.safetensors [--dtype fp32|bf16|fp16]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/bytes.h"
#include "base/error.h"
#include "base/timer.h"
#include "engine/checkpoint/durable.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/reader.h"
#include "engine/checkpoint/safetensors.h"

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
                           m.state_names.empty() ? std::string("no moments")
                                                 : fmt::format("{}", fmt::join(m.state_names, ", ")),
                           zero::dtype_name(m.state_dtype), m.scaler.scale);
  std::cout << fmt::format("  {} parameters, {} elements ({} trainable), {} in {} file(s)\n",
                           m.params.size(), elements, trainable,
                           zero::format_bytes(saved_bytes(m)), m.files.size());
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

int export_model(const std::string& path, const std::string& out, const std::string& dtype_text) {
  const auto dtype = zero::parse_dtype(dtype_text);
  if (!dtype || !zero::is_floating(*dtype)) {
    throw zero::make_error(zero::ErrorCategory::usage, "--dtype {}: use fp32, bf16 or fp16",
                           dtype_text);
  }
  const zero::Timer timer;
  CheckpointReader reader(tag_directory(path));
  const Manifest& m = reader.manifest();
  std::vector<zero::checkpoint::TensorDecl> decls;
  for (const ParamEntry& p : m.params) {
    decls.push_back({p.name, std::string(zero::checkpoint::safetensors_dtype(*dtype)), p.shape});
  }
  // Written beside the target and renamed at the end: a failed export leaves no partial file
  // under the name asked for. The temporary is made new (a leftover from a crash, or a link
  // planted there, is removed, never written through) and removed when the export fails.
  const std::string temporary = out + ".tmp";
  zero::checkpoint::claim_temporary(temporary);
  try {
    zero::checkpoint::SafetensorsWriter writer(
        temporary, std::move(decls),
        {{"format", "pt"}, {"zero_checkpoint", reader.directory()},
         {"zero_step", std::to_string(m.global_steps)}},
        zero::checkpoint::SafetensorsWriter::kDefaultChunkBytes, 0644, /*direct=*/true);
    // Streamed in pieces of 4 Mi elements: the memory does not grow with the model.
    constexpr std::size_t kPiece = std::size_t{1} << 22;
    std::vector<char> buffer(kPiece * zero::dtype_size(*dtype));
    for (const ParamEntry& p : m.params) {
      const std::string_view kind = p.trainable ? zero::checkpoint::kMaster : zero::checkpoint::kParam;
      for (std::uint64_t done = 0; done < p.numel; done += kPiece) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, p.numel - done));
        reader.read(kind, p, done, n, *dtype, buffer.data());
        writer.write(buffer.data(), n * zero::dtype_size(*dtype));
      }
    }
    writer.finish();
    fs::rename(temporary, out);  // a link at `out` is replaced, not followed
  } catch (...) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw;
  }
  std::uint64_t elements = 0;
  for (const ParamEntry& p : m.params) elements += p.numel;
  std::cout << fmt::format("{}: {} parameters, {} elements as {}, {} ({:.2f} s)\n", out,
                           m.params.size(), elements, zero::dtype_name(*dtype),
                           zero::format_bytes(fs::file_size(out)), timer.seconds());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "zero-ckpt: inspect zero checkpoints and export them as one safetensors model file.\n"
      "A checkpoint is DIR/<tag>/ (meta.json and one safetensors file per rank); DIR/latest\n"
      "names the newest tag. Loading at another world size or stage needs no conversion: the\n"
      "engine re-splits each parameter as it loads."};
  app.require_subcommand(1);

  auto* inspect_command = app.add_subcommand(
      "inspect", "Describe a checkpoint (world size, stage, step, parameters, sizes) and verify "
                 "every checksum of every rank file. Exits 1 naming the first damaged file.");
  std::string inspect_path;
  bool no_verify = false, list_params = false, as_json = false;
  inspect_command->add_option("CHECKPOINT", inspect_path, "DIR (its latest tag) or DIR/TAG")
      ->required();
  inspect_command->add_flag("--no-verify", no_verify, "skip reading the data to check it");
  inspect_command->add_flag("--params", list_params, "list every parameter");
  inspect_command->add_flag("--json", as_json, "print meta.json's description as JSON");

  auto* export_command = app.add_subcommand(
      "export", "Write the consolidated model (each parameter whole, under its name: fp32 "
                "masters of trainable parameters, values of frozen ones) as one safetensors file, "
                "streamed so that memory stays small whatever the model's size.");
  std::string export_path, out, dtype = "fp32";
  export_command->add_option("CHECKPOINT", export_path, "DIR (its latest tag) or DIR/TAG")
      ->required();
  export_command->add_option("-o,--out", out, "the safetensors file to write")->required();
  export_command->add_option("--dtype", dtype, "fp32, bf16 or fp16 (round to nearest even)")
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*inspect_command) return inspect(inspect_path, !no_verify, list_params, as_json);
    return export_model(export_path, out, dtype);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "zero-ckpt: %s\n", error.what());
    return 1;
  }
}

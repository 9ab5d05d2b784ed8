// Pretrained weights into the engine's state: safetensors tensors mapped onto the registered
// parameters by name, checked on every rank before anything changes, then read range by range
// (only the ranges this rank keeps) through ModelState::assign, with the moments zeroed.
#include <algorithm>
#include <set>

#include <fmt/ranges.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoint/tensor_set.h"
#include "engine/state/checkpoint_state.h"

namespace zero::engine {
namespace {

using checkpoint::TensorSet;

// What each parameter reads: its tensor (or none: skipped), and whether it is transposed.
struct Mapping {
  const TensorSet::Entry* entry = nullptr;
  bool transposed = false;
};

class PretrainedSource final : public ValueSource {
 public:
  PretrainedSource(const Registry& registry, std::vector<Mapping> mappings,
                   std::vector<std::vector<float>> kept)
      : registry_(registry), mappings_(std::move(mappings)), kept_(std::move(kept)) {}

  void values(std::size_t p, std::uint64_t first, std::size_t count, float* out) override {
    if (count == 0) return;
    const Mapping& m = mappings_[p];
    if (m.entry == nullptr) {  // skipped: the value it had
      std::copy_n(kept_[p].begin() + static_cast<std::ptrdiff_t>(first), count, out);
      return;
    }
    if (!m.transposed) {
      m.entry->file->read_f32(*m.entry->info, first, count, out);
      return;
    }
    // The parameter is [rows, cols], the tensor [cols, rows]: element (i, j) is the tensor's
    // (j, i). Rows i_lo..i_hi of the parameter are columns of the tensor: read those columns
    // from each of its rows, then pick.
    const auto& shape = registry_.param(p).shape;
    const auto rows = static_cast<std::uint64_t>(shape[0]);
    const auto cols = static_cast<std::uint64_t>(shape[1]);
    const std::uint64_t i_lo = first / cols;
    const std::uint64_t i_hi = (first + count - 1) / cols;
    const std::size_t width = static_cast<std::size_t>(i_hi - i_lo + 1);
    std::vector<float> block(width * cols);
    for (std::uint64_t j = 0; j < cols; ++j) {
      m.entry->file->read_f32(*m.entry->info, j * rows + i_lo, width, block.data() + j * width);
    }
    for (std::size_t k = 0; k < count; ++k) {
      const std::uint64_t e = first + k;
      out[k] = block[(e % cols) * width + (e / cols - i_lo)];
    }
  }

 private:
  const Registry& registry_;
  std::vector<Mapping> mappings_;
  std::vector<std::vector<float>> kept_;
};

}  // namespace

void CheckpointState::load_pretrained(const std::string& path, const PretrainedOptions& options,
                                      const std::function<std::vector<float>(std::size_t)>& read,
                                      const std::function<void(std::string)>& partly) {
  const Registry& registry = ctx_.registry;
  std::unique_ptr<TensorSet> files;
  std::vector<Mapping> mappings(registry.param_count());
  std::vector<bool> skipped(registry.param_count(), false);
  parts_.agreement.agree(fmt::format("loading pretrained weights from {}", path), [&] {
    files = std::make_unique<TensorSet>(path);
    std::map<std::string, std::string, std::less<>> names(options.names.begin(),
                                                          options.names.end());
    const std::set<std::string, std::less<>> transposed(options.transposed.begin(),
                                                        options.transposed.end());
    const std::set<std::string, std::less<>> skip(options.skip.begin(), options.skip.end());
    auto require_param = [&](const std::string& name, const char* list) {
      if (!registry.find_param(name)) {
        throw make_error(ErrorCategory::usage,
                         "load_pretrained: {} names '{}', which is not a "
                         "registered parameter",
                         list, name);
      }
    };
    for (const auto& [name, tensor] : names) require_param(name, "the name mapping");
    for (const std::string& name : transposed) require_param(name, "the transposed list");
    for (const std::string& name : skip) require_param(name, "the skip list");
    std::set<std::string, std::less<>> used;
    for (std::size_t p = 0; p < registry.param_count(); ++p) {
      const ParamSpec& spec = registry.param(p);
      if (skip.count(spec.name) != 0) {
        skipped[p] = true;
        continue;
      }
      const auto renamed = names.find(spec.name);
      const std::string tensor = renamed == names.end() ? spec.name : renamed->second;
      const TensorSet::Entry* entry = files->find(tensor);
      if (entry == nullptr) {
        throw make_error(ErrorCategory::usage,
                         "load_pretrained: {} has no tensor '{}' for parameter '{}' (shape {}); "
                         "map the name, or skip the parameter to keep its value",
                         path, tensor, spec.name, shape_text(spec.shape));
      }
      std::vector<std::int64_t> expected = spec.shape;
      const bool flip = transposed.count(spec.name) != 0;
      if (flip) {
        if (spec.shape.size() != 2) {
          throw make_error(ErrorCategory::usage,
                           "load_pretrained: parameter '{}' of shape {} cannot be transposed: only "
                           "2-D parameters can",
                           spec.name, shape_text(spec.shape));
        }
        std::swap(expected[0], expected[1]);
      }
      if (entry->info->shape != expected) {
        throw make_error(
            ErrorCategory::usage,
            "load_pretrained: tensor '{}' in {} has shape {}; parameter '{}' needs {}{}", tensor,
            entry->file->path(), shape_text(entry->info->shape), spec.name, shape_text(expected),
            flip ? " (transposed)" : "");
      }
      const std::string& dtype = entry->info->dtype;
      if (dtype != "F32" && dtype != "F16" && dtype != "BF16" && dtype != "F64") {
        throw make_error(ErrorCategory::usage,
                         "load_pretrained: tensor '{}' in {} is {}, not a floating type (F64, F32, "
                         "F16, BF16)",
                         tensor, entry->file->path(), dtype);
      }
      mappings[p] = {entry, flip};
      used.insert(tensor);
    }
    const std::set<std::string, std::less<>> ignore(options.ignore.begin(), options.ignore.end());
    for (const auto& [name, entry] : files->tensors()) {
      if (used.count(name) == 0 && ignore.count(name) == 0) {
        throw make_error(ErrorCategory::usage,
                         "load_pretrained: tensor '{}' (shape {}) in {} is not taken by any "
                         "parameter; map it, or list it to ignore",
                         name, shape_text(entry.info->shape), entry.file->path());
      }
    }
  });
  // Skipped parameters keep their values: read them first (collective).
  std::vector<std::vector<float>> kept(registry.param_count());
  for (std::size_t p = 0; p < kept.size(); ++p) {
    if (skipped[p]) kept[p] = read(p);
  }
  parts_.fetcher.release_unheld(/*stale=*/true);
  PretrainedSource source(registry, std::move(mappings), std::move(kept));
  try {
    parts_.agreement.agree(fmt::format("loading pretrained weights from {}", path),
                           [&] { parts_.state.assign(source); });
  } catch (const Error& error) {
    partly(fmt::format("loading pretrained weights failed part way: {}", error.what()));
    throw;
  }
  parts_.stepper.zero_grads();
  parts_.fetcher.release_unheld(/*stale=*/true);
  if (ctx_.comm.rank() == 0) {
    log::info("pretrained weights loaded from {} ({} file(s))", path, files->files().size());
  }
}

}  // namespace zero::engine

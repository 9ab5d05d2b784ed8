// Collective agreement for the engine's multi-step operations (checkpoints, pretrained
// weights): every rank's text gathered on every rank, and a step whose failure on any rank
// fails it on all of them, naming each failing rank and what failed there.
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "engine/engine_impl.h"

namespace zero::engine {

std::vector<std::string> Engine::Impl::all_gather_text(const std::string& text) {
  if (world == 1) return {text};
  const auto n = static_cast<std::size_t>(world);
  std::vector<std::int64_t> sizes(n);
  {
    DeviceScratch scratch(*device, (n + 1) * 8);
    const auto mine = static_cast<std::int64_t>(text.size());
    device->copy(scratch.data(), &mine, 8);
    comm->all_gather(scratch.data(), scratch.data() + 8, 1, DType::i64).wait();
    device->copy(sizes.data(), scratch.data() + 8, n * 8);
  }
  const std::size_t words =
      std::max<std::size_t>(1, (static_cast<std::size_t>(*std::max_element(sizes.begin(), sizes.end())) + 7) / 8);
  std::vector<char> all(n * words * 8);
  {
    DeviceScratch scratch(*device, (n + 1) * words * 8);
    std::vector<char> padded(words * 8, '\0');
    std::memcpy(padded.data(), text.data(), text.size());
    device->copy(scratch.data(), padded.data(), padded.size());
    comm->all_gather(scratch.data(), scratch.data() + words * 8, words, DType::i64).wait();
    device->copy(all.data(), scratch.data() + words * 8, all.size());
  }
  std::vector<std::string> out(n);
  for (std::size_t q = 0; q < n; ++q) {
    out[q].assign(all.data() + q * words * 8, static_cast<std::size_t>(sizes[q]));
  }
  return out;
}

void Engine::mean_across_ranks(double* values, std::size_t count) {
  Impl& e = *impl_;
  e.require_initialized("mean_across_ranks");
  if (count == 0 || e.world == 1) return;
  std::vector<float> sums(values, values + count);
  DeviceScratch scratch(*e.device, count * sizeof(float));
  e.device->copy(scratch.data(), sums.data(), count * sizeof(float));
  e.comm->all_reduce(scratch.data(), count, DType::f32, ReduceOp::sum).wait();
  e.device->copy(sums.data(), scratch.data(), count * sizeof(float));
  for (std::size_t i = 0; i < count; ++i) values[i] = sums[i] / e.world;
}

void Engine::Impl::agree(const char* what, const std::function<void()>& work) {
  std::string outcome;  // empty: done; else the category's digit and the message
  try {
    work();
  } catch (const Error& error) {
    outcome = fmt::format("{}{}", static_cast<int>(error.category()), error.what());
  } catch (const std::exception& error) {
    outcome = fmt::format("{}{}", static_cast<int>(ErrorCategory::internal), error.what());
  }
  const std::vector<std::string> all = all_gather_text(outcome);
  std::string message;
  auto category = ErrorCategory::internal;
  int failures = 0;
  for (std::size_t q = 0; q < all.size(); ++q) {
    if (all[q].empty()) continue;
    if (failures++ == 0) category = static_cast<ErrorCategory>(all[q][0] - '0');
    message += world == 1 ? all[q].substr(1)
                          : fmt::format("{}rank {}: {}", message.empty() ? "" : "; ", q,
                                        all[q].substr(1));
  }
  if (failures > 0) throw make_error(category, "{} failed: {}", what, message);
}

}  // namespace zero::engine

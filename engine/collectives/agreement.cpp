// Agreement: outcomes and texts shared by every rank (see agreement.h).
#include "engine/collectives/agreement.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "base/error.h"
#include "device/device_scratch.h"

namespace zero::engine {
std::vector<std::string> Agreement::all_gather_text(const std::string& text) {
  const int world = comm_->size();
  if (world == 1) return {text};
  const auto n = static_cast<std::size_t>(world);
  std::vector<std::int64_t> sizes(n);
  {
    DeviceScratch scratch(*device_, (n + 1) * 8);
    const auto mine = static_cast<std::int64_t>(text.size());
    device_->copy(scratch.data(), &mine, 8);
    comm_->all_gather(scratch.data(), scratch.data() + 8, 1, DType::i64).wait();
    device_->copy(sizes.data(), scratch.data() + 8, n * 8);
  }
  const auto longest = static_cast<std::size_t>(*std::max_element(sizes.begin(), sizes.end()));
  const std::size_t words = std::max<std::size_t>(1, (longest + 7) / 8);
  std::vector<char> all(n * words * 8);
  {
    DeviceScratch scratch(*device_, (n + 1) * words * 8);
    std::vector<char> padded(words * 8, '\0');
    std::memcpy(padded.data(), text.data(), text.size());
    device_->copy(scratch.data(), padded.data(), padded.size());
    comm_->all_gather(scratch.data(), scratch.data() + words * 8, words, DType::i64).wait();
    device_->copy(all.data(), scratch.data() + words * 8, all.size());
  }
  std::vector<std::string> out(n);
  for (std::size_t q = 0; q < n; ++q) {
    out[q].assign(all.data() + q * words * 8, static_cast<std::size_t>(sizes[q]));
  }
  return out;
}

void Agreement::agree(const std::string& what, const std::function<void()>& work) {
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
    message += all.size() == 1
                   ? all[q].substr(1)
                   : fmt::format("{}rank {}: {}", message.empty() ? "" : "; ", q, all[q].substr(1));
  }
  if (failures > 0) throw make_error(category, "{} failed: {}", what, message);
}

void Agreement::mean(double* values, std::size_t count) {
  const int world = comm_->size();
  if (count == 0 || world == 1) return;
  std::vector<float> sums(values, values + count);
  DeviceScratch scratch(*device_, count * sizeof(float));
  device_->copy(scratch.data(), sums.data(), count * sizeof(float));
  comm_->all_reduce(scratch.data(), count, DType::f32, ReduceOp::sum).wait();
  device_->copy(sums.data(), scratch.data(), count * sizeof(float));
  for (std::size_t i = 0; i < count; ++i) values[i] = sums[i] / world;
}

bool Agreement::same_everywhere(std::span<const std::uint64_t> values) {
  if (comm_->size() == 1 || values.empty()) return true;
  // max(x) and max(~x) = ~min(x) in one all_reduce: equal everywhere iff max == min.
  const std::size_t n = values.size();
  std::vector<std::int64_t> words(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    std::memcpy(&words[i], &values[i], 8);
    words[n + i] = ~words[i];
  }
  DeviceScratch scratch(*device_, words.size() * 8);
  device_->copy(scratch.data(), words.data(), words.size() * 8);
  comm_->all_reduce(scratch.data(), words.size(), DType::i64, ReduceOp::max).wait();
  device_->copy(words.data(), scratch.data(), words.size() * 8);
  for (std::size_t i = 0; i < n; ++i) {
    if (words[i] != ~words[n + i]) return false;
  }
  return true;
}

void Agreement::broadcast(std::span<std::uint64_t> values, int root) {
  if (comm_->size() == 1 || values.empty()) return;
  DeviceScratch scratch(*device_, values.size_bytes());
  if (comm_->rank() == root) device_->copy(scratch.data(), values.data(), values.size_bytes());
  comm_->broadcast(scratch.data(), values.size(), DType::i64, root).wait();
  device_->copy(values.data(), scratch.data(), values.size_bytes());
}

void Agreement::broadcast_bytes(void* data, std::size_t bytes, int root) {
  if (comm_->size() == 1 || bytes == 0) return;
  DeviceScratch scratch(*device_, bytes);
  if (comm_->rank() == root) device_->copy(scratch.data(), data, bytes);
  comm_->broadcast(scratch.data(), bytes, DType::u8, root).wait();
  device_->copy(data, scratch.data(), bytes);
}

}  // namespace zero::engine

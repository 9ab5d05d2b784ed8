// Agreement: outcomes and texts shared by every rank (see agreement.h).
#include "engine/collectives/agreement.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "base/error.h"
#include "device/device_scratch.h"

namespace zero::engine {

void Agreement::use_scratch(void* scratch, std::size_t bytes) {
  scratch_ = static_cast<char*>(scratch);
  scratch_bytes_ = bytes;
  stream_ = device_->create_stream();
}

char* Agreement::place(std::size_t bytes, std::unique_ptr<DeviceScratch>& own) {
  if (scratch_ != nullptr && bytes <= scratch_bytes_) return scratch_;
  own = std::make_unique<DeviceScratch>(*device_, bytes);
  return own->data();
}

void Agreement::copy(void* dst, const void* src, std::size_t bytes) {
  if (!stream_) {
    device_->copy(dst, src, bytes);
    return;
  }
  device_->copy_async(dst, src, bytes, *stream_);
  stream_->synchronize();
}

std::vector<std::string> Agreement::all_gather_text(const std::string& text) {
  const int world = comm_->size();
  if (world == 1) return {text};
  const auto n = static_cast<std::size_t>(world);
  std::vector<std::int64_t> sizes(n);
  {
    std::unique_ptr<DeviceScratch> own;
    char* scratch = place((n + 1) * 8, own);
    const auto mine = static_cast<std::int64_t>(text.size());
    copy(scratch, &mine, 8);
    comm_->all_gather(scratch, scratch + 8, 1, DType::i64, stream()).wait();
    copy(sizes.data(), scratch + 8, n * 8);
  }
  const auto longest = static_cast<std::size_t>(*std::max_element(sizes.begin(), sizes.end()));
  const std::size_t words = std::max<std::size_t>(1, (longest + 7) / 8);
  std::vector<char> all(n * words * 8);
  {
    std::unique_ptr<DeviceScratch> own;
    char* scratch = place((n + 1) * words * 8, own);
    std::vector<char> padded(words * 8, '\0');
    std::memcpy(padded.data(), text.data(), text.size());
    copy(scratch, padded.data(), padded.size());
    comm_->all_gather(scratch, scratch + words * 8, words, DType::i64, stream()).wait();
    copy(all.data(), scratch + words * 8, all.size());
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
  std::unique_ptr<DeviceScratch> own;
  char* scratch = place(count * sizeof(float), own);
  copy(scratch, sums.data(), count * sizeof(float));
  comm_->all_reduce(scratch, count, DType::f32, ReduceOp::sum, stream()).wait();
  copy(sums.data(), scratch, count * sizeof(float));
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
  std::unique_ptr<DeviceScratch> own;
  char* scratch = place(words.size() * 8, own);
  copy(scratch, words.data(), words.size() * 8);
  comm_->all_reduce(scratch, words.size(), DType::i64, ReduceOp::max, stream()).wait();
  copy(words.data(), scratch, words.size() * 8);
  for (std::size_t i = 0; i < n; ++i) {
    if (words[i] != ~words[n + i]) return false;
  }
  return true;
}

void Agreement::broadcast(std::span<std::uint64_t> values, int root) {
  if (comm_->size() == 1 || values.empty()) return;
  std::unique_ptr<DeviceScratch> own;
  char* scratch = place(values.size_bytes(), own);
  if (comm_->rank() == root) copy(scratch, values.data(), values.size_bytes());
  comm_->broadcast(scratch, values.size(), DType::i64, root, stream()).wait();
  copy(values.data(), scratch, values.size_bytes());
}

void Agreement::broadcast_bytes(void* data, std::size_t bytes, int root) {
  if (comm_->size() == 1 || bytes == 0) return;
  std::unique_ptr<DeviceScratch> own;
  char* scratch = place(bytes, own);
  if (comm_->rank() == root) copy(scratch, data, bytes);
  comm_->broadcast(scratch, bytes, DType::u8, root, stream()).wait();
  copy(data, scratch, bytes);
}

}  // namespace zero::engine

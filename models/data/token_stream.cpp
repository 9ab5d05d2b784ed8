// Token streams and batches for the reference trainer (token_stream.h).
#include "models/data/token_stream.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace zero::data {
namespace {

constexpr std::int32_t kMagicU16 = 20240520;  // llm.c, GPT-2 tokens
constexpr std::int32_t kMagicU32 = 20240801;  // llm.c, Llama 3 tokens
constexpr std::size_t kHeaderInts = 256;

std::runtime_error failure(const std::string& path, const std::string& what) {
  return std::runtime_error("data file " + path + ": " + what);
}

// Whether the 4 bytes at the start are one byte off a shard magic (a damaged shard).
bool near_magic(const std::string& bytes) {
  if (bytes.size() < 4) return false;
  for (const std::int32_t magic : {kMagicU16, kMagicU32}) {
    int differ = 0;
    for (int b = 0; b < 4; ++b) {
      differ += static_cast<unsigned char>(bytes[static_cast<std::size_t>(b)]) !=
                ((static_cast<std::uint32_t>(magic) >> (8 * b)) & 0xff);
    }
    if (differ == 1) return true;
  }
  return false;
}

}  // namespace

TokenStream TokenStream::open(const std::string& path, DataFormat format) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    throw failure(path,
                  "cannot read it: it is not a regular file (a FIFO, a device or a "
                  "directory); name a token shard or a text file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw failure(path, std::string("cannot open it: ") + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw failure(path, std::string("cannot read it: ") + std::strerror(errno));
  std::int32_t header[kHeaderInts] = {};
  if (bytes.size() >= sizeof header) std::memcpy(header, bytes.data(), sizeof header);
  const bool shard =
      bytes.size() >= sizeof header && (header[0] == kMagicU16 || header[0] == kMagicU32);
  if (format == DataFormat::text || !shard) {
    if (format == DataFormat::automatic && (near_magic(bytes) || path.ends_with(".bin"))) {
      std::uint32_t first = 0;
      std::memcpy(&first, bytes.data(), std::min<std::size_t>(4, bytes.size()));
      throw failure(
          path,
          fmt::format(
              "it looks like a token shard ({}) but starts with {}, not llm.c's magic {} (uint16 "
              "tokens) or {} (uint32 tokens): a damaged or foreign shard would train as text "
              "bytes; remake it with zero-tokenize, or give --data-format text to read it as text",
              near_magic(bytes) ? "its first 4 bytes are one byte off a shard's magic"
                                : "its name ends in .bin",
              first, kMagicU16, kMagicU32));
    }
    TokenStream stream = from_text(bytes);
    stream.origin_ = path;
    return stream;
  }
  const std::size_t width = header[0] == kMagicU16 ? 2 : 4;
  if (header[1] != 1) {
    throw failure(path, "llm.c token shard of version " + std::to_string(header[1]) +
                            "; this reader knows version 1");
  }
  const auto count = static_cast<std::uint64_t>(static_cast<std::uint32_t>(header[2]));
  const std::uint64_t expected = sizeof header + count * width;
  if (bytes.size() != expected) {
    const std::uint64_t body = bytes.size() - sizeof header;
    throw failure(
        path,
        fmt::format(
            "the header says {} tokens, the file holds {}{} ({} bytes after the {}-byte header, "
            "{} bytes a token): {}",
            count, body / width, body % width != 0 ? " and a part" : "", body, sizeof header, width,
            bytes.size() < expected ? "truncated, or a header that counts too many"
                                    : "data past the counted tokens, or a header that counts too "
                                      "few; remake the shard with zero-tokenize"));
  }
  std::vector<std::int32_t> tokens(count);
  const char* data = bytes.data() + sizeof header;
  for (std::uint64_t i = 0; i < count; ++i) {
    if (width == 2) {
      std::uint16_t t;
      std::memcpy(&t, data + 2 * i, 2);
      tokens[i] = t;
    } else {
      std::uint32_t t;
      std::memcpy(&t, data + 4 * i, 4);
      tokens[i] = static_cast<std::int32_t>(t);
    }
  }
  TokenStream stream = from_tokens(std::move(tokens), path);
  stream.format_ = width == 2 ? "llm.c uint16" : "llm.c uint32";
  return stream;
}

double TokenStream::control_fraction() const noexcept {
  if (format_ != "text" || tokens_.empty()) return 0.0;
  std::size_t control = 0;
  for (const std::int32_t t : tokens_) {
    const bool whitespace = t == '\t' || t == '\n' || t == '\f' || t == '\r';
    control += (t < 0x20 && !whitespace) || t == 0x7f;
  }
  return static_cast<double>(control) / static_cast<double>(tokens_.size());
}

TokenStream TokenStream::from_text(std::string_view text) {
  std::vector<std::int32_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  TokenStream stream = from_tokens(std::move(tokens), "text");
  stream.format_ = "text";
  return stream;
}

TokenStream TokenStream::from_tokens(std::vector<std::int32_t> tokens, std::string origin) {
  TokenStream stream;
  stream.tokens_ = std::move(tokens);
  stream.origin_ = std::move(origin);
  stream.format_ = "tokens";
  return stream;
}

std::int32_t TokenStream::max_token() const noexcept {
  return tokens_.empty() ? -1 : *std::max_element(tokens_.begin(), tokens_.end());
}

void TokenStream::split(double fraction, int seq, TokenStream& train,
                        TokenStream& validation) const {
  auto held = static_cast<std::size_t>(static_cast<double>(tokens_.size()) * fraction);
  const auto one = static_cast<std::size_t>(seq) + 1;
  if (fraction > 0 && held < one && tokens_.size() >= 2 * one) held = one;
  held = std::min(held, tokens_.size());
  const auto cut = static_cast<std::ptrdiff_t>(tokens_.size() - held);
  train = from_tokens({tokens_.begin(), tokens_.begin() + cut}, origin_ + " (training part)");
  validation = from_tokens({tokens_.begin() + cut, tokens_.end()}, origin_ + " (validation part)");
  train.format_ = validation.format_ = format_;
}

Batcher::Batcher(const TokenStream& stream, int batch, int seq, int vocab)
    : stream_(stream), batch_(batch), seq_(seq) {
  if (batch < 1 || seq < 1) {
    throw std::invalid_argument("micro-batch " + std::to_string(batch) + " and sequence " +
                                std::to_string(seq) + " must be at least 1");
  }
  if (stream.size() < static_cast<std::size_t>(seq) + 1) {
    throw std::invalid_argument(stream.origin() + " holds " + std::to_string(stream.size()) +
                                " tokens, fewer than one sequence of " + std::to_string(seq) +
                                " and its next token");
  }
  const auto& tokens = stream.tokens();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      // Shards hold unsigned tokens: uint32 ones of 2^31 and above are negative here.
      throw std::invalid_argument(stream.origin() + ": token " +
                                  std::to_string(static_cast<std::uint32_t>(tokens[i])) +
                                  " at position " + std::to_string(i) +
                                  " is outside the model's vocabulary of " + std::to_string(vocab));
    }
  }
  sequences_ = (stream.size() - 1) / static_cast<std::size_t>(seq);
}

void Batcher::fill(std::uint64_t first, std::int32_t* tokens, std::int32_t* targets) const {
  const auto& all = stream_.tokens();
  for (int b = 0; b < batch_; ++b) {
    const std::uint64_t k = (first + static_cast<std::uint64_t>(b)) % sequences_;
    const std::size_t start = static_cast<std::size_t>(k) * static_cast<std::size_t>(seq_);
    for (int t = 0; t < seq_; ++t) {
      tokens[b * seq_ + t] = all[start + static_cast<std::size_t>(t)];
      targets[b * seq_ + t] = all[start + static_cast<std::size_t>(t) + 1];
    }
  }
}

std::uint64_t Batcher::first_sequence(std::int64_t step, int micro, int accumulation, int rank,
                                      int world, int batch) {
  const auto s = static_cast<std::uint64_t>(step);
  return ((s * static_cast<std::uint64_t>(accumulation) + static_cast<std::uint64_t>(micro)) *
              static_cast<std::uint64_t>(world) +
          static_cast<std::uint64_t>(rank)) *
         static_cast<std::uint64_t>(batch);
}

}  // namespace zero::data

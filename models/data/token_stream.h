// The reference trainer's data: a stream of tokens from a file, split into training and
// validation parts, cut into the micro-batches of each rank.
//
// Files: llm.c's token shards (a header of 256 little-endian int32: magic 20240520 with uint16
// GPT-2 tokens, or 20240801 with uint32 tokens; header[1] the version, 1; header[2] the token
// count; then the tokens), or anything else as UTF-8 text through the byte-level tokenizer
// (token = byte, a vocabulary of 256).
//
// Batches: sequence k of the stream is tokens [k*T, k*T + T] (T inputs and their next tokens as
// targets), taken modulo the sequences the stream holds (epochs wrap). A global step of a run
// with W ranks, A accumulation steps and B sequences per micro-batch takes W*A*B sequences;
// rank r's micro-step m of step s takes sequences ((s*A + m)*W + r)*B .. +B. So the data a step
// sees does not depend on W, and the position to resume from is the count of sequences taken.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zero::data {

// How a data file is read: automatic (a shard when it starts with a known magic, text
// otherwise, except where it looks like a damaged shard), or always as text.
enum class DataFormat { automatic, text };

class TokenStream {
 public:
  // Reads `path` as `format` says. Throws std::runtime_error naming the path and what is
  // wrong: missing, unreadable, not a regular file (a FIFO would wait forever), a shard whose
  // header and size disagree, or (automatic) a file that looks like a shard but has no known
  // magic: its first 4 bytes one byte off a magic, or a name ending in .bin; DataFormat::text
  // reads those as text.
  static TokenStream open(const std::string& path, DataFormat format = DataFormat::automatic);
  static TokenStream from_text(std::string_view text);
  static TokenStream from_tokens(std::vector<std::int32_t> tokens, std::string origin);

  std::size_t size() const noexcept { return tokens_.size(); }
  const std::vector<std::int32_t>& tokens() const noexcept { return tokens_; }
  const std::string& origin() const noexcept { return origin_; }  // the path, or a description
  const std::string& format() const noexcept { return format_; }  // "text", "llm.c uint16", ...
  std::int32_t max_token() const noexcept;

  // Text only: the share of bytes that are control characters other than tab, line feed,
  // form feed and carriage return (0 for token shards). Text is well under 1%; a binary file
  // read as text is far above.
  double control_fraction() const noexcept;

  // The last `fraction` of the stream (at least one sequence of `seq` + 1 tokens when the
  // stream allows) as validation, the rest as training.
  void split(double fraction, int seq, TokenStream& train, TokenStream& validation) const;

 private:
  std::vector<std::int32_t> tokens_;
  std::string origin_;
  std::string format_;
};

class Batcher {
 public:
  // Throws std::invalid_argument when the stream holds fewer than seq + 1 tokens, or a token
  // at or past `vocab` (naming its position and the file).
  Batcher(const TokenStream& stream, int batch, int seq, int vocab);

  // Sequences first .. first + batch into tokens and targets (batch * seq each).
  void fill(std::uint64_t first, std::int32_t* tokens, std::int32_t* targets) const;
  // The distinct sequences the stream holds (after which they repeat).
  std::uint64_t sequences() const noexcept { return sequences_; }

  // Rank r's first sequence for micro-step m of global step s (see the top of this file).
  static std::uint64_t first_sequence(std::int64_t step, int micro, int accumulation, int rank,
                                      int world, int batch);

 private:
  const TokenStream& stream_;
  int batch_, seq_;
  std::uint64_t sequences_;
};

}  // namespace zero::data

// The sizes a decoder's buffers are made of, and the check of the sequence length that every
// family makes (decoder.h).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace zero::decoder {

// The sizes every decoder's buffers are made of: `batch` sequences of `seq` positions, `channels`
// wide on the residual stream, `heads` attention heads, `vocab` logits per position.
struct Shape {
  int batch = 0, seq = 0, channels = 0, heads = 0, vocab = 0;
  std::size_t positions() const noexcept { return static_cast<std::size_t>(batch) * seq; }
};

// Throws std::invalid_argument unless 1 <= seq <= max_seq.
inline void check_sequence(int seq, int max_seq) {
  if (seq < 1 || seq > max_seq) {
    throw std::invalid_argument("sequence length " + std::to_string(seq) +
                                " is outside the model's 1.." + std::to_string(max_seq));
  }
}

}  // namespace zero::decoder

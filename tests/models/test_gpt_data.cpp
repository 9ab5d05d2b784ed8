// The reference trainer's data: llm.c token shards (uint16 and uint32) and text read as bytes,
// shards whose header and size disagree refused naming the file, the validation split, and the
// batches: targets are the next tokens, sequences wrap, and every world size covers a global
// step's sequences exactly once.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "models/data/token_stream.h"

namespace zero::data {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("zero-gpt-data-" + std::to_string(getpid()) + "-" + name);
}

template <class Token>
void write_shard(const fs::path& path, std::int32_t magic, const std::vector<Token>& tokens,
                 std::int32_t claimed) {
  std::int32_t header[256] = {};
  header[0] = magic;
  header[1] = 1;
  header[2] = claimed;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * sizeof(Token)));
}

}  // namespace

TEST_CASE("gpt data: llm.c shards and text files are read", "[gpt]") {
  const fs::path u16 = scratch("u16.bin"), u32 = scratch("u32.bin"), text = scratch("text.txt"),
                 bad = scratch("bad.bin");
  write_shard<std::uint16_t>(u16, 20240520, {50256, 0, 17, 65535}, 4);
  write_shard<std::uint32_t>(u32, 20240801, {128000, 5}, 2);
  std::ofstream(text) << "héllo";
  write_shard<std::uint16_t>(bad, 20240520, {1, 2, 3}, 4);

  const TokenStream a = TokenStream::open(u16.string());
  CHECK(a.format() == "llm.c uint16");
  CHECK(a.tokens() == std::vector<std::int32_t>{50256, 0, 17, 65535});
  CHECK(a.max_token() == 65535);
  const TokenStream b = TokenStream::open(u32.string());
  CHECK(b.format() == "llm.c uint32");
  CHECK(b.tokens() == std::vector<std::int32_t>{128000, 5});
  const TokenStream c = TokenStream::open(text.string());
  CHECK(c.format() == "text");
  CHECK(c.tokens() == std::vector<std::int32_t>{'h', 0xc3, 0xa9, 'l', 'l', 'o'});
  CHECK_THROWS_WITH(TokenStream::open(bad.string()),
                    Catch::Contains(bad.string()) &&
                        Catch::Contains("the header says 4 tokens, the file holds 3") &&
                        Catch::Contains("truncated"));
  CHECK_THROWS_WITH(TokenStream::open(scratch("missing").string()),
                    Catch::Contains("cannot open it"));
  for (const auto& p : {u16, u32, text, bad}) fs::remove(p);
}

TEST_CASE("gpt data: the validation split takes the end of the stream", "[gpt]") {
  std::vector<std::int32_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i % 256);
  const TokenStream all = TokenStream::from_tokens(tokens, "test");
  TokenStream train, validation;
  all.split(0.1, 16, train, validation);
  CHECK(train.size() == 900);
  CHECK(validation.size() == 100);
  CHECK(validation.tokens().front() == tokens[900]);
  all.split(0.001, 16, train, validation);  // at least one sequence and its next token
  CHECK(validation.size() == 17);
  all.split(0.0, 16, train, validation);
  CHECK(validation.size() == 0);
}

TEST_CASE("gpt data: batches hold next-token targets, wrap, and tile a step at any world size",
          "[gpt]") {
  std::vector<std::int32_t> tokens(103);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i);
  const TokenStream stream = TokenStream::from_tokens(tokens, "test");
  const int B = 2, T = 10;
  const Batcher batcher(stream, B, T, 256);
  CHECK(batcher.sequences() == 10);  // (103 - 1) / 10
  std::vector<std::int32_t> x(B * T), y(B * T);
  batcher.fill(9, x.data(), y.data());  // sequences 9 and 10 = 0 (wrapped)
  CHECK(x[0] == 90);
  CHECK(y[0] == 91);
  CHECK(y[T - 1] == 100);
  CHECK(x[T] == 0);
  CHECK(y[2 * T - 1] == 10);

  // A global step of 24 sequences: the same set over 1, 2, 3 or 4 ranks.
  for (int world : {1, 2, 3, 4}) {
    const int per_rank = 24 / world / B;  // accumulation steps
    std::multiset<std::uint64_t> seen;
    for (int r = 0; r < world; ++r) {
      for (int m = 0; m < per_rank; ++m) {
        const std::uint64_t first = Batcher::first_sequence(5, m, per_rank, r, world, B);
        for (int b = 0; b < B; ++b) seen.insert(first + static_cast<std::uint64_t>(b));
      }
    }
    std::multiset<std::uint64_t> want;
    for (std::uint64_t k = 120; k < 144; ++k) want.insert(k);
    CHECK(seen == want);
  }

  std::vector<std::int32_t> big = tokens;
  big[57] = 300;
  const TokenStream with_big = TokenStream::from_tokens(big, "big.bin");
  CHECK_THROWS_WITH(Batcher(with_big, B, T, 256),
                    Catch::Contains("big.bin: token 300 at position 57 is outside"));
  const TokenStream tiny = TokenStream::from_tokens({1, 2, 3}, "tiny.bin");
  CHECK_THROWS_WITH(Batcher(tiny, B, T, 256), Catch::Contains("fewer than one sequence"));
}

TEST_CASE("gpt data: a shard's header and size, damaged magics and what is not a file", "[gpt]") {
  // A header that counts fewer tokens than the file holds is not called truncated.
  const fs::path extra = scratch("extra.bin");
  write_shard<std::uint16_t>(extra, 20240520, {1, 2, 3, 4, 5}, 3);
  CHECK_THROWS_WITH(TokenStream::open(extra.string()),
                    Catch::Contains("the header says 3 tokens, the file holds 5") &&
                        Catch::Contains("data past the counted tokens"));
  // A magic one byte off is a damaged shard, not text; --data-format text reads it as text.
  const fs::path damaged = scratch("damaged.tok");
  write_shard<std::uint16_t>(damaged, 20240520 ^ 0x100, {1, 2, 3}, 3);
  CHECK_THROWS_WITH(TokenStream::open(damaged.string()),
                    Catch::Contains(damaged.string()) &&
                        Catch::Contains("one byte off a shard's magic") &&
                        Catch::Contains("--data-format text"));
  CHECK(TokenStream::open(damaged.string(), DataFormat::text).format() == "text");
  // So is a .bin file without a magic; the same bytes under another name are text.
  const fs::path bin = scratch("plain.bin"), txt = scratch("plain.txt");
  std::ofstream(bin) << "hello, world";
  std::ofstream(txt) << "hello, world";
  CHECK_THROWS_WITH(TokenStream::open(bin.string()), Catch::Contains("its name ends in .bin"));
  CHECK(TokenStream::open(bin.string(), DataFormat::text).size() == 12);
  CHECK(TokenStream::open(txt.string()).size() == 12);
  // A uint32 token of 2^31 and above is printed as the file holds it.
  const fs::path big = scratch("big.bin");
  write_shard<std::uint32_t>(big, 20240801, {1, 0xFFFFFFFFu, 2, 3}, 4);
  const TokenStream stream = TokenStream::open(big.string());
  CHECK_THROWS_WITH(Batcher(stream, 1, 2, 100), Catch::Contains("token 4294967295 at position 1"));
  // A FIFO would wait for a writer forever: refused before it is opened.
  const fs::path fifo = scratch("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(TokenStream::open(fifo.string()), Catch::Contains("not a regular file"));
  CHECK_THROWS_WITH(TokenStream::open(fs::temp_directory_path().string()),
                    Catch::Contains("not a regular file"));
  for (const auto& p : {extra, damaged, bin, txt, big, fifo}) fs::remove(p);
}

}  // namespace zero::data

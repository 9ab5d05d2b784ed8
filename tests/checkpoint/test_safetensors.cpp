// The safetensors reader and writer: round trips of every dtype, writes in any pieces, reads of
// sub-ranges and as fp32, chunk sums that catch a changed byte where it is and nowhere else,
// a file laid out by hand from the spec, and every malformed file and writer misuse refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/error.h"
#include "base/half.h"
#include "checkpoint/safetensors.h"
#include "tests/scratch.h"

namespace zero::checkpoint {
namespace {

using Bytes = std::vector<unsigned char>;
using testing::error_of;
using testing::ScratchDir;

// A fresh directory for one test, removed when it ends.

Bytes random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  Bytes bytes(n);
  // Eight bytes a draw.
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t word = random();
    std::memcpy(bytes.data() + i, &word, std::min<std::size_t>(8, n - i));
  }
  return bytes;
}

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  REQUIRE(in);
  Bytes bytes(static_cast<std::size_t>(in.tellg()));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(in);
  return bytes;
}

void write_raw(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out);
}

// A file laid out by hand: the 8-byte little-endian length, the JSON text as given, the data.
Bytes raw_file(const std::string& json, const Bytes& data,
               std::uint64_t length_field = UINT64_MAX) {
  const std::uint64_t n = length_field == UINT64_MAX ? json.size() : length_field;
  Bytes bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<unsigned char>(n >> (8 * i)));
  bytes.insert(bytes.end(), json.begin(), json.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

void flip_byte(const std::string& path, std::uint64_t offset) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  unsigned char byte = 0;
  REQUIRE(::pread(fd, &byte, 1, static_cast<off_t>(offset)) == 1);
  byte ^= 0x5a;
  REQUIRE(::pwrite(fd, &byte, 1, static_cast<off_t>(offset)) == 1);
  ::close(fd);
}

std::uint64_t data_bytes_of(const std::vector<TensorDecl>& decls) {
  std::uint64_t total = 0;
  for (const auto& decl : decls) {
    std::uint64_t n = element_size(decl.dtype);
    for (auto dim : decl.shape) n *= static_cast<std::uint64_t>(dim);
    total += n;
  }
  return total;
}

// One tensor of every dtype with an odd shape, a scalar, zero-size tensors first, inside and last.
std::vector<TensorDecl> every_dtype() {
  std::vector<TensorDecl> decls = {{"empty_first", "F32", {0}}};
  const char* dtypes[] = {"F64", "F32", "F16", "BF16", "I64",  "I32",     "I16",    "I8",
                          "U8",  "U16", "U32", "U64",  "BOOL", "F8_E4M3", "F8_E5M2"};
  std::int64_t dim = 3;
  for (const char* dtype : dtypes) {
    decls.push_back({std::string("t.") + dtype, dtype, {dim, 5}});
    dim += 2;
  }
  decls.push_back({"scalar", "F32", {}});
  decls.push_back({"empty_inside", "I32", {4, 0, 3}});
  decls.push_back({"odd", "U8", {1, 1, 1001}});
  decls.push_back({"empty_last", "BF16", {0}});
  return decls;
}

const std::map<std::string, std::string> kMetadata = {
    {"format", "pt"}, {"step", "1234"}, {"note", "quotes \" and \\ and unicode \xc3\xa9"}};

struct Written {
  std::vector<TensorInfo> tensors;
  std::vector<ChunkSums> sums;
  std::uint64_t header_bytes;
  std::uint64_t header_hash;
};

// Writes `data` in pieces of the given sizes, cycling (one piece when empty).
Written write_file(const std::string& path, const std::vector<TensorDecl>& decls, const Bytes& data,
                   const std::vector<std::size_t>& pieces = {},
                   std::uint64_t chunk = SafetensorsWriter::kDefaultChunkBytes,
                   bool direct = false) {
  SafetensorsWriter writer(path, decls, kMetadata, chunk, 0644, direct);
  if (direct) CHECK(writer.direct());  // the build tree is on a disk that takes O_DIRECT
  std::size_t at = 0;
  for (std::size_t i = 0; at < data.size(); ++i) {
    const std::size_t n =
        pieces.empty() ? data.size() : std::min(pieces[i % pieces.size()], data.size() - at);
    writer.write(data.data() + at, n);
    at += n;
    // current() is the first tensor not yet full.
    std::size_t expect = 0;
    while (expect < writer.tensors().size() && writer.tensors()[expect].end <= at) ++expect;
    REQUIRE(writer.current() == expect);
  }
  writer.finish();
  return {writer.tensors(), writer.sums(), writer.header_bytes(), writer.header_hash()};
}

TEST_CASE("safetensors: dtype names, sizes and engine dtypes", "[checkpoint]") {
  CHECK(element_size("F64") == 8);
  CHECK(element_size("BF16") == 2);
  CHECK(element_size("BOOL") == 1);
  CHECK(element_size("F8_E5M2") == 1);
  CHECK(element_size("U64") == 8);
  CHECK(element_size("f32") == 0);
  CHECK(element_size("") == 0);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::i64}) {
    CHECK(engine_dtype(safetensors_dtype(dtype)) == dtype);
    CHECK(element_size(safetensors_dtype(dtype)) == dtype_size(dtype));
  }
  CHECK_FALSE(engine_dtype("F64").has_value());
  CHECK(TensorInfo{"s", "F32", {}, 0, 4}.numel() == 1);
  CHECK(TensorInfo{"z", "F32", {3, 0}, 0, 0}.numel() == 0);
}

TEST_CASE("safetensors: every dtype round trips with a scalar, zero-size tensors and metadata",
          "[checkpoint]") {
  ScratchDir dir("round-trip");
  const std::string path = dir.file("all.safetensors");
  const auto decls = every_dtype();
  const Bytes data = random_bytes(data_bytes_of(decls), 1);
  const Written written = write_file(path, decls, data);

  SafetensorsReader reader(path);
  CHECK(reader.path() == path);
  CHECK(reader.metadata() == kMetadata);
  CHECK(reader.header_bytes() == written.header_bytes);
  CHECK(reader.header_bytes() % 8 == 0);
  CHECK(reader.file_bytes() == std::filesystem::file_size(path));
  CHECK(reader.file_bytes() == written.header_bytes + data.size());
  const Bytes file = read_file(path);
  CHECK(reader.header_hash() == XXH3_64bits(file.data(), reader.header_bytes()));
  CHECK(reader.header_hash() == written.header_hash);

  // Zero-size tensors sort by offset among the others; compare by name.
  REQUIRE(reader.tensors().size() == decls.size());
  for (std::size_t i = 0; i < decls.size(); ++i) {
    const TensorInfo& want = written.tensors[i];
    const TensorInfo& got = reader.at(decls[i].name);
    CHECK(got.name == decls[i].name);
    CHECK(got.dtype == decls[i].dtype);
    CHECK(got.shape == decls[i].shape);
    CHECK(got.begin == want.begin);
    CHECK(got.end == want.end);
    Bytes back(got.bytes());
    reader.read(got, 0, back.size(), back.data());
    CHECK(std::equal(back.begin(), back.end(), data.begin() + static_cast<long>(got.begin)));
  }
  for (std::size_t i = 1; i < reader.tensors().size(); ++i) {
    CHECK(reader.tensors()[i - 1].end == reader.tensors()[i].begin);
  }
  CHECK(reader.at("scalar").numel() == 1);
  CHECK(reader.at("scalar").bytes() == 4);
  CHECK(reader.at("empty_inside").bytes() == 0);
  CHECK(written.sums[0].hashes.empty());
  CHECK(reader.find("missing") == nullptr);
  const Error missing = error_of([&] { reader.at("missing"); });
  CHECK(missing.category() == ErrorCategory::io);
  CHECK_THAT(missing.what(), Catch::Contains(path) && Catch::Contains("missing"));
}

TEST_CASE("safetensors: writes in odd pieces across tensor ends give the file of one write",
          "[checkpoint]") {
  ScratchDir dir("pieces");
  const auto decls = every_dtype();
  const Bytes data = random_bytes(data_bytes_of(decls), 2);
  const Written whole = write_file(dir.file("whole"), decls, data, {}, 100);
  const Written pieces =
      write_file(dir.file("pieces"), decls, data, {1, 3, 7, 13, 101, 257, 2}, 100);
  // Pieces larger than the writer's buffer, too.
  const Bytes big = random_bytes(9 << 20, 3);
  const std::vector<TensorDecl> big_decls = {{"a", "U8", {(5 << 20) + 3}},
                                             {"b", "U8", {(4 << 20) - 3}}};
  const Written big_whole = write_file(dir.file("big_whole"), big_decls, big, {}, 1 << 20);
  const Written big_pieces =
      write_file(dir.file("big_pieces"), big_decls, big, {(5 << 20) - 1, 7, 3 << 20}, 1 << 20);

  CHECK(read_file(dir.file("whole")) == read_file(dir.file("pieces")));
  CHECK(read_file(dir.file("big_whole")) == read_file(dir.file("big_pieces")));
  for (std::size_t i = 0; i < decls.size(); ++i) {
    CHECK(whole.sums[i].chunk_bytes == 100);
    CHECK(whole.sums[i].hashes == pieces.sums[i].hashes);
  }
  for (std::size_t i = 0; i < 2; ++i) CHECK(big_whole.sums[i].hashes == big_pieces.sums[i].hashes);
  const Bytes file = read_file(dir.file("big_pieces"));
  CHECK(Bytes(file.begin() + static_cast<long>(big_whole.header_bytes), file.end()) == big);
}

TEST_CASE(
    "safetensors: sub-range reads return those bytes, reads outside a tensor are usage errors",
    "[checkpoint]") {
  ScratchDir dir("ranges");
  const std::string path = dir.file("r.safetensors");
  const std::vector<TensorDecl> decls = {{"a", "U8", {3001}}, {"b", "F32", {777}}};
  const Bytes data = random_bytes(3001 + 777 * 4, 4);
  write_file(path, decls, data);
  SafetensorsReader reader(path);
  std::mt19937_64 random(5);
  for (const auto& tensor : reader.tensors()) {
    for (int i = 0; i < 200; ++i) {
      const std::uint64_t offset = random() % (tensor.bytes() + 1);
      const std::size_t bytes = random() % (tensor.bytes() - offset + 1);
      Bytes out(bytes + 1, 0xee);
      reader.read(tensor, offset, bytes, out.data());
      const auto from = data.begin() + static_cast<long>(tensor.begin + offset);
      CHECK(std::equal(out.begin(), out.end() - 1, from));
      CHECK(out.back() == 0xee);  // nothing past the range
    }
  }
  Bytes out(10);
  const TensorInfo& a = reader.at("a");
  CHECK(error_of([&] { reader.read(a, 3000, 2, out.data()); }).category() == ErrorCategory::usage);
  CHECK(error_of([&] { reader.read(a, 3002, 0, out.data()); }).category() == ErrorCategory::usage);
  const TensorInfo stranger{"x", "U8", {10}, 6105, 6115};  // past the data section
  CHECK(error_of([&] { reader.read(stranger, 0, 1, out.data()); }).category() ==
        ErrorCategory::usage);
}

TEST_CASE("safetensors: O_DIRECT writes give the same tensors with the header padded to 4096",
          "[checkpoint]") {
  ScratchDir dir("direct");
  // Odd sizes, a tail that is not a whole 4096-byte unit, and more than one write buffer.
  const std::vector<TensorDecl> decls = {{"a", "F32", {1000, 3}},
                                         {"b", "BF16", {4097}},
                                         {"empty", "F16", {0}},
                                         {"c", "U8", {(6 << 20) + 5}}};
  const Bytes data = random_bytes(data_bytes_of(decls), 11);
  const Written buffered = write_file(dir.file("buffered"), decls, data, {4099, 1 << 20}, 5000);
  const Written direct = write_file(dir.file("direct"), decls, data, {4099, 1 << 20}, 5000, true);
  CHECK(direct.header_bytes % 4096 == 0);
  CHECK(buffered.header_bytes % 8 == 0);
  const Bytes file = read_file(dir.file("direct"));
  CHECK(file.size() == direct.header_bytes + data.size());  // cut to its size after the padded tail
  CHECK(Bytes(file.begin() + static_cast<long>(direct.header_bytes), file.end()) == data);
  for (std::size_t i = 0; i < decls.size(); ++i)
    CHECK(direct.sums[i].hashes == buffered.sums[i].hashes);
  SafetensorsReader reader(dir.file("direct"));
  CHECK(reader.header_hash() == direct.header_hash);
  REQUIRE(reader.tensors().size() == decls.size());
  for (std::size_t i = 0; i < decls.size(); ++i) {
    const TensorInfo& t = reader.at(decls[i].name);
    Bytes got(t.bytes());
    reader.read_checked(t, 0, got.size(), got.data(), direct.sums[i]);
    CHECK(got == Bytes(data.begin() + static_cast<long>(t.begin),
                       data.begin() + static_cast<long>(t.end)));
  }
  CHECK(reader.metadata() == kMetadata);
}

TEST_CASE("safetensors: read_f32 converts F16, BF16 and F64 as the scalar conversions do",
          "[checkpoint]") {
  ScratchDir dir("f32");
  const std::string path = dir.file("f.safetensors");
  // Sizes past the reader's 1 MiB pieces, and odd.
  const std::vector<TensorDecl> decls = {{"h", "F16", {700001}},
                                         {"b", "BF16", {3, 233337}},
                                         {"d", "F64", {150001}},
                                         {"f", "F32", {300007}},
                                         {"i", "I64", {5}}};
  const Bytes data = random_bytes(data_bytes_of(decls), 6);
  const std::uint64_t chunk =
      GENERATE(std::uint64_t{1000}, std::uint64_t{999}, std::uint64_t{3} << 20);
  const Written written = write_file(path, decls, data, {}, chunk);
  SafetensorsReader reader(path);

  // A tensor's values as the scalar conversions give them, as bits.
  auto reference = [&](const TensorInfo& t) {
    std::vector<std::uint32_t> bits(t.numel());
    const unsigned char* at = data.data() + t.begin;
    for (std::size_t i = 0; i < bits.size(); ++i) {
      float v;
      if (t.dtype == "F64") {
        double d;
        std::memcpy(&d, at + 8 * i, 8);
        v = static_cast<float>(d);
      } else if (t.dtype == "F32") {
        std::memcpy(&v, at + 4 * i, 4);
      } else {
        std::uint16_t h;
        std::memcpy(&h, at + 2 * i, 2);
        v = t.dtype == "F16" ? fp16_to_float(h) : bf16_to_float(h);
      }
      bits[i] = std::bit_cast<std::uint32_t>(v);
    }
    return bits;
  };
  std::mt19937_64 random(7);
  for (std::size_t k = 0; k < 4; ++k) {
    const TensorInfo& tensor = reader.at(decls[k].name);
    const ChunkSums& sums = written.sums[k];
    const std::vector<std::uint32_t> expected = reference(tensor);
    for (int i = 0; i < 12; ++i) {
      const std::uint64_t first = i == 0 ? 0 : random() % tensor.numel();
      const std::size_t count = i == 0 ? tensor.numel() : random() % (tensor.numel() - first + 1);
      std::vector<float> plain(count), checked(count);
      reader.read_f32(tensor, first, count, plain.data());
      reader.read_f32(tensor, first, count, checked.data(), &sums);
      std::size_t wrong = 0;
      for (std::size_t j = 0; j < count; ++j) {
        const std::uint32_t want = expected[first + j];
        wrong += std::bit_cast<std::uint32_t>(plain[j]) != want;
        wrong += std::bit_cast<std::uint32_t>(checked[j]) != want;
      }
      INFO(tensor.name << " [" << first << ", +" << count << ") chunk " << chunk);
      CHECK(wrong == 0);
    }
  }
  float out[2];
  const Error not_float = error_of([&] { reader.read_f32(reader.at("i"), 0, 2, out); });
  CHECK(not_float.category() == ErrorCategory::usage);
  CHECK_THAT(not_float.what(), Catch::Contains("'i'") && Catch::Contains("I64"));
  CHECK(error_of([&] { reader.read_f32(reader.at("d"), 150000, 2, out); }).category() ==
        ErrorCategory::usage);
}

TEST_CASE(
    "safetensors: chunk sums catch a changed byte in the chunk that holds it and nowhere else",
    "[checkpoint]") {
  ScratchDir dir("sums");
  const std::string path = dir.file("s.safetensors");
  const std::vector<TensorDecl> decls = {
      {"first", "F32", {2501}},  // 10004 bytes: a short last chunk
      {"none", "F16", {0}},
      {"target", "U8", {7777}},
      {"last", "BF16", {1500}}};
  const Bytes data = random_bytes(data_bytes_of(decls), 8);
  const Written written = write_file(path, decls, data, {333}, 1000);

  // The sums are XXH3-64 of each 1000-byte piece of each tensor, the last one shorter.
  for (std::size_t k = 0; k < decls.size(); ++k) {
    const TensorInfo& t = written.tensors[k];
    REQUIRE(written.sums[k].hashes.size() == (t.bytes() + 999) / 1000);
    for (std::size_t c = 0; c < written.sums[k].hashes.size(); ++c) {
      const std::uint64_t b = t.begin + c * 1000;
      const std::uint64_t e = std::min(b + 1000, t.end);
      CHECK(written.sums[k].hashes[c] == XXH3_64bits(data.data() + b, e - b));
    }
  }

  SafetensorsReader reader(path);
  std::mt19937_64 random(9);
  auto check_ranges = [&](std::size_t k, std::uint64_t lo, std::uint64_t hi) {
    const TensorInfo& t = reader.at(decls[k].name);
    for (int i = 0; i < 100; ++i) {
      const std::uint64_t offset = lo + random() % (hi - lo + 1);
      const std::size_t bytes = random() % (hi - offset + 1);
      Bytes out(bytes);
      reader.read_checked(t, offset, bytes, out.data(), written.sums[k]);
      CHECK(std::equal(out.begin(), out.end(), data.begin() + static_cast<long>(t.begin + offset)));
    }
  };
  for (std::size_t k = 0; k < decls.size(); ++k) {
    reader.verify(reader.at(decls[k].name), written.sums[k]);
    check_ranges(k, 0, written.tensors[k].bytes());
  }

  // Sums of another tensor are refused.
  const TensorInfo& target = reader.at("target");
  Bytes out(8000);
  CHECK(error_of([&] { reader.verify(target, written.sums[0]); }).category() ==
        ErrorCategory::usage);
  CHECK(error_of([&] {
          reader.read_checked(target, 0, 1, out.data(), written.sums[3]);
        }).category() == ErrorCategory::usage);

  // One byte of chunk 3 of "target" (its bytes [3000, 4000)) changes behind the writer's back.
  const std::uint64_t chunk_at = reader.header_bytes() + target.begin + 3000;
  flip_byte(path, chunk_at + 517);
  const ChunkSums& sums = written.sums[2];
  const std::pair<std::uint64_t, std::size_t> touching[] = {
      {3517, 1}, {3100, 100}, {2999, 2}, {3999, 2}, {0, 7777}};
  for (const auto& [offset, bytes] : touching) {
    const Error error =
        error_of([&] { reader.read_checked(target, offset, bytes, out.data(), sums); });
    CHECK(error.category() == ErrorCategory::io);
    CHECK_THAT(error.what(),
               Catch::Contains(path) && Catch::Contains("'target'") &&
                   Catch::Contains("changed or damaged") &&
                   Catch::Contains(fmt::format("[{}, {})", chunk_at, chunk_at + 1000)));
  }
  const Error verify_error = error_of([&] { reader.verify(target, sums); });
  CHECK(verify_error.category() == ErrorCategory::io);
  CHECK_THAT(verify_error.what(), Catch::Contains(path) && Catch::Contains("'target'"));
  std::vector<float> floats(10);
  CHECK(error_of([&] {
          reader.read_f32(reader.at("first"), 0, 10, floats.data(), &sums);
        }).category() == ErrorCategory::usage);

  // Untouched chunks still read; the unchecked read shows the change landed.
  check_ranges(2, 0, 3000);
  check_ranges(2, 4000, target.bytes());
  for (std::size_t k : {0, 1, 3}) reader.verify(reader.at(decls[k].name), written.sums[k]);
  unsigned char byte = 0;
  reader.read(target, 3517, 1, &byte);
  CHECK(byte == (data[target.begin + 3517] ^ 0x5a));
  // A zero-byte tensor has no chunks to check.
  reader.read_checked(reader.at("none"), 0, 0, out.data(), written.sums[1]);
}

TEST_CASE("safetensors: a file laid out by hand from the spec is read as the spec says",
          "[checkpoint]") {
  ScratchDir dir("by-hand");
  const std::string path = dir.file("h.safetensors");
  // Keys out of data order, whitespace inside, trailing spaces not to a multiple of 8, and data
  // not in key order: "b" (F16 [2]) first, then "a" (I32 [1, 2]), then the scalar "c" (U8).
  const std::string json =
      "{\"a\": {\"shape\": [1, 2], \"dtype\": \"I32\", \"data_offsets\": [4, 12]},\n"
      " \"__metadata__\": {\"k\": \"v\"},\n"
      " \"c\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[12,13]},"
      " \"b\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [0, 4]}}   ";
  const Bytes data = {0x00, 0x3c, 0x00, 0xc0,                          // b: fp16 1.0, -2.0
                      0x07, 0x00, 0x00, 0x00, 0xfe, 0xff, 0xff, 0xff,  // a: 7, -2
                      0x2a};                                           // c: 42
  write_raw(path, raw_file(json, data));

  SafetensorsReader reader(path);
  CHECK(reader.header_bytes() == 8 + json.size());
  CHECK(reader.file_bytes() == 8 + json.size() + data.size());
  CHECK(reader.metadata() == std::map<std::string, std::string>{{"k", "v"}});
  REQUIRE(reader.tensors().size() == 3);
  CHECK(reader.tensors()[0].name == "b");
  CHECK(reader.tensors()[1].name == "a");
  CHECK(reader.tensors()[2].name == "c");
  CHECK(reader.at("a").shape == std::vector<std::int64_t>{1, 2});
  CHECK(reader.at("c").shape.empty());
  float b[2];
  reader.read_f32(reader.at("b"), 0, 2, b);
  CHECK(b[0] == 1.0f);
  CHECK(b[1] == -2.0f);
  std::int32_t a[2];
  reader.read(reader.at("a"), 0, 8, a);
  CHECK(a[0] == 7);
  CHECK(a[1] == -2);
  unsigned char c = 0;
  reader.read(reader.at("c"), 0, 1, &c);
  CHECK(c == 42);
  const Bytes file = read_file(path);
  CHECK(reader.header_hash() == XXH3_64bits(file.data(), 8 + json.size()));

  // An empty header and no data is a valid file.
  write_raw(path, raw_file("{}", {}));
  SafetensorsReader empty(path);
  CHECK(empty.tensors().empty());
  CHECK(empty.metadata().empty());
}

TEST_CASE("safetensors: malformed files are refused with an io error naming the path",
          "[checkpoint]") {
  ScratchDir dir("malformed");
  const std::string path = dir.file("bad.safetensors");
  const std::string one = R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  const Bytes eight(8, 1);
  // A good file first, so that the cases below fail for their own reason.
  write_raw(path, raw_file(one, eight));
  CHECK(SafetensorsReader(path).tensors().size() == 1);

  struct Case {
    const char* what;
    Bytes file;
    const char* says;  // a piece of the message
  };
  const Bytes good = raw_file(one, eight);
  const std::vector<Case> cases = {
      {"shorter than the length", Bytes(5, 0), "fewer than the 8"},
      {"truncated data", Bytes(good.begin(), good.end() - 1), "truncated"},
      {"extra bytes at the end", raw_file(one, Bytes(9, 1)), "extra bytes"},
      {"truncated header", Bytes(good.begin(), good.begin() + 8 + 20), "past the end"},
      {"header length past the file", raw_file(one, eight, one.size() + 100), "past the end"},
      {"header length over 100 MB", raw_file(one, eight, 100'000'001), "exceeds"},
      {"not JSON", raw_file("{\"t\": {\"dtype\": \"F32\",", eight), "not valid JSON"},
      {"not UTF-8", raw_file("{\"\xff\": {}}", {}), "not valid JSON"},
      {"not an object", raw_file("[1, 2]", {}), "start with '{'"},
      {"JSON after the object", raw_file(one + " {}", eight), "not valid JSON"},
      {"unknown dtype",
       raw_file(R"({"t": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}})", eight),
       "'t' has unknown dtype 'F33'"},
      {"dtype not a string",
       raw_file(R"({"t": {"dtype": 4, "shape": [2], "data_offsets": [0, 8]}})", eight), "'t'"},
      {"offsets and shape disagree",
       raw_file(R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", eight),
       "'t' has data_offsets [0, 8]"},
      {"end before begin",
       raw_file(R"({"t": {"dtype": "U8", "shape": [0], "data_offsets": [8, 0]}})", eight), "'t'"},
      {"negative dimension",
       raw_file(R"({"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", eight), "'t'"},
      {"fractional dimension",
       raw_file(R"({"t": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}})", eight),
       "'t'"},
      {"overflowing shape",
       raw_file(
           R"({"t": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})",
           eight),
       "'t'"},
      {"missing offsets", raw_file(R"({"t": {"dtype": "F32", "shape": [2]}})", eight), "'t'"},
      {"three offsets",
       raw_file(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 8]}})", eight),
       "'t'"},
      {"entry not an object", raw_file(R"({"t": [1]})", {}), "'t'"},
      {"overlapping tensors",
       raw_file(R"({"a": {"dtype": "U8", "shape": [5], "data_offsets": [0, 5]},
                   "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})",
                eight),
       "overlap"},
      {"a gap between tensors",
       raw_file(R"({"a": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},
                   "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})",
                eight),
       "a gap"},
      {"a gap at the start",
       raw_file(R"({"a": {"dtype": "U8", "shape": [7], "data_offsets": [1, 8]}})", eight), "a gap"},
      {"a name given twice",
       raw_file(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                   "a": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})",
                eight),
       "the header names tensor 'a' twice"},
      {"metadata not an object", raw_file(R"({"__metadata__": ["a"]})", {}), "__metadata__"},
      {"metadata value not a string", raw_file(R"({"__metadata__": {"a": 1}})", {}), "'a'"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    write_raw(path, c.file);
    const Error error = error_of([&] { SafetensorsReader reader(path); });
    CHECK(error.category() == ErrorCategory::io);
    CHECK_THAT(error.what(), Catch::Contains(path) && Catch::Contains(c.says));
  }
  const Error absent = error_of([&] { SafetensorsReader reader(dir.file("absent")); });
  CHECK(absent.category() == ErrorCategory::io);
  CHECK_THAT(absent.what(), Catch::Contains(dir.file("absent")));
  // What is not a regular file is refused before a byte is read: a FIFO would wait for a
  // writer forever, a link to one is followed to it.
  const std::string fifo = dir.file("shard.safetensors");
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const Error pipe = error_of([&] { SafetensorsReader reader(fifo); });
  CHECK(pipe.category() == ErrorCategory::io);
  CHECK_THAT(pipe.what(), Catch::Contains(fifo) && Catch::Contains("it is a FIFO"));
  const std::string link = dir.file("link.safetensors");
  std::filesystem::create_symlink(fifo, link);
  CHECK_THAT(error_of([&] { SafetensorsReader reader(link); }).what(),
             Catch::Contains("it is a FIFO"));
  CHECK_THAT(error_of([&] { SafetensorsReader reader(dir.file("")); }).what(),
             Catch::Contains("it is a directory"));
}

TEST_CASE("safetensors: a file truncated after it was opened fails reads with the path and offset",
          "[checkpoint]") {
  ScratchDir dir("shrunk");
  const std::string path = dir.file("s.safetensors");
  const Written written = write_file(path, {{"t", "U8", {4096}}}, random_bytes(4096, 10));
  SafetensorsReader reader(path);
  REQUIRE(::truncate(path.c_str(), static_cast<off_t>(written.header_bytes + 100)) == 0);
  Bytes out(4096);
  const Error error = error_of([&] { reader.read(reader.at("t"), 0, 4096, out.data()); });
  CHECK(error.category() == ErrorCategory::io);
  CHECK_THAT(error.what(), Catch::Contains(path) && Catch::Contains(fmt::format(
                                                        "offset {}", written.header_bytes + 100)));
}

TEST_CASE("safetensors: writer misuse is refused: names, dtypes, too much or too little data",
          "[checkpoint]") {
  ScratchDir dir("writer-errors");
  const std::string path = dir.file("w.safetensors");
  auto usage_error = [&](std::vector<TensorDecl> decls, std::map<std::string, std::string> meta,
                         const char* says) {
    const Error error = error_of([&] { SafetensorsWriter writer(path, decls, meta); });
    CHECK(error.category() == ErrorCategory::usage);
    CHECK_THAT(error.what(), Catch::Contains(path) && Catch::Contains(says));
    CHECK_FALSE(std::filesystem::exists(path));  // refused before the file was created
  };
  usage_error({{"a", "F32", {1}}, {"a", "F16", {2}}}, {}, "'a' is used twice");
  usage_error({{"__metadata__", "F32", {1}}}, {}, "reserved");
  usage_error({{"", "F32", {1}}}, {}, "empty");
  usage_error({{"a", "F31", {1}}}, {}, "unknown dtype 'F31'");
  usage_error({{"a", "F32", {-1}}}, {}, "'a'");
  usage_error({{"a", "F32", {1}}}, {{"k", "\xff"}}, "header");

  const Error no_chunks = error_of([&] { SafetensorsWriter writer(path, {}, {}, 0); });
  CHECK(no_chunks.category() == ErrorCategory::usage);
  CHECK_THAT(no_chunks.what(), Catch::Contains("chunk_bytes"));
  // Metadata past the limit on its own is refused before it is serialized; metadata under it
  // whose escaping takes the header past it (each '"' is written as two bytes), after.
  usage_error({{"a", "F32", {1}}}, {{"k", std::string(100'000'001, 'x')}},
              "header would have at least 100000002 bytes");
  usage_error({{"a", "F32", {1}}}, {{"k", std::string(50'000'000, '"')}}, "header would have 1000");

  const Error no_dir = error_of([&] {
    SafetensorsWriter writer(dir.file("no/such/dir/w"), {{"a", "F32", {1}}});
  });
  CHECK(no_dir.category() == ErrorCategory::io);
  CHECK_THAT(no_dir.what(), Catch::Contains(dir.file("no/such/dir/w")));

  const Bytes data = random_bytes(64, 11);
  {
    SafetensorsWriter writer(path, {{"a", "F32", {3}}, {"b", "I64", {2}}, {"c", "U8", {0}}});
    const Error too_much = error_of([&] { writer.write(data.data(), 29); });
    CHECK(too_much.category() == ErrorCategory::usage);
    CHECK_THAT(too_much.what(), Catch::Contains(path) && Catch::Contains("past the end"));
    writer.write(data.data(), 13);
    CHECK(writer.current() == 1);
    const Error missing = error_of([&] { writer.finish(); });
    CHECK(missing.category() == ErrorCategory::usage);
    CHECK_THAT(missing.what(), Catch::Contains(path) && Catch::Contains("'b' has 1 of its 16"));
    writer.write(data.data(), 15);
    CHECK(writer.current() == 3);
    CHECK(error_of([&] { writer.write(data.data(), 1); }).category() == ErrorCategory::usage);
    writer.write(data.data(), 0);
    writer.finish();
    CHECK(error_of([&] { writer.write(data.data(), 0); }).category() == ErrorCategory::usage);
    CHECK(error_of([&] { writer.finish(); }).category() == ErrorCategory::usage);
  }
  CHECK(SafetensorsReader(path).file_bytes() == std::filesystem::file_size(path));

  // A writer dropped before finish() leaves an incomplete file that no reader takes.
  {
    SafetensorsWriter writer(path, {{"a", "F32", {3}}});
    writer.write(data.data(), 5);
  }
  CHECK(error_of([&] { SafetensorsReader reader(path); }).category() == ErrorCategory::io);
}

// Writes past RLIMIT_FSIZE fail with EFBIG (SIGXFSZ ignored meanwhile).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = saved_;
    limit.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  struct rlimit saved_ {};
  void (*old_handler_)(int) = SIG_DFL;
};

TEST_CASE("safetensors: a failed write is an io error with the path and offset, and final",
          "[checkpoint]") {
  ScratchDir dir("write-fails");
  const std::string path = dir.file("w.safetensors");
  const Bytes data = random_bytes(9 << 20, 12);
  SafetensorsWriter writer(path, {{"a", "U8", {9 << 20}}});
  {
    // The second 4 MiB flush is cut short at the limit, then refused.
    const std::uint64_t limit = writer.header_bytes() + (6 << 20);
    FileSizeLimit file_size_limit(limit);
    const Error error = error_of([&] { writer.write(data.data(), data.size()); });
    CHECK(error.category() == ErrorCategory::io);
    CHECK_THAT(error.what(), Catch::Contains(path) &&
                                 Catch::Contains(fmt::format("at offset {}", limit)) &&
                                 Catch::Contains(std::strerror(EFBIG)));
  }
  CHECK(std::filesystem::file_size(path) == writer.header_bytes() + (6 << 20));
  CHECK(error_of([&] { writer.write(data.data(), 1); }).category() == ErrorCategory::io);
  CHECK(error_of([&] { writer.finish(); }).category() == ErrorCategory::io);

  // A device that is always full refuses the header.
  if (std::filesystem::exists("/dev/full")) {
    const Error full = error_of([&] { SafetensorsWriter w("/dev/full", {{"a", "U8", {1}}}); });
    CHECK(full.category() == ErrorCategory::io);
    CHECK_THAT(full.what(), Catch::Contains("/dev/full") && Catch::Contains("at offset 0") &&
                                Catch::Contains(std::strerror(ENOSPC)));
  }
}

TEST_CASE("safetensors: files get the mode given, and a file of no tensors is valid",
          "[checkpoint]") {
  ScratchDir dir("mode");
  const std::string path = dir.file("m.safetensors");
  SafetensorsWriter writer(path, {}, {}, 1000, 0600);
  CHECK(writer.current() == 0);
  writer.finish();
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  SafetensorsReader reader(path);
  CHECK(reader.tensors().empty());
  CHECK(reader.file_bytes() == writer.file_bytes());
  CHECK(reader.header_bytes() % 8 == 0);
}

}  // namespace
}  // namespace zero::checkpoint

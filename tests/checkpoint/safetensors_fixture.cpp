// Our side of the safetensors cross-check with the Python package (check_safetensors.py):
//   safetensors_fixture write PATH   writes known tensors and metadata with our writer;
//   safetensors_fixture read PATH    reads the file the Python package wrote and checks every
//                                    value and the metadata exactly.
// Values follow one formula on both sides: element i of a float tensor is i * 0.25 - 3, exact in
// every float format used; element i of an integer tensor is (i - 2) * 3000000000123.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "checkpoint/safetensors.h"

namespace {

using zero::checkpoint::SafetensorsReader;
using zero::checkpoint::SafetensorsWriter;
using zero::checkpoint::TensorDecl;

float float_value(std::size_t i) {
  return static_cast<float>(i) * 0.25f - 3.0f;
}
std::int64_t int_value(std::size_t i) {
  return (static_cast<std::int64_t>(i) - 2) * 3000000000123;
}

template <class T>
void append(std::vector<unsigned char>& bytes, T value) {
  // resize then copy: GCC 12 at -O3 misreads insert() of a small array as an overflow
  const std::size_t at = bytes.size();
  bytes.resize(at + sizeof value);
  std::memcpy(bytes.data() + at, &value, sizeof value);
}

int write_file(const std::string& path) {
  const std::vector<TensorDecl> decls = {{"f32", "F32", {2, 3}},   {"f16", "F16", {5}},
                                         {"bf16", "BF16", {3, 2}}, {"i64", "I64", {4}},
                                         {"scalar", "F32", {}},    {"empty", "F16", {2, 0}}};
  std::vector<unsigned char> data;
  for (std::size_t i = 0; i < 6; ++i) append(data, float_value(i));
  for (std::size_t i = 0; i < 5; ++i) append(data, zero::float_to_fp16(float_value(i)));
  for (std::size_t i = 0; i < 6; ++i) append(data, zero::float_to_bf16(float_value(i)));
  for (std::size_t i = 0; i < 4; ++i) append(data, int_value(i));
  append(data, 42.5f);
  SafetensorsWriter writer(path, decls, {{"producer", "zero"}, {"note", "caf\xc3\xa9 \"x\""}}, 16);
  writer.write(data.data(), data.size());
  writer.finish();
  return 0;
}

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "safetensors_fixture: %s\n", what.c_str());
    ++failures;
  }
}

// The file check_safetensors.py writes with safetensors.numpy.save_file.
int read_file(const std::string& path) {
  SafetensorsReader reader(path);
  expect(reader.metadata() == std::map<std::string, std::string>{{"source", "python"}, {"n", "3"}},
         "metadata differs");
  expect(reader.tensors().size() == 4, "expected 4 tensors");
  const auto& f32 = reader.at("f32");
  const auto& f16 = reader.at("f16");
  const auto& i64 = reader.at("i64");
  const auto& scalar = reader.at("scalar");
  expect(f32.dtype == "F32" && f32.shape == std::vector<std::int64_t>{3, 4}, "f32 dtype or shape");
  expect(f16.dtype == "F16" && f16.shape == std::vector<std::int64_t>{7}, "f16 dtype or shape");
  expect(i64.dtype == "I64" && i64.shape == std::vector<std::int64_t>{2, 3}, "i64 dtype or shape");
  expect(scalar.dtype == "F32" && scalar.shape.empty(), "scalar dtype or shape");
  for (const auto* tensor : {&f32, &f16}) {
    std::vector<float> values(tensor->numel());
    reader.read_f32(*tensor, 0, values.size(), values.data());
    for (std::size_t i = 0; i < values.size(); ++i) {
      expect(values[i] == float_value(i),
             tensor->name + "[" + std::to_string(i) + "] = " + std::to_string(values[i]));
    }
  }
  std::vector<std::int64_t> ints(i64.numel());
  reader.read(i64, 0, i64.bytes(), ints.data());
  for (std::size_t i = 0; i < ints.size(); ++i) {
    expect(ints[i] == int_value(i), "i64[" + std::to_string(i) + "] = " + std::to_string(ints[i]));
  }
  float value = 0;
  reader.read_f32(scalar, 0, 1, &value);
  expect(value == 1.5f, "scalar = " + std::to_string(value));
  if (failures == 0) std::printf("safetensors_fixture: %s read and checked\n", path.c_str());
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "write") != 0 && std::strcmp(argv[1], "read") != 0)) {
    std::fprintf(stderr, "usage: %s write|read PATH\n", argv[0]);
    return 2;
  }
  try {
    return std::strcmp(argv[1], "write") == 0 ? write_file(argv[2]) : read_file(argv[2]);
  } catch (const zero::Error& error) {
    std::fprintf(stderr, "safetensors_fixture: %s\n", error.what());
    return 1;
  }
}

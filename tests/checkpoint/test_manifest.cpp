// The checkpoint's description and arithmetic without an engine: which saved rank holds which
// elements (against a plain element-by-element reference, for every world size and range of
// small tensors), meta.json to JSON and back, a damaged meta.json refused naming the key,
// durable directory replacement, and `latest`.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <unistd.h>

#include "base/error.h"
#include "checkpoint/durable.h"
#include "checkpoint/manifest.h"
#include "engine/plan/partition.h"

namespace zero::checkpoint {
namespace {

namespace fs = std::filesystem;

Manifest sample() {
  Manifest m;
  m.tag = "global_step7";
  m.created = "2026-11-22T12:00:00Z";
  m.library_version = "0.1.0";
  m.world_size = 2;
  m.stage = 3;
  m.precision = "bf16";
  m.compute_dtype = DType::bf16;
  m.optimizer = "adamw";
  m.state_dtype = DType::f32;
  m.state_names = {"exp_avg", "exp_avg_sq"};
  m.config = {{"zero_optimization.stage", 3}};
  m.global_steps = 7;
  m.micro_steps = 14;
  m.optimizer_steps = 6;
  m.scaler = {65536.0, 2, 7, 3};
  m.seed = 0xfeedfacecafebeefull;
  m.user_data = std::string("pos\0ition", 9);
  m.groups = {{"default", 0.01, 1.0}, {"no_decay", 0.0, 0.5}};
  m.params = {
      {"wte", {50, 8}, 400, true, 0}, {"ln.bias", {8}, 8, true, 1}, {"mask", {3}, 3, false, 0}};
  m.chunk_bytes = 1024;
  for (int r = 0; r < 2; ++r) {
    FileEntry f;
    f.name = rank_file_name(r, 2);
    f.rank = r;
    f.bytes = 1000 + static_cast<std::uint64_t>(r);
    f.header_hash = 0x0123456789abcdefull + static_cast<std::uint64_t>(r);
    f.sums["master/wte"] = {1, 2};
    m.files.push_back(f);
  }
  return m;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("zero-manifest-" + std::to_string(getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

}  // namespace

TEST_CASE("checkpoint: saved pieces cover a range element by element as the shards do",
          "[checkpoint]") {
  for (std::uint64_t numel : {0, 1, 2, 3, 7, 10, 17}) {
    for (int world = 1; world <= 5; ++world) {
      const engine::ShardShape shape = engine::shard_shape(numel, world);
      for (int r = 0; r < world; ++r) {
        const SavedRange range = saved_range(numel, world, r);
        CHECK(range.begin == (shape.valid(r) == 0 ? std::min<std::uint64_t>(numel, shape.begin(r))
                                                  : shape.begin(r)));
        CHECK(range.count == shape.valid(r));
      }
      for (std::uint64_t first = 0; first <= numel; ++first) {
        for (std::uint64_t count = 0; first + count <= numel; ++count) {
          // The reference: each element's owner and offset, one at a time.
          std::vector<std::pair<int, std::uint64_t>> want;
          for (std::uint64_t e = first; e < first + count; ++e) {
            const auto q = static_cast<int>(e / shape.shard);
            want.emplace_back(q, e - shape.begin(q));
          }
          std::vector<std::pair<int, std::uint64_t>> got;
          std::size_t out = 0;
          for (const SavedPiece& piece : saved_pieces(numel, world, first, count)) {
            CHECK(piece.out == out);
            CHECK(piece.count > 0);
            for (std::size_t k = 0; k < piece.count; ++k)
              got.emplace_back(piece.rank, piece.offset + k);
            out += piece.count;
          }
          REQUIRE(got == want);
        }
      }
    }
  }
  CHECK_THROWS_AS(saved_pieces(10, 2, 8, 3), Error);
}

TEST_CASE("checkpoint: meta.json round-trips every field", "[checkpoint]") {
  const Manifest m = sample();
  const Manifest back = manifest_from_json(nlohmann::json::parse(to_json(m).dump()), "meta.json");
  CHECK(back.tag == m.tag);
  CHECK(back.world_size == 2);
  CHECK(back.stage == 3);
  CHECK(back.compute_dtype == DType::bf16);
  CHECK(back.state_names == m.state_names);
  CHECK(back.global_steps == 7);
  CHECK(back.micro_steps == 14);
  CHECK(back.optimizer_steps == 6);
  CHECK(back.scaler.scale == 65536.0);
  CHECK(back.scaler.hysteresis_left == 2);
  CHECK(back.scaler.last_overflow_iteration == 3);
  CHECK(back.seed == m.seed);
  CHECK(back.user_data == m.user_data);
  CHECK(back.groups.size() == 2);
  CHECK(back.groups[1].lr_scale == 0.5);
  REQUIRE(back.params.size() == 3);
  CHECK(back.params[0].shape == std::vector<std::int64_t>{50, 8});
  CHECK(!back.params[2].trainable);
  CHECK(back.params[1].group == 1);
  CHECK(back.files[1].header_hash == m.files[1].header_hash);
  CHECK(back.files[0].sums.at("master/wte") == std::vector<std::uint64_t>{1, 2});
  CHECK(back.config == m.config);
  CHECK(back.find("ln.bias") != nullptr);
  CHECK(back.find("nope") == nullptr);
}

TEST_CASE("checkpoint: a damaged meta.json is refused naming the key", "[checkpoint]") {
  const nlohmann::json good = to_json(sample());
  auto refused = [&](auto change, const std::string& words) {
    nlohmann::json bad = good;
    change(bad);
    try {
      manifest_from_json(bad, "x/meta.json");
      FAIL("accepted: " << words);
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::io);
      CHECK_THAT(error.what(), Catch::Contains("x/meta.json") && Catch::Contains(words));
    }
  };
  refused([](auto& j) { j["format"] = "deepspeed"; }, "format");
  refused([](auto& j) { j["version"] = 99; }, "newer than this zero reads");
  refused([](auto& j) { j.erase("world_size"); }, "world_size is missing");
  refused([](auto& j) { j["stage"] = 4; }, "stage is 4, outside [0, 3]");
  refused([](auto& j) { j["params"][0]["numel"] = 401; }, "params[0].numel is 401");
  refused([](auto& j) { j["params"][1]["name"] = "wte"; }, "appears twice");
  refused([](auto& j) { j["params"][0]["group"] = 2; }, "params[0].group");
  refused([](auto& j) { j["files"].erase(1); }, "1 entries for a world size of 2");
  refused([](auto& j) { j["files"][1]["name"] = "rank00000-of-00002.safetensors"; },
          "files[1].name");
  refused([](auto& j) { j["files"][0]["header_xxh3"] = "12"; }, "16-digit hex");
  refused([](auto& j) { j["user_data_hex"] = "abc"; }, "user_data_hex");
  refused([](auto& j) { j["counters"]["optimizer_steps"] = 8; }, "optimizer_steps is 8");
  refused([](auto& j) { j["compute_dtype"] = "int64"; }, "compute_dtype");
  // meta.json's own values are checksummed: a well-formed change is caught too.
  refused([](auto& j) { j["counters"]["global_steps"] = 70; }, "meta.json was changed");
  refused([](auto& j) { j["rng"]["seed"] = 1; }, "meta_xxh3 is");
  refused([](auto& j) { j["user_data_hex"] = "00"; }, "meta.json was changed");
  // Saved by an older zero: no checksum, taken with a warning.
  nlohmann::json old = good;
  old.erase("meta_xxh3");
  CHECK(manifest_from_json(old, "x/meta.json").global_steps == 7);
}

TEST_CASE("checkpoint: hex and file names", "[checkpoint]") {
  const std::string bytes("\x00\x7f\x80\xff z", 6);
  CHECK(to_hex(bytes) == "007f80ff207a");
  CHECK(from_hex("007F80ff207a", "t") == bytes);
  CHECK_THROWS_AS(from_hex("0g", "t"), Error);
  CHECK(rank_file_name(3, 16) == "rank00003-of-00016.safetensors");
  CHECK(tensor_name("exp_avg", "h.0.attn/w") == "exp_avg/h.0.attn/w");
}

TEST_CASE("checkpoint: a directory replaces another whole, and latest is read back",
          "[checkpoint]") {
  TempDir dir;
  const fs::path tag = dir.path / "tag";
  const fs::path fresh = dir.path / ".tag.saving";
  fs::create_directories(fresh);
  std::ofstream(fresh / "a") << "one";
  replace_directory(fresh.string(), tag.string());  // a new name
  CHECK(fs::exists(tag / "a"));
  CHECK(!fs::exists(fresh));
  fs::create_directories(fresh);
  std::ofstream(fresh / "b") << "two";
  replace_directory(fresh.string(), tag.string());  // over the old one
  CHECK(fs::exists(tag / "b"));
  CHECK(!fs::exists(tag / "a"));  // nothing of the old one is left
  CHECK(!fs::exists(fresh));

  CHECK_THROWS_WITH(read_latest(dir.path.string()), Catch::Contains("missing"));
  write_file_durably((dir.path / "latest").string(), "tag\n");
  CHECK(read_latest(dir.path.string()) == "tag");
  CHECK(!fs::exists(dir.path / "latest.tmp"));
}

TEST_CASE("checkpoint: temporaries never write through a link or a leftover", "[checkpoint]") {
  TempDir dir;
  const fs::path victim = dir.path / "victim";
  std::ofstream(victim) << "precious";
  // A link planted at latest.tmp: the write replaces the link, the file it names stays.
  fs::create_symlink(victim, dir.path / "latest.tmp");
  write_file_durably((dir.path / "latest").string(), "tag\n");
  CHECK(read_text(victim) == "precious");
  CHECK(fs::is_regular_file(fs::symlink_status(dir.path / "latest")));
  CHECK(read_text(dir.path / "latest") == "tag\n");
  CHECK(!fs::exists(fs::symlink_status(dir.path / "latest.tmp")));
  // A leftover file from a crash is replaced by a new one; a hard link to the victim too.
  fs::create_hard_link(victim, dir.path / "out.tmp");
  const int fd = create_temporary((dir.path / "out.tmp").string());
  CHECK(::write(fd, "x", 1) == 1);
  ::close(fd);
  CHECK(read_text(victim) == "precious");
  CHECK(read_text(dir.path / "out.tmp") == "x");
  // A directory in the way is an error naming it.
  fs::create_directories(dir.path / "d.tmp");
  CHECK_THROWS_WITH(create_temporary((dir.path / "d.tmp").string()),
                    Catch::Contains("d.tmp") && Catch::Contains("directory is in the way"));
}

TEST_CASE("checkpoint: latest must name a tag directory inside DIR", "[checkpoint]") {
  TempDir dir;
  fs::create_directories(dir.path / "outside");
  fs::create_directories(dir.path / "ckpt" / "good");
  const std::string ckpt = (dir.path / "ckpt").string();
  fs::create_directory_symlink(dir.path / "outside", dir.path / "ckpt" / "linked");
  std::ofstream(dir.path / "ckpt" / "afile") << "x";
  for (const char* bad : {"/abs/path", "../outside", ".hidden", "a/b", "latest", ".."}) {
    write_file_durably(ckpt + "/latest", std::string(bad) + "\n");
    INFO(bad);
    CHECK_THROWS_WITH(read_latest(ckpt),
                      Catch::Contains("not a tag directory inside") && Catch::Contains(bad));
  }
  write_file_durably(ckpt + "/latest", "linked\n");
  CHECK_THROWS_WITH(read_latest(ckpt), Catch::Contains("a symbolic link"));
  write_file_durably(ckpt + "/latest", "afile\n");
  CHECK_THROWS_WITH(read_latest(ckpt), Catch::Contains("a file, not a tag directory"));
  write_file_durably(ckpt + "/latest", "good\n");
  CHECK(read_latest(ckpt) == "good");
  CHECK(tag_problem("global_step10").empty());
  CHECK_FALSE(tag_problem(std::string(201, 'a')).empty());
}

TEST_CASE("checkpoint: what an unfinished save or prune left is removed, nothing else",
          "[checkpoint]") {
  TempDir dir;
  for (const char* name : {".a.saving", ".b.deleting", "tag", ".other", "keep.saving"}) {
    fs::create_directories(dir.path / name);
    std::ofstream(dir.path / name / "f") << "x";
  }
  std::ofstream(dir.path / "latest.tmp") << "tag";
  std::ofstream(dir.path / "latest") << "tag";
  remove_leftovers(dir.path.string());
  for (const char* gone : {".a.saving", ".b.deleting", "latest.tmp"}) {
    INFO(gone);
    CHECK(!fs::exists(dir.path / gone));
  }
  for (const char* kept : {"tag", ".other", "keep.saving", "latest"}) {
    INFO(kept);
    CHECK(fs::exists(dir.path / kept));
  }
}

}  // namespace zero::checkpoint

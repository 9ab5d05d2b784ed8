// Checkpoints of the engine in one process (the cross-process and N -> M runs are
// engine_checkpoint.cpp): a load restores the state saved bit for bit, a damaged or foreign
// checkpoint is refused with the file or parameter named, a save that fails or crashes at any
// point leaves the previous checkpoint as `latest` and loadable, checkpoint.keep_last prunes,
// and pretrained safetensors weights load by name with dtype conversion.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <mpi.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "base/error.h"
#include "base/half.h"
#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "engine_model.h"
#include "multirank.h"
#include "shared_dir.h"
#include "tests/stream_hold.h"

namespace zero::testing {
namespace {

namespace fs = std::filesystem;

void barrier() {
  side_channel().barrier().wait();
}

std::string config(int stage, const std::string& extra = "", int accumulation = 1) {
  return R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": )" +
         std::to_string(accumulation) + R"(,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
      "zero_optimization": {"stage": )" +
         std::to_string(stage) +
         R"(, "reduce_bucket_size": 1000, "allgather_bucket_size": 1000,
        "stage3_param_persistence_threshold": 20}, )" +
         extra + R"( "steps_per_print": 1000})";
}

void train(engine::Engine& e, int from, int to) {
  for (int step = from; step < to; ++step) micro_step(e, kModuleOrder, step);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("engine checkpoint: a load restores the saved state bit for bit", "[engine]") {
  SharedDir dir("ckpt-roundtrip");
  for (int stage = 0; stage <= 3; ++stage) {
    auto e = make_engine(config(stage));
    train(*e, 0, 3);
    const auto saved = param_values(*e);
    e->save_checkpoint(dir.path.string(), {"", "position 3"});
    CHECK(read_text(dir.path / "latest") == "global_step3\n");
    train(*e, 3, 5);
    const auto later = param_values(*e);
    const engine::LoadResult result = e->load_checkpoint(dir.path.string());
    CHECK(result.tag == "global_step3");
    CHECK(result.user_data == "position 3");
    CHECK(result.global_steps == 3);
    CHECK(param_values(*e) == saved);
    train(*e, 3, 5);
    CHECK(param_values(*e) == later);
    INFO("stage " << stage);
  }
}

TEST_CASE("engine checkpoint: a flipped byte in a rank file is found, naming the file",
          "[engine]") {
  SharedDir dir("ckpt-flip");
  auto e = make_engine(config(1));
  train(*e, 0, 2);
  e->save_checkpoint(dir.path.string(), {"flipped", ""});
  fs::path rank0;  // rank00000-of-<world>.safetensors
  for (const auto& entry : fs::directory_iterator(dir.path / "flipped")) {
    if (entry.path().filename().string().rfind("rank00000-of-", 0) == 0) rank0 = entry.path();
  }
  REQUIRE(!rank0.empty());
  if (e->rank() == 0) {
    checkpoint::SafetensorsReader reader(rank0.string());
    const checkpoint::TensorInfo& master = reader.at("master/p1");
    std::fstream f(rank0, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(reader.header_bytes() + master.begin + 5);
    f.seekg(at);
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    f.seekp(at);
    f.write(&byte, 1);
  }
  barrier();
  try {
    e->load_checkpoint(dir.path.string());
    FAIL("a damaged checkpoint loaded");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::io);
    CHECK_THAT(error.what(), Catch::Contains(rank0.filename().string()));
    CHECK_THAT(error.what(), Catch::Contains("master/p1"));
  }
  // Half loaded: the engine takes no more steps.
  CHECK_THROWS_WITH(micro_step(*e, kModuleOrder, 2),
                    Catch::Contains("checkpoint load failed part way"));
}

TEST_CASE("engine checkpoint: another model's checkpoint is refused before anything changes",
          "[engine]") {
  SharedDir dir("ckpt-foreign");
  auto e = make_engine(config(2));
  train(*e, 0, 2);
  e->save_checkpoint(dir.path.string(), {"mine", ""});
  const fs::path meta = dir.path / "mine" / "meta.json";
  const std::string original = read_text(meta);
  auto edit = [&](auto change) {
    barrier();
    if (e->rank() == 0) {
      nlohmann::json m = nlohmann::json::parse(original);
      change(m);
      // Another model's checkpoint, whole: its own checksum matches it.
      m[std::string(checkpoint::kManifestHashKey)] =
          fmt::format("{:016x}", checkpoint::manifest_hash(m));
      std::ofstream(meta) << m.dump();
    }
    barrier();
  };
  train(*e, 2, 3);
  const auto before = param_values(*e);

  edit([](nlohmann::json& m) { m["params"][3]["name"] = "renamed"; });
  CHECK_THROWS_WITH(e->load_checkpoint(dir.path.string()),
                    Catch::Contains("has no parameter 'p3'"));
  edit([](nlohmann::json& m) {
    m["params"][4]["shape"] = {998};
    m["params"][4]["numel"] = 998;
  });
  CHECK_THROWS_WITH(e->load_checkpoint(dir.path.string()),
                    Catch::Contains("'p4' has shape [998] there and [999] in this model"));
  edit([](nlohmann::json& m) { m["optimizer"]["states"] = {"momentum_buffer"}; });
  CHECK_THROWS_WITH(e->load_checkpoint(dir.path.string()), Catch::Contains("module_only"));
  CHECK(param_values(*e) == before);
  train(*e, 3, 4);  // still trains
  CHECK(param_values(*e) != before);
}

TEST_CASE("engine checkpoint: a save that fails or dies at any point leaves the last one",
          "[engine]") {
  SharedDir dir("ckpt-crash");
  for (const char* point : {"rank_file_written", "manifest_written", "tag_in_place"}) {
    std::string armed;
    engine::FaultHooks hooks;
    hooks.save = [&](const std::string& where) {
      if (where == armed) throw make_error(ErrorCategory::io, "injected failure at {}", where);
    };
    auto e = make_engine(config(3), {},
                         [&](engine::Engine& engine) { engine::set_fault_hooks(engine, hooks); });
    train(*e, 0, 2);
    e->save_checkpoint(dir.path.string(), {"good", ""});
    const auto good = param_values(*e);
    train(*e, 2, 3);
    armed = point;
    CHECK_THROWS_WITH(e->save_checkpoint(dir.path.string(), {"bad", ""}),
                      Catch::Contains("injected failure at"));
    armed.clear();
    barrier();
    CHECK(read_text(dir.path / "latest") == "good\n");
    CHECK(!fs::exists(dir.path / ".bad.saving"));
    // Past tag_in_place the new tag is complete; before it there is none.
    CHECK(fs::exists(dir.path / "bad" / "meta.json") == (std::string(point) == "tag_in_place"));
    e->load_checkpoint(dir.path.string());
    CHECK(param_values(*e) == good);
    INFO("failure at " << point);
    barrier();
    if (e->rank() == 0) fs::remove_all(dir.path / "bad");
  }
}

TEST_CASE("engine checkpoint: saving a tag again replaces it whole", "[engine]") {
  SharedDir dir("ckpt-again");
  auto e = make_engine(config(1));
  train(*e, 0, 1);
  e->save_checkpoint(dir.path.string(), {"same", "first"});
  train(*e, 1, 2);
  const auto second = param_values(*e);
  e->save_checkpoint(dir.path.string(), {"same", "second"});
  train(*e, 2, 3);
  const engine::LoadResult result = e->load_checkpoint(dir.path.string(), {"same", false});
  CHECK(result.user_data == "second");
  CHECK(param_values(*e) == second);
}

TEST_CASE("engine checkpoint: checkpoint.keep_last keeps the newest tags", "[engine]") {
  SharedDir dir("ckpt-keep");
  auto e = make_engine(config(2, R"("checkpoint": {"keep_last": 2},)"));
  for (int step = 0; step < 4; ++step) {
    train(*e, step, step + 1);
    e->save_checkpoint(dir.path.string());
  }
  barrier();
  std::vector<std::string> tags;
  for (const auto& entry : fs::directory_iterator(dir.path)) {
    if (entry.is_directory()) tags.push_back(entry.path().filename().string());
  }
  std::sort(tags.begin(), tags.end());
  CHECK(tags == std::vector<std::string>{"global_step3", "global_step4"});
  CHECK(read_text(dir.path / "latest") == "global_step4\n");
}

TEST_CASE("engine checkpoint: a save inside an accumulation window is refused", "[engine]") {
  SharedDir dir("ckpt-window");
  auto e = make_engine(config(1, "", 2));
  micro_step(*e, kModuleOrder, 0);
  CHECK_THROWS_WITH(e->save_checkpoint(dir.path.string()),
                    Catch::Contains("inside an accumulation window (1 of 2"));
  micro_step(*e, kModuleOrder, 1);
  e->save_checkpoint(dir.path.string());
  CHECK(fs::exists(dir.path / "global_step1" / "meta.json"));
}

TEST_CASE("engine checkpoint: module_only takes the values and leaves the counters", "[engine]") {
  SharedDir dir("ckpt-module");
  auto e = make_engine(config(3));
  train(*e, 0, 2);
  const auto saved = param_values(*e);
  e->save_checkpoint(dir.path.string());
  auto fresh = make_engine(config(1));
  const engine::LoadResult result =
      fresh->load_checkpoint(dir.path.string(), {"", /*module_only=*/true});
  CHECK(result.global_steps == 2);
  CHECK(param_values(*fresh) == saved);
  // The counters started afresh: the next step is the first.
  train(*fresh, 0, 1);
  fresh->save_checkpoint(dir.path.string());
  CHECK(read_text(dir.path / "latest") == "global_step1\n");
}

TEST_CASE("engine pretrained: safetensors weights load by name, with dtype conversion",
          "[engine]") {
  SharedDir dir("pretrained");
  const Model model;
  const fs::path file = dir.path / "model.safetensors";
  auto value = [](std::size_t p, std::size_t i) {
    return 0.25f * static_cast<float>(p) - 0.001f * static_cast<float>(i % 1000);
  };
  // p2 as F16 under another name; p5 missing (skipped); an extra buffer to ignore.
  if (side_channel().rank() == 0) {
    std::vector<checkpoint::TensorDecl> decls;
    for (std::size_t p = 0; p < model.sizes.size(); ++p) {
      if (p == 5) continue;
      decls.push_back({p == 2 ? "renamed.two" : "p" + std::to_string(p),
                       p == 2 ? "F16" : "F32",
                       {model.sizes[p]}});
    }
    decls.push_back({"attn.mask", "F32", {3}});
    checkpoint::SafetensorsWriter writer(file.string(), decls);
    for (std::size_t p = 0; p < model.sizes.size(); ++p) {
      if (p == 5) continue;
      for (std::int64_t i = 0; i < model.sizes[p]; ++i) {
        const float v = value(p, static_cast<std::size_t>(i));
        if (p == 2) {
          const std::uint16_t h = float_to_fp16(v);
          writer.write(&h, 2);
        } else {
          writer.write(&v, 4);
        }
      }
    }
    const float mask[3] = {1, 0, 1};
    writer.write(mask, sizeof mask);
    writer.finish();
  }
  barrier();
  for (int stage : {1, 3}) {
    auto e = make_engine(config(stage));
    const auto before = param_values(*e);
    engine::PretrainedOptions options;
    options.names = {{"p2", "renamed.two"}};
    options.skip = {"p5"};
    CHECK_THROWS_WITH(e->load_pretrained(file.string(), options),
                      Catch::Contains("tensor 'attn.mask' (shape [3])"));
    options.ignore = {"attn.mask"};
    options.skip.clear();
    CHECK_THROWS_WITH(e->load_pretrained(file.string(), options),
                      Catch::Contains("no tensor 'p5' for parameter 'p5'"));
    CHECK(param_values(*e) == before);  // refused before anything changed
    options.skip = {"p5"};
    e->load_pretrained(file.string(), options);
    const auto after = param_values(*e);
    for (std::size_t p = 0; p < model.sizes.size(); ++p) {
      for (std::size_t i = 0; i < after[p].size(); ++i) {
        float want = p == 5 ? before[p][i] : value(p, i);
        if (p == 2) want = fp16_to_float(float_to_fp16(want));
        if (after[p][i] != want) {
          FAIL_CHECK("stage " << stage << ": p" << p << "[" << i << "] = " << after[p][i]
                              << ", expected " << want);
          break;
        }
      }
    }
    train(*e, 0, 1);  // trains on from there
  }
}

TEST_CASE("engine pretrained: several files listed by an index JSON, found from the directory",
          "[engine]") {
  SharedDir dir("pretrained-index");
  const Model model;
  auto value = [](std::size_t p, std::size_t i) {
    return 0.5f - 0.125f * static_cast<float>(p) + 0.002f * static_cast<float>(i % 500);
  };
  // Parameters 0-4 in the first file, 5-8 in the second, as Hugging Face shards a model.
  if (side_channel().rank() == 0) {
    nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                            {"weight_map", nlohmann::json::object()}};
    for (int part = 0; part < 2; ++part) {
      const std::string name = "model-0000" + std::to_string(part + 1) + "-of-00002.safetensors";
      std::vector<checkpoint::TensorDecl> decls;
      const std::size_t lo = part == 0 ? 0 : 5, hi = part == 0 ? 5 : model.sizes.size();
      for (std::size_t p = lo; p < hi; ++p) {
        decls.push_back({"p" + std::to_string(p), "BF16", {model.sizes[p]}});
        index["weight_map"]["p" + std::to_string(p)] = name;
      }
      checkpoint::SafetensorsWriter writer((dir.path / name).string(), decls);
      for (std::size_t p = lo; p < hi; ++p) {
        for (std::int64_t i = 0; i < model.sizes[p]; ++i) {
          const std::uint16_t b = float_to_bf16(value(p, static_cast<std::size_t>(i)));
          writer.write(&b, 2);
        }
      }
      writer.finish();
    }
    std::ofstream(dir.path / "model.safetensors.index.json") << index.dump(1);
  }
  barrier();
  auto e = make_engine(config(3));
  e->load_pretrained(dir.path.string());
  const auto after = param_values(*e);
  for (std::size_t p = 0; p < model.sizes.size(); ++p) {
    for (std::size_t i = 0; i < after[p].size(); ++i) {
      const float want = bf16_to_float(float_to_bf16(value(p, i)));
      if (after[p][i] != want) {
        FAIL_CHECK("p" << p << "[" << i << "] = " << after[p][i] << ", expected " << want);
        break;
      }
    }
  }
  // An index naming a tensor its file lacks is refused, naming both.
  barrier();
  if (side_channel().rank() == 0) {
    nlohmann::json index =
        nlohmann::json::parse(read_text(dir.path / "model.safetensors.index.json"));
    index["weight_map"]["p9"] = "model-00001-of-00002.safetensors";
    std::ofstream(dir.path / "model.safetensors.index.json") << index.dump(1);
  }
  barrier();
  CHECK_THROWS_WITH(e->load_pretrained(dir.path.string()),
                    Catch::Contains("model-00001-of-00002.safetensors") && Catch::Contains("p9"));
}

}  // namespace zero::testing

namespace zero::testing {

// Beside the agreements checkpoints use: the mean a trainer prints (its loss) over the ranks.
TEST_CASE("engine agreement: mean_across_ranks gives every rank the mean of each value",
          "[engine]") {
  auto e = make_engine(config(2));
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  double values[3] = {static_cast<double>(rank), 2.5, rank == 0 ? 4.0 * world : 0.0};
  e->mean_across_ranks(values, 3);
  CHECK(values[0] == Approx((world - 1) / 2.0));
  CHECK(values[1] == Approx(2.5));
  CHECK(values[2] == Approx(4.0));
}

// A trainer takes the mean of its loss while the next step's work is queued: on the
// asynchronous CPU device (streams on their own threads, as a GPU's) the engine's stream is
// held, and a mean that waited for it would wait for the hold (which gives up after 10 s).
TEST_CASE("engine agreement: mean_across_ranks waits for nothing queued on the engine's stream",
          "[engine]") {
  DeviceOptions device_options;
  device_options.preference = DevicePreference::cpu;
  device_options.cpu_mode = CpuDeviceMode::async;
  auto e = make_engine(config(2), {}, {}, create_device(device_options));
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Device& device = e->device();
  StreamHold hold(device, device.default_stream());
  double values[2] = {static_cast<double>(rank), 1.0};
  e->mean_across_ranks(values, 2);
  hold.release();
  CHECK_FALSE(hold.gave_up());  // returned with the engine's stream still held
  CHECK(values[0] == Approx((world - 1) / 2.0));
  CHECK(values[1] == Approx(1.0));
  device.synchronize();
}

}  // namespace zero::testing

// MemoryFit (engine/plan/memory_fit.h): the verdict from gathered notes and needs (pools shared by
// ranks, machines, GPUs and file systems kept apart), and zero_init on the CPU device refusing
// a run that does not fit before reserving anything: the model state, declared memory, NVMe.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/backends.h"
#include "config/config.h"
#include "device/memory_probe.h"
#include "engine/plan/memory_fit.h"
#include "engine/plan/memory_plan.h"
#include "scratch.h"
#include "zero/zero.h"

namespace zero::engine {
namespace {

using json = nlohmann::json;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

json note(const std::string& machine, std::optional<std::uint64_t> host_free,
          const json& gpu = nullptr, const json& disks = json::object()) {
  json n;
  n["machine"] = machine;
  n["host"] = host_free ? json{{"free", *host_free}, {"source", "MemAvailable"}} : json(nullptr);
  n["gpu"] = gpu;
  n["disks"] = disks;
  return n;
}

json part(std::uint64_t bytes, const std::string& name = "model state",
          const std::string& lower = "a higher zero_optimization.stage") {
  json items = json::array();
  if (bytes != 0) items.push_back(json::array({name, bytes, lower}));
  return {{"bytes", bytes}, {"items", items}};
}

json need(std::uint64_t host, std::uint64_t gpu = 0, std::uint64_t optimizer_disk = 0,
          std::uint64_t param_disk = 0) {
  return {
      {"host", part(host)},
      {"gpu", part(gpu, "gathered parameters (stage 3)", "stage3_max_live_parameters")},
      {"disks",
       {{"optimizer", part(optimizer_disk, "optimizer swap file", "offload_optimizer.nvme_path")},
        {"param", part(param_disk, "parameter swap file", "offload_param.nvme_path")}}}};
}

std::string shortfalls(const std::vector<json>& notes, const std::vector<json>& needs) {
  std::vector<std::string> n, d;
  for (const json& x : notes) n.push_back(x.dump());
  for (const json& x : needs) d.push_back(x.dump());
  return fit_shortfalls(n, d);
}

TEST_CASE("fit_shortfalls adds up the ranks of one machine against its least free figure",
          "[memory_fit]") {
  // Two ranks of 6 GiB each: 12 GiB against the 10 GiB the second rank saw.
  const std::string text =
      shortfalls({note("m1", 16 * kGiB), note("m1", 10 * kGiB)}, {need(6 * kGiB), need(6 * kGiB)});
  CHECK_THAT(text, Catch::Contains("host memory of m1: 2 ranks (0, 1) need 12.00 GiB, 10.00 GiB "
                                   "is free (MemAvailable)"));
  CHECK_THAT(text, Catch::Contains("Rank 0's: model state 6.00 GiB (lower with a higher "
                                   "zero_optimization.stage)"));
  // One rank alone fits.
  CHECK(shortfalls({note("m1", 16 * kGiB)}, {need(6 * kGiB)}).empty());
  // Exactly what is free fits.
  CHECK(shortfalls({note("m1", 12 * kGiB), note("m1", 12 * kGiB)}, {need(6 * kGiB), need(6 * kGiB)})
            .empty());
}

TEST_CASE("fit_shortfalls keeps machines, GPUs and file systems apart", "[memory_fit]") {
  const json gpu_a = {{"id", "GPU-a"}, {"free", 8 * kGiB}, {"source", "cudaMemGetInfo"}};
  const json gpu_b = {{"id", "GPU-b"}, {"free", 8 * kGiB}, {"source", "cudaMemGetInfo"}};
  const json one_disk = {
      {"fs", "device 8:1"}, {"free", 100 * kGiB}, {"path", "/d"}, {"source", "statvfs"}};
  const json disk = {{"optimizer", one_disk}, {"param", one_disk}};
  // Two machines of one rank each, each with its own GPU: 10 GiB host each fits 12, 6 GiB of
  // GPU each fits 8; but the disk of one machine holds both swap files: 60 + 50 over 100.
  std::string text =
      shortfalls({note("m1", 12 * kGiB, gpu_a, disk), note("m2", 12 * kGiB, gpu_b)},
                 {need(10 * kGiB, 6 * kGiB, 60 * kGiB, 50 * kGiB), need(10 * kGiB, 6 * kGiB)});
  CHECK_THAT(text, Catch::Contains("disk space under /d (device 8:1) on m1: rank 0 need 110.00 "
                                   "GiB, 100.00 GiB is free (statvfs)"));
  CHECK_THAT(text, Catch::Contains("optimizer swap file 60.00 GiB (lower with "
                                   "offload_optimizer.nvme_path), parameter swap file 50.00 GiB"));
  CHECK_THAT(text, !Catch::Contains("host memory"));
  CHECK_THAT(text, !Catch::Contains("memory of GPU"));

  // Two ranks sharing one GPU: 12 GiB of it against 8.
  text = shortfalls({note("m1", 64 * kGiB, gpu_a), note("m1", 64 * kGiB, gpu_a)},
                    {need(kGiB, 6 * kGiB), need(kGiB, 6 * kGiB)});
  CHECK_THAT(text, Catch::Contains("memory of GPU GPU-a on m1: 2 ranks (0, 1) need 12.00 GiB, "
                                   "8.00 GiB is free (cudaMemGetInfo)"));
  CHECK_THAT(text, !Catch::Contains("host memory"));
  // The same on two GPUs fits.
  CHECK(shortfalls({note("m1", 64 * kGiB, gpu_a), note("m1", 64 * kGiB, gpu_b)},
                   {need(kGiB, 6 * kGiB), need(kGiB, 6 * kGiB)})
            .empty());
}

TEST_CASE("fit_note and fit_need give what fit_verdict judges, pool by pool", "[memory_fit]") {
  // A plan with one arena of each memory tier and both swap files.
  MemoryPlan plan;
  plan.state.name = "model state";
  plan.state.tier = Tier::device;
  plan.state.capacity = 6 * kGiB;
  plan.offload.name = "offloaded optimizer state (pinned)";
  plan.offload.tier = Tier::pinned;
  plan.offload.capacity = 3 * kGiB;
  plan.nvme.name = "optimizer swap file";
  plan.nvme.tier = Tier::nvme;
  plan.nvme.capacity = 40 * kGiB;
  plan.param_nvme.name = "parameter swap file";
  plan.param_nvme.tier = Tier::nvme;
  plan.param_nvme.capacity = 20 * kGiB;
  const config::Config config;
  const std::vector<DeclaredMemory> activations{{Tier::device, 2 * kGiB, "activations"}};
  FreeNote note;
  note.machine = "node (boot)";
  note.host = 8 * kGiB;
  note.host_source = "--cpu-mem";
  note.gpu = FreeNote::Gpu{"GPU 0", 7 * kGiB, "--gpu-mem"};
  note.optimizer_disk = note.param_disk = FreeNote::Disk{"NVMe", 50 * kGiB, "the NVMe", "--nvme"};

  // With a GPU: 8 GiB of state and activations on it (7 free), 3 GiB pinned (8 free), 60 GiB of
  // swap files on one disk (50 free).
  auto verdict = fit_verdict({fit_note(note)}, {fit_need(plan, config, activations, true)});
  REQUIRE(verdict.size() == 2);
  CHECK(verdict[0].pool == Shortfall::Pool::gpu);
  CHECK_THAT(verdict[0].text,
             Catch::StartsWith("memory of GPU GPU 0 on node: rank 0 need 8.00 GiB, 7.00 GiB is "
                               "free (--gpu-mem). Rank 0's: model state 6.00 GiB"));
  CHECK_THAT(verdict[0].text, Catch::Contains("activations (the program's) 2.00 GiB"));
  CHECK(verdict[1].pool == Shortfall::Pool::disk);
  CHECK_THAT(verdict[1].text, Catch::StartsWith("disk space under the NVMe (NVMe) on node: rank 0 "
                                                "need 60.00 GiB, 50.00 GiB is free (--nvme)"));
  // Without one, everything but the disks is host memory: 11 GiB against 8.
  note.gpu.reset();
  verdict = fit_verdict({fit_note(note)}, {fit_need(plan, config, activations, false)});
  REQUIRE(verdict.size() == 2);
  CHECK(verdict[0].pool == Shortfall::Pool::host);
  CHECK_THAT(verdict[0].text, Catch::Contains("need 11.00 GiB, 8.00 GiB is free (--cpu-mem)"));
  CHECK(verdict[1].pool == Shortfall::Pool::disk);
  // A disk with room and a host with room: nothing is short.
  note.host = 16 * kGiB;
  note.optimizer_disk->free = note.param_disk->free = 60 * kGiB;
  CHECK(fit_verdict({fit_note(note)}, {fit_need(plan, config, activations, false)}).empty());
}

TEST_CASE("fit_shortfalls does not judge a pool no rank could measure", "[memory_fit]") {
  CHECK(shortfalls({note("m1", std::nullopt)}, {need(1000 * kGiB)}).empty());
  // One rank's figure is enough to judge the pool.
  CHECK_FALSE(
      shortfalls({note("m1", std::nullopt), note("m1", 4 * kGiB)}, {need(3 * kGiB), need(3 * kGiB)})
          .empty());
}

// ---- zero_init on the CPU device ----

// An engine of one rank on the CPU device with one trainable parameter of `rows` x `columns`
// elements in one module, not yet initialised.
struct OneParam {
  OneParam(const std::string& config, long long rows, long long columns) {
    zero_create_options options = ZERO_CREATE_OPTIONS_INIT;
    options.device = ZERO_DEVICE_CPU;
    REQUIRE(zero_create(config.c_str(), &options, &engine) == ZERO_OK);
    int module = 0;
    REQUIRE(zero_add_module(engine, "m", &module) == ZERO_OK);
    const long long shape[2] = {rows, columns};
    zero_param_desc desc{};
    desc.name = "w";
    desc.shape = shape;
    desc.ndim = 2;
    desc.trainable = 1;
    desc.modules = &module;
    desc.module_count = 1;
    REQUIRE(zero_add_param(engine, &desc, nullptr) == ZERO_OK);
  }
  ~OneParam() { zero_destroy(engine); }
  OneParam(const OneParam&) = delete;
  OneParam& operator=(const OneParam&) = delete;
  zero_engine* engine = nullptr;
};

const std::string kAdamStage0 = R"({"train_batch_size": 1, "optimizer": {"type": "AdamW"},
                                    "zero_optimization": {"stage": 0}})";

// Sets ZERO_MEMORY_CHECK for a scope.
class CheckMode {
 public:
  explicit CheckMode(const char* value) {
    if (const char* old = std::getenv("ZERO_MEMORY_CHECK")) old_ = old;
    if (value != nullptr) {
      ::setenv("ZERO_MEMORY_CHECK", value, 1);
    } else {
      ::unsetenv("ZERO_MEMORY_CHECK");
    }
  }
  ~CheckMode() {
    if (old_) {
      ::setenv("ZERO_MEMORY_CHECK", old_->c_str(), 1);
    } else {
      ::unsetenv("ZERO_MEMORY_CHECK");
    }
  }
  CheckMode(const CheckMode&) = delete;
  CheckMode& operator=(const CheckMode&) = delete;

 private:
  std::optional<std::string> old_;
};

TEST_CASE("zero_init refuses a model state larger than the machine, before reserving it",
          "[memory_fit]") {
  const CheckMode refuse(nullptr);
  // 2^38 fp32 elements with AdamW: 4 TiB of state, more than any machine this runs on.
  OneParam run(kAdamStage0, 1 << 19, 1 << 19);
  REQUIRE(zero_init(run.engine) == ZERO_ERROR_OUT_OF_MEMORY);
  const std::string error = zero_last_error();
  CHECK_THAT(error, Catch::Contains("the run does not fit this machine; nothing was reserved"));
  const std::string machine = memory_probe::machine_id();
  CHECK_THAT(error, Catch::Contains("host memory of " + machine.substr(0, machine.find(" (")) +
                                    ": rank 0 need"));
  CHECK_THAT(error, Catch::Contains("model state 4.00 TiB (lower with a higher "
                                    "zero_optimization.stage, or offload_optimizer)"));
  CHECK_THAT(error, Catch::Contains("ZERO_MEMORY_CHECK=warn"));
  // Nothing but the scratch of zero_create.
  unsigned long long reserved = 1;
  REQUIRE(zero_memory_reserved(run.engine, ZERO_TIER_HOST, &reserved) == ZERO_OK);
  CHECK(reserved == 0);
  REQUIRE(zero_memory_reserved(run.engine, ZERO_TIER_DEVICE, &reserved) == ZERO_OK);
  CHECK(reserved == 4096);
}

TEST_CASE("zero_init counts declared memory, and ZERO_MEMORY_CHECK=warn goes on, off skips",
          "[memory_fit]") {
  const auto declare_too_much = [](zero_engine* engine) {
    const auto free = memory_probe::host_available();
    REQUIRE(free);
    REQUIRE(zero_declare_memory(engine, ZERO_TIER_DEVICE, free->bytes / 2 + kGiB, "activations") ==
            ZERO_OK);
    REQUIRE(zero_declare_memory(engine, ZERO_TIER_HOST, free->bytes / 2 + kGiB, nullptr) ==
            ZERO_OK);
  };
  {
    const CheckMode refuse(nullptr);
    OneParam run(kAdamStage0, 3, 5);
    declare_too_much(run.engine);
    REQUIRE(zero_init(run.engine) == ZERO_ERROR_OUT_OF_MEMORY);
    const std::string error = zero_last_error();
    // On the CPU device the device tier is host memory: both declarations are in one pool.
    CHECK_THAT(error, Catch::Contains("activations (the program's)"));
    CHECK_THAT(error, Catch::Contains("declared memory (the program's)"));
  }
  for (const char* mode : {"warn", "off"}) {
    INFO(mode);
    const CheckMode going_on(mode);
    OneParam run(kAdamStage0, 3, 5);
    declare_too_much(run.engine);
    CHECK(zero_init(run.engine) == ZERO_OK);
  }
  {
    // A small model and nothing declared fits.
    OneParam run(kAdamStage0, 3, 5);
    CHECK(zero_init(run.engine) == ZERO_OK);
    CHECK(zero_declare_memory(run.engine, ZERO_TIER_HOST, 1, "late") == ZERO_ERROR_USAGE);
    CHECK_THAT(zero_last_error(), Catch::Contains("declare memory before init"));
  }
  OneParam run(kAdamStage0, 3, 5);
  CHECK(zero_declare_memory(run.engine, ZERO_TIER_NVME, 1, "disk") == ZERO_ERROR_USAGE);
  CHECK_THAT(zero_last_error(), Catch::Contains("tier 3 is not memory"));
}

TEST_CASE("zero_init refuses swap files larger than the disk under nvme_path, with the host",
          "[memory_fit]") {
  const CheckMode refuse(nullptr);
  zero::testing::ScratchDir dir("memory-fit");
  // 2^38 elements: 4 TiB of fp32 masters and moments to swap, more than the scratch disk has;
  // sub-groups of 2^24 elements keep the swap buffers small.
  const std::string config = R"({"train_batch_size": 1, "optimizer": {"type": "AdamW"},
      "zero_optimization": {"stage": 1, "sub_group_size": 16777216,
        "offload_optimizer": {"device": "nvme", "nvme_path": ")" +
                             dir.path() + R"(/not/yet", "buffer_count": 4}}})";
  OneParam run(config, 1 << 19, 1 << 19);
  REQUIRE(zero_init(run.engine) == ZERO_ERROR_OUT_OF_MEMORY);
  const std::string error = zero_last_error();
  CHECK_THAT(error, Catch::Contains("disk space under " + dir.path()));
  CHECK_THAT(error, Catch::Contains("optimizer swap file"));
  CHECK_THAT(error, Catch::Contains("offload_optimizer.nvme_path on a disk with more room"));
  // Nothing was made under nvme_path.
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/not"));
}

}  // namespace
}  // namespace zero::engine

namespace zero::engine {

TEST_CASE(
    "MemoryFit::fits judges a plan by check's rules whatever ZERO_MEMORY_CHECK says, and "
    "super_offload unset is a candidate only beside a GPU with the state in host memory",
    "[memory_fit]") {
  auto device = create_cpu_device();
  comm::CommOptions comm_options;
  comm_options.device = device.get();
  auto comm = comm::make_local_communicator(comm_options);
  Agreement agreement(*comm, *device);
  const config::Config config = config::read_config_text(
      R"({"train_batch_size": 1, "optimizer": {"type": "AdamW"},
          "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})",
      {});
  MemoryFit fit;
  fit.note_free(agreement, *device, config, StateModes{});
  MemoryPlan small;
  small.offload.tier = Tier::host;
  small.offload.capacity = std::size_t{1} << 20;
  MemoryPlan huge = small;
  huge.offload.capacity = std::size_t{1} << 50;  // a PiB of host memory
  for (const char* mode : {"", "warn", "off"}) {
    INFO("ZERO_MEMORY_CHECK=" << mode);
    const CheckMode check(*mode != '\0' ? mode : nullptr);
    CHECK(fit.fits(small, config, agreement));
    CHECK_FALSE(fit.fits(huge, config, agreement));
  }

  CHECK(config.zero.offload_optimizer.super_offload_auto);
  CHECK(super_offload_auto_unused(config, /*gpu=*/true).empty());
  CHECK(super_offload_auto_unused(config, /*gpu=*/false) ==
        "not beside a GPU: the CPU optimizer would share its cores with backward");
  const auto with = [](const char* zero) {
    return config::read_config_text(
        std::string(R"({"train_batch_size": 1, "optimizer": {"type": "AdamW"},
                        "zero_optimization": )") +
            zero + "}",
        {});
  };
  CHECK(
      super_offload_auto_unused(
          with(R"({"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "."}})"), true)
          .starts_with("the optimizer state is on NVMe"));
  CHECK(super_offload_auto_unused(with(R"({"stage": 2})"), true) ==
        "the optimizer is not offloaded");
  CHECK(super_offload_auto_unused(
            with(R"({"stage": 2, "offload_optimizer": {"device": "cpu", "super_offload": false}})"),
            true) == "the config sets super_offload");

  // On the CPU device init decides it off, and zero_config_value says so.
  OneParam run(R"({"train_batch_size": 1, "optimizer": {"type": "AdamW"},
                   "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})",
               4, 5);
  REQUIRE(zero_init(run.engine) == ZERO_OK);
  char value[64] = {};
  unsigned long long needed = 0;
  REQUIRE(zero_config_value(run.engine, "zero_optimization.offload_optimizer.super_offload", value,
                            sizeof value, &needed) == ZERO_OK);
  CHECK(std::string(value) == "false");
}

TEST_CASE("sub_group_size left unset reads back as the step groups' size the engine took",
          "[engine]") {
  const auto value_of = [](const std::string& super_offload) {
    OneParam run(R"({"train_batch_size": 1, "optimizer": {"type": "AdamW"},
                     "zero_optimization": {"stage": 3, "reduce_bucket_size": 6,
                       "offload_optimizer": {"device": "cpu", "super_offload": )" +
                     super_offload + "}}}",
                 4, 5);
    REQUIRE(zero_init(run.engine) == ZERO_OK);
    char value[64] = {};
    unsigned long long needed = 0;
    REQUIRE(zero_config_value(run.engine, "zero_optimization.sub_group_size", value, sizeof value,
                              &needed) == ZERO_OK);
    return std::string(value);
  };
  CHECK(value_of("true") == "6");  // super_offload: a bucket's size
  CHECK(value_of("false") == "1000000000");
}

}  // namespace zero::engine

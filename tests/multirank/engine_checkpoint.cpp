// Checkpoints through the C API, across processes and world sizes. Two runs make one test:
//
//   zero_engine_checkpoint save DIR SET     (under zero-run -n N)
//     for each case of SET: trains 5 optimizer steps, saves DIR/<case>/step5 with user data,
//     trains 5 more and writes what it ends with to DIR/<case>/reference.bin; for the exact set
//     it also trains 10 steps without saving and requires the same bits (a save changes nothing).
//   zero_engine_checkpoint resume DIR SET   (a new process, under zero-run -n M)
//     for each case: a fresh engine (at the case's resume stage) loads DIR/<case> (latest),
//     checks the user data and the step counter, trains 5 more steps and compares with
//     reference.bin: bit for bit in the exact set (M = N, same stage), within fp32 rounding of
//     another reduction order in the reshard set (M != N, or another stage).
//   The hybrid sets do the same with hybrid sharding (mics_shard_size 2) and hpZ
//   (zero_hpz_partition_size 2): hybrid-exact keeps the layout (bit for bit at M = N), hybrid
//   also goes from hybrid to flat and back.
//
// Each optimizer step takes a global batch of `batch` micro-batches (batch / world accumulation
// steps per rank), the same at any world size, so runs at N and M ranks see the same data.
// The model is in c_api_model.h. Exits non-zero when a case fails, naming it.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <mpi.h>

#include "tests/multirank/c_api_model.h"

namespace {

using namespace zero_test;

constexpr int kSaveAt = 5;
constexpr int kSteps = 10;
int g_failures = 0;

struct CheckpointCase {
  const char* id;
  Case c;
  int batch;              // micro-batches per optimizer step, over all ranks
  int resume_stage;       // the stage the resumed run uses
  int resume_shard = -1;  // the resumed run's mics_shard_size (0: flat; -1: the saving run's)
};

std::vector<CheckpointCase> cases(const std::string& set) {
  std::vector<CheckpointCase> out;
  if (set == "exact") {
    out = {
        {"s0-fp32", {0, "fp32", 0, 0.05, false}, 12, 0},
        {"s1-fp32", {1, "fp32", 0, 0.05, true}, 12, 1},
        {"s2-fp32", {2, "fp32", 0, 0.05, true}, 12, 2},
        {"s3-fp32", {3, "fp32", 0, 0.05, true}, 12, 3},
        // Without accumulation: one micro-batch per rank and step.
        {"s1-fp32-noacc", {1, "fp32", 0, 0.0, false}, 0, 1},
        {"s3-fp32-noacc", {3, "fp32", 0, 0.0, false}, 0, 3},
        {"s0-bf16", {0, "bf16", 0, 0.05, false}, 12, 0},
        {"s2-bf16", {2, "bf16", 0, 0.05, true}, 12, 2},
        {"s3-bf16", {3, "bf16", 0, 0.05, true}, 12, 3},
        {"s1-bf16-states", {1, "bf16-states", 0, 0.0, false}, 12, 1},
        {"s2-fp16", {2, "fp16", 0, 0.05, true}, 12, 2},
        {"s1-fp32-cpu", {1, "fp32", 0, 0.05, true, "cpu"}, 12, 1},
        {"s2-fp32-nvme", {2, "fp32", 0, 0.05, true, "nvme"}, 12, 2},
        {"s3-bf16-nvme", {3, "bf16", 0, 0.05, true, "nvme"}, 12, 3},
        {"s3-fp32-param-cpu", {3, "fp32", 0, 0.05, true, "cpu", "cpu"}, 12, 3},
        {"s3-fp32-param-nvme", {3, "fp32", 0, 0.05, true, "nvme", "nvme"}, 12, 3},
    };
  } else if (set == "hybrid" || set == "hybrid-exact") {
    // Hybrid sharding (groups of 2 at 4 and 6 ranks): saved by the first shard group, loaded
    // by every group, and across layouts (flat to hybrid and back, another stage).
    const auto hybrid = [](Case c) {
      c.shard_size = 2;
      return c;
    };
    out = {
        {"h-s3-fp32", hybrid({3, "fp32", 0, 0.05, true}), 12, 3},
        {"h-s2-bf16", hybrid({2, "bf16", 0, 0.05, true}), 12, 2},
        {"h-s1-fp32-cpu", hybrid({1, "fp32", 0, 0.05, true, "cpu"}), 12, 1},
        {"h-s3-fp32-param-nvme", hybrid({3, "fp32", 0, 0.05, true, "nvme", "nvme"}), 12, 3},
    };
    // hpZ (groups of 2): its secondary copies are dropped at the load.
    Case hpz{3, "fp32", 0, 0.05, true};
    hpz.hpz = 2;
    out.push_back({"hpz-s3-fp32", hpz, 12, 3});
    if (set == "hybrid") {
      out.push_back({"h-s3-to-flat", hybrid({3, "fp32", 0, 0.05, true}), 12, 3, 0});
      out.push_back({"flat-s3-to-h", {3, "fp32", 0, 0.05, true}, 12, 3, 2});
      out.push_back({"h-s1-to-h-s3", hybrid({1, "fp32", 0, 0.05, true, "cpu"}), 12, 3});
    }
  } else if (set == "reshard") {
    out = {
        {"s1-fp32", {1, "fp32", 0, 0.05, true}, 12, 1},
        {"s3-fp32", {3, "fp32", 0, 0.05, true}, 12, 3},
        {"s3-fp32-nvme", {3, "fp32", 0, 0.05, true, "nvme", "nvme"}, 12, 3},
        // Saved at one stage, loaded at another.
        {"s1-to-s3", {1, "fp32", 0, 0.05, true}, 12, 3},
        {"s3-to-s0", {3, "fp32", 0, 0.05, true}, 12, 0},
        {"s2-nvme-to-s2", {2, "fp32", 0, 0.05, true, "nvme"}, 12, 2},
    };
  }
  return out;
}

int per_rank(const CheckpointCase& k) {
  return k.batch == 0 ? 1 : k.batch / g_world;
}
int global_batch(const CheckpointCase& k) {
  return k.batch == 0 ? g_world : k.batch;
}

// Optimizer steps [from, to): micro-batch s of rank r in step t is t * batch + s * world + r.
void train(zero_engine* engine, const CheckpointCase& k, int from, int to, zero_step_stats* last) {
  zero_dtype dtype = ZERO_FP32;
  CHECK_OK(zero_compute_dtype(engine, &dtype));
  for (int step = from; step < to; ++step) {
    for (int s = 0; s < per_rank(k); ++s) {
      const long long batch = static_cast<long long>(step) * global_batch(k) + s * g_world + g_rank;
      micro_batch(engine, step, batch, dtype);
      CHECK_OK(zero_step(engine, last));
    }
  }
}

std::vector<float> read_all(zero_engine* engine) {
  std::vector<float> all;
  for (std::size_t p = 0; p < kParams.size(); ++p) {
    std::vector<float> values(numel(kParams[p]));
    CHECK_OK(zero_read_param(engine, static_cast<int>(p), values.data(), values.size()));
    all.insert(all.end(), values.begin(), values.end());
  }
  return all;
}

void write_floats(const std::string& path, const std::vector<float>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
}

// The values written by write_floats; empty when the file is missing or short.
std::vector<float> read_floats(const std::string& path, std::size_t count) {
  std::vector<float> values(count);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(count * 4));
  if (!in) values.clear();
  return values;
}

std::string user_data_for(const CheckpointCase& k) {
  return std::string("next step 5 of case ") + k.id;
}

zero_engine* engine_for(const CheckpointCase& k, int stage, int shard_size = -1) {
  Case c = k.c;
  c.stage = stage;
  if (shard_size >= 0) c.shard_size = shard_size;
  if (stage == 0) c.offload = "none";
  if (stage != 3) c.param_offload = "none";
  MPI_Comm world = MPI_COMM_WORLD;
  std::vector<int> ids;
  return build(c, &world, per_rank(k), &ids);
}

bool agree(bool ok) {
  int all = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all != 0;
}

void report(const CheckpointCase& k, const char* what, bool ok, const std::string& detail) {
  ok = agree(ok);
  if (g_rank == 0) {
    std::printf("%s %s %s at %d rank(s)%s%s\n", ok ? "ok  " : "FAIL", what, k.id, g_world,
                detail.empty() ? "" : ": ", detail.c_str());
  }
  if (!ok) ++g_failures;
}

void save_case(const std::string& dir, const CheckpointCase& k, bool exact) {
  const std::string root = dir + "/" + k.id;
  zero_engine* engine = engine_for(k, k.c.stage);
  zero_step_stats stats{};
  train(engine, k, 0, kSaveAt, &stats);
  const std::string user = user_data_for(k);
  CHECK_OK(zero_save_checkpoint(engine, root.c_str(), "step5", user.data(), user.size()));
  const std::vector<float> at_save = read_all(engine);
  train(engine, k, kSaveAt, kSteps, &stats);
  const std::vector<float> continued = read_all(engine);
  CHECK_OK(zero_destroy(engine));
  if (g_rank == 0) {
    write_floats(root + "/at_save.bin", at_save);
    write_floats(root + "/reference.bin", continued);
  }
  if (!exact) return;
  // The same 10 steps without a save in the middle: saving must not change the state.
  zero_engine* straight = engine_for(k, k.c.stage);
  train(straight, k, 0, kSteps, &stats);
  const std::vector<float> want = read_all(straight);
  CHECK_OK(zero_destroy(straight));
  const bool same = std::memcmp(want.data(), continued.data(), want.size() * sizeof(float)) == 0;
  report(k, "saving changes nothing:", same,
         same ? "" : "10 steps with a save differ from 10 without");
}

void resume_case(const std::string& dir, const CheckpointCase& k, bool exact) {
  const std::string root = dir + "/" + k.id;
  zero_engine* engine = engine_for(k, k.resume_stage, k.resume_shard);
  CHECK_OK(zero_load_checkpoint(engine, root.c_str(), nullptr, 0));
  std::string detail;
  bool ok = true;
  unsigned long long bytes = 0;
  CHECK_OK(zero_checkpoint_user_data(engine, nullptr, 0, &bytes));
  std::string user(bytes, '\0');
  CHECK_OK(zero_checkpoint_user_data(engine, user.data(), user.size(), nullptr));
  if (user != user_data_for(k)) {
    ok = false;
    detail = "user data \"" + user + "\"";
  }
  // Right after the load: the values at the save, exactly (fp32 masters), at any world size.
  const std::vector<float> loaded = read_all(engine);
  if (read_floats(root + "/at_save.bin", loaded.size()) != loaded) {
    ok = false;
    detail += " the values after loading differ from those at the save";
  }
  zero_step_stats stats{};
  train(engine, k, kSaveAt, kSteps, &stats);
  if (stats.global_steps != kSteps || !stats.stepped) {
    ok = false;
    detail += " global_steps " + std::to_string(stats.global_steps) + " after resuming";
  }
  const std::vector<float> got = read_all(engine);
  CHECK_OK(zero_destroy(engine));

  std::vector<float> want = read_floats(root + "/reference.bin", got.size());
  if (want.empty()) {
    ok = false;
    detail += " reference.bin is missing or short";
    want.assign(got.size(), 0.0f);
  }
  double worst = 0;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, diff);
    const bool bad = exact ? std::memcmp(&got[i], &want[i], 4) != 0
                           : !(diff <= 2e-5 + 1e-4 * std::fabs(want[i]));
    differ += bad ? 1 : 0;
  }
  if (differ > 0) {
    ok = false;
    char text[160];
    std::snprintf(text, sizeof text,
                  " %zu of %zu values differ from continuing without a restart "
                  "(largest difference %.3g)",
                  differ, got.size(), worst);
    detail += text;
  }
  char what[96];
  std::snprintf(what, sizeof what, "resume at stage %d%s:", k.resume_stage,
                exact ? ", bit for bit" : ", within fp32 rounding");
  report(k, what, ok, detail);
}

// A safetensors file written here byte by byte (the format: an 8-byte little-endian header
// length, the JSON header, the data), as another program would write it: every parameter of
// the model under "model." + its name, except "head.weight" under "lm_head.weight";
// embed.weight [7, 5] stored transposed as [5, 7]; block.bias as F16; and a buffer no
// parameter takes. Values: value(p, i) for element i of parameter p (in the parameter's layout).
float import_value(std::size_t p, std::size_t i) {
  return 0.125f * static_cast<float>(p + 1) - 0.0625f * static_cast<float>(i % 13);
}

void write_foreign_file(const std::string& path) {
  std::string header = "{";
  std::string data;
  auto add = [&](const std::string& name, const char* dtype, const std::string& shape,
                 const std::string& bytes) {
    char entry[256];
    std::snprintf(entry, sizeof entry,
                  "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                  header.size() > 1 ? "," : "", name.c_str(), dtype, shape.c_str(), data.size(),
                  data.size() + bytes.size());
    header += entry;
    data += bytes;
  };
  for (std::size_t p = 0; p < kParams.size(); ++p) {
    const Param& param = kParams[p];
    const std::string name = std::string(param.name) == "head.weight"
                                 ? "lm_head.weight"
                                 : std::string("model.") + param.name;
    std::string bytes;
    const bool transposed = std::string(param.name) == "embed.weight";
    const bool half = std::string(param.name) == "block.bias";
    std::vector<long long> dims = param.shape;
    if (transposed) std::swap(dims[0], dims[1]);
    std::string shape = "[";
    for (std::size_t d = 0; d < dims.size(); ++d) shape += (d ? "," : "") + std::to_string(dims[d]);
    shape += "]";
    const std::size_t n = numel(param);
    for (std::size_t k = 0; k < n; ++k) {
      // The k-th stored element: for the transposed [cols, rows] tensor, (j, i) = (k / rows,
      // k % rows) is the parameter's element i * cols + j.
      std::size_t i = k;
      if (transposed) {
        const auto rows = static_cast<std::size_t>(param.shape[0]);
        const auto cols = static_cast<std::size_t>(param.shape[1]);
        i = (k % rows) * cols + k / rows;
      }
      const float v = import_value(p, i);
      if (half) {
        const std::uint16_t h = zero::float_to_fp16(v);
        bytes.append(reinterpret_cast<const char*>(&h), 2);
      } else {
        bytes.append(reinterpret_cast<const char*>(&v), 4);
      }
    }
    add(name, half ? "F16" : "F32", shape, bytes);
  }
  add("attn.masked_bias", "F32", "[1]", std::string(4, '\0'));
  header += "}";
  while ((8 + header.size()) % 8 != 0) header += ' ';
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t length = header.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << header << data;
}

// zero_load_pretrained of FILE (an export of a checkpoint) must give exactly EXPECTED (floats
// in registration order); then the foreign file above, with names mapped, one tensor
// transposed, one F16 and one ignored.
int import_check(const std::string& file, const std::string& expected_path) {
  int failures = 0;
  for (int stage : {1, 3}) {
    CheckpointCase k{"import", {stage, "fp32", 0, 0.0, false}, 0, stage};
    zero_engine* engine = engine_for(k, stage);
    CHECK_OK(zero_load_pretrained(engine, file.c_str(), nullptr));
    const std::vector<float> got = read_all(engine);
    const bool same = read_floats(expected_path, got.size()) == got;
    if (g_rank == 0)
      std::printf("%s import of the export at stage %d, %d rank(s)\n", same ? "ok  " : "FAIL",
                  stage, g_world);
    failures += same ? 0 : 1;

    const std::string foreign = file + ".foreign.safetensors";
    if (g_rank == 0) write_foreign_file(foreign);
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<std::string> names_text;
    for (const Param& p : kParams) {
      if (std::string(p.name) == "head.weight") continue;
      names_text.push_back(p.name);
      names_text.push_back(std::string("model.") + p.name);
    }
    names_text.push_back("head.weight");
    names_text.push_back("lm_head.weight");
    std::vector<const char*> names;
    for (const std::string& n : names_text) names.push_back(n.c_str());
    const char* transposed[] = {"embed.weight"};
    const char* ignore[] = {"attn.masked_bias"};
    zero_pretrained_options options{};
    options.names = names.data();
    options.name_pairs = static_cast<int>(names.size() / 2);
    options.transposed = transposed;
    options.transposed_count = 1;
    options.ignore = ignore;
    options.ignore_count = 1;
    CHECK_OK(zero_load_pretrained(engine, foreign.c_str(), &options));
    const std::vector<float> loaded = read_all(engine);
    std::size_t at = 0, wrong = 0;
    for (std::size_t p = 0; p < kParams.size(); ++p) {
      for (std::size_t i = 0; i < numel(kParams[p]); ++i, ++at) {
        float want = import_value(p, i);
        if (std::string(kParams[p].name) == "block.bias")
          want = zero::fp16_to_float(zero::float_to_fp16(want));
        wrong += loaded[at] != want ? 1 : 0;
      }
    }
    if (g_rank == 0) {
      std::printf(
          "%s import of a foreign file (renamed, transposed, F16, ignored buffer) at stage %d, %d "
          "rank(s)%s\n",
          wrong == 0 ? "ok  " : "FAIL", stage, g_world, wrong == 0 ? "" : ": values differ");
    }
    failures += wrong == 0 ? 0 : 1;
    CHECK_OK(zero_destroy(engine));
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string dir = argc > 2 ? argv[2] : "";
  if (mode == "import" && argc == 4) {
    const int failures = import_check(dir, argv[3]);
    MPI_Finalize();
    return failures == 0 ? 0 : 1;
  }
  const std::string set = argc > 3 ? argv[3] : "";
  const std::vector<CheckpointCase> all = cases(set);
  if ((mode != "save" && mode != "resume") || dir.empty() || all.empty()) {
    if (g_rank == 0) {
      std::fprintf(stderr,
                   "usage: %s save|resume DIR exact|reshard|hybrid|hybrid-exact | import FILE "
                   "EXPECTED\n",
                   argv[0]);
    }
    MPI_Finalize();
    return 2;
  }
  for (const CheckpointCase& k : all) {
    if (k.batch != 0 && k.batch % g_world != 0) continue;  // 12 splits over 1, 2, 3, 4 ranks
    if (mode == "save") {
      save_case(dir, k, set == "exact" || set == "hybrid-exact");
    } else {
      resume_case(dir, k, set == "exact" || set == "hybrid-exact");
    }
  }
  if (g_rank == 0) std::printf("%d case(s) failed\n", g_failures);
  MPI_Finalize();
  return g_failures == 0 ? 0 : 1;
}

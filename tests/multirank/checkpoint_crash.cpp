// A checkpoint save killed part way, for real: the process ends (_exit) at a point of the save,
// and a new job then finds the previous checkpoint as `latest`, intact and loadable.
//
//   zero_checkpoint_crash crash DIR POINT RANK   saves tag "good", trains on, and dies on rank
//                                                RANK at POINT of saving tag "bad"
//   zero_checkpoint_crash check DIR TAG          latest is TAG, it loads, the values are those
//                                                at its save, and a new save clears what the
//                                                crash left
// Points (engine/fault_hooks.h, FaultHooks::save): rank_file_written (some ranks' files
// are written, not all), manifest_written (meta.json written, the tag not in place yet),
// tag_in_place (the tag complete, `latest` not moved yet): latest stays "good". pruning
// (checkpoint.keep_last 1: "bad" complete and latest, "good" taken out of the checkpoint
// namespace but its files not all removed): latest is "bad", and no tag "good" is left to load.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <mpi.h>
#include <unistd.h>

#include "engine_model.h"

namespace {

using namespace zero;
using namespace zero::testing;

const char* kConfig = R"({"train_micro_batch_size_per_gpu": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
    "checkpoint": {"keep_last": 1},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": 1000,
                          "stage3_param_persistence_threshold": 20}})";

void write_values(const std::string& path, const std::vector<float>& values) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(values.data()),
             static_cast<std::streamsize>(values.size() * 4));
}

bool exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

std::vector<float> all_values(engine::Engine& e) {
  std::vector<float> out;
  for (std::size_t p = 0; p < e.registry().param_count(); ++p) {
    const std::vector<float> v = e.read_param(p);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

int crash(const std::string& dir, const std::string& point, int victim) {
  engine::FaultHooks hooks;
  bool armed = false;
  hooks.save = [&](const std::string& where) {
    if (armed && where == point) {
      std::fprintf(stderr, "checkpoint_crash: rank %d ends at %s\n", victim, point.c_str());
      ::_exit(3);  // no unwinding, no cleanup: as a killed process
    }
  };
  auto e = make_engine(kConfig, {},
                       [&](engine::Engine& engine) { engine::set_fault_hooks(engine, hooks); });
  for (int step = 0; step < 2; ++step) micro_step(*e, kModuleOrder, step);
  e->save_checkpoint(dir, {"good", ""});
  const std::vector<float> good = all_values(*e);
  if (e->rank() == 0) write_values(dir + "/good.bin", good);
  micro_step(*e, kModuleOrder, 2);
  const std::vector<float> bad = all_values(*e);
  if (e->rank() == 0) write_values(dir + "/bad.bin", bad);
  armed = e->rank() == victim;
  e->save_checkpoint(dir, {"bad", ""});
  std::fprintf(stderr, "checkpoint_crash: the save of \"bad\" finished: no crash at %s\n",
               point.c_str());
  return 1;
}

int check(const std::string& dir, const std::string& expected) {
  auto e = make_engine(kConfig);
  std::ifstream latest(dir + "/latest");
  std::string tag;
  std::getline(latest, tag);
  int failures = 0;
  if (tag != expected) {
    std::fprintf(stderr, "FAIL: latest names \"%s\", not \"%s\"\n", tag.c_str(), expected.c_str());
    ++failures;
  }
  if (expected == "bad" && exists(dir + "/good")) {
    std::fprintf(stderr, "FAIL: the pruned tag \"good\" is still a tag directory\n");
    ++failures;
  }
  const engine::LoadResult result = e->load_checkpoint(dir);
  const std::vector<float> loaded = all_values(*e);
  std::vector<float> saved(loaded.size());
  std::ifstream in(dir + "/" + expected + ".bin", std::ios::binary);
  in.read(reinterpret_cast<char*>(saved.data()), static_cast<std::streamsize>(saved.size() * 4));
  if (result.tag != expected || !in || saved != loaded) {
    std::fprintf(stderr, "FAIL: the checkpoint loaded (%s) is not %s's state\n", result.tag.c_str(),
                 expected.c_str());
    ++failures;
  }
  micro_step(*e, kModuleOrder, 2);  // and trains on
  // The next save clears what the crash left: staging and doomed directories, latest.tmp.
  e->save_checkpoint(dir, {"next", ""});
  for (const char* left : {"/.bad.saving", "/.good.deleting", "/latest.tmp"}) {
    if (exists(dir + left)) {
      std::fprintf(stderr, "FAIL: %s%s is still there after the next save\n", dir.c_str(), left);
      ++failures;
    }
  }
  if (e->rank() == 0) {
    std::printf("%s: latest was \"%s\" and loads\n", failures ? "FAIL" : "ok", expected.c_str());
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  int status = 2;
  try {
    if (mode == "crash" && argc == 5) status = crash(argv[2], argv[3], std::atoi(argv[4]));
    if (mode == "check" && argc == 4) status = check(argv[2], argv[3]);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "checkpoint_crash: %s\n", error.what());
    status = 1;
  }
  if (status == 2)
    std::fprintf(stderr, "usage: %s crash DIR POINT RANK | check DIR TAG\n", argv[0]);
  MPI_Finalize();
  return status;
}

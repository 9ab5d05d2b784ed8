// A checkpoint save killed part way, for real: the process ends (_exit) at a point of the save,
// and a new job then finds the previous checkpoint as `latest`, intact and loadable.
//
//   zero_checkpoint_crash crash DIR POINT RANK   saves tag "good", trains on, and dies on rank
//                                                RANK at POINT of saving tag "bad"
//   zero_checkpoint_crash check DIR              latest is "good", it loads, and the values
//                                                are those at its save
// Points (engine/engine.h, EngineOptions::save_inject): rank_file_written (some ranks' files
// are written, not all), manifest_written (meta.json written, the tag not in place yet),
// tag_in_place (the tag complete, `latest` not moved yet).
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine_model.h"

namespace {

using namespace zero;
using namespace zero::testing;

const std::vector<std::size_t> kOrder{0, 1, 2, 3, 4, 5};

const char* kConfig = R"({"train_micro_batch_size_per_gpu": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": 1000,
                          "stage3_param_persistence_threshold": 20}})";

std::vector<float> all_values(engine::Engine& e) {
  std::vector<float> out;
  for (std::size_t p = 0; p < e.registry().param_count(); ++p) {
    const std::vector<float> v = e.read_param(p);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

int crash(const std::string& dir, const std::string& point, int victim) {
  engine::EngineOptions options;
  bool armed = false;
  options.save_inject = [&](const std::string& where) {
    if (armed && where == point) {
      std::fprintf(stderr, "checkpoint_crash: rank %d ends at %s\n", victim, point.c_str());
      ::_exit(3);  // no unwinding, no cleanup: as a killed process
    }
  };
  auto e = make_engine(kConfig, options);
  for (int step = 0; step < 2; ++step) micro_step(*e, kOrder, step);
  e->save_checkpoint(dir, {"good", ""});
  const std::vector<float> good = all_values(*e);
  if (e->rank() == 0) {
    std::ofstream(dir + "/good.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(good.data()),
               static_cast<std::streamsize>(good.size() * 4));
  }
  micro_step(*e, kOrder, 2);
  armed = e->rank() == victim;
  e->save_checkpoint(dir, {"bad", ""});
  std::fprintf(stderr, "checkpoint_crash: the save of \"bad\" finished: no crash at %s\n",
               point.c_str());
  return 1;
}

int check(const std::string& dir) {
  auto e = make_engine(kConfig);
  std::ifstream latest(dir + "/latest");
  std::string tag;
  std::getline(latest, tag);
  int failures = 0;
  if (tag != "good") {
    std::fprintf(stderr, "FAIL: latest names \"%s\", not \"good\"\n", tag.c_str());
    ++failures;
  }
  const engine::LoadResult result = e->load_checkpoint(dir);
  const std::vector<float> loaded = all_values(*e);
  std::vector<float> good(loaded.size());
  std::ifstream in(dir + "/good.bin", std::ios::binary);
  in.read(reinterpret_cast<char*>(good.data()), static_cast<std::streamsize>(good.size() * 4));
  if (result.tag != "good" || !in || good != loaded) {
    std::fprintf(stderr, "FAIL: the checkpoint loaded (%s) is not the good one's state\n",
                 result.tag.c_str());
    ++failures;
  }
  micro_step(*e, kOrder, 2);  // and trains on
  if (e->rank() == 0) std::printf("%s: latest is \"good\" and loads\n", failures ? "FAIL" : "ok");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  int status = 2;
  try {
    if (mode == "crash" && argc == 5) status = crash(argv[2], argv[3], std::atoi(argv[4]));
    if (mode == "check" && argc == 3) status = check(argv[2]);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "checkpoint_crash: %s\n", error.what());
    status = 1;
  }
  if (status == 2) std::fprintf(stderr, "usage: %s crash DIR POINT RANK | check DIR\n", argv[0]);
  MPI_Finalize();
  return status;
}

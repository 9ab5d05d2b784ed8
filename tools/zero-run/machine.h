// What zero-run needs to know about this machine: the CPUs it may run on, the physical cores
// behind them, where a program is on PATH, and where zero-run itself is.
#pragma once

#include <optional>
#include <string>

namespace zero::run {

struct Cpus {
  int logical = 1;   // CPUs in this process's affinity mask (what nproc prints)
  int physical = 1;  // distinct cores behind them: what Open MPI counts as slots and binds to
};

// Reads sched_getaffinity and /sys/devices/system/cpu/cpuN/topology; when the topology cannot
// be read, every CPU counts as a core.
Cpus available_cpus();

// `name` itself when it contains a '/', else the first executable PATH entry named `name`;
// nothing when there is no such executable file.
std::optional<std::string> find_program(const std::string& name);

// This program's own path (/proc/self/exe), for mpirun to start it on every node; "zero-run"
// (looked up on PATH there) when it cannot be read.
std::string own_path();

// The as-deepspeed folder for the zero-run at `own`: `as-deepspeed` beside it (the build
// tree's copy of python/as-deepspeed). Throws a usage zero::Error naming where it looked.
std::string deepspeed_shim(const std::string& own);

// A TCP port free on this machine now (the kernel's choice for port 0), for the ranks'
// torch.distributed rendezvous; 29500, DeepSpeed's default, when none can be had.
int free_port();

}  // namespace zero::run

// The launch plan: from the user's request and this machine's facts, the exact program,
// arguments and environment zero-run starts. Pure (no system calls), so --dry-run prints
// exactly what a real run would start.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/zero-run/hostfile.h"
#include "tools/zero-run/machine.h"

namespace zero::run {

using Environment = std::vector<std::pair<std::string, std::string>>;

struct Request {
  int ranks = 1;
  std::optional<Hostfile> hostfile;
  bool bind_cores = false;
  std::vector<std::string> mpi_args;  // passed to mpirun as given, after zero-run's own
  std::vector<std::string> command;   // the program each rank runs, and its arguments
  double start_timeout = 300;         // seconds the ranks may take to start (ZERO_START_TIMEOUT)
  std::string start_dir;  // where ranks mark their arrival (ZERO_START_DIR); empty: none
  // Each rank runs under `SUPERVISOR --supervise --` reporting to REPORT (ZERO_RUN_REPORT,
  // rank_reports.h); empty: the command alone.
  std::string supervisor;
  std::string report_address;
  // torch.distributed's rendezvous for the ranks' own use (zero.init_distributed, a
  // DeepSpeed script): MASTER_ADDR and MASTER_PORT for every rank; empty: not set (the user's
  // own are kept). --dry-run shows the port as PORT.
  std::string master_addr;
  std::string master_port;
  // --as-deepspeed: the folder whose `deepspeed` package maps DeepSpeed's modules onto zero's
  // (python/as-deepspeed, copied beside zero-run), put first on every rank's PYTHONPATH before
  // `python_path` (the user's own, kept); empty: not asked. Every rank gets RANK, LOCAL_RANK and
  // WORLD_SIZE as DeepSpeed's launcher sets them (set by the rank's supervisor, which an
  // mpirun job then has), and, with `local_rank_arg`, --local_rank=N after the command's
  // arguments as that launcher passes it.
  std::string deepspeed_shim;
  std::string python_path;
  bool local_rank_arg = true;
};

struct Machine {
  Cpus cpus;
  bool root = false;                  // geteuid() == 0: Open MPI refuses unless told it may
  bool user_omp_num_threads = false;  // OMP_NUM_THREADS is set (non-empty): keep the user's
  bool stdout_tty = false;            // zero-run's stdout is a terminal (ranks' is a pty anyway)
};

struct Plan {
  bool direct = false;            // runs the command itself, without mpirun
  std::vector<std::string> argv;  // argv[0] is the program
  Environment environment;        // set in argv[0]'s environment (replacing existing values)
  int ranks_per_node = 1;
  int cores_per_rank = 1;  // physical cores per rank: the PE=k of --bind-cores
  int omp_threads = 0;     // the OMP_NUM_THREADS default set; 0 when the user's is kept
  bool oversubscribed = false;
};

// One rank on this machine and nothing for mpirun to do: run the command without mpirun.
bool runs_directly(const Request& request);

// The plan; `mpirun` is the program to start unless the plan is direct. Throws a usage
// zero::Error when --bind-cores is asked for an oversubscribed run.
Plan make_plan(const Request& request, const Machine& machine, const std::string& mpirun);

// `word` as one shell word: unchanged when it holds only safe characters, else single-quoted.
std::string shell_quote(std::string_view word);

// The plan as a shell script (--dry-run): a comment with the facts it was derived from, one
// `export NAME=VALUE` line per environment addition, then the command on one line.
std::string describe(const Plan& plan, const Request& request, const Machine& machine);

}  // namespace zero::run

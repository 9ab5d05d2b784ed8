// zero-run: start N ranks of a command through Open MPI's mpirun with the settings zero wants
// (root, oversubscription, OMP_NUM_THREADS, binding), forwarding signals and exit status.
//
//   zero-run -n N [--hostfile FILE] [--bind-cores] [--start-timeout S] [--start-dir DIR]
//            [--mpi-arg ARG]... [--as-deepspeed [--no-local-rank]] [--dry-run] -- COMMAND...
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include "base/error.h"
#include "tools/cli_checks.h"
#include "tools/zero-run/child.h"
#include "tools/zero-run/host_probe.h"
#include "tools/zero-run/hostfile.h"
#include "tools/zero-run/machine.h"
#include "tools/zero-run/plan.h"
#include "tools/zero-run/rank_reports.h"
#include "tools/zero-run/start_dir.h"
#include "tools/zero-run/supervise.h"

namespace {

constexpr int kUsage = 2;
constexpr int kStartTimeout = 124;  // as the ranks' own start-up bound (comm/start_watch.h)
constexpr double kStartGrace = 10;  // seconds zero-run's bound waits past the ranks'

constexpr const char* kFooter = R"(
What zero-run does:
  mpirun      --mpirun PATH, else $ZERO_MPIRUN, else the first mpirun on PATH (Open MPI).
  CPUs, cores CPUs: those zero-run may use (sched_getaffinity, as nproc prints); cores: the
              physical cores behind them (what Open MPI counts as slots). Ranks per node:
              N; with --hostfile, ceil(N / hosts), or min(N, the largest slots=N) when the
              file gives slots. Hostfile nodes are assumed to be like this one.
  root        as root, sets OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
              in mpirun's environment.
  oversubscription
              without --hostfile and with N > cores, passes --oversubscribe.
  environment every rank gets ZERO_LAUNCHER=zero-run, ZERO_STDOUT_TTY=1 or 0 (whether
              zero-run's stdout is a terminal; ranks on this node) and OMP_NUM_THREADS=k with
              k = max(1, CPUs / ranks per node) (-x NAME=VALUE); an OMP_NUM_THREADS already
              set is kept and passed on instead (-x OMP_NUM_THREADS). For torch.distributed
              (zero.init_distributed, DeepSpeed scripts): MASTER_ADDR (127.0.0.1, or the
              hostfile's first host) and MASTER_PORT, a port free on this machine when
              zero-run starts (not DeepSpeed's fixed 29500, which two jobs on one machine
              would share), unless already set.
  binding     --bind-to none (for at most two ranks Open MPI would bind each to one core,
              where all its OpenMP threads would share it). --bind-cores: each rank gets
              k = max(1, cores / ranks per node) cores, --map-by slot:PE=k --bind-to core;
              refused (exit 2) when oversubscribed.
  one rank    -n 1 without --hostfile or --mpi-arg runs COMMAND itself, without mpirun,
              with the same environment, signal forwarding and exit status.
  signals     SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to zero-run go to
              mpirun (or COMMAND); zero-run waits for it. mpirun passes SIGUSR1 and SIGUSR2
              on to the ranks and ends the job on the others. A terminal's Ctrl-C reaches
              mpirun directly and is not sent twice; a signal zero-run inherits as ignored
              (nohup) stays ignored.
  as-deepspeed
              --as-deepspeed runs a script written for DeepSpeed as DeepSpeed's launcher
              would, on zero: every rank's PYTHONPATH starts with zero-run's as-deepspeed
              folder (beside it in the build tree), whose `deepspeed` package maps
              `import deepspeed` and its submodules onto zero's (zero must be importable:
              pip install ./python or PYTHONPATH=python); it says once, on rank 0, that it
              is zero and which installed DeepSpeed it leaves unused. Each rank gets RANK,
              LOCAL_RANK and WORLD_SIZE, and --local_rank=N after COMMAND's arguments
              (--no-local-rank: not). Nothing is installed; without the flag, `import
              deepspeed` is whatever the Python has. docs/from-deepspeed.md.
  supervision with --hostfile or --as-deepspeed, each rank runs as `zero-run --supervise
              -- COMMAND`. With --hostfile it reports to zero-run over TCP
              (ZERO_RUN_REPORT=HOST:PORT; HOST is this host's name, or ZERO_RUN_REPORT_HOST)
              when the rank starts, with its host and pid, and how it ended. zero-run prints each rank that fails on its own as it
              happens, as in: rank 3 on node2 (pid 4242) was killed by signal 9 (Killed).
              A supervisor that cannot reach zero-run says so and runs the rank unreported.
  start-up    ranks wait for each other in MPI_Init_thread, which has no timeout of its
              own. Every rank gets ZERO_START_TIMEOUT=T (--start-timeout, default 300 s) and,
              without --hostfile, ZERO_START_DIR (a fresh directory under $TMPDIR where each
              rank marks its arrival; removed at the end; with --hostfile give a directory
              every node sees with --start-dir). Ranks that have not all started within T end
              the job with exit status 124, naming the ranks that never arrived. zero-run
              keeps a bound of its own, T + 10 s: when its ranks' supervisors have not all
              reported by then (a node that never starts, whose ranks mpirun never launches),
              it names the ranks and the hostfile's hosts where none started, ends mpirun and
              exits 124.
  failure     when a rank exits non-zero or is killed, mpirun ends the other ranks.
  exit status with mpirun, what it returns: the first non-zero exit code of a rank (128+S
              for a rank killed by signal S), 1 when a signal to mpirun ended the job, 124
              when zero-run's start-up bound ended it.
              COMMAND run directly: its exit code, or 128+S when signal S killed it.
              2: usage error. 127: mpirun or COMMAND cannot be started.

Under Slurm zero-run is not needed: `srun -n N COMMAND` starts the ranks, and zero reads
SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID.

Examples:
  zero-run -n 2 -- ./train --config configs/demo.json
  zero-run -n 16 --hostfile hosts --bind-cores -- ./train
  zero-run -n 4 --mpi-arg=--report-bindings --dry-run -- ./train)";

// CLI11 would print "Usage: zero-run [OPTIONS]"; the command after "--" belongs in it too.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: zero-run -n N [OPTIONS] -- COMMAND [ARGS...]\n";
  }
};

// zero-run's own arguments are the ones before the first "--"; the command is all after it.
struct SplitArguments {
  std::vector<char*> options;  // with argv[0], for CLI11
  std::vector<std::string> command;
  bool has_separator = false;
};

SplitArguments split_arguments(int argc, char** argv) {
  SplitArguments split;
  int index = 0;
  for (; index < argc; ++index) {
    if (index > 0 && std::string_view(argv[index]) == "--") break;
    split.options.push_back(argv[index]);
  }
  split.has_separator = index < argc;
  for (++index; index < argc; ++index) split.command.emplace_back(argv[index]);
  return split;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "zero-run: start N ranks of COMMAND through Open MPI's mpirun, on this machine or on\n"
      "the hosts of a hostfile, with the settings zero wants; forwards signals and returns\n"
      "the first non-zero exit status.\n",
      "zero-run"};
  app.formatter(std::make_shared<Formatter>());
  app.footer(kFooter);
  zero::run::Request request;
  std::string hostfile, mpirun_option;
  bool dry_run = false;
  app.add_option("-n,--np", request.ranks, "number of ranks to start")
      ->required()
      ->check(zero::tools::between(1, 1 << 20))
      ->type_name("N");
  app.add_option("--hostfile", hostfile, "Open MPI hostfile (HOST [slots=N] lines), passed on")
      ->type_name("FILE");
  app.add_flag("--bind-cores", request.bind_cores,
               "bind each rank to k cores of its own (see binding)");
  app.add_option("--mpirun", mpirun_option, "the mpirun to run (else $ZERO_MPIRUN, else PATH)")
      ->type_name("PATH");
  app.add_option("--mpi-arg", request.mpi_args,
                 "one more word for mpirun, after zero-run's own words;\n"
                 "repeatable; --mpi-arg=-X for words starting with -")
      ->allow_extra_args(false)
      ->type_name("ARG");
  app.add_option("--start-timeout", request.start_timeout,
                 "seconds the ranks may take to all start (see start-up)")
      ->check(zero::tools::above(0))
      ->capture_default_str()
      ->type_name("SECONDS");
  std::string start_parent;
  app.add_option("--start-dir", start_parent,
                 "a directory every node sees, for the ranks' arrival marks\n"
                 "(default: $TMPDIR without --hostfile, none with it)")
      ->type_name("DIR");
  bool as_deepspeed = false, no_local_rank = false;
  app.add_flag("--as-deepspeed", as_deepspeed,
               "run a DeepSpeed script unchanged: `import deepspeed` is zero's\n"
               "(see as-deepspeed), with DeepSpeed's launcher's variables");
  app.add_flag("--no-local-rank", no_local_rank,
               "with --as-deepspeed: no --local_rank=N argument (DeepSpeed's\n"
               "launcher's --no_local_rank)");
  app.add_flag("--dry-run", dry_run,
               "print what would run as a shell script (environment\n"
               "additions, then the command line); run nothing");

  SplitArguments split = split_arguments(argc, argv);
  // How mpirun starts each rank (supervise.h); not for users.
  if (split.options.size() == 2 && std::string_view(split.options[1]) == "--supervise") {
    if (split.command.empty()) {
      std::cerr << "zero-run --supervise: no COMMAND after --\n";
      return kUsage;
    }
    return zero::run::supervise(split.command);
  }
  try {
    app.parse(static_cast<int>(split.options.size()), split.options.data());
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : kUsage;
  }
  request.command = std::move(split.command);
  if (request.command.empty()) {
    std::cerr << (split.has_separator ? "zero-run: no COMMAND after --\n"
                                      : "zero-run: no COMMAND: give it after --, as in "
                                        "zero-run -n 2 -- ./train\n");
    return kUsage;
  }

  if (no_local_rank && !as_deepspeed) {
    std::cerr << "zero-run: --no-local-rank goes with --as-deepspeed (only then is a "
                 "--local_rank argument added)\n";
    return kUsage;
  }

  try {
    if (as_deepspeed) {
      request.deepspeed_shim = zero::run::deepspeed_shim(zero::run::own_path());
      const char* python_path = std::getenv("PYTHONPATH");
      request.python_path = python_path != nullptr ? python_path : "";
      request.local_rank_arg = !no_local_rank;
    }
    if (!hostfile.empty()) request.hostfile = zero::run::read_hostfile(hostfile);
    const char* omp = std::getenv("OMP_NUM_THREADS");
    const zero::run::Machine machine{zero::run::available_cpus(), geteuid() == 0,
                                     omp != nullptr && *omp != '\0', isatty(STDOUT_FILENO) == 1};
    std::string mpirun;
    if (!zero::run::runs_directly(request)) {
      const char* from_env = std::getenv("ZERO_MPIRUN");
      const std::string wanted = !mpirun_option.empty()                     ? mpirun_option
                                 : from_env != nullptr && *from_env != '\0' ? from_env
                                                                            : "mpirun";
      const auto found = zero::run::find_program(wanted);
      if (!found) {
        std::cerr << fmt::format(
            "zero-run: cannot find mpirun ('{}' is not an executable file{}); install Open MPI "
            "(Debian: openmpi-bin) or name it with --mpirun PATH or ZERO_MPIRUN. Under Slurm, "
            "run srun -n N COMMAND instead.\n",
            wanted, wanted.find('/') == std::string::npos ? " on PATH" : "");
        return zero::run::kCannotRun;
      }
      mpirun = *found;
    }
    // The arrival directory: made for a real run, shown as its pattern by --dry-run.
    std::optional<zero::run::StartDir> start;
    if (!zero::run::runs_directly(request) && (!request.hostfile || !start_parent.empty())) {
      const std::string parent = !start_parent.empty() ? start_parent : zero::run::temp_dir();
      if (dry_run) {
        request.start_dir = parent + "/zero-run-start.XXXXXX";
      } else {
        start.emplace(parent);
        request.start_dir = start->path();
      }
    }
    // Supervised ranks report to zero-run, which names a failing rank and its host, and ranks
    // and hosts that never start (rank_reports.h).
    std::optional<zero::run::RankReports> reports;
    // With a hostfile: on one node Open MPI's own reports name a failed rank, and the ranks'
    // start-up bound names those that never arrive; across nodes neither reaches far enough.
    // --as-deepspeed: the supervisor sets each rank's RANK, LOCAL_RANK and WORLD_SIZE.
    if (!zero::run::runs_directly(request) && (request.hostfile || as_deepspeed)) {
      request.supervisor = zero::run::own_path();
    }
    if (!zero::run::runs_directly(request) && request.hostfile) {
      if (dry_run) {
        request.report_address = "HOST:PORT";
      } else {
        reports.emplace(request.ranks,
                        request.hostfile ? request.hostfile->names : std::vector<std::string>{},
                        hostfile, zero::run::remote_agent(request.mpi_args));
        request.report_address = reports->address();
      }
    }
    // torch.distributed's rendezvous, unless the user set one.
    const char* addr = std::getenv("MASTER_ADDR");
    if (addr == nullptr || *addr == '\0') {
      request.master_addr = request.hostfile ? request.hostfile->names.front() : "127.0.0.1";
    }
    const char* port = std::getenv("MASTER_PORT");
    if (port == nullptr || *port == '\0') {
      request.master_port = dry_run ? "PORT" : std::to_string(zero::run::free_port());
    }
    const zero::run::Plan plan = zero::run::make_plan(request, machine, mpirun);
    if (dry_run) {
      std::cout << zero::run::describe(plan, request, machine);
      return 0;
    }
    if (reports) {
      // The ranks' own bound (ZERO_START_TIMEOUT, counted from their start) names what they
      // see first; zero-run's, later, covers ranks mpirun never launched.
      reports->start(
          request.start_timeout, kStartGrace, [] { zero::run::signal_child(SIGTERM); },
          [] { zero::run::signal_child(SIGKILL); });
    }
    const int status = zero::run::run_child(plan.argv, plan.environment);
    if (reports) {
      reports->stop();
      if (reports->start_timed_out()) return kStartTimeout;
    }
    return status;
  } catch (const zero::Error& error) {
    std::cerr << "zero-run: " << error.what() << "\n";
    return error.category() == zero::ErrorCategory::usage ? kUsage : 1;
  }
}

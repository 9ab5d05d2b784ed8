// Derives mpirun's command line and environment from the request (see plan.h).
#include "tools/zero-run/plan.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "base/error.h"

namespace zero::run {

namespace {

// Ranks on the busiest node. Open MPI fills each host's slots in hostfile order, so with
// slots given the first host takes min(N, slots); without, we assume ranks spread evenly.
int ranks_per_node(const Request& request) {
  if (!request.hostfile) return request.ranks;
  const Hostfile& hostfile = *request.hostfile;
  if (hostfile.max_slots > 0) return std::min(request.ranks, hostfile.max_slots);
  return (request.ranks + hostfile.hosts - 1) / hostfile.hosts;
}

// Under mpirun a rank's stdout is a pseudo-terminal even when zero-run's output goes to a file;
// ZERO_STDOUT_TTY says what it really is (zero-train draws its progress bar by it). mpirun's
// own environment reaches the ranks on this node.
void add_stdout_tty(Plan& plan, const Machine& machine) {
  plan.environment.emplace_back("ZERO_STDOUT_TTY", machine.stdout_tty ? "1" : "0");
}

// --as-deepspeed's environment: the shim first on PYTHONPATH, and the supervisor's switches.
void add_as_deepspeed(Environment& environment, const Request& request) {
  if (request.deepspeed_shim.empty()) return;
  environment.emplace_back("PYTHONPATH", request.python_path.empty()
                                             ? request.deepspeed_shim
                                             : request.deepspeed_shim + ":" + request.python_path);
  environment.emplace_back("ZERO_AS_DEEPSPEED", request.local_rank_arg ? "1" : "no-local-rank");
}

}  // namespace

bool runs_directly(const Request& request) {
  return request.ranks == 1 && !request.hostfile && request.mpi_args.empty();
}

Plan make_plan(const Request& request, const Machine& machine, const std::string& mpirun) {
  Plan plan;
  plan.direct = runs_directly(request);
  plan.ranks_per_node = ranks_per_node(request);
  // Nodes named in a hostfile are assumed to be like this one.
  plan.cores_per_rank = std::max(1, machine.cpus.physical / plan.ranks_per_node);
  if (!machine.user_omp_num_threads) {
    plan.omp_threads = std::max(1, machine.cpus.logical / plan.ranks_per_node);
  }
  // Open MPI's slots here are physical cores; past them it refuses to start unless told to
  // oversubscribe. With a hostfile its slots decide (--mpi-arg=--oversubscribe to override).
  plan.oversubscribed = !request.hostfile && request.ranks > machine.cpus.physical;

  const std::string omp_value = plan.omp_threads > 0 ? std::to_string(plan.omp_threads) : "";
  if (plan.direct) {
    plan.argv = request.command;
    if (!request.deepspeed_shim.empty()) {  // one rank: what a supervisor would set, here
      add_as_deepspeed(plan.environment, request);
      for (const char* name : {"RANK", "LOCAL_RANK"}) plan.environment.emplace_back(name, "0");
      plan.environment.emplace_back("WORLD_SIZE", "1");
      if (request.local_rank_arg) plan.argv.push_back("--local_rank=0");
    }
    if (plan.omp_threads > 0) plan.environment.emplace_back("OMP_NUM_THREADS", omp_value);
    plan.environment.emplace_back("ZERO_LAUNCHER", "zero-run");
    if (!request.master_addr.empty()) {
      plan.environment.emplace_back("MASTER_ADDR", request.master_addr);
    }
    if (!request.master_port.empty()) {
      plan.environment.emplace_back("MASTER_PORT", request.master_port);
    }
    add_stdout_tty(plan, machine);
    return plan;
  }

  if (request.bind_cores && plan.oversubscribed) {
    throw make_error(ErrorCategory::usage,
                     "--bind-cores: {} ranks do not fit on the {} cores here, so they cannot "
                     "each have a core; drop --bind-cores or run fewer ranks",
                     request.ranks, machine.cpus.physical);
  }
  auto& argv = plan.argv;
  argv = {mpirun, "-n", std::to_string(request.ranks)};
  if (request.hostfile) argv.insert(argv.end(), {"--hostfile", request.hostfile->path});
  if (plan.oversubscribed) argv.push_back("--oversubscribe");
  if (request.bind_cores) {
    argv.insert(argv.end(),
                {"--map-by", fmt::format("slot:PE={}", plan.cores_per_rank), "--bind-to", "core"});
  } else {
    // Open MPI binds each rank to one core when there are at most two ranks, which would put
    // all of a rank's OpenMP threads on that core.
    argv.insert(argv.end(), {"--bind-to", "none"});
  }
  // -x NAME=VALUE sets a variable for every rank; -x NAME forwards ours to remote nodes too.
  argv.insert(argv.end(), {"-x", plan.omp_threads > 0 ? "OMP_NUM_THREADS=" + omp_value
                                                      : std::string("OMP_NUM_THREADS")});
  argv.insert(argv.end(), {"-x", "ZERO_LAUNCHER=zero-run"});
  // A bounded start-up (comm/start_watch.h): ranks that have not all started in time end the
  // job, naming the missing ones from their arrival files.
  argv.insert(argv.end(), {"-x", fmt::format("ZERO_START_TIMEOUT={:g}", request.start_timeout)});
  if (!request.start_dir.empty()) {
    argv.insert(argv.end(), {"-x", "ZERO_START_DIR=" + request.start_dir});
  }
  // Supervised ranks report their start and end to zero-run (rank_reports.h).
  if (!request.supervisor.empty()) {
    argv.insert(argv.end(), {"-x", "ZERO_RUN_REPORT=" + request.report_address});
  }
  if (!request.master_addr.empty()) {
    argv.insert(argv.end(), {"-x", "MASTER_ADDR=" + request.master_addr});
  }
  if (!request.master_port.empty()) {
    argv.insert(argv.end(), {"-x", "MASTER_PORT=" + request.master_port});
  }
  Environment as_deepspeed;
  add_as_deepspeed(as_deepspeed, request);
  for (const auto& [name, value] : as_deepspeed)
    argv.insert(argv.end(), {"-x", name + "=" + value});
  argv.insert(argv.end(), request.mpi_args.begin(), request.mpi_args.end());
  argv.push_back("--");
  if (!request.supervisor.empty()) {
    argv.insert(argv.end(), {request.supervisor, "--supervise", "--"});
  }
  argv.insert(argv.end(), request.command.begin(), request.command.end());
  if (machine.root) {
    plan.environment = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
  }
  add_stdout_tty(plan, machine);
  return plan;
}

std::string shell_quote(std::string_view word) {
  const bool safe = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
  });
  if (safe) return std::string(word);
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string describe(const Plan& plan, const Request& request, const Machine& machine) {
  std::string text = fmt::format(
      "# zero-run: mode={} ranks={} ranks_per_node={} cpus={} cores={} cores_per_rank={} "
      "omp_num_threads={} oversubscribed={}\n",
      plan.direct ? "direct" : "mpirun", request.ranks, plan.ranks_per_node, machine.cpus.logical,
      machine.cpus.physical, plan.cores_per_rank,
      plan.omp_threads > 0 ? std::to_string(plan.omp_threads) : std::string("user"),
      plan.oversubscribed ? "yes" : "no");
  for (const auto& [name, value] : plan.environment) {
    text += fmt::format("export {}={}\n", name, shell_quote(value));
  }
  std::string line;
  for (const auto& word : plan.argv) line += (line.empty() ? "" : " ") + shell_quote(word);
  return text + line + "\n";
}

}  // namespace zero::run

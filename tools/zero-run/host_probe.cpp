// Asking hosts to run `true` through mpirun's remote start (see host_probe.h).
#include "tools/zero-run/host_probe.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

extern char** environ;

namespace zero::run {

std::string remote_agent(const std::vector<std::string>& mpi_args) {
  std::string agent;
  for (std::size_t i = 0; i + 2 < mpi_args.size(); ++i) {
    if ((mpi_args[i] == "--mca" || mpi_args[i] == "-mca") && mpi_args[i + 1] == "plm_rsh_agent") {
      agent = mpi_args[i + 2];
    }
  }
  if (agent.empty()) {
    if (const char* given = std::getenv("OMPI_MCA_plm_rsh_agent"); given != nullptr) agent = given;
  }
  if (const auto colon = agent.find(':'); colon != std::string::npos) agent.resize(colon);
  while (!agent.empty() && agent.back() == ' ') agent.pop_back();
  return agent.empty() ? std::string("ssh") : agent;
}

std::vector<std::string> unanswered_hosts(const std::string& agent,
                                          const std::vector<std::string>& hosts, double seconds) {
  std::vector<std::string> words;
  std::istringstream split(agent);
  for (std::string word; split >> word;) words.push_back(word);
  if (words.empty()) words.push_back("ssh");
  if (std::filesystem::path(words[0]).filename() == "ssh") {
    words.insert(words.end(), {"-o", "BatchMode=yes", "-o", "ConnectTimeout=5"});
  }
  std::vector<pid_t> pids(hosts.size(), 0);
  std::vector<bool> answered(hosts.size(), false);
  for (std::size_t h = 0; h < hosts.size(); ++h) {
    std::vector<std::string> argv = words;
    argv.insert(argv.end(), {hosts[h], "true"});
    std::vector<char*> pointers;
    for (auto& word : argv) pointers.push_back(word.data());
    pointers.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    if (posix_spawnp(&pids[h], pointers[0], &actions, nullptr, pointers.data(), environ) != 0) {
      pids[h] = 0;
    }
    posix_spawn_file_actions_destroy(&actions);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    bool running = false;
    for (std::size_t h = 0; h < hosts.size(); ++h) {
      if (pids[h] <= 0) continue;
      int status = 0;
      const pid_t done = waitpid(pids[h], &status, WNOHANG);
      if (done == 0) {
        running = true;
        continue;
      }
      answered[h] = done == pids[h] && WIFEXITED(status) && WEXITSTATUS(status) == 0;
      pids[h] = 0;
    }
    if (!running || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::vector<std::string> silent;
  for (std::size_t h = 0; h < hosts.size(); ++h) {
    if (pids[h] > 0) {
      kill(pids[h], SIGKILL);
      waitpid(pids[h], nullptr, 0);
    }
    if (!answered[h]) silent.push_back(hosts[h]);
  }
  return silent;
}

}  // namespace zero::run

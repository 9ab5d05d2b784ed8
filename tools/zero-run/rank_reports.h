// zero-run's view of its ranks while mpirun runs them. Each rank runs under a supervisor
// (`zero-run --supervise`, supervise.h) that connects back to this server over TCP and reports
// two lines: when the rank starts (its host and pid) and how it ended. So zero-run names a
// failing rank and its host itself, whatever mpirun prints, and knows which ranks, and which
// hosts, never started, and asks those hosts whether they answer at all (host_probe.h).
//
// The protocol, one line each, words separated by spaces:
//   start RANK HOST PID
//   exit RANK CODE SIGNAL ENDED   (SIGNAL: the signal that killed the rank, 0 when it exited;
//                                  ENDED: 1 when the launcher was ending it: a teardown, not
//                                  a failure of its own)
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace zero::run {

// "0-3, 5, 7-8": sorted ranks as ranges.
std::string rank_ranges(const std::vector<int>& ranks);

// One parsed report line; `valid` is false for a line that is neither.
struct ReportLine {
  bool valid = false;
  bool start = false;  // a start line, else an exit line
  int rank = -1;
  std::string host;  // start
  long pid = 0;      // start
  int code = 0;      // exit: the exit status as zero-run returns it (128 + S for signal S)
  int signal = 0;    // exit
  bool ended = false;
};
ReportLine parse_report(const std::string& line);

// What a rank's failure or start-up timeout says, from what the ranks reported (pure, so it is
// tested without sockets).
class RankBook {
 public:
  RankBook(int ranks, std::vector<std::string> hosts, std::string hostfile);

  // Records a line; returns the message to print for it ("" for none): a rank's own failure,
  // the first one saying that the job ends.
  std::string record(const ReportLine& line);
  // A supervisor's connection closed before its exit line: the message, the first failure
  // only ("" after a failure or a teardown, when supervisors are expected to go).
  std::string lost(int rank);
  bool all_started() const;
  // The hostfile's hosts where no rank has started.
  std::vector<std::string> silent_hosts() const;
  // Ranks that have not all started after `seconds` (`grace` of them past --start-timeout):
  // which, where none did, and of those the hosts that did not answer the remote start `agent`
  // at all (`unanswered`).
  std::string start_timeout_message(double seconds, double grace, const std::string& agent,
                                    const std::vector<std::string>& unanswered) const;

 private:
  struct Rank {
    bool started = false;
    bool ended = false;
    std::string host;
    long pid = 0;
  };
  std::string who(int rank) const;  // "rank 3 on zn-node1 (pid 42)"

  std::vector<Rank> ranks_;
  std::vector<std::string> hosts_;  // the hostfile's (empty: this machine)
  std::string hostfile_;
  bool failed_ = false;
  bool torn_down_ = false;
};

class RankReports {
 public:
  // Listens on every interface, on a port the kernel picks; throws an io zero::Error when it
  // cannot. `hosts`: the hostfile's hosts, for naming where ranks never started.
  RankReports(int ranks, std::vector<std::string> hosts, std::string hostfile, std::string agent);
  ~RankReports();  // stop()
  RankReports(const RankReports&) = delete;
  RankReports& operator=(const RankReports&) = delete;

  // Where supervisors report, HOST:PORT: HOST is ZERO_RUN_REPORT_HOST, else this host's name.
  const std::string& address() const noexcept { return address_; }

  // Starts serving: prints each rank's own failure on stderr as it is reported, and when the
  // ranks have not all started within `start_timeout` + `grace` seconds (the ranks' own bound,
  // counted from their start, acts first where they run), asks the hosts where none did to
  // answer through the remote start `agent` (host_probe.h), prints which ranks and hosts did
  // not start and which hosts did not answer, and calls `end_job` (then after a grace period
  // `kill_job`).
  void start(double start_timeout, double grace, std::function<void()> end_job,
             std::function<void()> kill_job);
  void stop();
  bool start_timed_out() const noexcept { return timed_out_.load(); }

 private:
  void serve(double start_timeout, double grace);

  int listener_ = -1;
  int wake_[2] = {-1, -1};  // stop() writes to wake the thread
  std::string address_;
  std::string agent_;
  RankBook book_;  // the serving thread's alone
  std::function<void()> end_job_, kill_job_;
  std::atomic<bool> timed_out_{false};
  std::thread thread_;
};

}  // namespace zero::run

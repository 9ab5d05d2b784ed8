#include "tools/zero-bench/bench_aio.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "base/timer.h"
#include "offload/aio.h"
#include "tools/zero-bench/bench_comm.h"
#include "tools/zero-bench/bench_stats.h"

namespace zero::bench {
namespace {

using offload::AioBackend;
using offload::AioOptions;
using offload::AsyncIO;
using offload::File;

std::string human(std::uint64_t bytes) {
  if (bytes >= (std::uint64_t{1} << 30) && bytes % (std::uint64_t{1} << 30) == 0) {
    return fmt::format("{} GiB", bytes >> 30);
  }
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

// The file measured: inside PATH when it is a directory, else PATH itself when it does not
// exist yet. Removed afterwards; an existing file is never overwritten.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        throw make_error(ErrorCategory::usage,
                         "{} exists and would be overwritten: give a directory (a scratch file "
                         "is made there) or the name of a new file",
                         path);
      }
      path_ = fmt::format("{}/zero-bench-aio.{}", path, ::getpid());
    } else {
      path_ = path;
    }
  }
  ~ScratchFile() { ::unlink(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The data buffer: aligned, filled with random bytes (so that nothing on the way can compress
// it), and locked when the limit allows, as the engine's pinned swap buffers are.
class PinnedBuffer {
 public:
  PinnedBuffer(std::size_t bytes, std::size_t alignment) : bytes_(bytes) {
    if (::posix_memalign(&data_, std::max<std::size_t>(alignment, 4096), bytes) != 0) {
      throw make_error(ErrorCategory::out_of_memory, "cannot allocate a {} buffer", human(bytes));
    }
    std::uint64_t state = 0x9e3779b97f4a7c15ull;  // splitmix64: fast enough for a GiB
    auto* words = static_cast<std::uint64_t*>(data_);
    for (std::size_t i = 0; i < bytes / 8; ++i) {
      std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      words[i] = z ^ (z >> 31);
    }
    locked_ = ::mlock(data_, bytes) == 0;
    if (!locked_) {
      std::cerr << fmt::format(
          "zero-bench: could not lock the {} buffer (mlock: {}); measuring "
          "with unlocked memory (raise ulimit -l to lock it)\n",
          human(bytes), std::strerror(errno));
    }
  }
  ~PinnedBuffer() {
    if (locked_) ::munlock(data_, bytes_);
    std::free(data_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(data_); }
  bool locked() const { return locked_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
  bool locked_ = false;
};

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The fio program to compare with, or none.
std::optional<std::string> find_fio(const std::string& option) {
  if (option == "no") return std::nullopt;
  if (option != "auto") {
    if (::access(option.c_str(), X_OK) != 0) {
      throw make_error(ErrorCategory::usage, "--fio {}: not an executable program", option);
    }
    return option;
  }
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/bin:/bin";
  while (!dirs.empty()) {
    const std::size_t colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    const std::string candidate = (dir.empty() ? "." : dir) + "/fio";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

// Runs `command` through the shell; returns its standard output and error.
std::string run_command(const std::string& command) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    throw make_error(ErrorCategory::io, "cannot run {}: {}", command, std::strerror(errno));
  }
  std::string output;
  char chunk[4096];
  while (const std::size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) output.append(chunk, n);
  const int status = ::pclose(pipe);
  if (status != 0) {
    throw make_error(ErrorCategory::io, "{} failed (status {}): {}", command,
                     WIFEXITED(status) ? WEXITSTATUS(status) : status, output);
  }
  return output;
}

std::string fio_version(const std::string& fio) {
  try {
    std::string version = run_command(shell_quote(fio) + " --version");
    while (!version.empty() && std::isspace(static_cast<unsigned char>(version.back()))) {
      version.pop_back();
    }
    return version;
  } catch (const Error&) {
    return "fio (version unknown)";
  }
}

// fio's GB/s for the same file, direction, block size, depth and bytes. With several rings,
// as many jobs, each over its share of the file, reported as one group.
double run_fio(const std::string& fio, const std::string& file, bool write, std::uint64_t block,
               int depth, std::uint64_t bytes, int jobs) {
  const char* rw = write ? "write" : "read";
  std::string command = fmt::format(
      "{} --name=zero-bench-aio --filename={} --ioengine=io_uring --direct=1 --rw={} --bs={} "
      "--iodepth={} --output-format=json",
      shell_quote(fio), shell_quote(file), rw, block, depth);
  if (jobs > 1) {
    const std::uint64_t share = bytes / static_cast<std::uint64_t>(jobs) / block * block;
    command += fmt::format(" --numjobs={} --size={} --offset_increment={} --group_reporting", jobs,
                           share, share);
  } else {
    command += fmt::format(" --size={}", bytes);
  }
  const std::string output = run_command(command);
  // The report is the first line that opens a JSON object; notes may come before it.
  std::size_t json_at = output.rfind('{', 0) == 0 ? 0 : output.find("\n{");
  if (json_at != 0 && json_at != std::string::npos) ++json_at;
  try {
    if (json_at == std::string::npos) throw std::runtime_error("no JSON in its output");
    const auto report = nlohmann::json::parse(output.substr(json_at));
    const auto& job = report.at("jobs").at(0);
    if (job.value("error", 0) != 0) {
      throw std::runtime_error(fmt::format("the job failed with error {}", job.value("error", 0)));
    }
    return job.at(rw).at("bw_bytes").get<double>() / 1e9;
  } catch (const std::exception& error) {
    throw make_error(ErrorCategory::io, "cannot read fio's report ({}) from {}:\n{}", error.what(),
                     command, output);
  }
}

double measure(AsyncIO& io, const File& file, bool write, std::byte* buffer, std::uint64_t bytes) {
  const Timer timer;
  io.wait(write ? io.write(file, 0, buffer, bytes) : io.read(file, 0, buffer, bytes));
  return static_cast<double>(bytes) / timer.seconds() / 1e9;
}

std::string file_system_of(const std::string& path) {
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) != 0) return "unknown file system";
  switch (static_cast<unsigned long>(fs.f_type)) {
    case 0xEF53:
      return "ext4";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x01021994:
      return "tmpfs";
    default:
      return fmt::format("file system 0x{:x}", static_cast<unsigned long>(fs.f_type));
  }
}

}  // namespace

CLI::App* add_aio_command(CLI::App& app, AioBenchOptions& o) {
  CLI::App* command = app.add_subcommand(
      "aio",
      "Read and write GB/s of the offload engine's direct I/O per block size and queue depth on "
      "PATH, and fio's (--ioengine=io_uring --direct=1) on the same file, sizes and depths when "
      "fio is installed.");
  command
      ->add_option("path", o.path,
                   "a directory (a scratch file is made and removed there) "
                   "or the name of a new file")
      ->required();
  command->add_option("--size", o.size, "bytes per measurement and size of the file (K, M, G)")
      ->capture_default_str();
  command->add_option("--block-sizes", o.block_sizes, "aio.block_size values, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  command->add_option("--queue-depths", o.queue_depths, "aio.queue_depth values, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  command->add_flag("--full", o.full,
                    "every block size 128K..4M and queue depth 1..64 (powers of two)");
  command->add_option("--backend", o.backend, "uring or threads")
      ->check(CLI::IsMember({"uring", "threads"}))
      ->capture_default_str();
  command
      ->add_option("--parallelism", o.parallelism,
                   "aio.intra_op_parallelism: rings (fio: as many jobs)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  command
      ->add_option("--register", o.register_buffers,
                   "register the buffer with the rings (fixed buffers): yes or no")
      ->check(CLI::IsMember({"yes", "no"}))
      ->capture_default_str();
  command
      ->add_option("--repeats", o.repeats,
                   "runs per measurement, ours and fio's taking turns (median reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  command->add_option("--settle", o.settle_seconds, "seconds of pause before every run")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  command->add_flag("--each-run", o.each_run, "print every run's figures under the medians");
  command->add_option("--fio", o.fio, "auto (fio on PATH), no, or the fio program to run")
      ->capture_default_str();
  command->add_option("--json", o.json, "Append one JSON line per measurement to FILE");
  return command;
}

int run_aio_bench(const AioBenchOptions& o) {
  const std::uint64_t bytes = parse_byte_size(o.size, "--size");
  std::vector<std::uint64_t> blocks;
  std::vector<int> depths = o.queue_depths;
  if (o.full) {
    for (std::uint64_t b = 128 << 10; b <= (4 << 20); b *= 2) blocks.push_back(b);
    depths = {1, 2, 4, 8, 16, 32, 64};
  } else {
    for (const auto& text : o.block_sizes) blocks.push_back(parse_byte_size(text, "--block-sizes"));
  }
  for (std::uint64_t b : blocks) {
    if (b % 4096 != 0 || b > bytes) {
      throw make_error(ErrorCategory::usage,
                       "--block-sizes: {} is not a multiple of 4096 no larger than --size ({})", b,
                       bytes);
    }
  }
  const AioBackend backend = *offload::parse_aio_backend(o.backend);
  const std::optional<std::string> fio = find_fio(o.fio);

  ScratchFile scratch(o.path);
  File file(scratch.path(), true);
  if (bytes % file.alignment() != 0) {
    throw make_error(ErrorCategory::usage, "--size {}: give a multiple of {} (the alignment)",
                     bytes, file.alignment());
  }
  file.preallocate(bytes);
  PinnedBuffer buffer(bytes, file.alignment());
  std::ofstream json;
  if (!o.json.empty()) json.open(o.json, std::ios::app);

  // Written once whole first, so that every measurement (ours and fio's) overwrites allocated
  // blocks rather than converting preallocated ones.
  {
    AioOptions layout;
    layout.backend = backend;
    layout.block_size = 4 << 20;
    layout.queue_depth = 16;
    auto io = AsyncIO::create(layout);
    measure(*io, file, true, buffer.data(), bytes);
  }

  fmt::print(
      "# zero-bench aio: {} ({}), {} per run, median of {} run(s) each after a {} s "
      "pause, direct-I/O alignment {}\n",
      scratch.path(), file_system_of(scratch.path()), human(bytes), o.repeats, o.settle_seconds,
      file.alignment());
  const auto make_io = [&](std::uint64_t block, int depth, bool& fixed) {
    AioOptions options;
    options.backend = backend;
    options.block_size = block;
    options.queue_depth = depth;
    options.intra_op_parallelism = o.parallelism;
    auto io = AsyncIO::create(options);
    fixed = o.register_buffers == "yes" && io->register_buffers({{buffer.data(), bytes}});
    return io;
  };
  bool fixed = false;
  make_io(blocks.front(), depths.front(), fixed);
  fmt::print("# ours: backend {}, {} {}, buffer {}locked, fixed buffers: {}\n", o.backend,
             o.parallelism, backend == AioBackend::uring ? "ring(s)" : "thread group(s)",
             buffer.locked() ? "" : "not ",
             fixed                         ? "yes"
             : o.register_buffers == "yes" ? "refused (see the warning)"
                                           : "no");
  if (fio) {
    fmt::print("# fio: {} --ioengine=io_uring --direct=1, same file, block sizes and depths{}\n",
               fio_version(*fio), o.parallelism > 1 ? ", --numjobs=rings" : "");
  } else {
    fmt::print("# fio: {}, no comparison\n", o.fio == "no"
                                                 ? "not run (--fio no)"
                                                 : "not found on PATH (install fio, or --fio "
                                                   "PROGRAM)");
  }
  fmt::print("{:>9} {:>6} | {:>10} {:>8} {:>6} | {:>10} {:>8} {:>6}\n", "block", "depth",
             "read GB/s", "fio", "ratio", "write GB/s", "fio", "ratio");

  struct Lowest {
    double ratio = 1e9;
    std::string where;
  } lowest_read, lowest_write;
  int below = 0;
  double log_read_ratios = 0, log_write_ratios = 0;  // for the geometric means
  int points = 0;
  const auto ratio_text = [](double ours, std::optional<double> theirs) {
    return theirs ? fmt::format("{:6.3f}", ours / *theirs) : std::string("     -");
  };
  const auto fio_text = [](std::optional<double> theirs) {
    return theirs ? fmt::format("{:8.3f}", *theirs) : std::string("       -");
  };
  for (std::uint64_t block : blocks) {
    for (int depth : depths) {
      auto io = make_io(block, depth, fixed);

      // Medians of --repeats runs. Ours and fio's take turns going first, so that neither
      // always follows the other's writes (which a virtual disk's host may still cache) and
      // drift of the device hits both alike.
      std::vector<double> reads, writes, fio_reads, fio_writes;
      // Every run starts after the same pause. A virtual disk's rate limiter (a token bucket)
      // refills while the device is idle, and fio's own start-up (about 0.3 s here) would
      // otherwise give fio a fuller bucket than ours gets.
      const auto settle = [&] {
        std::this_thread::sleep_for(std::chrono::duration<double>(o.settle_seconds));
      };
      for (int r = 0; r < o.repeats; ++r) {
        for (const bool write : {false, true}) {
          for (int turn = 0; turn < 2; ++turn) {
            if (turn == r % 2) {
              settle();
              (write ? writes : reads).push_back(measure(*io, file, write, buffer.data(), bytes));
            } else if (fio) {
              settle();
              (write ? fio_writes : fio_reads)
                  .push_back(run_fio(*fio, file.path(), write, block, depth, bytes, o.parallelism));
            }
          }
        }
      }
      const double read = median(reads);
      const double write = median(writes);
      std::optional<double> fio_read, fio_write;
      if (fio) {
        fio_read = median(fio_reads);
        fio_write = median(fio_writes);
      }

      fmt::print("{:>9} {:>6} | {:>10.3f} {} {} | {:>10.3f} {} {}\n", human(block), depth, read,
                 fio_text(fio_read), ratio_text(read, fio_read), write, fio_text(fio_write),
                 ratio_text(write, fio_write));
      if (o.each_run) {
        for (std::size_t i = 0; i < reads.size(); ++i) {
          fmt::print("#   run {} ({} first): read {:.3f} fio {} | write {:.3f} fio {}\n", i + 1,
                     i % 2 == 0 ? "ours" : "fio", reads[i],
                     fio ? fmt::format("{:.3f}", fio_reads[i]) : "-", writes[i],
                     fio ? fmt::format("{:.3f}", fio_writes[i]) : "-");
        }
      }
      std::fflush(stdout);
      const std::string where = fmt::format("{} x {}", human(block), depth);
      if (fio_read && read / *fio_read < lowest_read.ratio) lowest_read = {read / *fio_read, where};
      if (fio_write && write / *fio_write < lowest_write.ratio) {
        lowest_write = {write / *fio_write, where};
      }
      if ((fio_read && read / *fio_read < 0.95) || (fio_write && write / *fio_write < 0.95)) {
        ++below;
      }
      if (fio) {
        log_read_ratios += std::log(read / *fio_read);
        log_write_ratios += std::log(write / *fio_write);
        ++points;
      }
      nlohmann::json line{
          {"bench", "aio"},       {"path", scratch.path()}, {"bytes", bytes},
          {"block_size", block},  {"queue_depth", depth},   {"parallelism", o.parallelism},
          {"backend", o.backend}, {"fixed_buffers", fixed}, {"repeats", o.repeats},
          {"read_GBps", read},    {"write_GBps", write}};
      if (fio) {
        line["fio_read_GBps"] = *fio_read;
        line["fio_write_GBps"] = *fio_write;
        line["read_ratio"] = read / *fio_read;
        line["write_ratio"] = write / *fio_write;
      }
      if (json.is_open()) json << line.dump() << "\n";
    }
  }
  if (fio) {
    // One point's ratio swings with the device (a virtual disk's throughput can vary by a
    // quarter from run to run); the geometric mean over the points is the steadier figure.
    fmt::print("# ratio to fio, geometric mean over {} points: read {:.3f}, write {:.3f}\n", points,
               std::exp(log_read_ratios / points), std::exp(log_write_ratios / points));
    fmt::print(
        "# lowest ratio to fio: read {:.3f} ({}), write {:.3f} ({}); points below 0.95: {}\n",
        lowest_read.ratio, lowest_read.where, lowest_write.ratio, lowest_write.where, below);
  }
  return 0;
}

}  // namespace zero::bench

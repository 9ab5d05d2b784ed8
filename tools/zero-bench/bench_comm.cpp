// zero-bench comm: per collective and size, the time of back-to-back collectives (each waited
// before the next is issued, like nccl-tests' out-of-place loop), the algorithm bandwidth
// (size / time) and the bus bandwidth (algbw times the collective's factor), as nccl-tests
// prints them. With --overlap: a collective alone, a compute loop alone, and both together,
// to measure how much of the collective the backend's progress hides behind compute.
#include "tools/zero-bench/bench_comm.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/dtype.h"
#include "base/error.h"
#include "base/half.h"
#include "base/log.h"
#include "comm/communicator.h"
#include "comm/create.h"
#include "comm/launch.h"
#include "device/device.h"
#include "device/memory.h"

namespace zero::bench {

std::uint64_t parse_byte_size(const std::string& text, const std::string& what) {
  const auto bad = [&] {
    return make_error(ErrorCategory::usage,
                      "{} '{}': expected a byte count like 4096, 64K, 256M or 1G (binary "
                      "multiples, optional iB/B)",
                      what, text);
  };
  std::size_t position = 0;
  std::uint64_t value = 0;
  while (position < text.size() && text[position] >= '0' && text[position] <= '9') {
    const auto digit = static_cast<std::uint64_t>(text[position] - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) throw bad();
    value = value * 10 + digit;
    ++position;
  }
  if (position == 0) throw bad();
  std::string rest = text.substr(position);
  for (char& c : rest) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (!rest.empty() && (rest[0] == 'K' || rest[0] == 'M' || rest[0] == 'G')) {
    shift = rest[0] == 'K' ? 10 : rest[0] == 'M' ? 20 : 30;
    rest.erase(0, 1);
    if (rest == "IB" || rest == "B") rest.clear();
  } else if (rest == "B") {
    rest.clear();
  }
  if (!rest.empty()) throw bad();
  if (value > (std::numeric_limits<std::uint64_t>::max() >> shift)) throw bad();
  return value << shift;
}

namespace {

using Clock = std::chrono::steady_clock;

enum class Collective { all_reduce, reduce_scatter, all_gather, broadcast };

constexpr Collective kAllCollectives[] = {Collective::all_reduce, Collective::reduce_scatter,
                                          Collective::all_gather, Collective::broadcast};

std::string_view collective_name(Collective collective) {
  switch (collective) {
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_gather:
      return "all_gather";
    case Collective::broadcast:
      return "broadcast";
  }
  return "?";
}

bool reduces(Collective collective) {
  return collective == Collective::all_reduce || collective == Collective::reduce_scatter;
}

// Count is per rank and the buffer holds ranks * count elements.
bool blocked(Collective collective) {
  return collective == Collective::reduce_scatter || collective == Collective::all_gather;
}

// nccl-tests' bus bandwidth factors: what each rank's link carries relative to the size.
double bus_factor(Collective collective, int ranks) {
  const double n = ranks;
  switch (collective) {
    case Collective::all_reduce:
      return 2.0 * (n - 1) / n;
    case Collective::reduce_scatter:
    case Collective::all_gather:
      return (n - 1) / n;
    case Collective::broadcast:
      return 1.0;
  }
  return 1.0;
}

// Already-validated option values, in zero's types.
struct Settings {
  comm::Backend backend = comm::Backend::automatic;
  comm::Progress progress = comm::Progress::automatic;
  DevicePreference device = DevicePreference::automatic;
  std::vector<Collective> collectives;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  std::uint64_t min_bytes = 0, max_bytes = 0;
  std::vector<std::uint64_t> overlap_sizes;
};

std::optional<DevicePreference> device_preference(std::string_view text) {
  if (text == "auto") return DevicePreference::automatic;
  if (text == "cpu") return DevicePreference::cpu;
  if (text == "cuda") return DevicePreference::cuda;
  return std::nullopt;
}

std::optional<ReduceOp> reduce_op(std::string_view text) {
  if (text == "sum") return ReduceOp::sum;
  if (text == "avg") return ReduceOp::avg;
  if (text == "max") return ReduceOp::max;
  return std::nullopt;
}

void require(bool condition, const char* message) {
  if (!condition) throw Error(ErrorCategory::usage, message);
}

Settings settle(const CommBenchOptions& options) {
  Settings settings;
  const auto backend = comm::parse_backend(options.backend);
  const auto progress = comm::parse_progress(options.progress);
  const auto dtype = parse_dtype(options.dtype);
  if (!backend) {
    throw make_error(ErrorCategory::usage, "--backend '{}': expected auto, local, mpi or nccl",
                     options.backend);
  }
  if (!progress) {
    throw make_error(ErrorCategory::usage, "--progress '{}': expected auto, thread or poll",
                     options.progress);
  }
  if (!dtype) {
    throw make_error(ErrorCategory::usage, "--dtype '{}': expected fp32, fp16, bf16 or int64",
                     options.dtype);
  }
  settings.backend = *backend;
  settings.progress = *progress;
  settings.dtype = *dtype;
  const auto device = device_preference(options.device);
  if (!device) {
    throw make_error(ErrorCategory::usage, "--device '{}': expected auto, cpu or cuda",
                     options.device);
  }
  settings.device = *device;
  const auto op = reduce_op(options.op);
  if (!op) {
    throw make_error(ErrorCategory::usage, "--op '{}': expected sum, avg or max", options.op);
  }
  settings.op = *op;

  for (const std::string& name : options.ops) {
    if (name == "all") {
      for (Collective collective : kAllCollectives) {
        if (std::find(settings.collectives.begin(), settings.collectives.end(), collective) ==
            settings.collectives.end()) {
          settings.collectives.push_back(collective);
        }
      }
      continue;
    }
    const auto* found = std::find_if(std::begin(kAllCollectives), std::end(kAllCollectives),
                                     [&](Collective c) { return collective_name(c) == name; });
    if (found == std::end(kAllCollectives)) {
      throw make_error(ErrorCategory::usage,
                       "--ops '{}': expected all_reduce, reduce_scatter, all_gather, broadcast "
                       "or all",
                       name);
    }
    if (std::find(settings.collectives.begin(), settings.collectives.end(), *found) ==
        settings.collectives.end()) {
      settings.collectives.push_back(*found);
    }
  }
  require(!settings.collectives.empty(), "--ops: no collective given");

  settings.min_bytes = parse_byte_size(options.min_bytes, "--min-bytes");
  settings.max_bytes = parse_byte_size(options.max_bytes, "--max-bytes");
  require(settings.min_bytes > 0, "--min-bytes must be at least 1");
  if (settings.max_bytes < settings.min_bytes) {
    throw make_error(ErrorCategory::usage, "--max-bytes ({}) is below --min-bytes ({})",
                     settings.max_bytes, settings.min_bytes);
  }
  require(options.step_factor >= 2, "--step-factor must be at least 2");
  require(options.warmup >= 0, "--warmup must not be negative");
  require(options.iters >= 0, "--iters must not be negative (0: adaptive)");
  require(options.poll_every >= 0, "--poll-every must not be negative");
  require(options.time_per_size > 0, "--time-per-size must be positive");
  require(options.timeout_s > 0, "--timeout must be positive");
  for (const std::string& text : options.overlap_sizes) {
    const std::uint64_t bytes = parse_byte_size(text, "--overlap-sizes");
    require(bytes > 0, "--overlap-sizes: sizes must be at least 1 byte");
    settings.overlap_sizes.push_back(bytes);
  }
  require(!options.overlap || !settings.overlap_sizes.empty(), "--overlap-sizes: no size given");
  return settings;
}

// Thrown alike by every rank (after an agreement over the communicator), so no rank is left
// waiting in a collective and the job can end normally.
class AgreedError : public Error {
 public:
  using Error::Error;
};

// One reservation of the communicator's device, returned on destruction.
class Buffer {
 public:
  Buffer(Device& device, Tier tier, std::size_t bytes)
      : device_(device), tier_(tier), bytes_(bytes), data_(device.reserve(tier, bytes)) {}
  ~Buffer() {
    if (data_ != nullptr) device_.unreserve(tier_, data_, bytes_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  char* data() const noexcept { return static_cast<char*>(data_); }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  Device& device_;
  Tier tier_;
  std::size_t bytes_;
  void* data_;
};

void put(DType dtype, void* base, std::size_t index, double value) {
  switch (dtype) {
    case DType::f32:
      static_cast<float*>(base)[index] = static_cast<float>(value);
      return;
    case DType::f16:
      static_cast<std::uint16_t*>(base)[index] = float_to_fp16(static_cast<float>(value));
      return;
    case DType::bf16:
      static_cast<std::uint16_t*>(base)[index] = float_to_bf16(static_cast<float>(value));
      return;
    case DType::i64:
      static_cast<std::int64_t*>(base)[index] = static_cast<std::int64_t>(value);
      return;
    case DType::u8:
      static_cast<std::uint8_t*>(base)[index] = static_cast<std::uint8_t>(value);
      return;
  }
}

double get(DType dtype, const void* base, std::size_t index) {
  switch (dtype) {
    case DType::f32:
      return static_cast<const float*>(base)[index];
    case DType::f16:
      return fp16_to_float(static_cast<const std::uint16_t*>(base)[index]);
    case DType::bf16:
      return bf16_to_float(static_cast<const std::uint16_t*>(base)[index]);
    case DType::i64:
      return static_cast<double>(static_cast<const std::int64_t*>(base)[index]);
    case DType::u8:
      return static_cast<const std::uint8_t*>(base)[index];
  }
  return 0;
}

// `value` as the dtype stores it.
double in_dtype(DType dtype, double value) {
  switch (dtype) {
    case DType::f32:
      return static_cast<float>(value);
    case DType::f16:
      return fp16_to_float(float_to_fp16(static_cast<float>(value)));
    case DType::bf16:
      return bf16_to_float(float_to_bf16(static_cast<float>(value)));
    case DType::i64:
    case DType::u8:
      return std::trunc(value);
  }
  return value;
}

// The values --check fills in: small integers, exact in every dtype and in their sums.
double pattern(int rank, std::size_t index) {
  return static_cast<double>(rank + 1) + static_cast<double>(index % 5);
}

// The reduction over ranks of pattern(r, index), as the collective computes it in the dtype.
double reduced(DType dtype, ReduceOp op, int ranks, std::size_t index) {
  if (op == ReduceOp::max) return pattern(ranks - 1, index);
  double sum = 0;
  for (int r = 0; r < ranks; ++r) sum += pattern(r, index);
  sum = in_dtype(dtype, sum);
  if (op == ReduceOp::sum) return sum;
  if (dtype == DType::i64) {
    return static_cast<double>(static_cast<std::int64_t>(sum) / static_cast<std::int64_t>(ranks));
  }
  return in_dtype(dtype, sum / ranks);
}

bool close_enough(DType dtype, double got, double expected) {
  if (dtype == DType::i64) return got == expected;
  const double tolerance = dtype == DType::f32 ? 1e-5 : dtype == DType::f16 ? 2e-3 : 1.6e-2;
  return std::fabs(got - expected) <= tolerance * std::max(1.0, std::fabs(expected));
}

// A busy arithmetic loop over a private buffer, on the calling thread: the stand-in for the
// engine's compute. One chunk is a few microseconds.
class Compute {
 public:
  void chunk() {
    for (int pass = 0; pass < kPasses; ++pass) {
      for (float& x : data_) x = x * 0.999f + 0.001f;
    }
  }
  // `chunks` chunks; every `poll_every` chunks (0: never) one work->test().
  void run(std::int64_t chunks, int poll_every, Work* work) {
    for (std::int64_t c = 1; c <= chunks; ++c) {
      chunk();
      if (work != nullptr && poll_every > 0 && c % poll_every == 0) work->test();
    }
    sink_ = sink_ + data_[static_cast<std::size_t>(chunks) % data_.size()];
  }

 private:
  static constexpr int kPasses = 4;
  std::vector<float> data_ = std::vector<float>(4096, 1.0f);
  volatile float sink_ = 0;
};

// Bytes this node's network devices have sent: through the loopback device (between
// processes of the node, when MPI sends over TCP) and through the others (to other nodes).
struct NetBytes {
  std::int64_t loopback = 0;
  std::int64_t network = 0;
};

NetBytes read_net_bytes() {
  NetBytes bytes;
  std::ifstream in("/proc/net/dev");
  std::string line;
  for (int number = 0; std::getline(in, line); ++number) {
    const auto colon = line.find(':');
    if (number < 2 || colon == std::string::npos) continue;  // two header lines
    std::istringstream fields(line.substr(colon + 1));
    std::int64_t value = 0, sent = 0;
    for (int field = 0; field < 9 && fields >> value; ++field) sent = value;  // 9th: tx bytes
    const std::size_t first = line.find_first_not_of(' ');
    (line.substr(first, colon - first) == "lo" ? bytes.loopback : bytes.network) += sent;
  }
  return bytes;
}

struct Context {
  Communicator& comm;
  Device& device;
  Stream& stream;
  Tier tier;
  DType dtype;
  ReduceOp op;
  int rank;
  int ranks;
  Buffer scratch;            // for the benchmark's own agreements (device memory on CUDA)
  bool node_leader = false;  // the node's local rank 0: it reads the node's counters
};

void settle_stream(Context& context) {
  if (context.device.type() != DeviceType::cpu) context.stream.synchronize();
}

// One int64 through a collective on the scratch buffer.
std::int64_t agree(Context& context, std::int64_t value, std::optional<ReduceOp> op) {
  context.device.copy(context.scratch.data(), &value, sizeof value);
  Work work = op ? context.comm.all_reduce(context.scratch.data(), 1, DType::i64, *op)
                 : context.comm.broadcast(context.scratch.data(), 1, DType::i64, 0);
  work.wait();
  settle_stream(context);
  context.device.copy(&value, context.scratch.data(), sizeof value);
  return value;
}
std::int64_t max_over_ranks(Context& context, std::int64_t value) {
  return agree(context, value, ReduceOp::max);
}
std::int64_t sum_over_ranks(Context& context, std::int64_t value) {
  return agree(context, value, ReduceOp::sum);
}
std::int64_t from_rank0(Context& context, std::int64_t value) {
  return agree(context, value, std::nullopt);
}

void barrier(Context& context) {
  context.comm.barrier().wait();
  settle_stream(context);
}

constexpr std::size_t kStageElements = std::size_t{1} << 20;

// destination[i] = value(i) for i < count, through a host staging buffer.
template <typename Value>
void write_elements(Context& context, char* destination, std::size_t count, Value value) {
  const std::size_t element = dtype_size(context.dtype);
  std::vector<char> host(std::min(count, kStageElements) * element);
  for (std::size_t start = 0; start < count; start += kStageElements) {
    const std::size_t n = std::min(kStageElements, count - start);
    for (std::size_t i = 0; i < n; ++i) put(context.dtype, host.data(), i, value(start + i));
    context.device.copy(destination + start * element, host.data(), n * element);
  }
}

// Elements of source[0, count) that differ from expected(i); the first one described.
template <typename Expected>
std::int64_t count_wrong(Context& context, const char* source, std::size_t count, Expected expected,
                         std::string& first) {
  const std::size_t element = dtype_size(context.dtype);
  std::vector<char> host(std::min(count, kStageElements) * element);
  std::int64_t wrong = 0;
  for (std::size_t start = 0; start < count; start += kStageElements) {
    const std::size_t n = std::min(kStageElements, count - start);
    context.device.copy(host.data(), source + start * element, n * element);
    for (std::size_t i = 0; i < n; ++i) {
      const double got = get(context.dtype, host.data(), i);
      const double want = expected(start + i);
      if (close_enough(context.dtype, got, want)) continue;
      if (wrong++ == 0) first = fmt::format("element {} is {}, expected {}", start + i, got, want);
    }
  }
  return wrong;
}

struct Row {
  Collective collective;
  std::uint64_t bytes;  // the whole buffer, as nccl-tests reports it
  std::size_t count;    // the call's count (per rank for reduce_scatter and all_gather)
  std::int64_t iters;
  double time_us;      // average per collective, the slowest rank's
  double algbw;        // GB/s
  double busbw;        // GB/s
  std::int64_t wrong;  // -1: not checked
  // --net-bytes: bytes each rank sent per call within its node and across nodes (-1: not
  // read), and what a ring algorithm sends (size * the bus factor)
  double within = -1, across = -1, ring = 0;
};

class CommBench {
 public:
  CommBench(const CommBenchOptions& options, const Settings& settings, Context& context,
            std::string launcher, std::string progress_text, std::ofstream* json)
      : options_(options),
        settings_(settings),
        context_(context),
        launcher_(std::move(launcher)),
        progress_text_(std::move(progress_text)),
        json_(json) {}

  void bandwidth() {
    std::uint64_t largest = 0;
    bool two_buffers = false;
    for (Collective collective : settings_.collectives) {
      largest =
          std::max(largest, total_bytes(collective, count_for(collective, settings_.max_bytes)));
      two_buffers = two_buffers || blocked(collective);
    }
    input_ = std::make_unique<Buffer>(context_.device, context_.tier, largest);
    if (two_buffers) output_ = std::make_unique<Buffer>(context_.device, context_.tier, largest);
    const std::size_t element = dtype_size(context_.dtype);
    write_elements(context_, input_->data(), largest / element,
                   [&](std::size_t i) { return pattern(context_.rank, i); });
    if (output_) {
      write_elements(context_, output_->data(), largest / element, [](std::size_t) { return 0.0; });
    }

    header("bandwidth");
    std::int64_t total_wrong = 0;
    for (Collective collective : settings_.collectives) {
      table_header(collective);
      double busbw_sum = 0;
      int rows = 0;
      std::uint64_t previous = 0;
      for (std::uint64_t bytes = settings_.min_bytes; bytes <= settings_.max_bytes;) {
        const std::size_t count = count_for(collective, bytes);
        const std::uint64_t total = total_bytes(collective, count);
        if (total != previous) {
          previous = total;
          const Row row = measure(collective, count);
          print_row(row);
          busbw_sum += row.busbw;
          ++rows;
          if (row.wrong > 0) total_wrong += row.wrong;
        }
        if (bytes > settings_.max_bytes / static_cast<std::uint64_t>(options_.step_factor)) break;
        bytes *= static_cast<std::uint64_t>(options_.step_factor);
      }
      if (context_.rank == 0) {
        std::cout << fmt::format("# {:<14} avg bus bandwidth: {:.3f} GB/s ({} sizes)\n#\n",
                                 collective_name(collective), rows > 0 ? busbw_sum / rows : 0.0,
                                 rows)
                  << std::flush;
      }
    }
    if (options_.check && context_.rank == 0) {
      std::cout << fmt::format("# --check: {} wrong values in all\n", total_wrong) << std::flush;
    }
    if (total_wrong > 0) {
      throw AgreedError(ErrorCategory::comm,
                        fmt::format("--check found {} wrong values (each rank's first one is "
                                    "on stderr)",
                                    total_wrong));
    }
  }

  void overlap() {
    std::uint64_t largest = 0;
    for (std::uint64_t bytes : settings_.overlap_sizes) {
      largest = std::max(
          largest, total_bytes(Collective::all_reduce, count_for(Collective::all_reduce, bytes)));
    }
    input_ = std::make_unique<Buffer>(context_.device, context_.tier, largest);
    write_elements(context_, input_->data(), largest / dtype_size(context_.dtype),
                   [&](std::size_t i) { return pattern(context_.rank, i); });

    // The compute's speed, once: nanoseconds per chunk. Every rank computes at the same time
    // (as in the timed runs, where ranks may share cores); rank 0's figure counts.
    Compute compute;
    double chunk_ns = 0;
    barrier(context_);
    compute.run(64, 0, nullptr);
    for (std::int64_t chunks = 64;; chunks *= 2) {
      const auto start = Clock::now();
      compute.run(chunks, 0, nullptr);
      const double elapsed = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
      if (elapsed > 1e8 || chunks > (std::int64_t{1} << 30)) {
        chunk_ns = elapsed / static_cast<double>(chunks);
        break;
      }
    }
    const std::int64_t chunk_ps = from_rank0(context_, std::llround(chunk_ns * 1000));
    chunk_ns = static_cast<double>(chunk_ps) / 1000;

    header("overlap");
    if (context_.rank == 0) {
      std::cout
          << fmt::format(
                 "# overlap of all_reduce with compute: a busy fp32 loop on the calling thread\n"
                 "#   (chunk {:.2f} us, calibrated on rank 0), {}\n"
                 "#   t_comm: the collective alone; t_compute: the loop alone, sized to about "
                 "t_comm;\n"
                 "#   t_both: issue, compute, then wait; hidden = (t_comm + t_compute - t_both) /\n"
                 "#   min(t_comm, t_compute), clamped to [0, 100] %. Times: the slowest rank's "
                 "average.\n"
                 "#\n"
                 "# {:>10}  {:>10}  {:>6}  {:>12}  {:>12}  {:>12}  {:>8}  {:>9}\n"
                 "# {:>10}  {:>10}  {:>6}  {:>12}  {:>12}  {:>12}  {:>8}  {:>9}\n",
                 chunk_ns / 1000,
                 options_.poll_every > 0
                     ? fmt::format("work.test() every {} chunks during the compute",
                                   options_.poll_every)
                     : std::string("no work.test() during the compute"),
                 "size", "count", "iters", "t_comm", "t_compute", "t_both", "hidden", "chunks",
                 "(B)", "(elements)", "", "(us)", "(us)", "(us)", "(%)", "")
          << std::flush;
    }
    for (std::uint64_t bytes : settings_.overlap_sizes) {
      const std::size_t count = count_for(Collective::all_reduce, bytes);
      const std::uint64_t total = total_bytes(Collective::all_reduce, count);
      const std::int64_t iters = warm_up(Collective::all_reduce, count);

      const double comm_ns = timed(iters, [&] { issue(Collective::all_reduce, count).wait(); });
      std::int64_t chunks = 0;
      if (context_.rank == 0) chunks = std::max<std::int64_t>(1, std::llround(comm_ns / chunk_ns));
      chunks = from_rank0(context_, chunks);
      const double compute_ns = timed(iters, [&] { compute.run(chunks, 0, nullptr); });
      const double both_ns = timed(iters, [&] {
        Work work = issue(Collective::all_reduce, count);
        compute.run(chunks, options_.poll_every, &work);
        work.wait();
      });
      const double hidden = std::clamp(
          (comm_ns + compute_ns - both_ns) / std::min(comm_ns, compute_ns) * 100, 0.0, 100.0);
      if (context_.rank != 0) continue;
      std::cout
          << fmt::format(
                 "  {:>10}  {:>10}  {:>6}  {:>12.1f}  {:>12.1f}  {:>12.1f}  {:>8.1f}  {:>9}\n",
                 total, count, iters, comm_ns / 1000, compute_ns / 1000, both_ns / 1000, hidden,
                 chunks)
          << std::flush;
      if (json_ != nullptr) {
        nlohmann::json line = common_json("overlap");
        line.update({{"collective", "all_reduce"},
                     {"bytes", total},
                     {"count", count},
                     {"iters", iters},
                     {"poll_every", options_.poll_every},
                     {"chunk_us", chunk_ns / 1000},
                     {"chunks", chunks},
                     {"t_comm_us", comm_ns / 1000},
                     {"t_compute_us", compute_ns / 1000},
                     {"t_both_us", both_ns / 1000},
                     {"hidden_percent", hidden}});
        *json_ << line.dump() << "\n" << std::flush;
      }
    }
  }

 private:
  // Elements per call for a loop size: per rank for the blocked collectives; at least one.
  std::size_t count_for(Collective collective, std::uint64_t bytes) const {
    std::uint64_t per = dtype_size(context_.dtype);
    if (blocked(collective)) per *= static_cast<std::uint64_t>(context_.ranks);
    return static_cast<std::size_t>(std::max<std::uint64_t>(1, bytes / per));
  }
  std::uint64_t total_bytes(Collective collective, std::size_t count) const {
    std::uint64_t bytes = count * dtype_size(context_.dtype);
    if (blocked(collective)) bytes *= static_cast<std::uint64_t>(context_.ranks);
    return bytes;
  }

  Work issue(Collective collective, std::size_t count) {
    const DType dtype = context_.dtype;
    switch (collective) {
      case Collective::all_reduce:
        return context_.comm.all_reduce(input_->data(), count, dtype, context_.op);
      case Collective::reduce_scatter:
        return context_.comm.reduce_scatter(input_->data(), output_->data(), count, dtype,
                                            context_.op);
      case Collective::all_gather:
        return context_.comm.all_gather(input_->data(), output_->data(), count, dtype);
      case Collective::broadcast:
        return context_.comm.broadcast(input_->data(), count, dtype, 0);
    }
    return Work();
  }

  // The slowest rank's average nanoseconds of `body` over `iters` runs, after a barrier.
  template <typename Body>
  double timed(std::int64_t iters, Body body) {
    barrier(context_);
    const auto start = Clock::now();
    for (std::int64_t i = 0; i < iters; ++i) body();
    settle_stream(context_);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start);
    return static_cast<double>(max_over_ranks(context_, ns.count() / iters));
  }

  // Runs the warm-up and returns the iteration count every rank uses: --iters, or enough for
  // about --time-per-size seconds from rank 0's warm-up timing, in [5, 1000].
  std::int64_t warm_up(Collective collective, std::size_t count) {
    const int warmup = options_.warmup;
    const bool adaptive = options_.iters == 0;
    // The first call of a size may pay for first touches and setup; it is not timed.
    const int untimed = warmup >= 2 ? 1 : 0;
    const int probes = adaptive ? std::max(warmup, 1) : warmup;
    Clock::time_point start = Clock::now();
    for (int i = 0; i < probes; ++i) {
      if (i == untimed) {
        settle_stream(context_);
        start = Clock::now();
      }
      issue(collective, count).wait();
    }
    settle_stream(context_);
    if (!adaptive) return options_.iters;
    std::int64_t iters = 0;
    if (context_.rank == 0) {
      const double each =
          std::chrono::duration<double>(Clock::now() - start).count() / (probes - untimed);
      const double wanted = std::ceil(options_.time_per_size / std::max(each, 1e-9));
      iters = static_cast<std::int64_t>(std::clamp(wanted, 5.0, 1000.0));
    }
    return from_rank0(context_, iters);
  }

  Row measure(Collective collective, std::size_t count) {
    Row row{};
    row.collective = collective;
    row.count = count;
    row.bytes = total_bytes(collective, count);
    row.iters = warm_up(collective, count);
    const NetBytes before = options_.net_bytes ? read_net_bytes() : NetBytes{};
    const double ns = timed(row.iters, [&] { issue(collective, count).wait(); });
    if (options_.net_bytes) {
      // Each node's counters once (by its local rank 0), summed over the nodes, per rank and
      // call; the timing's own barrier and agreement are in them too (a few bytes).
      const NetBytes after = read_net_bytes();
      const bool leader = context_.node_leader;
      const double calls = static_cast<double>(row.iters) * context_.ranks;
      row.within = static_cast<double>(
                       sum_over_ranks(context_, leader ? after.loopback - before.loopback : 0)) /
                   calls;
      row.across = static_cast<double>(
                       sum_over_ranks(context_, leader ? after.network - before.network : 0)) /
                   calls;
      row.ring = static_cast<double>(row.bytes) * bus_factor(collective, context_.ranks);
    }
    row.time_us = ns / 1000;
    row.algbw = static_cast<double>(row.bytes) / std::max(ns, 1.0);  // bytes per ns = GB/s
    row.busbw = row.algbw * bus_factor(collective, context_.ranks);
    row.wrong = options_.check ? check(collective, count) : -1;
    return row;
  }

  // One more call on known values; the wrong elements over all ranks.
  std::int64_t check(Collective collective, std::size_t count) {
    Context& c = context_;
    const int rank = c.rank, ranks = c.ranks;
    const DType dtype = c.dtype;
    const ReduceOp op = c.op;
    std::string first;
    std::int64_t wrong = 0;
    switch (collective) {
      case Collective::all_reduce:
        write_elements(c, input_->data(), count, [&](std::size_t i) { return pattern(rank, i); });
        issue(collective, count).wait();
        settle_stream(c);
        wrong = count_wrong(
            c, input_->data(), count, [&](std::size_t i) { return reduced(dtype, op, ranks, i); },
            first);
        break;
      case Collective::broadcast:
        write_elements(c, input_->data(), count,
                       [&](std::size_t i) { return rank == 0 ? pattern(0, i) : -1.0; });
        issue(collective, count).wait();
        settle_stream(c);
        wrong = count_wrong(
            c, input_->data(), count, [&](std::size_t i) { return pattern(0, i); }, first);
        break;
      case Collective::reduce_scatter:
        write_elements(c, input_->data(), count * static_cast<std::size_t>(ranks),
                       [&](std::size_t i) { return pattern(rank, i); });
        issue(collective, count).wait();
        settle_stream(c);
        wrong = count_wrong(
            c, output_->data(), count,
            [&](std::size_t i) {
              return reduced(dtype, op, ranks, static_cast<std::size_t>(rank) * count + i);
            },
            first);
        break;
      case Collective::all_gather:
        write_elements(c, input_->data(), count, [&](std::size_t i) {
          return pattern(rank, static_cast<std::size_t>(rank) * count + i);
        });
        issue(collective, count).wait();
        settle_stream(c);
        wrong = count_wrong(
            c, output_->data(), count * static_cast<std::size_t>(ranks),
            [&](std::size_t i) { return pattern(static_cast<int>(i / count), i); }, first);
        break;
    }
    if (wrong > 0) {
      std::cerr << fmt::format("zero-bench: rank {}: --check: {} of {} B: {} wrong values; {}\n",
                               rank, collective_name(collective), total_bytes(collective, count),
                               wrong, first);
    }
    return sum_over_ranks(c, wrong);
  }

  void header(std::string_view mode) {
    if (context_.rank != 0) return;
    const std::string iters =
        options_.iters > 0
            ? std::to_string(options_.iters)
            : fmt::format("adaptive (about {} s per size, 5 to 1000)", options_.time_per_size);
    std::cout << fmt::format(
        "# zero-bench comm ({})\n"
        "#   backend {}, {} ranks (launcher {}), device {}\n"
        "#   progress {}, dtype {}, redop {}\n"
        "#   warmup {}, iters {}, check {}\n",
        mode, context_.comm.backend(), context_.ranks, launcher_, context_.device.description(),
        progress_text_, dtype_name(context_.dtype), reduce_op_name(context_.op), options_.warmup,
        iters, options_.check ? "on" : "off");
    if (mode == "bandwidth") {
      std::cout << "#   each collective waited before the next is issued; time: the slowest "
                   "rank's average.\n"
                   "#   size: the whole buffer (count * ranks elements for reduce_scatter and "
                   "all_gather, where count\n"
                   "#   is per rank); algbw = size / time; busbw = algbw * 2(n-1)/n "
                   "(all_reduce), (n-1)/n\n"
                   "#   (reduce_scatter, all_gather), 1 (broadcast). all_reduce and broadcast "
                   "run in place.\n";
      if (options_.net_bytes) {
        std::cout << "#   within, across: bytes each rank sent per call through its node's "
                     "loopback device and through\n"
                     "#   its other network devices (/proc/net/dev; MPI over TCP between ranks "
                     "of a node uses loopback);\n"
                     "#   ring: what a ring algorithm sends, size * the bus factor.\n";
      }
    }
    std::cout << "#\n" << std::flush;
  }

  void table_header(Collective collective) {
    if (context_.rank != 0) return;
    std::cout
        << fmt::format(
               "# {}\n"
               "# {:>10}  {:>10}  {:>6}  {:>5}  {:>4}  {:>6}  {:>10}  {:>8}  {:>8}  {:>6}{}\n"
               "# {:>10}  {:>10}  {:>6}  {:>5}  {:>4}  {:>6}  {:>10}  {:>8}  {:>8}  {:>6}{}\n",
               collective_name(collective), "size", "count", "type", "redop", "root", "iters",
               "time", "algbw", "busbw", "#wrong",
               options_.net_bytes
                   ? fmt::format("  {:>12}  {:>12}  {:>12}", "within", "across", "ring")
                   : "",
               "(B)", "(elements)", "", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
               options_.net_bytes
                   ? fmt::format("  {:>12}  {:>12}  {:>12}", "(B/rank)", "(B/rank)", "(B/rank)")
                   : "")
        << std::flush;
  }

  void print_row(const Row& row) {
    if (context_.rank != 0) return;
    const bool reducing = reduces(row.collective);
    const std::string redop = reducing ? std::string(reduce_op_name(context_.op)) : "none";
    const int root = row.collective == Collective::broadcast ? 0 : -1;
    const std::string wrong = row.wrong < 0 ? "N/A" : std::to_string(row.wrong);
    const std::string bytes = row.within < 0 ? std::string()
                                             : fmt::format("  {:>12.0f}  {:>12.0f}  {:>12.0f}",
                                                           row.within, row.across, row.ring);
    std::cout << fmt::format(
                     "  {:>10}  {:>10}  {:>6}  {:>5}  {:>4}  {:>6}  {:>10.2f}  {:>8.3f}  {:>8.3f}  "
                     "{:>6}{}\n",
                     row.bytes, row.count, dtype_name(context_.dtype), redop, root, row.iters,
                     row.time_us, row.algbw, row.busbw, wrong, bytes)
              << std::flush;
    if (json_ != nullptr) {
      nlohmann::json line = common_json("bandwidth");
      line.update({{"collective", collective_name(row.collective)},
                   {"bytes", row.bytes},
                   {"count", row.count},
                   {"redop", redop},
                   {"root", root},
                   {"iters", row.iters},
                   {"time_us", row.time_us},
                   {"algbw_gbps", row.algbw},
                   {"busbw_gbps", row.busbw}});
      if (row.wrong >= 0) line["wrong"] = row.wrong;
      if (row.within >= 0) {
        line.update({{"within_node_bytes_per_rank", row.within},
                     {"across_nodes_bytes_per_rank", row.across},
                     {"ring_bytes_per_rank", row.ring}});
      }
      *json_ << line.dump() << "\n" << std::flush;
    }
  }

  nlohmann::json common_json(std::string_view mode) const {
    return {{"bench", "comm"},
            {"mode", mode},
            {"backend", context_.comm.backend()},
            {"ranks", context_.ranks},
            {"device", context_.device.description()},
            {"progress", progress_text_},
            {"dtype", dtype_name(context_.dtype)},
            {"op", reduce_op_name(context_.op)}};
  }

 private:
  const CommBenchOptions& options_;
  const Settings& settings_;
  Context& context_;
  std::string launcher_;
  std::string progress_text_;
  std::ofstream* json_;
  std::unique_ptr<Buffer> input_;
  std::unique_ptr<Buffer> output_;
};

std::string describe_progress(const Communicator& comm, comm::Progress requested) {
  if (comm.backend() != "mpi") return fmt::format("n/a ({} backend)", comm.backend());
  if (requested != comm::Progress::automatic) return std::string(comm::progress_name(requested));
  const char* from_env = std::getenv("ZERO_MPI_PROGRESS");
  if (from_env != nullptr && *from_env != '\0') {
    return fmt::format("auto (ZERO_MPI_PROGRESS={})", from_env);
  }
  return "auto (the backend's default)";
}

}  // namespace

CLI::App* add_comm_command(CLI::App& app, CommBenchOptions& o) {
  CLI::App* command = app.add_subcommand(
      "comm",
      "Algorithm and bus bandwidth of each collective per size, as nccl-tests reports them "
      "(run it on every rank: zero-run -n N -- zero-bench comm). With --overlap: how much of an "
      "all_reduce hides behind compute.");
  command->add_option("--backend", o.backend, "communicator backend: auto, local, mpi or nccl")
      ->check(CLI::IsMember({"auto", "local", "mpi", "nccl"}))
      ->capture_default_str();
  command
      ->add_option("--progress", o.progress,
                   "MPI progress: auto (ZERO_MPI_PROGRESS, else the backend's default), "
                   "thread or poll")
      ->check(CLI::IsMember({"auto", "thread", "poll"}))
      ->capture_default_str();
  command
      ->add_option("--device", o.device,
                   "where the buffers live: auto (a GPU when there is one), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  command
      ->add_option("--ops", o.ops,
                   "collectives, comma-separated: all_reduce, reduce_scatter, all_gather, "
                   "broadcast, or all")
      ->delimiter(',')
      ->check(CLI::IsMember({"all_reduce", "reduce_scatter", "all_gather", "broadcast", "all"}))
      ->capture_default_str();
  command->add_option("--dtype", o.dtype, "element type: fp32, fp16, bf16 or int64")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "int64"}))
      ->capture_default_str();
  command->add_option("--op", o.op, "reduction of all_reduce and reduce_scatter: sum, avg or max")
      ->check(CLI::IsMember({"sum", "avg", "max"}))
      ->capture_default_str();
  const CLI::Validator byte_size(
      [](std::string& text) -> std::string {
        try {
          if (parse_byte_size(text, "size") == 0) return "must be at least 1 byte";
          return {};
        } catch (const Error& error) {
          return error.what();
        }
      },
      "SIZE");
  command
      ->add_option("--min-bytes", o.min_bytes,
                   "smallest size (whole buffer; K, M, G: binary multiples)")
      ->check(byte_size)
      ->capture_default_str();
  command->add_option("--max-bytes", o.max_bytes, "largest size")
      ->check(byte_size)
      ->capture_default_str();
  command->add_option("--step-factor", o.step_factor, "size multiplier from one row to the next")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  command->add_option("--warmup", o.warmup, "untimed calls per size before timing")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  command
      ->add_option("--iters", o.iters,
                   "timed calls per size; 0: adaptive, enough for about --time-per-size "
                   "seconds from rank 0's warm-up, at least 5 and at most 1000")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  command
      ->add_option("--time-per-size", o.time_per_size,
                   "seconds of timed calls per size that adaptive --iters aims for")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_flag("--check", o.check,
                    "after timing each size, run one more call on known values (rank + 1 "
                    "patterns) and count the wrong results (#wrong); exit 1 if any");
  command->add_option("--json", o.json, "also write every row as a JSON line to FILE (rank 0)")
      ->type_name("FILE");
  command->add_flag("--overlap", o.overlap,
                    "instead of the bandwidth tables: time an all_reduce alone, a compute loop "
                    "alone (sized to the same time) and both together, and report how much of "
                    "the collective was hidden");
  command->add_option("--overlap-sizes", o.overlap_sizes, "all_reduce sizes for --overlap")
      ->delimiter(',')
      ->check(byte_size)
      ->capture_default_str();
  command
      ->add_option("--poll-every", o.poll_every,
                   "--overlap: call work.test() every N compute chunks (0: never), the "
                   "engine's wait points; what drives progress in poll mode")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  command->add_flag("--net-bytes", o.net_bytes,
                    "also the bytes each rank sent per call within its node and across nodes, "
                    "from the node's network devices (/proc/net/dev), beside a ring's");
  command->add_option("--timeout", o.timeout_s, "seconds a collective may take before it fails")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return command;
}

int run_comm_bench(const CommBenchOptions& options) {
  const Settings settings = settle(options);
  const comm::LaunchInfo launch = comm::detect_launch();
  // Log lines (the device's among them) name this rank from here on.
  log::set_rank(launch.rank);

  std::unique_ptr<std::ofstream> json;
  if (!options.json.empty() && launch.rank == 0) {
    json = std::make_unique<std::ofstream>(options.json, std::ios::trunc);
    if (!*json) {
      throw make_error(ErrorCategory::io, "--json {}: cannot open the file for writing",
                       options.json);
    }
  }

  const std::unique_ptr<Device> device =
      create_device(DeviceOptions{settings.device, launch.local_rank});
  comm::CommOptions comm_options;
  comm_options.backend = settings.backend;
  comm_options.progress = settings.progress;
  comm_options.device = device.get();
  comm_options.launch = launch;
  comm_options.timeout = std::chrono::milliseconds(std::llround(options.timeout_s * 1000));
  const std::unique_ptr<Communicator> comm = comm::create_communicator(comm_options);

  try {
    const Tier tier = device->type() == DeviceType::cpu ? Tier::host : Tier::device;
    Context context{*comm,
                    *device,
                    device->default_stream(),
                    tier,
                    settings.dtype,
                    settings.op,
                    comm->rank(),
                    comm->size(),
                    Buffer(*device, tier, 4096),
                    launch.local_rank == 0};
    CommBench bench(options, settings, context, launch.launcher,
                    describe_progress(*comm, settings.progress), json.get());
    if (options.overlap) {
      bench.overlap();
    } else {
      bench.bandwidth();
    }
    barrier(context);
  } catch (const AgreedError&) {
    // Every rank has it; rank 0 says it.
    if (comm->rank() != 0) return 1;
    throw;
  } catch (const Error& error) {
    // Errors every rank reaches alike (a --check failure) end the job normally; anything else
    // may have left the other ranks waiting in a collective, so the job ends here.
    if (comm->size() > 1) {
      std::cerr << "zero-bench: " << error.what() << "\n" << std::flush;
      comm->abort(1, error.what());
    }
    throw;
  }
  return 0;
}

}  // namespace zero::bench

// The shared-memory arrival counters.
#include "comm/mpi/arrival_board.h"

#include <fmt/format.h>

#include "comm/mpi/mpi_runtime.h"

namespace zero::comm::mpi {

ArrivalBoard::ArrivalBoard(MPI_Comm comm) {
  const std::string where = "the arrival board of a new communicator";
  MPI_Comm_size(comm, &size_);
  check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_),
        "MPI_Comm_split_type", where);
  int node_size = 0;
  MPI_Comm_size(node_, &node_size);
  // Two words per rank: the last sequence issued, and 1 once departed.
  check(MPI_Win_allocate_shared(2 * sizeof(std::uint64_t), sizeof(std::uint64_t), MPI_INFO_NULL,
                                node_, &mine_, &window_),
        "MPI_Win_allocate_shared", where);
  __atomic_store_n(mine_, 0, __ATOMIC_RELEASE);
  __atomic_store_n(mine_ + 1, 0, __ATOMIC_RELEASE);
  slots_.resize(static_cast<std::size_t>(node_size));
  for (int r = 0; r < node_size; ++r) {
    MPI_Aint bytes = 0;
    int unit = 0;
    check(MPI_Win_shared_query(window_, r, &bytes, &unit, &slots_[static_cast<std::size_t>(r)]),
          "MPI_Win_shared_query", where);
  }
  // Node ranks -> ranks of `comm`.
  MPI_Group node_group, comm_group;
  MPI_Comm_group(node_, &node_group);
  MPI_Comm_group(comm, &comm_group);
  std::vector<int> node_ranks(static_cast<std::size_t>(node_size));
  for (int r = 0; r < node_size; ++r) node_ranks[static_cast<std::size_t>(r)] = r;
  ranks_.resize(static_cast<std::size_t>(node_size));
  MPI_Group_translate_ranks(node_group, node_size, node_ranks.data(), comm_group, ranks_.data());
  MPI_Group_free(&node_group);
  MPI_Group_free(&comm_group);
  // Every counter is zero before anyone issues a collective.
  check(MPI_Barrier(node_), "MPI_Barrier", where);
}

void ArrivalBoard::release(bool usable) noexcept {
  if (!usable) return;
  if (window_ != MPI_WIN_NULL) MPI_Win_free(&window_);
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
}

void ArrivalBoard::issued(std::uint64_t sequence) noexcept {
  __atomic_store_n(mine_, sequence, __ATOMIC_RELEASE);
}

void ArrivalBoard::depart() noexcept {
  if (mine_ != nullptr) __atomic_store_n(mine_ + 1, 1, __ATOMIC_RELEASE);
}

std::string ArrivalBoard::departed_before(std::uint64_t sequence) const {
  std::string gone;
  for (std::size_t r = 0; r < slots_.size(); ++r) {
    // The flag first: a rank marks it after its last issue, so its counter is then final.
    if (__atomic_load_n(slots_[r] + 1, __ATOMIC_ACQUIRE) == 0) continue;
    const std::uint64_t last = __atomic_load_n(slots_[r], __ATOMIC_ACQUIRE);
    if (last < sequence) {
      gone +=
          fmt::format("{}rank {} (it left after #{})", gone.empty() ? "" : ", ", ranks_[r], last);
    }
  }
  return gone;
}

std::string ArrivalBoard::missing(std::uint64_t sequence) const {
  std::string late;
  for (std::size_t r = 0; r < slots_.size(); ++r) {
    const std::uint64_t last = __atomic_load_n(slots_[r], __ATOMIC_ACQUIRE);
    if (last < sequence) {
      late += fmt::format("{}{} (last issued #{})", late.empty() ? "" : ", ", ranks_[r], last);
    }
  }
  std::string text;
  if (!late.empty()) text = "ranks that have not issued it: " + late;
  const int elsewhere = size_ - static_cast<int>(slots_.size());
  if (elsewhere > 0) {
    text += fmt::format("{}{} rank{} on other nodes could not be checked", text.empty() ? "" : "; ",
                        elsewhere, elsewhere == 1 ? "" : "s");
  }
  return text;
}

}  // namespace zero::comm::mpi

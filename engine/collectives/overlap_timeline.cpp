#include "engine/collectives/overlap_timeline.h"

#include <algorithm>

namespace zero::engine {

namespace {

using Spans = std::vector<std::pair<double, double>>;

// The union as sorted, disjoint intervals.
Spans merged(Spans spans) {
  std::erase_if(spans, [](const auto& s) { return !(s.second > s.first); });
  std::sort(spans.begin(), spans.end());
  Spans out;
  for (const auto& s : spans) {
    if (!out.empty() && s.first <= out.back().second) {
      out.back().second = std::max(out.back().second, s.second);
    } else {
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace

double union_length(Spans spans) {
  double total = 0;
  for (const auto& s : merged(std::move(spans))) total += s.second - s.first;
  return total;
}

double overlap_length(Spans a, Spans b) {
  const Spans x = merged(std::move(a));
  const Spans y = merged(std::move(b));
  double total = 0;
  std::size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    const double lo = std::max(x[i].first, y[j].first);
    const double hi = std::min(x[i].second, y[j].second);
    if (hi > lo) total += hi - lo;
    if (x[i].second < y[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

Event& OverlapTimeline::next_event() {
  MicroStep& m = current();
  if (m.used == m.events.size()) m.events.push_back(device_.create_event(/*timing=*/true));
  return *m.events[m.used++];
}

void OverlapTimeline::start(Stream& caller) {
  MicroStep& m = current();
  m.used = 0;
  m.compute.clear();
  m.comms.clear();
  comm_open_ = false;
  compute_depth_ = 0;
  m.origin = &next_event();
  m.origin->record(caller);
  recording_ = true;
}

void OverlapTimeline::compute_begin(Stream& caller) {
  if (!recording_ || compute_depth_++ > 0) return;
  Event& begin = next_event();
  begin.record(caller);
  current().compute.push_back({&begin, nullptr, Kind::reduction});
}

void OverlapTimeline::compute_end(Stream& caller) {
  if (!recording_ || compute_depth_ == 0 || --compute_depth_ > 0) return;
  Event& end = next_event();
  end.record(caller);
  current().compute.back().end = &end;
}

void OverlapTimeline::comm_begin(Kind kind, Stream& inputs, Stream& comm_stream) {
  if (!recording_) return;
  if (!ready_) ready_ = device_.create_event();
  ready_->record(inputs);
  ready_->block(comm_stream);
  Event& begin = next_event();
  begin.record(comm_stream);
  current().comms.push_back({&begin, nullptr, kind});
  comm_open_ = true;
}

void OverlapTimeline::comm_end(Stream& comm_stream) {
  if (!recording_ || !comm_open_) return;
  Event& end = next_event();
  end.record(comm_stream);
  current().comms.back().end = &end;
  comm_open_ = false;
}

void OverlapTimeline::collect() {
  recording_ = false;
  comm_open_ = false;
  if (pending_) {
    resolve(micro_[1 - current_]);
    pending_ = false;
  }
  if (current().origin == nullptr) return;
  pending_ = true;
  current_ = 1 - current_;  // the next micro-step records into the one just resolved
}

OverlapTimeline::Totals OverlapTimeline::take() {
  if (pending_) {
    resolve(micro_[1 - current_]);
    pending_ = false;
  }
  return std::exchange(totals_, {});
}

void OverlapTimeline::resolve(MicroStep& m) {
  const auto at = [&](Event* event) {
    event->synchronize();
    return static_cast<double>(event->elapsed_ms_since(*m.origin));
  };
  Spans compute, reductions, gathers, copies;
  for (const Span& s : m.compute) {
    if (s.end != nullptr) compute.emplace_back(at(s.begin), at(s.end));
  }
  for (const Span& s : m.comms) {
    if (s.end == nullptr) continue;
    Spans& spans = s.kind == Kind::reduction ? reductions
                   : s.kind == Kind::gather  ? gathers
                                             : copies;
    spans.emplace_back(at(s.begin), at(s.end));
  }
  totals_.compute_ms += union_length(compute);
  totals_.reduction_ms += union_length(reductions);
  totals_.reduction_overlap_ms += overlap_length(reductions, compute);
  totals_.gather_ms += union_length(gathers);
  totals_.gather_overlap_ms += overlap_length(gathers, compute);
  totals_.copy_ms += union_length(copies);
  totals_.copy_overlap_ms += overlap_length(copies, compute);
  m.origin = nullptr;
  m.compute.clear();
  m.comms.clear();
}

}  // namespace zero::engine

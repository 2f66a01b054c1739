#include "scheduler/trace.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace strata::sched {

namespace {
constexpr double kMs = 1e-6;  // ns -> ms

// Length of the union of [start, end) intervals (sorted in place).
int64_t union_ns(std::vector<std::pair<int64_t, int64_t>>& spans) {
  std::sort(spans.begin(), spans.end());
  int64_t total = 0, cur_s = -1, cur_e = -1;
  for (const auto& [s, e] : spans) {
    if (s > cur_e) {
      total += cur_e - cur_s;
      cur_s = s;
      cur_e = e;
    } else {
      cur_e = std::max(cur_e, e);
    }
  }
  return total + (cur_e - cur_s);
}
}  // namespace

StepMetrics compute_metrics(const Plan& plan, const StepTrace& trace) {
  StepMetrics m;
  m.step_ms = static_cast<double>(trace.step_ns) * kMs;
  const size_t n = std::min(plan.num_tasks(), trace.spans.size());
  auto ran = [&](TaskId t) { return trace.spans[static_cast<size_t>(t)].end_ns >= 0; };
  auto span = [&](TaskId t) -> const Span& { return trace.spans[static_cast<size_t>(t)]; };
  for (int lane = 0; lane < kNumLanes; ++lane) {
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (TaskId t : plan.lane_tasks(Lane(lane))) {
      if (static_cast<size_t>(t) < n && ran(t))
        spans.emplace_back(span(t).start_ns, span(t).end_ns);
    }
    m.busy_ms[lane] = static_cast<double>(union_ns(spans)) * kMs;
  }
  // Exposed transfer: gaps before compute tasks whose last-ending dependency is a transfer.
  int64_t prev_end = 0, last_compute_end = 0;
  for (TaskId t : plan.lane_tasks(Lane::kCompute)) {
    if (static_cast<size_t>(t) >= n || !ran(t)) continue;
    TaskId latest = -1;
    plan.for_each_predecessor(t, [&](TaskId p) {
      if (plan.task(p).lane != Lane::kCompute && ran(p) &&
          (latest < 0 || span(p).end_ns > span(latest).end_ns)) {
        latest = p;
      }
    });
    if (latest >= 0 && is_transfer_lane(plan.task(latest).lane)) {
      const int64_t waited = std::min(span(t).start_ns, span(latest).end_ns) - prev_end;
      if (waited > 0) m.exposed_transfer_ms += static_cast<double>(waited) * kMs;
    }
    prev_end = std::max(prev_end, span(t).end_ns);
    last_compute_end = std::max(last_compute_end, span(t).end_ns);
  }
  int64_t end_all = 0;
  TaskId last = -1;
  for (size_t t = 0; t < n; ++t) {
    if (ran(TaskId(t)) && trace.spans[t].end_ns >= end_all) {
      end_all = trace.spans[t].end_ns;
      last = TaskId(t);
    }
  }
  m.optimizer_tail_ms =
      static_cast<double>(std::max<int64_t>(trace.step_ns - last_compute_end, 0)) * kMs;
  // Critical path: from the last task back through the predecessor that ended last.
  int64_t on_path_ns = 0;
  for (TaskId t = last; t >= 0;) {
    const Span& s = span(t);
    m.critical_path_ms[static_cast<int>(plan.task(t).lane)] +=
        static_cast<double>(s.end_ns - s.start_ns) * kMs;
    on_path_ns += s.end_ns - s.start_ns;
    ++m.critical_path_tasks;
    m.critical_path_head = plan.task(t).name;
    TaskId pred = -1;
    plan.for_each_predecessor(t, [&](TaskId p) {
      if (ran(p) && (pred < 0 || span(p).end_ns > span(pred).end_ns)) pred = p;
    });
    t = pred;
  }
  m.critical_path_wait_ms = static_cast<double>(end_all - on_path_ns) * kMs;
  return m;
}

std::string StepMetrics::describe() const {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(2);
  o << "step " << step_ms << " ms; busy:";
  for (int lane = 0; lane < kNumLanes; ++lane) {
    if (busy_ms[lane] > 0) o << " " << lane_name(Lane(lane)) << " " << busy_ms[lane];
  }
  o << " ms; exposed transfer " << exposed_transfer_ms << " ms; optimizer tail "
    << optimizer_tail_ms << " ms; critical path " << critical_path_tasks << " tasks from '"
    << critical_path_head << "':";
  for (int lane = 0; lane < kNumLanes; ++lane) {
    if (critical_path_ms[lane] > 0)
      o << " " << lane_name(Lane(lane)) << " " << critical_path_ms[lane];
  }
  o << " ms, waiting " << critical_path_wait_ms << " ms";
  return o.str();
}

void TraceWriter::add_step(const Plan& plan, const StepTrace& trace) {
  const size_t n = std::min(plan.num_tasks(), trace.spans.size());
  for (size_t t = 0; t < n; ++t) {
    const Span& s = trace.spans[t];
    if (s.end_ns < 0) continue;
    const int tid = static_cast<int>(plan.task(TaskId(t)).lane) * 100 + s.worker;
    if (std::find(tids_.begin(), tids_.end(), tid) == tids_.end()) tids_.push_back(tid);
    events_.push_back(Event{plan.task(TaskId(t)).name, tid,
                            offset_us_ + static_cast<double>(s.start_ns) * 1e-3,
                            static_cast<double>(s.end_ns - s.start_ns) * 1e-3, trace.step});
  }
  offset_us_ += static_cast<double>(trace.step_ns) * 1e-3 + 10.0;
}

nlohmann::json TraceWriter::events(int pid, const std::string& process) const {
  nlohmann::json events = nlohmann::json::array();
  if (!process.empty()) {
    events.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", process}}}});
    events.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", pid},
                      {"args", {{"sort_index", pid}}}});
  }
  for (int tid : tids_) {
    const std::string lane(lane_name(Lane(tid / 100)));
    const bool multi =
        std::count_if(tids_.begin(), tids_.end(), [&](int o) { return o / 100 == tid / 100; }) > 1;
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", pid},
                      {"tid", tid},
                      {"args", {{"name", multi ? lane + "." + std::to_string(tid % 100) : lane}}}});
    events.push_back({{"ph", "M"},
                      {"name", "thread_sort_index"},
                      {"pid", pid},
                      {"tid", tid},
                      {"args", {{"sort_index", tid}}}});
  }
  for (const Event& e : events_) {
    events.push_back({{"ph", "X"},
                      {"name", e.name},
                      {"cat", std::string(lane_name(Lane(e.tid / 100)))},
                      {"pid", pid},
                      {"tid", e.tid},
                      {"ts", e.ts_us},
                      {"dur", e.dur_us},
                      {"args", {{"step", e.step}}}});
  }
  return events;
}

std::string TraceWriter::json() const {
  return nlohmann::json{{"traceEvents", events(1, "")}, {"displayTimeUnit", "ms"}}.dump(1);
}

std::string TraceWriter::events_json(int pid, const std::string& process) const {
  return events(pid, process).dump();
}

namespace {

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  if (!out)
    return make_error(ErrorCode::kIo, "cannot open the trace file '", path, "' for writing");
  out << text << "\n";
  out.close();
  if (!out) return make_error(ErrorCode::kIo, "writing the trace file '", path, "' failed");
  return ok_status();
}

}  // namespace

Status TraceWriter::write(const std::string& path) const { return write_text(path, json()); }

Status TraceWriter::write_joined(const std::string& path, const std::vector<std::string>& arrays) {
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& a : arrays) {
    nlohmann::json part = nlohmann::json::parse(a, nullptr, false);
    if (!part.is_array()) {
      return make_error(ErrorCode::kInternal, "a rank's trace events are not a JSON array");
    }
    for (auto& e : part) all.push_back(std::move(e));
  }
  return write_text(path, nlohmann::json{{"traceEvents", all}, {"displayTimeUnit", "ms"}}.dump(1));
}

}  // namespace strata::sched

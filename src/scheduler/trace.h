// StepTrace: when every task of one replayed step started and ended, on which lane and worker;
// StepMetrics derived from it (busy time per lane, exposed transfer, optimizer tail, critical
// path); TraceWriter: Chrome trace-event JSON of one or a few steps, which opens in Perfetto
// (ui.perfetto.dev) and chrome://tracing.
//
// Times are nanoseconds from the start of the step. A stream-lane task's span is measured on
// the stream (host callbacks before and after its work), a host-lane task's on its worker.
// Thread safety: a StepTrace is written by the Executor during replay() and read after it.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "scheduler/lane.h"
#include "scheduler/plan.h"

namespace strata::sched {

struct Span {
  int64_t start_ns = -1;  // -1: did not run (the step failed first)
  int64_t end_ns = -1;
  int32_t worker = 0;  // host lanes: worker thread index (a track of its own in the trace)
};

struct StepTrace {
  int64_t step = 0;
  int64_t step_ns = 0;      // the whole replay, as the caller saw it
  std::vector<Span> spans;  // by TaskId
};

struct StepMetrics {
  double step_ms = 0;
  double busy_ms[kNumLanes] = {};  // union of the lane's task spans
  // Time the compute lane sat idle while the task it was about to run waited on a transfer-lane
  // task (h2d, d2h, link, nvme, comm) it depends on.
  double exposed_transfer_ms = 0;
  // From the end of the last compute-lane task to the end of the step.
  double optimizer_tail_ms = 0;
  // The chain of tasks that ended the step: walking back from the last task to end, each step
  // to the predecessor (dependency, memory dependency or lane predecessor) that ended last.
  double critical_path_ms[kNumLanes] = {};  // task time on that chain, per lane
  double critical_path_wait_ms = 0;         // gaps on that chain (dispatch, synchronisation)
  int critical_path_tasks = 0;
  std::string critical_path_head;  // name of the first task on the chain

  // Several lines: busy per lane, exposed transfer, optimizer tail, critical path.
  std::string describe() const;
};

StepMetrics compute_metrics(const Plan& plan, const StepTrace& trace);

// Collects steps and writes them as {"traceEvents": [...]} ("X" complete events, one track per
// lane and worker, named by "thread_name" metadata); steps follow each other on the time axis.
class TraceWriter {
 public:
  void add_step(const Plan& plan, const StepTrace& trace);
  // Writes the file (kIo naming the path when it cannot).
  Status write(const std::string& path) const;
  std::string json() const;
  size_t num_events() const { return events_.size(); }
  // The events alone, a JSON array, as process `pid` named `process` (train_gpt under mpirun:
  // every rank's array, joined by write_joined, makes one trace with a process per rank).
  std::string events_json(int pid, const std::string& process) const;
  static Status write_joined(const std::string& path, const std::vector<std::string>& arrays);

 private:
  nlohmann::json events(int pid, const std::string& process) const;
  struct Event {
    std::string name;
    int tid;
    double ts_us, dur_us;
    int64_t step;
  };
  std::vector<Event> events_;
  std::vector<int> tids_;
  double offset_us_ = 0;
};

}  // namespace strata::sched

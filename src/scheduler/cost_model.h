// Cost model: the step time a finalized Plan would take on a machine, predicted by simulating its
// replay with a cost per task (DESIGN.md §4: the plan is checked, simulated and replayed).
//
// A task's duration is the rates' fixed overhead per task plus, for every kind of work it
// declares (Plan::add_work), the amount over the machine's rate of that kind. The simulation
// replays the plan as the Executor does: a task starts when every predecessor has completed
// (dependencies, memory dependencies, the previous task of an in-order lane) and its lane has
// room (one task at a time on compute, h2d, d2h and comm; nvme_workers and cpu_workers on the
// nvme and cpu lanes); ready host tasks start in plan-walk order (Plan::order()).
//
// Shared cores (Rates::shared_cores): where the device is the host's own cores (CpuDevice), the
// compute lane's kernels, the cpu lane's Adam and checks, the copies of h2d and d2h (memcpy) and
// the comm lane's host reductions all run on the same cores and do not speed each other up by
// running at once; the simulation runs them one at a time (processor sharing of the same cores
// gives the same total). The nvme lane mostly waits on the disk and runs beside them.
//
// Shared disk (Rates::shared_disk): the nvme lane's rates are the disk's totals, and the tasks
// the lane runs at once (up to nvme_workers) share it: after its dispatch (task_overhead_s, not
// shared), while k tasks are on the disk each progresses at 1/k of its own pace (three small reads
// issued together on the test machine all completed after about three requests' time; one after the
// other, the first would have been ready after one). A draining disk (Rates::disk_drains)
// reports the requests it holds done together, when it has none left: the test machine's
// virtual disk does (a 58 KiB read issued with a 600 KiB one completed with it, at 393 us, where
// alone it took 175; issued 150 us after it, it still completed with it), so there the small
// reads of a step's first layer wait for the large ones beside them.
//
// The disk's requests on the cores (Rates::nvme_cpu_op_s, nvme_cpu_byte_s): with shared cores,
// each nvme task also takes the host's CPU for its request (submission, completion, the
// threads' wake-ups, the checksum of its bytes); when it starts while a task of the shared
// cores runs, that task ends so much later (the rank's one core on the test machine ran its
// kernels 4-9% slower with parameters and optimizer state on NVMe than in pinned memory). While
// the cores are idle it is done in their idle time: what is left of it when the next task of
// theirs starts delays that one.
//
// Hand-offs (Rates::handoff_s): a compute task that is the first of its lane to depend on a
// transfer task (a predecessor on the h2d, d2h, nvme or comm lane that no earlier compute task
// depends on) costs handoff_s more: the threads' wake-ups from one lane to the next and, with
// several ranks, the wait at the collective for the slowest rank, which the tasks' own costs do
// not hold. Later compute tasks that depend on the same transfer (a layer's ops for several
// micro-batches after one gather) follow their predecessor on the compute lane and are not
// charged again. Only active tasks count (both ends).
//
// Values; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "scheduler/plan.h"

namespace strata::sched {

struct Rates {
  double per_second[kNumWorkKinds] = {};  // units of each Work kind per second
  double task_overhead_s = 0.0;           // fixed cost of dispatching one task
  double handoff_s = 0.0;                 // a compute task's first wait for a transfer (above)
  bool shared_cores = false;              // every lane but nvme runs on the same cores
  bool shared_disk = false;               // the nvme lane's tasks at once share the disk
  bool disk_drains = false;               // and are done together when none is left (above)
  double nvme_cpu_op_s = 0.0;             // with shared cores: the CPU of an nvme request (above)
  double nvme_cpu_byte_s = 0.0;           // and of each byte it moves
  int nvme_workers = 4;                   // as ExecutorOptions
  int cpu_workers = 2;
  double rate(Work w) const { return per_second[static_cast<int>(w)]; }
};

struct Prediction {
  double step_s = 0.0;              // the simulated step, start to last completion
  double busy_s[kNumLanes] = {};    // time each lane had a task running
  double work[kNumWorkKinds] = {};  // the plan's total of each kind of work
  double exposed_s = 0.0;           // compute lane idle while its next task waits on transfers
  std::string describe() const;     // one line: step time, busy per lane
};

// Fails (kConfig) when the plan is not finalized, or when a task has work of a kind whose rate is
// not positive (naming the kind and the task).
// `active` (by TaskId, when given): the tasks that do their work in the replay simulated; the
// others cost only the overhead of dispatching them (a task whose replay has nothing for it).
Result<Prediction> simulate(const Plan& plan, const Rates& rates,
                            const std::vector<bool>* active = nullptr);

}  // namespace strata::sched

#include "engine/zero/plan/builder.h"

#include <utility>

#include "engine/collective_work.h"

namespace strata::engine::zero {

sched::BufferId PlanBuilder::add_buffer(BufferKind kind, std::string name, sched::Tier tier,
                                        uint64_t bytes, bool initially_valid) {
  notes.kinds.push_back(kind);
  return plan.add_buffer(std::move(name), tier, bytes, initially_valid);
}

void PlanBuilder::runs_when(sched::TaskId first, RunsWhen w) {
  notes.when.resize(plan.num_tasks(), RunsWhen::kEvery);
  for (size_t t = size_t(first); t < notes.when.size(); ++t) notes.when[t] = w;
}

void PlanBuilder::task_runs_when(sched::TaskId t, RunsWhen w) {
  notes.when.resize(plan.num_tasks(), RunsWhen::kEvery);
  notes.when[size_t(t)] = w;
}

void PlanBuilder::nvme_work(sched::TaskId t, sched::Work w, double bytes) {
  work(t, w, bytes);
  work(t, sched::Work::kNvmeOps, 1.0);
}

void PlanBuilder::collective_work(sched::TaskId t, comm::CollectiveKind kind, size_t count,
                                  DType dt, int rank, int ranks, bool on_device) {
  add_collective_work(plan, t, collective(kind, count, dt), rank, ranks, on_device);
}

}  // namespace strata::engine::zero

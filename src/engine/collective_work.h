// The cost model's work of one collective call (sched::Plan::add_work), for the step's plans and
// the compute probe's step-shaped ones alike: one call, the bytes this rank sends (moving calls
// and reducing ones apart: reductions sum as they go, at a rate of their own), and the bytes its
// host passes over (copies and, for a reduction, the sums).
#pragma once

#include "comm/communicator.h"
#include "scheduler/plan.h"

namespace strata::engine {

// On device buffers (`on_device`): the device links' kinds of work, and no host pass.
inline void add_collective_work(sched::Plan& plan, sched::TaskId t,
                                const comm::CollectiveCall& call, int rank, int ranks,
                                bool on_device = false) {
  using comm::CollectiveKind;
  using sched::Work;
  const bool reduces = call.kind == CollectiveKind::kReduceScatter ||
                       call.kind == CollectiveKind::kAllReduce ||
                       call.kind == CollectiveKind::kReduce;
  const double sent = double(comm::textbook_bytes(call, rank, ranks).sent);
  if (on_device) {
    plan.add_work(t, reduces ? Work::kLinkReduceCalls : Work::kLinkCalls, 1.0);
    plan.add_work(t, reduces ? Work::kLinkReduceBytes : Work::kLinkBytes, sent);
    return;
  }
  plan.add_work(t, reduces ? Work::kNetReduceCalls : Work::kNetCalls, 1.0);
  plan.add_work(t, reduces ? Work::kNetReduceBytes : Work::kNetBytes, sent);
  plan.add_work(t, Work::kHostBytes, double(call.count * size_t(ranks) * dtype_size(call.dtype)));
}

}  // namespace strata::engine

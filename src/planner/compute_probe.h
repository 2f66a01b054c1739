// The compute probe of calibration (calibration.h): the model's entry points on one- and
// two-layer copies of the model (same width, heads, vocabulary, batch, sequence and dtype),
// replayed through the Executor's threads in two shapes:
//   - back to back: the ops one after the other on the compute lane (the kernels' rate);
//   - as a step replays them: each op after a gather on the comm lane and an upload on the h2d
//     lane, the gathers one op ahead as the step's prefetch runs, and after each backward op a
//     reduction (tiny: their bytes are the cost model's other kinds of work; what they carry
//     here is the hand-offs between the lanes' threads, each collective's latency, which the
//     network's rates already charge, and, with several ranks, the wait at each collective for
//     the slowest rank).
// The four replays alternate after a quarter of a second of warm-up (2 to 15 timed rounds, a
// second of them when replays are short).
// The difference of the back-to-back medians is a layer's forward + backward (Work::kFlops),
// the rest the shared block's (embedding, head, loss: kFlopsHead). The step shape's extra time
// per op is kept with the mean op time: fit_handoff turns it into Rates::handoff_s, the part of
// it the cost model does not already charge (the small tasks' dispatch, cost_model.h), charged
// where a compute task first waits on a transfer.
//
// Why apart: on the 2-vCPU test machine two ranks' steps ran their compute 10-25% slower than
// the model's entry points queued back to back predicted, and waited 2.5-4 ms a step between
// them (a collective posted while a rank computes completes after that op; the ranks' times for
// one op differ by up to 40% from op to op), so the 2-rank step was predicted 14-26% short.
// Folding that into the compute rate (probe version 4) fixed it for steps where every op waits
// on a gather, but charged it to every op of a layer-major step too, whose K micro-batches'
// ops of a layer share one gather.
//
// With several ranks (rq.comm->size() > 1) every rank must call it (collective).
#pragma once

#include <vector>

#include "core/status.h"
#include "planner/calibration.h"
#include "scheduler/cost_model.h"

namespace strata::planner {

struct ComputeProbe {
  double layer_flops_per_s = 0.0;  // back to back
  double head_flops_per_s = 0.0;
  double step_extra_s = 0.0;  // per op: shaped as a step minus back to back (either sign)
  double op_s = 0.0;          // per op: back to back
};

Result<ComputeProbe> measure_compute(const CalibrationRequest& rq);

// Rates::handoff_s from a probe and the other rates: the probe's step-shaped extra per op less
// what the cost model charges for the step shape without hand-offs (it simulates the probe's
// plans with ops of probe.op_s, their collectives among `ranks` and their uploads declared as
// the step's are: the collectives' latency is the network's rates', not a hand-off), at least
// zero.
Result<double> fit_handoff(const ComputeProbe& probe, const sched::Rates& rates, int ranks);

}  // namespace strata::planner

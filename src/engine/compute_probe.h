// The compute probe of calibration (calibration.h): the model's entry points on one- and
// two-layer copies of the model (same width, heads, vocabulary, batch, sequence and dtype),
// replayed as a step replays them, so that the rate includes what the step's compute meets
// besides its kernels:
//   - each entry point is one task of the compute lane, after a gather on the comm lane and an
//     upload on the h2d lane, the gathers one op ahead as the step's prefetch runs, and after
//     each backward op a reduction (tiny: their bytes are the cost model's other kinds of work;
//     what they carry here is the hand-offs between the lanes' threads and, with several ranks,
//     the wait at each collective for the slowest rank);
//   - the Executor's own threads and dispatch, as in a step.
// The two copies alternate after a quarter of a second of warm-up (seven timed replays each):
// the difference of the medians is a layer's forward + backward (Work::kFlops), the rest the
// shared block's (embedding, head, loss: kFlopsHead).
//
// Why: on the 2-vCPU test machine two ranks' steps ran their compute 10-25% slower than the
// model's entry points queued back to back predicted, and waited 2.5-4 ms a step between them
// (a collective posted while a rank computes completes after that op; the ranks' times for one
// op differ by up to 40% from op to op), so the 2-rank step was predicted 14-26% short.
//
// With several ranks (rq.comm->size() > 1) every rank must call it (collective).
#pragma once

#include <vector>

#include "core/status.h"
#include "engine/calibration.h"

namespace strata::engine {

// {layer FLOP/s, shared block FLOP/s}.
Result<std::vector<double>> measure_compute(const CalibrationRequest& rq);

}  // namespace strata::engine

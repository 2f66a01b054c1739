// The held-out evaluation of train_gpt (after the step's pending update is applied): token data
// by the model's own mean cross-entropy (computed on the device, averaged over the validation
// batches, all of whose targets count); the synthetic task by the mean over its answer tokens,
// from the logits on the host (float64 sums), with the answer-token accuracy and exact match.
// Every rank evaluates the same parameters on the same batches (a stage-3 model gathers).
#pragma once

#include "core/status.h"
#include "metrics_file.h"
#include "run.h"

namespace strata::train_gpt {

struct Evaluation {
  double val_loss = 0.0;
  double token = 0.0, exact_match = 0.0;  // the synthetic task only
};

Result<Evaluation> evaluate(const Run& run);

// The evaluation after step `step` (a pending update applied first), its line (rank 0) and its
// --metrics record; whether the synthetic task reached --target-accuracy (rank 0's figure,
// broadcast, so that every rank stops at the same step). `accuracy`: the answer-token accuracy.
Result<bool> evaluate_at(const Run& run, int64_t step, MetricsFile& metrics, double& accuracy);

}  // namespace strata::train_gpt

// What train_gpt prints about a run on rank 0: the banner before the first step (the model, the
// config in effect, the data, the ZeRO layout, the optimizer's tiers, the swap store, the memory
// and the schedule), one line per logged step, and the summary at the end.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/offload_step.h"
#include "run.h"
#include "scheduler/trace.h"

namespace strata::train_gpt {

void print_banner(const Run& run);

struct StepLine {
  int64_t step = 0;
  engine::StepResult result;
  float lr = 0.0f;
  double ms = 0.0, tokens_per_s = 0.0, mfu = 0.0;  // mfu 0: not known
};
// "step N/M | loss ... | norm ... | lr ... | ms | tok/s [| MFU] | mem ... [| scale]".
void print_step_line(const Run& run, const StepLine& line);

// The step's --metrics record; `elapsed_s`: wall-clock seconds since training started, at the
// end of the step's work (the step's time with everything the trainer does around the engine).
nlohmann::json step_record(const StepLine& line, double elapsed_s);

// "train_gpt: summary: ..." (steps, tokens, time, throughput, peak memory per tier), then the
// predicted against the measured step time when there is a prediction (`versus`).
void print_summary(const Run& run, int64_t steps_done, double seconds, const std::string& versus);

// --trace: whether step `step` is one the trace keeps (steps 2 .. 2 + --trace-steps - 1; only
// those pay for the stream callbacks); record_trace() adds its spans, prints its lane metrics
// and traffic (rank 0), and writes the file after the last of them.
bool traced_step(const Flags& f, int64_t step);
Status record_trace(const Run& run, sched::TraceWriter& trace, int64_t step);

}  // namespace strata::train_gpt

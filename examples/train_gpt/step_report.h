// train_gpt's messages about a run that are more than a line of code each: the per-step traffic
// of a traced ZeRO step, the advice when the model does not fit the device, the NVMe share the
// optimizer's partitions reached, and the line that says where an interrupted run stopped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/engine_config.h"
#include "engine/step_reports.h"
#include "flags.h"

namespace strata::train_gpt {

// "comm step N: ...", "lanes step N: ..." and the bytes per collective kind (rank 0, --trace).
void print_step_traffic(int64_t step, const engine::StepTraffic& traffic,
                        const comm::Communicator& world);

// What a run of `config` that does not fit the device has not tried yet (the flags to name).
std::string out_of_memory_advice(const engine::EngineConfig& config);

// "; NVMe share 0.031 (--optimizer-nvme-fraction 0.5, rounded to whole partitions of 4)", or ""
// without a fraction.
std::string nvme_share_text(double fraction, uint64_t nvme_state_bytes,
                            const std::vector<int64_t>& numel);

// Where an interrupted run stopped.
struct StopReport {
  int signal = 0;
  int64_t next_step = 0;  // the step it did not start (steps + 1: after the last)
  int64_t steps = 0, steps_done = 0, saved_step = 0;
  std::string checkpoint_dir, resume_dir;
  bool outputs = false, swap_files = false;
};
void print_stop(const StopReport& r);

}  // namespace strata::train_gpt

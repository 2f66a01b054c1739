// bench_zero's micro-batch order case (issue 31): stage 3 with the parameter shards at a home,
// K micro-batches a step, the micro-batch-major order against the segment-major one.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "zero_stack.h"

namespace strata::bench_zero {

struct OrderCase {
  Shape shape;  // micros: K; batch: rows per micro-batch
  engine::Home param_home = engine::Home::kNvme;
  std::string nvme_dir;  // the stacks' swap store directory
  double link = 0, cuda_gib = 0;
  int repeats = 7;
};

// Runs micro-batch-major, segment-major reducing each micro-batch's gradients, and segment-major
// summing them on the device (checkpoint interval 1 for all, so each layer is a segment), in
// turn, forwards then backwards every other repeat, after a warm-up step each; prints a table on
// rank 0 and returns the case's JSON: the medians of the step times, the lane bytes per step of
// each, layer_major_speedup (micro-batch-major's step over segment-major's with the device sum;
// layer_major_reduce_each_speedup without it) and layer_major_param_read_bytes_ratio
// (segment-major's parameter read bytes over micro-batch-major's: NVMe reads with the shards on
// NVMe, uploads otherwise).
nlohmann::json run_order_case(const OrderCase& oc, comm::Communicator& world);

}  // namespace strata::bench_zero

// bench_zero's stacks: one rank's device, GPT model, session and ZeRO step for a case, and the
// synthetic batches they train on (bench_zero.cpp, microbatch_order.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/session.h"
#include "gpu/device.h"
#include "model/gpt.h"

namespace strata::bench_zero {

struct Shape {
  // 12 layers (GPT-2 small's depth): with clipping the update is rotated into the next step and
  // the first layer's update and upload cannot overlap anything, one layer's transfer per step
  // whose share falls as 1/L (at L = 4 it alone is 5-8% of the step).
  int64_t layers = 12, channels = 128, heads = 4, batch = 16, seq = 64;
  int prefetch_depth = 2;
  int64_t checkpoint = 0;        // the checkpoint interval (0: every activation kept)
  int micros = 1;                // micro-batches of `batch` rows per step (--grad-accum)
  bool layer_major = false;      // their segment-major order (--microbatch-order layer)
  bool device_grad_sum = false;  // stages 2-3, segment-major: --device-grad-sum
};

// One rank's model, optimizer and ZeRO step.
struct Stack {
  std::unique_ptr<gpu::Device> dev;
  std::unique_ptr<model::GptModel> model;
  std::unique_ptr<engine::Session> session;
  engine::ZeroStep* step = nullptr;  // the session's
};

// The device of a stack: a CpuDevice with one thread behind the modelled link (`link` bytes/s),
// or (cuda_gib > 0) this rank's GPU with a pool of cuda_gib GiB.
std::unique_ptr<gpu::Device> make_device(double link, double cuda_gib, comm::Communicator& world);

// A stack at `stage` with the optimizer's state `nvme_fraction` on NVMe (nvme_dir: the directory
// of the stack's own swap store) and stage 3's shards at `offload_param`. Exits on failure.
Stack make_stack(const Shape& s, int stage, double nvme_fraction, const std::string& nvme_dir,
                 double link, comm::Communicator& world,
                 engine::Home offload_param = engine::Home::kPinned, double cuda_gib = 0);

// A step's tokens and targets for every micro-batch of a shape, deterministic per (step, rank).
struct Batch {
  std::vector<int32_t> tokens, targets;
  explicit Batch(const Shape& s)
      : tokens(static_cast<size_t>(s.batch * s.seq * s.micros)), targets(tokens.size()) {}
  void make(int64_t step, int rank) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const size_t k = i * 7 + static_cast<size_t>(step) + static_cast<size_t>(rank) * 3;
      tokens[i] = static_cast<int32_t>(k % 13);
      targets[i] = static_cast<int32_t>((k + 7) % 13);
    }
  }
};

}  // namespace strata::bench_zero

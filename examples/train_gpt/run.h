// A training run's parts, built by main in order (the flags, the data, the model's setup, the
// communicator, the device, the model, the engine's session), as the trainer's pieces read them:
// evaluation (evaluation.h), the model files and checkpoints (run_outputs.h), the reports
// (step_report.h). References only: main owns every part and outlives the Run.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "data.h"
#include "engine/session.h"
#include "flags.h"
#include "gpu/device.h"
#include "model/model.h"
#include "model_setup.h"

namespace strata::train_gpt {

struct Run {
  const Flags& f;
  const DataSource& source;
  const ModelSetup& setup;
  comm::Communicator& world;
  gpu::Device& dev;
  model::Model& model;
  engine::Session& session;
  TrainData& data;
  // The ZeRO step's reports (the zero: and memory lines, the traffic of traced steps): several
  // ranks, a stage above 0 or offloaded activations.
  bool zero = false;

  int stage() const { return zero ? f.zero_stage : 0; }  // as checkpoints record it
  int rank() const { return world.rank(); }
  int ranks() const { return world.size(); }
  bool lead() const { return world.rank() == 0; }  // rank 0 prints and writes
  const ModelSpec& spec() const { return setup.spec; }
  int64_t batch() const { return f.batch; }        // B: rows per micro-batch
  int64_t seq() const { return setup.shape.seq; }  // T
  int64_t micro() const { return f.grad_accum; }   // K: micro-batches per step
  // Tokens one step trains on, over every rank.
  int64_t step_tokens() const { return micro() * batch() * seq() * ranks(); }
  const model::AdditionTask* task() const { return source.task ? &*source.task : nullptr; }
};

}  // namespace strata::train_gpt

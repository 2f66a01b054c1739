// The calibration request the planner's calibration tests share: a 2-layer GPT of 16 channels as
// the compute probe, B 2, T 8, one host thread, this cache file.
#pragma once

#include <string>

#include "model/gpt.h"
#include "planner/calibration.h"

namespace strata::planner::testing {

inline CalibrationRequest tiny_calibration_request(gpu::Device& device, comm::Communicator& comm,
                                                   const std::string& cache, DType dtype) {
  model::GptConfig cfg;
  cfg.vocab = 32;
  cfg.max_seq = 8;
  cfg.layers = 2;
  cfg.heads = 2;
  cfg.channels = 16;
  cfg.dtype = dtype;
  CalibrationRequest rq;
  rq.device = &device;
  rq.probe = model::GptModel::probe(cfg);
  rq.shape = model::RunShape{2, 8, 0};
  rq.comm = &comm;
  rq.host_threads = 1;
  rq.cache_path = cache;
  return rq;
}

}  // namespace strata::planner::testing

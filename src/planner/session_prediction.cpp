#include "planner/session_prediction.h"

#include <utility>

namespace strata::planner {

using engine::Field;

CalibrationRequest calibration_request(const engine::EngineConfig& config, model::ModelProbe probe,
                                       const model::RunShape& shape, gpu::Device& real,
                                       comm::Communicator& comm, int host_threads) {
  CalibrationRequest rq;
  rq.device = &real;
  rq.probe = std::move(probe);
  rq.shape = shape;
  rq.comm = &comm;
  rq.host_threads = host_threads;
  if (config.uses_nvme()) rq.nvme_dirs = config.storage.nvme_paths;
  rq.nvme_block_bytes = config.storage.nvme_block_size;
  rq.nvme_queue_depth = static_cast<uint32_t>(config.storage.nvme_queue_depth);
  return rq;
}

Result<Calibration> calibrate(const engine::Session& session, gpu::Device& real, bool redo) {
  CalibrationRequest rq =
      calibration_request(session.config(), session.model().probe(), session.model().shape(), real,
                          session.communicator(), session.host_threads());
  rq.redo = redo;
  rq.device_comm = session.device_communicator();
  return calibrate(rq);
}

Result<sched::Prediction> predict(const engine::Session& session, const sched::Rates& rates) {
  const engine::ZeroStep* zero = session.zero();
  if (zero == nullptr) {
    return make_error(ErrorCode::kConfig, "no prediction for ", engine::ref(Field::kSchedule), " ",
                      engine::schedule_name(session.config().schedule.kind), " (it runs no plan)");
  }
  return zero->predict(rates, static_cast<int>(session.config().schedule.grad_accum));
}

}  // namespace strata::planner

// The planner's use of an engine session (engine/session.h): the calibration a run of a config
// needs, this machine's rates for a session (calibration.h, cached per machine), and the step
// time the cost model predicts for the session's plan (ZeroStep::predict with the config's
// micro-batches).
//
// Thread safety: as the session (one thread). calibrate() is collective: every rank calls it.
#pragma once

#include "comm/communicator.h"
#include "core/status.h"
#include "engine/engine_config.h"
#include "engine/session.h"
#include "gpu/device.h"
#include "model/config.h"
#include "model/model.h"
#include "planner/calibration.h"
#include "scheduler/cost_model.h"

namespace strata::planner {

// The calibration for a run of `config` with a model of this probe and shape: the NVMe
// directories when a home is on NVMe, the store's request size and queue depth. `real`: the
// device to measure (not a planning device).
CalibrationRequest calibration_request(const engine::EngineConfig& config, model::ModelProbe probe,
                                       const model::RunShape& shape, gpu::Device& real,
                                       comm::Communicator& comm, int host_threads);
// This machine's rates for the session's run (`redo` measures again).
Result<Calibration> calibrate(const engine::Session& session, gpu::Device& real, bool redo);
// The step time the cost model predicts with `rates`; kConfig for the serial step, which runs no
// plan.
Result<sched::Prediction> predict(const engine::Session& session, const sched::Rates& rates);

}  // namespace strata::planner

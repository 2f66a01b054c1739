#include "engine/planned_step.h"

#include "comm/local_comm.h"

namespace strata::engine {

Result<std::unique_ptr<PlannedStep>> PlannedStep::create(model::GptModel& model,
                                                         OffloadedOptimizer& optimizer,
                                                         const PlannedStepOptions& options) {
  if (options.staging_slots < 1 || options.staging_slots > 64) {
    return make_error(ErrorCode::kConfig, "planned step: staging slots ", options.staging_slots,
                      " is not accepted (1..64)");
  }
  std::unique_ptr<PlannedStep> s(new PlannedStep());
  s->comm_ = comm::create_local_comm();
  ZeroStepOptions zo;
  zo.step = options.step;
  zo.executor = options.executor;
  zo.stage = 0;
  zo.staging_slots = options.staging_slots;
  zo.device_optimizer = options.device_optimizer;
  zo.gpu_optimizer_fraction = options.gpu_optimizer_fraction;
  zo.delayed_update_warmup = options.delayed_update_warmup;
  STRATA_ASSIGN_OR_RETURN(s->step_, ZeroStep::create(model, optimizer, *s->comm_, zo));
  return s;
}

}  // namespace strata::engine

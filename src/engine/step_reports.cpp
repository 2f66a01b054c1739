#include "engine/step_reports.h"

#include <sstream>

namespace strata::engine {

std::string ZeroMemory::describe() const {
  std::ostringstream os;
  os << "model state " << model_state() << " bytes (16-bit params " << params16 << ", grads "
     << grads16 << ", fp32 master " << master << ", m " << exp_avg << ", v " << exp_avg_sq << "; "
     << optimizer_nvme << " of it on NVMe, " << optimizer_device
     << " on the device; 16-bit params on the device " << params_device << ", on NVMe "
     << params_nvme << "); device: activations " << device_activations << ", in flight "
     << device_working << " (gathered " << device_gathered << ", gradients "
     << device_grads_in_flight << ", optimizer i/o " << device_optimizer_io << "); pinned "
     << pinned_working << " (gathered " << pinned_gathered << ", gradients " << pinned_grads
     << ", new params " << pinned_params << ", NVMe staging " << pinned_nvme_staging
     << "); activation checkpoints offloaded: device " << device_checkpoints << ", pinned "
     << pinned_checkpoints << ", NVMe " << nvme_checkpoints;
  return os.str();
}

}  // namespace strata::engine

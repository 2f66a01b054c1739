// Internal to GptModel's .cpp files: the per-layer saved tensors and pointer helpers.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "gpu/device.h"
#include "model/gpt.h"

namespace strata::model {

struct GptModel::Activations {
  gpu::DeviceBuffer ln1, ln1_mean, ln1_rstd;  // [B,T,C], fp32 [B*T] x2
  gpu::DeviceBuffer qkv;                      // [B,T,3C]
  gpu::DeviceBuffer atty, lse;                // [B,T,C], fp32 [B,NH,T]
  gpu::DeviceBuffer res2;                     // [B,T,C] residual after attention
  gpu::DeviceBuffer ln2, ln2_mean, ln2_rstd;  // [B,T,C], fp32 [B*T] x2
  gpu::DeviceBuffer fch, fch_gelu;            // [B,T,4C] x2
};

}  // namespace strata::model

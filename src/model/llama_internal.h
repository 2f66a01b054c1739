// Internal to LlamaModel's .cpp files: one layer's saved tensors.
#pragma once

#include "gpu/device.h"
#include "model/llama.h"

namespace strata::model {

struct LlamaModel::Activations {
  gpu::DeviceBuffer ln1, rstd1;  // rmsnorm(x) [B*T, C], fp32 [B*T]
  gpu::DeviceBuffer qkv;         // [B*T, width], q and k rotated
  gpu::DeviceBuffer atty, lse;   // [B*T, C], fp32 [B, NH, T]
  gpu::DeviceBuffer res2;        // [B*T, C] residual after attention
  gpu::DeviceBuffer ln2, rstd2;  // rmsnorm(res2) [B*T, C], fp32 [B*T]
  gpu::DeviceBuffer gate_up;     // [B*T, 2I]
  gpu::DeviceBuffer h;           // silu(gate) * up [B*T, I]
};

}  // namespace strata::model

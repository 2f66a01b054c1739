// Stand-in for the CUDA header of this name in the emulated-runtime build (see cuda_runtime_api.h):
// the runtime API and, for the kernels' translation units, the device built-ins.
#pragma once
#include "../../gpu_simt/simt_builtins.h"
#include "cuda_runtime_api.h"

// Stand-in for the CUDA header of this name (see ../simt_cuda.h).
#pragma once
#include "../simt_builtins.h"

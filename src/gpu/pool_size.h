// The default size of a CUDA device's memory pool (DeviceOptions::memory_limit_bytes = 0), kept
// apart from the CUDA backend (and inline: the backend's library sits below strata_gpu's) so
// that its arithmetic is tested on every machine.
#pragma once

#include <algorithm>
#include <cstddef>

#include "core/status.h"

namespace strata::gpu {

// A rank alone on its GPU: the free memory less 1 GiB (left to the CUDA context, cuBLASLt and
// NCCL). `sharing` ranks on one GPU start together and each sees only what the others have not
// taken yet, so each takes at most its fair share of the whole: (total less 1 GiB a rank) /
// sharing. kOutOfMemory, naming the figures, when that leaves less than 1 GiB.
inline Result<size_t> default_pool_bytes(size_t free_bytes, size_t total_bytes, int sharing,
                                         int ordinal) {
  constexpr size_t kGiB = size_t{1} << 30;
  const auto ranks = static_cast<size_t>(std::max(1, sharing));
  if (free_bytes <= 2 * kGiB) {
    return make_error(ErrorCode::kOutOfMemory, "GPU ", ordinal, " has ", free_bytes,
                      " bytes free; the default pool (free memory less 1 GiB) needs more than "
                      "2 GiB free (or set the GPU memory limit)");
  }
  size_t limit = free_bytes - kGiB;
  if (ranks > 1) {
    const size_t share = total_bytes > ranks * kGiB ? (total_bytes - ranks * kGiB) / ranks : 0;
    limit = std::min(limit, share);
    if (limit < kGiB) {
      return make_error(ErrorCode::kOutOfMemory, "GPU ", ordinal, " (", total_bytes, " bytes, ",
                        free_bytes, " free) is shared by ", ranks,
                        " ranks: a share of each is under 1 GiB (run fewer ranks per GPU, or set "
                        "the GPU memory limit)");
    }
  }
  return limit;
}

}  // namespace strata::gpu

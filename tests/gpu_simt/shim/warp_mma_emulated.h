// The SIMT emulator's implementation of src/gpu/cuda/warp_mma.cuh (mma.sync m16n8k16, ldmatrix
// x4 with and without .trans, cp.async of 16 bytes with its groups, pack_rn), for the same
// contracts and fragment layouts, written from the PTX ISA's tables independently of the kernels
// that use them. A warp-collective call gathers every lane's registers (or addresses) through a
// per-warp scratch between two convergence points, so each lane sees the whole tile and computes
// its own part. mma: products summed in fp32, k ascending, onto the accumulator. ldmatrix checks
// that each row address is 16-byte aligned. cp.async is deferred as on a GPU: a copy lands when a
// cp_async_wait lets its group complete (never before), so a kernel that reads shared memory
// before waiting reads the NaN bytes the emulator fills it with.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "../simt_builtins.h"

namespace strata::gpu::cuda {

namespace warp_emu {

inline int linear_thread() {
  const uint3& i = ::simt::thread_idx();
  const dim3& b = ::simt::block_dim();
  return static_cast<int>(i.x + b.x * (i.y + b.y * i.z));
}

// all[l] = lane l's `mine`, for every lane of the calling warp.
template <typename W, int N>
void warp_all_gather(const W (&mine)[N], W (&all)[32][N]) {
  static thread_local W scratch[32][32][N];  // [warp of the block][lane]
  const int w = linear_thread() / 32, lane = ::simt::lane_id();
  for (int n = 0; n < N; ++n) scratch[w][lane][n] = mine[n];
  ::simt::warp_converge();
  std::memcpy(all, scratch[w], sizeof(all));
  ::simt::warp_converge();  // nobody writes the scratch again before every lane has read it
}

template <typename T>
float element(uint32_t word, int half) {
  const auto bits = static_cast<uint16_t>(word >> (16 * half));
  T v;
  std::memcpy(&v, &bits, sizeof(v));
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else {
    return __bfloat162float(v);
  }
}

inline void ldmatrix(uint32_t* r, const void* p, bool trans) {
  const void* mine[1] = {p};
  const void* all[32][1];
  warp_all_gather(mine, all);
  for (int l = 0; l < 32; ++l) {
    if (reinterpret_cast<uintptr_t>(all[l][0]) % 16 != 0) {
      ::simt::kernel_error("ldmatrix: lane " + std::to_string(l) +
                           "'s row address is not 16-byte aligned");
    }
  }
  const int lane = ::simt::lane_id(), g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const auto row = [&](int rr) { return static_cast<const uint16_t*>(all[i * 8 + rr][0]); };
    const uint16_t lo = trans ? row(2 * t)[g] : row(g)[2 * t];
    const uint16_t hi = trans ? row(2 * t + 1)[g] : row(g)[2 * t + 1];
    r[i] = uint32_t{lo} | (uint32_t{hi} << 16);
  }
}

struct PendingCopy {
  void* dst;
  const void* src;
  int bytes;
};
struct CopyQueue {
  std::vector<PendingCopy> open;                 // issued since the last commit
  std::vector<std::vector<PendingCopy>> groups;  // committed, oldest first
};
inline CopyQueue& copy_queue() {
  static thread_local std::vector<CopyQueue> queues(1024);  // by thread of the running block
  return queues[static_cast<size_t>(linear_thread())];
}

}  // namespace warp_emu

template <typename T>
void mma_16816(float* d, const uint32_t* a, const uint32_t* b) {
  const uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  uint32_t all[32][6];
  warp_emu::warp_all_gather(mine, all);
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int j = 0; j < 2; ++j) {
      A[g][2 * t + j] = warp_emu::element<T>(all[l][0], j);
      A[g + 8][2 * t + j] = warp_emu::element<T>(all[l][1], j);
      A[g][2 * t + 8 + j] = warp_emu::element<T>(all[l][2], j);
      A[g + 8][2 * t + 8 + j] = warp_emu::element<T>(all[l][3], j);
      B[2 * t + j][g] = warp_emu::element<T>(all[l][4], j);
      B[2 * t + 8 + j][g] = warp_emu::element<T>(all[l][5], j);
    }
  }
  const int lane = ::simt::lane_id(), g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i / 2) * 8, col = 2 * t + i % 2;
    float acc = d[i];
    for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
    d[i] = acc;
  }
}

template <typename T>
uint32_t pack_rn(float lo, float hi) {
  uint16_t bits[2];
  if constexpr (std::is_same_v<T, __half>) {
    bits[0] = __float2half_rn(lo).bits;
    bits[1] = __float2half_rn(hi).bits;
  } else {
    bits[0] = __float2bfloat16_rn(lo).bits;
    bits[1] = __float2bfloat16_rn(hi).bits;
  }
  return uint32_t{bits[0]} | (uint32_t{bits[1]} << 16);
}

inline void ldmatrix_x4(uint32_t* r, const void* p) { warp_emu::ldmatrix(r, p, false); }
inline void ldmatrix_x4_trans(uint32_t* r, const void* p) { warp_emu::ldmatrix(r, p, true); }

inline void cp_async_16(void* dst, const void* src, int bytes) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 ||
      (bytes > 0 && reinterpret_cast<uintptr_t>(src) % 16 != 0) || bytes < 0 || bytes > 16) {
    ::simt::kernel_error(
        "cp.async: a 16-byte copy needs 16-byte aligned addresses and 0..16 "
        "source bytes, got " +
        std::to_string(bytes));
  }
  warp_emu::copy_queue().open.push_back({dst, src, bytes});
}

inline void cp_async_commit() {
  warp_emu::CopyQueue& q = warp_emu::copy_queue();
  q.groups.push_back(std::move(q.open));
  q.open.clear();
}

template <int N>
void cp_async_wait() {
  warp_emu::CopyQueue& q = warp_emu::copy_queue();
  while (q.groups.size() > static_cast<size_t>(N)) {
    for (const warp_emu::PendingCopy& c : q.groups.front()) {
      std::memcpy(c.dst, c.src, static_cast<size_t>(c.bytes));
      std::memset(static_cast<char*>(c.dst) + c.bytes, 0, static_cast<size_t>(16 - c.bytes));
    }
    q.groups.erase(q.groups.begin());
  }
}

}  // namespace strata::gpu::cuda

// Stand-in for CUDA's mma.h: the nvcuda::wmma tensor-core API for the SIMT emulator (simt.h), for
// 16x16x16 tiles of __half or __nv_bfloat16 with float accumulators. A fragment's elements are
// spread over the warp's lanes in an unspecified way on a GPU; here every lane holds the whole
// tile, so a kernel that uses fragments only through these calls (and element-wise operations
// applied alike to every element) computes the same on both. Each call is warp-collective (all
// 32 lanes must reach it) and checks CUDA's rules: a 256-bit aligned pointer and a leading
// dimension that is a multiple of 16 bytes. Products are summed in fp32, k ascending.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "../simt_builtins.h"

namespace nvcuda::wmma {

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 tiles only");
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  T x[num_elements];  // row-major in the logical tile
};

namespace detail {

inline float to_float(float v) { return v; }
inline float to_float(__half v) { return __half2float(v); }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    return __float2bfloat16_rn(v);
  }
}

template <typename T>
void check(const void* p, unsigned ldm, const char* what) {
  ::simt::warp_converge();
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0) {
    ::simt::kernel_error(std::string(what) + ": pointer not 256-bit aligned");
  }
  if ((ldm * sizeof(T)) % 16 != 0) {
    ::simt::kernel_error(std::string(what) + ": ldm " + std::to_string(ldm) +
                         " is not a multiple of 16 bytes");
  }
}

}  // namespace detail

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, float v) {
  ::simt::warp_converge();
  for (auto& e : f.x) e = detail::from_float<T>(v);
}

// matrix_a / matrix_b: the layout is the fragment's.
template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load names its layout");
  detail::check<T>(p, ldm, "wmma::load_matrix_sync");
  constexpr bool row = std::is_same_v<Layout, row_major>;
  using F = fragment<Use, 16, 16, 16, T, Layout>;
  for (int r = 0; r < F::rows; ++r) {
    for (int c = 0; c < F::cols; ++c) f.x[r * F::cols + c] = row ? p[r * ldm + c] : p[c * ldm + r];
  }
}

template <typename T>
void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& f, const T* p, unsigned ldm,
                      layout_t layout) {
  detail::check<T>(p, ldm, "wmma::load_matrix_sync");
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      f.x[r * 16 + c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
    }
  }
}

template <typename T>
void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T>& f, unsigned ldm,
                       layout_t layout) {
  detail::check<T>(p, ldm, "wmma::store_matrix_sync");
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r * 16 + c];
    }
  }
}

template <typename TA, typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, TA, LA>& a,
              const fragment<matrix_b, 16, 16, 16, TA, LB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  ::simt::warp_converge();
  float out[256];
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      float acc = c.x[i * 16 + j];
      for (int k = 0; k < 16; ++k) {
        acc += detail::to_float(a.x[i * 16 + k]) * detail::to_float(b.x[k * 16 + j]);
      }
      out[i * 16 + j] = acc;
    }
  }
  for (int i = 0; i < 256; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma

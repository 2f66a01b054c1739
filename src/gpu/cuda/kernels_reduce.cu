// Reductions with a fixed order: bias_backward (column sums), the embedding forward/backward,
// sum_squares and grad_stats (two passes through per-stream scratch). No floating-point atomics
// anywhere, so every run gives the same bits.
#include "gpu/cuda/common.cuh"

namespace strata::gpu::cuda {
namespace {

// bias_backward: a block of 32 columns x kRowGroups row groups over the rows of one chunk
// (blockIdx.y; one chunk: every row); thread (x, y) sums rows y, y + kRowGroups, ... of its
// column in the chunk in order, then row 0 of the block adds the kRowGroups partials in order.
// One chunk: that is the column's sum (+ dbias), stored. Several (bias_backward_chunks: the
// columns alone would leave the GPU idle, 24 blocks at C = 768): each chunk's sums go to
// scratch[chunk][col], and a second pass adds them in chunk order. No atomics: the same bits
// every run.
template <typename T>
__global__ void bias_backward_kernel(T* dbias, float* scratch, const T* dout, int64_t m, int64_t n,
                                     int64_t rows_per_chunk, bool accumulate) {
  __shared__ float partial[kRowGroups][32];
  const int64_t col = blockIdx.x * int64_t{32} + threadIdx.x;
  const int64_t first = blockIdx.y * rows_per_chunk;
  const int64_t end = first + rows_per_chunk < m ? first + rows_per_chunk : m;
  float sum = 0.0f;
  if (col < n) {
    for (int64_t r = first + threadIdx.y; r < end; r += kRowGroups) {
      sum += load_f32(dout + r * n + col);
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    float total = 0.0f;
    for (int g = 0; g < kRowGroups; ++g) total += partial[g][threadIdx.x];
    if (gridDim.y > 1) {
      scratch[int64_t{blockIdx.y} * n + col] = total;
      return;
    }
    if (accumulate) total += load_f32(dbias + col);
    store_f32(dbias + col, total);
  }
}

template <typename T>
__global__ void bias_backward_final_kernel(T* dbias, const float* scratch, int64_t n, int chunks,
                                           bool accumulate) {
  const int64_t col = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (col >= n) return;
  float total = 0.0f;
  for (int k = 0; k < chunks; ++k) total += scratch[int64_t{k} * n + col];
  if (accumulate) total += load_f32(dbias + col);
  store_f32(dbias + col, total);
}

// out[b, t, :] = wte[token] + wpe[t] (a negative token: wpe alone). `packed` (C a multiple of
// kPack<T>, 16-byte aligned tensors): each thread takes kPack<T> consecutive columns with 16-byte
// loads and stores, the same operations element by element.
template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                         int64_t B, int64_t T_, int64_t C, bool packed) {
  const int64_t per = packed ? kPack<T> : 1;
  const int64_t total = B * T_ * C / per;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = i * per;
    const int64_t bt = e / C;
    const int64_t c = e % C;
    const int64_t t = bt % T_;
    const int32_t tok = tokens[bt];
    if (packed) {
      float w[kPack<T>], p[kPack<T>];
      load_pack(wpe + t * C + c, p);
      if (tok >= 0) {
        load_pack(wte + tok * C + c, w);
      } else {
#pragma unroll
        for (int j = 0; j < kPack<T>; ++j) w[j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kPack<T>; ++j) w[j] += p[j];
      store_pack(out + e, w);
    } else {
      const float w = tok >= 0 ? load_f32(wte + tok * C + c) : 0.0f;
      store_f32(out + e, w + load_f32(wpe + t * C + c));
    }
  }
}

// dwpe[t, c] += sum over b in order of dout[b, t, c]; one thread per (t, c).
template <typename T>
__global__ void embedding_backward_wpe_kernel(T* dwpe, const T* dout, int64_t B, int64_t T_,
                                              int64_t C) {
  const int64_t total = T_ * C;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    float acc = load_f32(dwpe + i);
    for (int64_t b = 0; b < B; ++b) acc += load_f32(dout + b * T_ * C + i);
    store_f32(dwpe + i, acc);
  }
}

// dwte, linear in B*T (deterministic, no atomics): the positions are sorted by (token,
// position) in the stream's scratch (a bitonic sort of 64-bit keys: token + 2^31 above, position
// below, padded to a power of two with keys that sort last); then one block per sorted index
// that starts a token's run sums, in fp32 and in position order, dout of every position of the
// run, and adds the sum to the token's row of dwte once (one rounding, as on the CpuDevice).
// Tokens below 0 (not scored) sort first and are skipped.
constexpr int kEmbThreads = 256;
constexpr int kSortThreads = 256;
constexpr uint64_t kNoKey = ~uint64_t{0};

__global__ void embedding_sort_keys_kernel(uint64_t* keys, const int32_t* tokens, int64_t BT,
                                           int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t tok =
        static_cast<uint64_t>(static_cast<int64_t>(tokens[i < BT ? i : 0]) + (int64_t{1} << 31));
    keys[i] = i < BT ? (tok << 32) | static_cast<uint64_t>(i) : kNoKey;
  }
}

// One compare-exchange pass of the bitonic sort (stage k, distance j): the lower index of each
// pair orders it.
__global__ void bitonic_pass_kernel(uint64_t* keys, int64_t n, int64_t j, int64_t k) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t partner = i ^ j;
    if (partner <= i) continue;
    const uint64_t a = keys[i];
    const uint64_t b = keys[partner];
    const bool ascending = (i & k) == 0;
    if ((a > b) == ascending) {
      keys[i] = b;
      keys[partner] = a;
    }
  }
}

__device__ inline int64_t key_token(uint64_t key) {
  return static_cast<int64_t>(key >> 32) - (int64_t{1} << 31);
}

template <typename T>
__global__ void embedding_backward_wte_kernel(T* dwte, const T* dout, const uint64_t* keys,
                                              int64_t BT, int64_t C) {
  const int64_t i = blockIdx.x;
  const uint64_t key = keys[i];
  const int64_t tok = key_token(key);
  // The whole block takes these branches: not scored, or not the first of its token's run.
  if (tok < 0) return;
  if (i > 0 && key_token(keys[i - 1]) == tok) return;
  T* row = dwte + tok * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t k = i; k < BT && key_token(keys[k]) == tok; ++k) {
      const int64_t pos = static_cast<int64_t>(keys[k] & 0xffffffffu);
      acc += load_f32(dout + pos * C + c);
    }
    store_f32(row + c, load_f32(row + c) + acc);
  }
}

// sum_squares, pass 1: block b writes (sum of squares, non-finite flag) of its grid-stride share
// to scratch[2b], scratch[2b + 1]. Pass 2: one block combines the partials in order.
constexpr int kSqThreads = 512;
constexpr int kSqMaxBlocks = static_cast<int>(kSumSquaresScratchFloats / 2);

template <typename T>
__global__ void sum_squares_partial_kernel(float* scratch, const T* x, int64_t n) {
  __shared__ float shared[32];
  float sum = 0.0f;
  float bad = 0.0f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = load_f32(x + i);
    sum += v * v;
    if (!isfinite(v)) bad = 1.0f;
  }
  sum = block_sum(sum, shared);
  bad = block_max(bad, shared);
  if (threadIdx.x == 0) {
    scratch[2 * blockIdx.x] = sum;
    scratch[2 * blockIdx.x + 1] = bad;
  }
}

__global__ void sum_squares_final_kernel(float* out, const float* scratch, int blocks,
                                         bool accumulate) {
  __shared__ float shared[32];
  const int i = static_cast<int>(threadIdx.x);
  float sum = i < blocks ? scratch[2 * i] : 0.0f;
  float bad = i < blocks ? scratch[2 * i + 1] : 0.0f;
  sum = block_sum(sum, shared);
  bad = block_max(bad, shared);
  if (threadIdx.x == 0) {
    if (accumulate) {
      out[0] += sum;
      out[1] = fmaxf(out[1], bad);
    } else {
      out[0] = sum;
      out[1] = bad;
    }
  }
}

// grad_stats, pass 1: cpu::grad_check's chunk sums. kGradLanes threads take a chunk, thread j
// adding the exact fp64 squares of elements j, j + 16, ... of it in order (grad_check's lane j;
// the elements past n are its zero padding, which adds nothing), then the chunk's first thread
// adds the 16 lanes in order into partial[chunk]. Pass 2: one thread adds the chunks in order.
constexpr int kGradLanes = 16;
constexpr int kGradChunksPerBlock = 8;

template <typename T>
__global__ void grad_stats_partial_kernel(double* partial, const T* x, int64_t n, int64_t chunks) {
  __shared__ double lanes[kGradChunksPerBlock][kGradLanes];
  const int lane = static_cast<int>(threadIdx.x) % kGradLanes;
  const int local = static_cast<int>(threadIdx.x) / kGradLanes;
  const int64_t chunk = blockIdx.x * int64_t{kGradChunksPerBlock} + local;
  double acc = 0.0;
  if (chunk < chunks) {
    const int64_t end = min(n, (chunk + 1) * kGradCheckChunk);
#pragma unroll 8
    for (int64_t i = chunk * kGradCheckChunk + lane; i < end; i += kGradLanes) {
      const double v = load_f32(x + i);
      acc += v * v;  // the square is exact in fp64: one rounding, as on the host
    }
  }
  lanes[local][lane] = acc;
  __syncthreads();
  if (lane != 0 || chunk >= chunks) return;
  double sum = 0.0;
  for (int j = 0; j < kGradLanes; ++j) sum += lanes[local][j];
  partial[chunk] = sum;
}

__global__ void grad_stats_final_kernel(double* out, const double* partial, int64_t chunks) {
  double sum = 0.0;
  for (int64_t c = 0; c < chunks; ++c) sum += partial[c];
  out[0] = sum;
  out[1] = isfinite(sum) ? 0.0 : 1.0;
}

struct GradStats {
  template <typename T>
  static cudaError_t run(cudaStream_t s, double* out, const void* x, int64_t n, float* scratch) {
    const int64_t chunks = (n + kGradCheckChunk - 1) / kGradCheckChunk;
    auto* partial = reinterpret_cast<double*>(scratch);
    if (chunks > 0) {
      const auto blocks =
          static_cast<unsigned>((chunks + kGradChunksPerBlock - 1) / kGradChunksPerBlock);
      grad_stats_partial_kernel<T><<<blocks, kGradLanes * kGradChunksPerBlock, 0, s>>>(
          partial, static_cast<const T*>(x), n, chunks);
      const cudaError_t err = launch_result();
      if (err != cudaSuccess) return err;
    }
    grad_stats_final_kernel<<<1, 1, 0, s>>>(out, partial, chunks);
    return launch_result();
  }
};

struct BiasBackward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* dbias, const void* dout, int64_t m, int64_t n,
                         bool accumulate, float* scratch) {
    const int chunks = bias_backward_chunks(m, n);
    const int64_t rows_per_chunk = (m + chunks - 1) / chunks;
    const dim3 block(32, kRowGroups);
    const dim3 grid(static_cast<unsigned>((n + 31) / 32), static_cast<unsigned>(chunks));
    bias_backward_kernel<T><<<grid, block, 0, s>>>(static_cast<T*>(dbias), scratch,
                                                   static_cast<const T*>(dout), m, n,
                                                   rows_per_chunk, accumulate);
    const cudaError_t err = launch_result();
    if (err != cudaSuccess || chunks == 1) return err;
    bias_backward_final_kernel<T><<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(
        static_cast<T*>(dbias), scratch, n, chunks, accumulate);
    return launch_result();
  }
};

struct EmbeddingForward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* out, const int32_t* tokens, const void* wte,
                         const void* wpe, int64_t B, int64_t T_, int64_t C) {
    const bool packed = C % kPack<T> == 0 && aligned16({out, wte, wpe});
    embedding_forward_kernel<T><<<grid_for(B * T_ * C / (packed ? kPack<T> : 1), 256), 256, 0, s>>>(
        static_cast<T*>(out), tokens, static_cast<const T*>(wte), static_cast<const T*>(wpe), B, T_,
        C, packed);
    return launch_result();
  }
};

struct EmbeddingBackward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* dwte, void* dwpe, const void* dout,
                         const int32_t* tokens, int64_t B, int64_t T_, int64_t C, float* scratch) {
    embedding_backward_wpe_kernel<T><<<grid_for(T_ * C, 256), 256, 0, s>>>(
        static_cast<T*>(dwpe), static_cast<const T*>(dout), B, T_, C);
    cudaError_t err = launch_result();
    if (err != cudaSuccess) return err;
    const int64_t BT = B * T_;
    const int64_t n = embedding_sort_length(BT);
    uint64_t* keys = reinterpret_cast<uint64_t*>(scratch);
    const unsigned grid = grid_for(n, kSortThreads);
    embedding_sort_keys_kernel<<<grid, kSortThreads, 0, s>>>(keys, tokens, BT, n);
    err = launch_result();
    for (int64_t k = 2; k <= n && err == cudaSuccess; k <<= 1) {
      for (int64_t j = k >> 1; j > 0 && err == cudaSuccess; j >>= 1) {
        bitonic_pass_kernel<<<grid, kSortThreads, 0, s>>>(keys, n, j, k);
        err = launch_result();
      }
    }
    if (err != cudaSuccess) return err;
    embedding_backward_wte_kernel<T><<<static_cast<unsigned>(BT), kEmbThreads, 0, s>>>(
        static_cast<T*>(dwte), static_cast<const T*>(dout), keys, BT, C);
    return launch_result();
  }
};

struct SumSquares {
  template <typename T>
  static cudaError_t run(cudaStream_t s, float* out, const void* x, int64_t n, bool accumulate,
                         float* scratch) {
    const int blocks = static_cast<int>(grid_for(n, kSqThreads * 4, kSqMaxBlocks));
    sum_squares_partial_kernel<T>
        <<<blocks, kSqThreads, 0, s>>>(scratch, static_cast<const T*>(x), n);
    cudaError_t err = launch_result();
    if (err != cudaSuccess) return err;
    sum_squares_final_kernel<<<1, kSqMaxBlocks, 0, s>>>(out, scratch, blocks, accumulate);
    return launch_result();
  }
};

}  // namespace

cudaError_t launch_bias_backward(cudaStream_t stream, void* dbias, const void* dout, int64_t m,
                                 int64_t n, ElemType t, bool accumulate, float* scratch) {
  if (n == 0) return cudaSuccess;
  return dispatch<BiasBackward>(t, stream, dbias, dout, m, n, accumulate, scratch);
}

cudaError_t launch_embedding_forward(cudaStream_t stream, void* out, const int32_t* tokens,
                                     const void* wte, const void* wpe, int64_t B, int64_t T,
                                     int64_t C, ElemType t) {
  if (B * T * C == 0) return cudaSuccess;
  return dispatch<EmbeddingForward>(t, stream, out, tokens, wte, wpe, B, T, C);
}

cudaError_t launch_embedding_backward(cudaStream_t stream, void* dwte, void* dwpe, const void* dout,
                                      const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                      ElemType t, float* scratch) {
  if (B * T * C == 0) return cudaSuccess;
  return dispatch<EmbeddingBackward>(t, stream, dwte, dwpe, dout, tokens, B, T, C, scratch);
}

int64_t embedding_sort_length(int64_t BT) {
  int64_t n = 1;
  while (n < BT) n <<= 1;
  return n;
}

cudaError_t launch_sum_squares(cudaStream_t stream, float* out, const void* x, int64_t n,
                               ElemType t, bool accumulate, float* scratch) {
  return dispatch<SumSquares>(t, stream, out, x, n, accumulate, scratch);
}

cudaError_t launch_grad_stats(cudaStream_t stream, double* out, const void* x, int64_t n,
                              ElemType t, float* scratch) {
  return dispatch<GradStats>(t, stream, out, x, n, scratch);
}

}  // namespace strata::gpu::cuda

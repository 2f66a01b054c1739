// CpuKernels: the Kernels of a CpuDevice, the reference implementation of every op
// (DESIGN.md §3; semantics in gpu/kernels.h). Internal to src/gpu.
// Each call validates its arguments at enqueue time, then enqueues one work item on the
// CpuStream; the item runs on the stream's worker thread inside the device's tbb::task_arena.
// Parallel loops use fixed chunk boundaries that depend only on the shapes (never on the thread
// count or timing) and reductions combine chunk partials in chunk order, so results are
// bit-identical run to run. 16-bit tensors are converted to fp32 in per-thread host scratch
// (kernels never allocate device memory), computed in fp32 and rounded to nearest even on store.
// Thread safety: calls may come from different host threads for different streams.
#pragma once

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "gpu/kernels.h"

namespace strata::gpu {

class CpuDevice;
class CpuStream;

class CpuKernels final : public Kernels {
 public:
  explicit CpuKernels(CpuDevice* device);

  Status matmul(Stream& s, const MatmulArgs& args) override;
  Status bias_backward(Stream& s, void* dbias, const void* dout, int64_t m, int64_t n, DType dtype,
                       bool accumulate) override;
  Status embedding_forward(Stream& s, void* out, const int32_t* tokens, const void* wte,
                           const void* wpe, int64_t B, int64_t T, int64_t C, DType dtype) override;
  Status embedding_backward(Stream& s, void* dwte, void* dwpe, const void* dout,
                            const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                            DType dtype) override;
  Status layernorm_forward(Stream& s, void* out, float* mean, float* rstd, const void* inp,
                           const void* weight, const void* bias, int64_t N, int64_t C, float eps,
                           DType dtype) override;
  Status layernorm_backward(Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                            const void* inp, const void* weight, const float* mean,
                            const float* rstd, int64_t N, int64_t C, DType dtype) override;
  Status rmsnorm_forward(Stream& s, void* out, float* rstd, const void* inp, const void* weight,
                         int64_t N, int64_t C, float eps, DType dtype) override;
  Status rmsnorm_backward(Stream& s, void* dinp, void* dweight, const void* dout, const void* inp,
                          const void* weight, const float* rstd, int64_t N, int64_t C,
                          DType dtype) override;
  Status rope(Stream& s, void* x, const float* inv_freq, int64_t B, int64_t T, int64_t heads,
              int64_t HS, int64_t stride, bool inverse, DType dtype) override;
  Status swiglu_forward(Stream& s, void* out, const void* gate_up, int64_t N, int64_t H,
                        DType dtype) override;
  Status swiglu_backward(Stream& s, void* dgate_up, const void* gate_up, const void* dout,
                         int64_t N, int64_t H, DType dtype) override;
  Status gelu_forward(Stream& s, void* out, const void* inp, int64_t n, DType dtype) override;
  Status gelu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t n,
                       DType dtype) override;
  Status attention_forward(Stream& s, void* out, float* lse, const void* qkv, int64_t B, int64_t T,
                           int64_t C, int64_t NH, int64_t NKV, DType dtype) override;
  Status attention_backward(Stream& s, void* dqkv, const void* dout, const void* qkv,
                            const void* out, const float* lse, int64_t B, int64_t T, int64_t C,
                            int64_t NH, int64_t NKV, DType dtype) override;
  Status add(Stream& s, void* out, const void* a, const void* b, int64_t n, DType dtype) override;
  Status scale(Stream& s, void* x, float factor, int64_t n, DType dtype) override;
  Status cast(Stream& s, void* dst, DType dst_dtype, const void* src, DType src_dtype,
              int64_t n) override;
  Status accumulate(Stream& s, void* dst, DType dst_dtype, const void* src, DType src_dtype,
                    int64_t n) override;
  Status softmax_cross_entropy(Stream& s, float* losses, void* logits, const int32_t* targets,
                               int64_t N, int64_t V, int64_t Vp, float dloss, DType dtype) override;
  Status sum_squares(Stream& s, float* out, const void* x, int64_t n, DType dtype,
                     bool accumulate) override;
  Status grad_stats(Stream& s, double* out, const void* x, int64_t n, DType dtype) override;

 private:
  // Enqueues `body` on `s` (which must be a stream of this device) to run inside the arena.
  // The body gets the stream for its top-level scratch (CpuStream::scratch); leaf tasks of its
  // parallel loops use cpu_detail::scratch (per thread; they never wait inside, so nothing else
  // can run nested on their thread while they hold it).
  Status launch(Stream& s, const char* op, std::function<Status(CpuStream&)> body);

 public:
  // The CPU Adam's own SIMD update (cpu/cpu_adam.h) on the device's arena.
  Status adam_step(Stream& s, const AdamArgs& args) override;

 private:
  CpuDevice* device_;
};

namespace cpu_detail {

// Converts n elements starting at element `offset` of `src` (type t) to fp32.
void load_f32(const void* src, DType t, size_t offset, size_t n, float* dst);
// Stores n fp32 values to `dst` (type t) from element `offset`, rounding to nearest even.
void store_f32(const float* src, void* dst, DType t, size_t offset, size_t n);

// Per-thread reusable host scratch: slot in [0, kScratchSlots), at least n floats. Valid until
// the same thread asks for the same slot again.
constexpr int kScratchSlots = 6;
float* scratch(int slot, size_t n);

// Under the thread sanitizer the CpuDevice runs each kernel's chunks in order on the stream's
// worker thread instead of on oneTBB: the distribution's libtbb is not instrumented, so its
// internal synchronisation would be reported as races. Streams stay real threads, so a missing
// dependency between streams is still reported. Chunk boundaries are the same either way.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kSerialKernels = true;
#else
inline constexpr bool kSerialKernels = false;
#endif

// Runs f(begin, end) over [0, n) in chunks of `grain` with fixed boundaries [i*grain, ...).
template <typename F>
void parallel_chunks(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t chunks = (n + grain - 1) / grain;
  if (chunks == 1 || kSerialKernels) {
    for (int64_t i = 0; i < chunks; ++i) f(i * grain, std::min(n, (i + 1) * grain));
    return;
  }
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, chunks, 1),
      [&](const tbb::blocked_range<int64_t>& r) {
        for (int64_t i = r.begin(); i < r.end(); ++i) {
          const int64_t b = i * grain;
          const int64_t e = b + grain < n ? b + grain : n;
          f(b, e);
        }
      },
      tbb::simple_partitioner());
}

// Sets OpenBLAS to one thread (once per process): every BLAS call runs inside a TBB task.
void make_blas_single_threaded();

Status check_dtype(const char* op, DType dtype);
Status check_positive(const char* op, const char* name, int64_t v);
Status check_pointer(const char* op, const char* name, const void* p);

}  // namespace cpu_detail
}  // namespace strata::gpu

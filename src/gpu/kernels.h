// The kernels of a Device (DESIGN.md §3), llm.c-style: each op and its backward, enqueued on a
// Stream. All tensor pointers are device memory of the Device the Kernels belong to. Kernels
// never allocate device memory. Unless stated, 16-bit tensors are computed in fp32 and rounded
// to nearest even on store; layernorm statistics, losses and reductions are fp32.
//
// Shapes use B (batch), T (time), C (channels), NH (heads), HS = C/NH, V (vocab), Vp (padded
// vocab, the row stride of logits and of the embedding table), N = rows.
// Work: each op says its FLOPs (tensor-core work: matmul, attention) or the bytes it must move
// at least (each input read once, each output written once; e bytes an element of `dtype`), the
// figures bench/kernels/bench_kernels measures each kernel against its roofline with.
// Every op returns a Status for argument errors found at enqueue time (bad shape, bad dtype
// combination); errors while running surface at the next synchronize.
//
// Determinism: for the same inputs, every op gives the same bits on every run (fixed reduction
// orders; no floating-point atomics whose order depends on timing).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "cpu/cpu_adam.h"
#include "gpu/device.h"

namespace strata::gpu {

// What a matmul applies to its result before storing it (cuBLASLt's epilogues), with
// p = alpha * op(A) op(B) + bias (fp32, before rounding):
//   kNone:         C = p + beta * C.
//   kGelu:         aux[M,N] = p; C = gelu(p) (gelu_forward's tanh form). beta must be 0.
//   kGeluBackward: C = gelu'(aux) * p with aux[M,N] the forward's pre-activation (gelu_backward's
//                  formula). beta must be 0 and there is no bias.
// aux has dtype_c, rows of N elements, and must not overlap C. gelu (or gelu') is taken of p
// either in fp32 (a fused epilogue) or of p rounded to dtype_c (matmul then gelu_forward or
// gelu_backward, the sequence every implementation may fall back to): the two differ by at most
// the rounding of p. Work: as the matmul, plus M·N e bytes of aux written (kGelu) or read.
enum class Epilogue : uint8_t { kNone, kGelu, kGeluBackward };

// Row-major C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C (+ bias[N] on every row), then
// the epilogue. op(A) = A stored [M,K], or A stored [K,M] transposed when trans_a. op(B) = B
// stored [K,N], or B stored [N,K] transposed when trans_b. Leading dimensions are the stored row
// lengths. fp32 accumulation; the bias is added in fp32 before the one rounding to dtype_c. A and
// B share dtype_ab; C, bias and aux have dtype_c. beta = 0 never reads C.
// Work: 2·M·N·K FLOPs; (M·K + K·N + M·N) e bytes (+ M·N e when beta reads C, + N e for a bias,
// + M·N e for aux).
struct MatmulArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  const void* bias = nullptr;  // optional, [N], dtype_c
  DType dtype_ab = DType::kF32;
  DType dtype_c = DType::kF32;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
  Epilogue epilogue = Epilogue::kNone;
  void* aux = nullptr;  // kGelu: written; kGeluBackward: read
};

// One Adam step over `numel` elements of device memory (Kernels::adam_step).
struct AdamArgs {
  float* params = nullptr;      // fp32, updated in place
  float* exp_avg = nullptr;     // fp32 m
  float* exp_avg_sq = nullptr;  // fp32 v
  const void* grads = nullptr;
  DType grad_dtype = DType::kF32;
  void* out16 = nullptr;  // optional: the new params as out_dtype (fp16 or bf16)
  DType out_dtype = DType::kBF16;
  int64_t numel = 0;
  cpu::AdamConstants constants;
};

// All tensors of one call share `dtype` except where a parameter says fp32 or int32.
class Kernels {
 public:
  virtual ~Kernels() = default;

  virtual Status matmul(Stream& s, const MatmulArgs& args) = 0;
  // dbias[N] (+)= sum over rows of dout[M,N]; accumulate adds into dbias, else overwrites.
  // Work: (M·N + N) e bytes.
  virtual Status bias_backward(Stream& s, void* dbias, const void* dout, int64_t m, int64_t n,
                               DType dtype, bool accumulate) = 0;

  // out[B,T,C] = wte[tokens[b,t], :] + wpe[t, :]. tokens int32 in [0, V); wte [Vp,C], wpe [T',C]
  // with T' >= T. Work: (2·B·T·C + T·C) e + 4·B·T bytes.
  virtual Status embedding_forward(Stream& s, void* out, const int32_t* tokens, const void* wte,
                                   const void* wpe, int64_t B, int64_t T, int64_t C,
                                   DType dtype) = 0;
  // dwte[tokens[b,t], :] += dout[b,t,:]; dwpe[t,:] += sum_b dout[b,t,:]. Each element's
  // additions are summed in fp32 in position order and rounded once. Work: (2·B·T·C + 2·T·C) e
  // + 4·B·T bytes.
  virtual Status embedding_backward(Stream& s, void* dwte, void* dwpe, const void* dout,
                                    const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                    DType dtype) = 0;

  // out[N,C] = (inp - mean) * rstd * weight + bias, per row; mean/rstd fp32 [N] are saved.
  // Work: (2·N·C + 2·C) e + 8·N bytes.
  virtual Status layernorm_forward(Stream& s, void* out, float* mean, float* rstd, const void* inp,
                                   const void* weight, const void* bias, int64_t N, int64_t C,
                                   float eps, DType dtype) = 0;
  // The residual add fused with the LayerNorm that reads it: residual[N,C] = a + b (rounded),
  // then layernorm_forward of residual into out, mean, rstd: the bits of add() then
  // layernorm_forward() (the default does exactly that; a GPU reads a and b once and the residual
  // from cache). residual may alias a or b. Work: (4·N·C + 2·C) e + 8·N bytes.
  virtual Status residual_layernorm_forward(Stream& s, void* residual, void* out, float* mean,
                                            float* rstd, const void* a, const void* b,
                                            const void* weight, const void* bias, int64_t N,
                                            int64_t C, float eps, DType dtype) {
    STRATA_RETURN_IF_ERROR(add(s, residual, a, b, N * C, dtype));
    return layernorm_forward(s, out, mean, rstd, residual, weight, bias, N, C, eps, dtype);
  }
  // dinp += d/dinp; dweight += ...; dbias += ... (all three accumulate). Work: (4·N·C + 5·C) e
  // + 8·N bytes (dout, inp, dinp read and written, the weight, dweight and dbias).
  virtual Status layernorm_backward(Stream& s, void* dinp, void* dweight, void* dbias,
                                    const void* dout, const void* inp, const void* weight,
                                    const float* mean, const float* rstd, int64_t N, int64_t C,
                                    DType dtype) = 0;

  // RMSNorm (Llama): out[N,C] = inp * rstd * weight per row, rstd = 1 / sqrt(mean(inp^2) + eps)
  // (fp32 [N], saved for the backward). The product is rounded once (Hugging Face rounds
  // inp * rstd to the dtype before the weight multiplies it).
  virtual Status rmsnorm_forward(Stream& s, void* out, float* rstd, const void* inp,
                                 const void* weight, int64_t N, int64_t C, float eps,
                                 DType dtype) = 0;
  // dinp += d/dinp; dweight += sum over rows of dout * inp * rstd (both accumulate).
  virtual Status rmsnorm_backward(Stream& s, void* dinp, void* dweight, const void* dout,
                                  const void* inp, const void* weight, const float* rstd, int64_t N,
                                  int64_t C, DType dtype) = 0;

  // Rotary position embeddings in Hugging Face's rotate-half layout, in place on the first
  // `heads` heads (HS elements each, HS even) of each of the B*T rows of x, rows `stride`
  // elements apart (a fused q | k | v row: heads = NH + NKV). For t the row's position in [0, T)
  // and i < HS/2: angle = t * inv_freq[i] (fp32 product, inv_freq fp32 [HS/2] in device memory),
  //   x[i] <- x[i] cos(angle) - x[i + HS/2] sin(angle),
  //   x[i + HS/2] <- x[i + HS/2] cos(angle) + x[i] sin(angle).
  // inverse rotates by -angle: applied to the gradient of the rotated x, it gives the gradient
  // of x (the rotation is orthogonal).
  virtual Status rope(Stream& s, void* x, const float* inv_freq, int64_t B, int64_t T,
                      int64_t heads, int64_t HS, int64_t stride, bool inverse, DType dtype) = 0;

  // SwiGLU (Llama's MLP): gate_up [N, 2H] holds gate | up in each row (one fused matmul);
  // out [N, H] = silu(gate) * up, silu(a) = a / (1 + exp(-a)), rounded once.
  virtual Status swiglu_forward(Stream& s, void* out, const void* gate_up, int64_t N, int64_t H,
                                DType dtype) = 0;
  // dgate_up [N, 2H] (overwrites): dgate = dout * up * silu'(gate), dup = dout * silu(gate).
  virtual Status swiglu_backward(Stream& s, void* dgate_up, const void* gate_up, const void* dout,
                                 int64_t N, int64_t H, DType dtype) = 0;

  // GELU, tanh approximation (GPT-2): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  // Work: 2·n e bytes (the backward: 3·n e).
  virtual Status gelu_forward(Stream& s, void* out, const void* inp, int64_t n, DType dtype) = 0;
  // dinp = gelu'(inp) * dout (overwrites).
  virtual Status gelu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t n,
                               DType dtype) = 0;

  // Causal self-attention with NKV key/value heads shared by groups of NH / NKV query heads
  // (grouped-query attention; NKV = NH is multi-head attention, NKV must divide NH). Each qkv
  // row [B,T,C + 2*NKV*HS] holds q (NH heads of HS = C/NH) | k (NKV heads) | v (NKV heads);
  // query head h uses key/value head h / (NH / NKV). out [B,T,C]; lse fp32 [B,NH,T] = log-sum-
  // exp of each row's scaled scores (saved for the backward). Scores are q.k / sqrt(HS),
  // softmax in fp32. Work (NKV = NH): 2·B·T²·C FLOPs (QKᵀ and PV, the causal half of 4·B·T²·C);
  // 4·B·T·C e + 4·B·NH·T bytes.
  virtual Status attention_forward(Stream& s, void* out, float* lse, const void* qkv, int64_t B,
                                   int64_t T, int64_t C, int64_t NH, int64_t NKV, DType dtype) = 0;
  // dqkv (qkv's shape) = gradient w.r.t. qkv (overwrites), from dout [B,T,C], the forward's qkv,
  // out and lse. A key/value head's gradient sums its group's query heads in head order.
  // Work (NKV = NH): 5·B·T²·C FLOPs (five matmuls of the causal half, as FlashAttention-2's
  // backward); 8·B·T·C e + 4·B·NH·T bytes.
  virtual Status attention_backward(Stream& s, void* dqkv, const void* dout, const void* qkv,
                                    const void* out, const float* lse, int64_t B, int64_t T,
                                    int64_t C, int64_t NH, int64_t NKV, DType dtype) = 0;

  // out = a + b (n elements; out may alias a or b). Work: 3·n e bytes.
  virtual Status add(Stream& s, void* out, const void* a, const void* b, int64_t n,
                     DType dtype) = 0;
  // x *= factor (n elements).
  virtual Status scale(Stream& s, void* x, float factor, int64_t n, DType dtype) = 0;
  // dst = src converted (n elements), round to nearest even.
  virtual Status cast(Stream& s, void* dst, DType dst_dtype, const void* src, DType src_dtype,
                      int64_t n) = 0;
  // dst += src (n elements): each sum in fp32 (src converted exactly), rounded to dst's dtype
  // (round to nearest even): the reduced gradient shards of the micro-batches added into the
  // rank's, in fp32 with fp32_grad_accum, on the device. Work: (2 dst + src) e bytes an element.
  virtual Status accumulate(Stream& s, void* dst, DType dst_dtype, const void* src, DType src_dtype,
                            int64_t n) = 0;

  // Softmax over the first V of Vp columns of logits [N,Vp], then per row:
  // losses[r] = -log p[targets[r]] (fp32), and logits are overwritten with the gradient
  // dlogits = (p - onehot(target)) * dloss (padded columns set to 0). A row whose target is
  // negative is ignored: loss 0 and gradient 0. Work: 2·N·Vp e + 8·N bytes.
  virtual Status softmax_cross_entropy(Stream& s, float* losses, void* logits,
                                       const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                                       float dloss, DType dtype) = 0;

  // out fp32 [2]: out[0] = sum of x^2 (fp32 accumulation, fixed order), out[1] = 1.0f if any
  // element is NaN or Inf else 0.0f. When accumulate, out[0] += and out[1] = max(out[1], ...).
  // Work: n e bytes.
  virtual Status sum_squares(Stream& s, float* out, const void* x, int64_t n, DType dtype,
                             bool accumulate) = 0;
  // The gradient check of cpu::grad_check on the device, bit for bit: out fp64 [2] (device):
  // out[0] = sum of x^2, out[1] = 1.0 if that sum is not finite (x holds a NaN or Inf) else 0.0,
  // with grad_check's operations in its order (chunks of cpu::kGradCheckChunk elements; in a
  // chunk, element i's exact fp64 square added into lane i % 16; the 16 lanes added in order,
  // then the chunks' sums in order), so the global norm has the same bits whether a shard was
  // checked on the host or on the device. Work: n e bytes.
  virtual Status grad_stats(Stream& s, double* out, const void* x, int64_t n, DType dtype) = 0;

  // Adam/AdamW on device memory (the optimizer state kept on the device): fp32 params, m and v
  // updated in place from gradients of `grad_dtype`, the new params also written as fp16/bf16
  // into out16 when it is given, with the constants of cpu::CpuAdam::constants and exactly
  // cpu_adam.h's per-element operations (bit for bit with the CPU Adam on the CpuDevice; on a GPU
  // the same IEEE operations, fused multiply-adds included). Work: 24 bytes an element (fp32 p,
  // m, v read and written) + the gradient's + out16's.
  virtual Status adam_step(Stream& s, const AdamArgs& args) = 0;

 protected:
  // The epilogue's own arguments (aux given and apart from C, beta 0, no bias backward).
  static Status check_epilogue(const MatmulArgs& args);
  // A matmul with an epilogue as its sequence of kernels: matmul (into aux for kGelu) then
  // gelu_forward or gelu_backward. For implementations without the fused epilogue, after their
  // argument checks (check_epilogue among them).
  Status matmul_in_sequence(Stream& s, const MatmulArgs& args);
};

}  // namespace strata::gpu

#include "gpu/matmul_epilogue_inl.h"  // IWYU pragma: export

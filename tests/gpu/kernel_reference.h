// Float64 reference implementations of every Kernels op (gpu/kernels.h), written independently of
// the device kernels, for the conformance tests. Plain loops; no threads.
#pragma once

#include <cstdint>
#include <vector>

namespace strata::gpu::ref {

using Vec = std::vector<double>;

// C[M,N] = alpha * op(A) op(B) + beta * C + bias (bias may be empty).
void matmul(const Vec& a, const Vec& b, Vec& c, const Vec& bias, int64_t M, int64_t N, int64_t K,
            bool trans_a, bool trans_b, double alpha, double beta);

void layernorm_forward(const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t C, double eps,
                       Vec& out, Vec& mean, Vec& rstd);
// Accumulates into dx, dw, db.
void layernorm_backward(const Vec& dout, const Vec& x, const Vec& w, int64_t N, int64_t C,
                        double eps, Vec& dx, Vec& dw, Vec& db);

double gelu(double x);
double gelu_grad(double x);

// qkv [B,T,C + 2*NKV*(C/NH)] (q | k | v, NKV key/value heads) -> out [B,T,C], lse [B,NH,T].
void attention_forward(const Vec& qkv, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                       Vec& out, Vec& lse);
// dqkv in qkv's shape (overwritten).
void attention_backward(const Vec& dout, const Vec& qkv, int64_t B, int64_t T, int64_t C,
                        int64_t NH, int64_t NKV, Vec& dqkv);

void embedding_forward(const std::vector<int32_t>& tokens, const Vec& wte, const Vec& wpe,
                       int64_t B, int64_t T, int64_t C, Vec& out);
// Accumulates into dwte, dwpe.
void embedding_backward(const Vec& dout, const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                        int64_t C, Vec& dwte, Vec& dwpe);

// losses [N]; dlogits [N,Vp] (padded columns and ignored rows 0).
void softmax_cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t N,
                           int64_t V, int64_t Vp, double dloss, Vec& losses, Vec& dlogits);

// --- Llama's operations (kernel_reference_llama.cpp) ---
// out [N,C], rstd [N].
void rmsnorm_forward(const Vec& x, const Vec& w, int64_t N, int64_t C, double eps, Vec& out,
                     Vec& rstd);
// Accumulates into dx, dw.
void rmsnorm_backward(const Vec& dout, const Vec& x, const Vec& w, int64_t N, int64_t C, double eps,
                      Vec& dx, Vec& dw);
// In place on the first `heads` heads of each of the B*T rows (stride apart); sign -1 rotates
// back. inv_freq as given (the kernel's fp32 values), angles in float64.
void rope(Vec& x, const Vec& inv_freq, int64_t B, int64_t T, int64_t heads, int64_t HS,
          int64_t stride, double sign);
// gate_up [N,2H] -> out [N,H]; dgate_up [N,2H] overwritten.
void swiglu_forward(const Vec& gate_up, int64_t N, int64_t H, Vec& out);
void swiglu_backward(const Vec& dout, const Vec& gate_up, int64_t N, int64_t H, Vec& dgate_up);

}  // namespace strata::gpu::ref

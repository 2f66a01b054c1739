// GptModel's forward pass: one transformer layer, and the head (final layernorm, tied-embedding
// logits, cross-entropy). All work is enqueued on the model's stream.
#include <cmath>

#include "model/gpt.h"
#include "model/gpt_internal.h"

namespace strata::model {
namespace {
constexpr float kLayerNormEps = 1e-5f;
}  // namespace

Status GptModel::layer_forward(int64_t l, bool write_output) {
  const DType dt = config_.dtype;
  const int64_t n = shape_.batch * shape_.seq;
  const int64_t c = config_.channels;
  gpu::Stream& s = *stream_;
  void* p = param_block(l);
  Activations& a = acts(l);
  const void* x = layer_input(l);

  STRATA_RETURN_IF_ERROR(k_ops_.layernorm_forward(s, a.ln1.data(), a.ln1_mean.as<float>(),
                                                  a.ln1_rstd.as<float>(), x, elem(p, ll_.ln1w, dt),
                                                  elem(p, ll_.ln1b, dt), n, c, kLayerNormEps, dt));
  gpu::MatmulArgs mm;
  mm.dtype_ab = dt;
  mm.dtype_c = dt;
  // qkv[n,3C] = ln1[n,C] . qkvw[3C,C]^T + qkvb
  mm.a = a.ln1.data();
  mm.b = elem(p, ll_.qkvw, dt);
  mm.bias = elem(p, ll_.qkvb, dt);
  mm.c = a.qkv.data();
  mm.m = n;
  mm.n = 3 * c;
  mm.k = c;
  mm.trans_b = true;
  STRATA_RETURN_IF_ERROR(k_ops_.matmul(s, mm));
  STRATA_RETURN_IF_ERROR(k_ops_.attention_forward(s, a.atty.data(), a.lse.as<float>(), a.qkv.data(),
                                                  shape_.batch, shape_.seq, c, config_.heads, dt));
  // tmp[n,C] = atty[n,C] . attprojw[C,C]^T + attprojb; res2 = x + tmp
  mm.a = a.atty.data();
  mm.b = elem(p, ll_.attprojw, dt);
  mm.bias = elem(p, ll_.attprojb, dt);
  mm.c = tmp_.data();
  mm.n = c;
  mm.k = c;
  STRATA_RETURN_IF_ERROR(k_ops_.matmul(s, mm));
  STRATA_RETURN_IF_ERROR(k_ops_.add(s, a.res2.data(), x, tmp_.data(), n * c, dt));
  STRATA_RETURN_IF_ERROR(k_ops_.layernorm_forward(
      s, a.ln2.data(), a.ln2_mean.as<float>(), a.ln2_rstd.as<float>(), a.res2.data(),
      elem(p, ll_.ln2w, dt), elem(p, ll_.ln2b, dt), n, c, kLayerNormEps, dt));
  // fch[n,4C] = ln2[n,C] . fcw[4C,C]^T + fcb; fch_gelu = gelu(fch)
  mm.a = a.ln2.data();
  mm.b = elem(p, ll_.fcw, dt);
  mm.bias = elem(p, ll_.fcb, dt);
  mm.c = a.fch.data();
  mm.n = 4 * c;
  mm.k = c;
  STRATA_RETURN_IF_ERROR(k_ops_.matmul(s, mm));
  STRATA_RETURN_IF_ERROR(k_ops_.gelu_forward(s, a.fch_gelu.data(), a.fch.data(), n * 4 * c, dt));
  if (!write_output) return ok_status();
  // tmp[n,C] = fch_gelu[n,4C] . fcprojw[C,4C]^T + fcprojb; out = res2 + tmp
  mm.a = a.fch_gelu.data();
  mm.b = elem(p, ll_.fcprojw, dt);
  mm.bias = elem(p, ll_.fcprojb, dt);
  mm.c = tmp_.data();
  mm.n = c;
  mm.k = 4 * c;
  STRATA_RETURN_IF_ERROR(k_ops_.matmul(s, mm));
  return k_ops_.add(s, layer_output(l), a.res2.data(), tmp_.data(), n * c, dt);
}

Status GptModel::head_forward(const int32_t* targets_host, float* loss) {
  const DType dt = config_.dtype;
  const int64_t n = shape_.batch * shape_.seq;
  const int64_t c = config_.channels;
  gpu::Stream& s = *stream_;
  void* p = param_block(config_.layers);
  STRATA_RETURN_IF_ERROR(k_ops_.layernorm_forward(
      s, lnf_.data(), lnf_mean_.as<float>(), lnf_rstd_.as<float>(), x_final_.data(),
      elem(p, sl_.lnfw, dt), elem(p, sl_.lnfb, dt), n, c, kLayerNormEps, dt));
  // logits[n,Vp] = lnf[n,C] . wte[Vp,C]^T (tied embedding)
  gpu::MatmulArgs mm;
  mm.dtype_ab = dt;
  mm.dtype_c = dt;
  mm.a = lnf_.data();
  mm.b = elem(p, sl_.wte, dt);
  mm.c = logits_.data();
  mm.m = n;
  mm.n = config_.vp();
  mm.k = c;
  mm.trans_b = true;
  STRATA_RETURN_IF_ERROR(k_ops_.matmul(s, mm));
  *loss = 0.0f;
  if (targets_host == nullptr) return s.synchronize();
  int64_t valid = 0;
  for (int64_t i = 0; i < n; ++i) valid += targets_host[i] >= 0 ? 1 : 0;
  const float dloss = valid > 0 ? 1.0f / static_cast<float>(valid) : 0.0f;
  STRATA_RETURN_IF_ERROR(s.copy(targets_.data(), targets_host, static_cast<size_t>(n) * 4,
                                gpu::CopyKind::kHostToDevice));
  STRATA_RETURN_IF_ERROR(k_ops_.softmax_cross_entropy(s, losses_.as<float>(), logits_.data(),
                                                      targets_.as<int32_t>(), n, config_.vocab,
                                                      config_.vp(), dloss, dt));
  STRATA_RETURN_IF_ERROR(s.copy(host_losses_.data(), losses_.data(), static_cast<size_t>(n) * 4,
                                gpu::CopyKind::kDeviceToHost));
  STRATA_RETURN_IF_ERROR(s.synchronize());
  double sum = 0.0;  // fixed order on the host
  for (int64_t i = 0; i < n; ++i) sum += host_losses_[static_cast<size_t>(i)];
  *loss = valid > 0 ? static_cast<float>(sum / static_cast<double>(valid)) : 0.0f;
  return ok_status();
}

}  // namespace strata::model

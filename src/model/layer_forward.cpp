// GptModel's forward pass: one transformer layer, and the head (final layernorm, tied-embedding
// logits, cross-entropy). All work is enqueued on the model's stream.
#include <cmath>

#include "model/gpt.h"
#include "model/gpt_internal.h"

namespace strata::model {
namespace {
constexpr float kLayerNormEps = 1e-5f;
}  // namespace

Status GptModel::embedding_forward(gpu::Stream& s, const void* shared) {
  void* p = const_cast<void*>(shared);
  return k_ops_.embedding_forward(s, checkpoint_at_[0], tokens_.as<int32_t>(),
                                  elem(p, sl_.wte, config_.dtype), elem(p, sl_.wpe, config_.dtype),
                                  shape_.batch, shape_.seq, config_.channels, config_.dtype);
}

Status GptModel::forward_layer(gpu::Stream& s, int64_t l, const void* params, bool write_output) {
  const DType dt = config_.dtype;
  const int64_t n = shape_.batch * shape_.seq;
  const int64_t c = config_.channels;
  void* p = const_cast<void*>(params);  // elem() computes addresses only; nothing is written
  Activations& a = acts(l);
  const void* x = layer_input(l);

  STRATA_RETURN_IF_ERROR(k_ops_.layernorm_forward(s, a.ln1.data(), a.ln1_mean.as<float>(),
                                                  a.ln1_rstd.as<float>(), x, elem(p, ll_.ln1w, dt),
                                                  elem(p, ll_.ln1b, dt), n, c, kLayerNormEps, dt));
  // qkv[n,3C] = ln1[n,C] . qkvw[3C,C]^T + qkvb
  STRATA_RETURN_IF_ERROR(linear(s, a.qkv.data(), a.ln1.data(), elem(p, ll_.qkvw, dt),
                                elem(p, ll_.qkvb, dt), 3 * c, c));
  STRATA_RETURN_IF_ERROR(k_ops_.attention_forward(s, a.atty.data(), a.lse.as<float>(), a.qkv.data(),
                                                  shape_.batch, shape_.seq, c, config_.heads,
                                                  config_.heads, dt));
  // tmp[n,C] = atty[n,C] . attprojw[C,C]^T + attprojb; res2 = x + tmp
  STRATA_RETURN_IF_ERROR(linear(s, tmp_.data(), a.atty.data(), elem(p, ll_.attprojw, dt),
                                elem(p, ll_.attprojb, dt), c, c));
  // ln2 = LayerNorm(res2), fused with the residual add.
  STRATA_RETURN_IF_ERROR(k_ops_.residual_layernorm_forward(
      s, a.res2.data(), a.ln2.data(), a.ln2_mean.as<float>(), a.ln2_rstd.as<float>(), x,
      tmp_.data(), elem(p, ll_.ln2w, dt), elem(p, ll_.ln2b, dt), n, c, kLayerNormEps, dt));
  // fch[n,4C] = ln2[n,C] . fcw[4C,C]^T + fcb; fch_gelu = gelu(fch): one matmul with its epilogue.
  STRATA_RETURN_IF_ERROR(linear(s, a.fch_gelu.data(), a.ln2.data(), elem(p, ll_.fcw, dt),
                                elem(p, ll_.fcb, dt), 4 * c, c, gpu::Epilogue::kGelu,
                                a.fch.data()));
  if (!write_output) return ok_status();
  // tmp[n,C] = fch_gelu[n,4C] . fcprojw[C,4C]^T + fcprojb; out = res2 + tmp
  STRATA_RETURN_IF_ERROR(linear(s, tmp_.data(), a.fch_gelu.data(), elem(p, ll_.fcprojw, dt),
                                elem(p, ll_.fcprojb, dt), c, 4 * c));
  return k_ops_.add(s, layer_output(l), a.res2.data(), tmp_.data(), n * c, dt);
}

Status GptModel::head_forward(gpu::Stream& s, const void* shared) {
  const DType dt = config_.dtype;
  const int64_t n = shape_.batch * shape_.seq;
  const int64_t c = config_.channels;
  void* p = const_cast<void*>(shared);
  STRATA_RETURN_IF_ERROR(k_ops_.layernorm_forward(
      s, lnf_.data(), lnf_mean_.as<float>(), lnf_rstd_.as<float>(), x_final_.data(),
      elem(p, sl_.lnfw, dt), elem(p, sl_.lnfb, dt), n, c, kLayerNormEps, dt));
  // logits[n,Vp] = lnf[n,C] . wte[Vp,C]^T (tied embedding)
  STRATA_RETURN_IF_ERROR(
      linear(s, logits_.data(), lnf_.data(), elem(p, sl_.wte, dt), nullptr, config_.vp(), c));
  if (!have_targets()) return ok_status();
  STRATA_RETURN_IF_ERROR(k_ops_.softmax_cross_entropy(s, losses_.as<float>(), logits_.data(),
                                                      targets_.as<int32_t>(), n, config_.vocab,
                                                      config_.vp(), dloss(), dt));
  return copy_losses(s);
}

}  // namespace strata::model

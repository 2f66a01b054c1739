// GptModel's backward pass: the head (logits -> final layernorm) and one transformer layer.
// dres_ [B,T,C] carries the gradient of the residual stream between layers; parameter
// gradients accumulate into the gradient blocks.
#include "model/gpt.h"
#include "model/gpt_internal.h"

namespace strata::model {

Status GptModel::head_backward(gpu::Stream& s, const void* shared, void* shared_grads) {
  if (!have_targets()) {
    return make_error(ErrorCode::kConfig, "GptModel::head_backward needs a forward with targets");
  }
  const DType dt = config_.dtype;
  const int64_t n = shape_.batch * shape_.seq;
  const int64_t c = config_.channels;
  void* p = const_cast<void*>(shared);
  void* g = shared_grads;
  // logits_ holds dlogits [n,Vp] (softmax_cross_entropy wrote it).
  // dwte[Vp,C] += dlogits[n,Vp]^T . lnf[n,C]; dlnf[n,C] = dlogits[n,Vp] . wte[Vp,C]
  STRATA_RETURN_IF_ERROR(
      weight_grad(s, tied_head_grad(g), logits_.data(), lnf_.data(), config_.vp(), c));
  STRATA_RETURN_IF_ERROR(
      input_grad(s, dbuf_.data(), logits_.data(), elem(p, sl_.wte, dt), config_.vp(), c));
  STRATA_RETURN_IF_ERROR(s.memset(dres_.data(), 0, dres_.size_bytes()));
  return k_ops_.layernorm_backward(s, dres_.data(), elem(g, sl_.lnfw, dt), elem(g, sl_.lnfb, dt),
                                   dbuf_.data(), x_final_.data(), elem(p, sl_.lnfw, dt),
                                   lnf_mean_.as<float>(), lnf_rstd_.as<float>(), n, c, dt);
}

Status GptModel::embedding_backward(gpu::Stream& s, void* shared_grads) {
  const DType dt = config_.dtype;
  return k_ops_.embedding_backward(
      s, elem(shared_grads, sl_.wte, dt), elem(shared_grads, sl_.wpe, dt), dres_.data(),
      tokens_.as<int32_t>(), shape_.batch, shape_.seq, config_.channels, dt);
}

Status GptModel::backward_layer(gpu::Stream& s, int64_t l, const void* params, void* grads) {
  const DType dt = config_.dtype;
  const int64_t n = shape_.batch * shape_.seq;
  const int64_t c = config_.channels;
  void* p = const_cast<void*>(params);
  void* g = grads;
  Activations& a = acts(l);
  const void* x = layer_input(l);

  // MLP: out = res2 + fch_gelu . fcprojw^T + fcprojb. dres_ = d out.
  STRATA_RETURN_IF_ERROR(
      k_ops_.bias_backward(s, elem(g, ll_.fcprojb, dt), dres_.data(), n, c, dt, true));
  STRATA_RETURN_IF_ERROR(
      weight_grad(s, elem(g, ll_.fcprojw, dt), dres_.data(), a.fch_gelu.data(), c, 4 * c));
  // d fch = gelu'(fch) * (dres_ . fcprojw): one matmul with its epilogue.
  STRATA_RETURN_IF_ERROR(input_grad(s, d4b_.data(), dres_.data(), elem(p, ll_.fcprojw, dt), c,
                                    4 * c, gpu::Epilogue::kGeluBackward, a.fch.data()));
  STRATA_RETURN_IF_ERROR(
      k_ops_.bias_backward(s, elem(g, ll_.fcb, dt), d4b_.data(), n, 4 * c, dt, true));
  STRATA_RETURN_IF_ERROR(weight_grad(s, elem(g, ll_.fcw, dt), d4b_.data(), a.ln2.data(), 4 * c, c));
  STRATA_RETURN_IF_ERROR(input_grad(s, dbuf_.data(), d4b_.data(), elem(p, ll_.fcw, dt), 4 * c, c));
  // dres_ += ln2 backward (dres_ is now d res2).
  STRATA_RETURN_IF_ERROR(k_ops_.layernorm_backward(
      s, dres_.data(), elem(g, ll_.ln2w, dt), elem(g, ll_.ln2b, dt), dbuf_.data(), a.res2.data(),
      elem(p, ll_.ln2w, dt), a.ln2_mean.as<float>(), a.ln2_rstd.as<float>(), n, c, dt));

  // Attention: res2 = x + atty . attprojw^T + attprojb.
  STRATA_RETURN_IF_ERROR(
      k_ops_.bias_backward(s, elem(g, ll_.attprojb, dt), dres_.data(), n, c, dt, true));
  STRATA_RETURN_IF_ERROR(
      weight_grad(s, elem(g, ll_.attprojw, dt), dres_.data(), a.atty.data(), c, c));
  STRATA_RETURN_IF_ERROR(
      input_grad(s, dbuf_.data(), dres_.data(), elem(p, ll_.attprojw, dt), c, c));
  STRATA_RETURN_IF_ERROR(k_ops_.attention_backward(
      s, dqkv_.data(), dbuf_.data(), a.qkv.data(), a.atty.data(), a.lse.as<float>(), shape_.batch,
      shape_.seq, c, config_.heads, config_.heads, dt));
  STRATA_RETURN_IF_ERROR(
      k_ops_.bias_backward(s, elem(g, ll_.qkvb, dt), dqkv_.data(), n, 3 * c, dt, true));
  STRATA_RETURN_IF_ERROR(
      weight_grad(s, elem(g, ll_.qkvw, dt), dqkv_.data(), a.ln1.data(), 3 * c, c));
  STRATA_RETURN_IF_ERROR(
      input_grad(s, dbuf_.data(), dqkv_.data(), elem(p, ll_.qkvw, dt), 3 * c, c));
  // dres_ += ln1 backward (dres_ is now d x, the layer input).
  return k_ops_.layernorm_backward(s, dres_.data(), elem(g, ll_.ln1w, dt), elem(g, ll_.ln1b, dt),
                                   dbuf_.data(), x, elem(p, ll_.ln1w, dt), a.ln1_mean.as<float>(),
                                   a.ln1_rstd.as<float>(), n, c, dt);
}

}  // namespace strata::model

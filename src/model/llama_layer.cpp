// LlamaModel's passes: the embedding, one layer forward and backward, and the head. dres_ [B,T,C]
// carries the gradient of the residual stream between layers; parameter gradients accumulate into
// the gradient blocks. All work is enqueued on the caller's stream.
#include "model/llama.h"
#include "model/llama_internal.h"

namespace strata::model {

Status LlamaModel::embedding_forward(gpu::Stream& s, const void* shared) {
  // The embedding kernel adds a position table: Llama has none (zero_pos_ holds zeros), so each
  // row is its token's embedding exactly.
  return k_ops_.embedding_forward(s, checkpoint_at_[0], tokens_.as<int32_t>(),
                                  elem(const_cast<void*>(shared), embed_, config_.dtype),
                                  zero_pos_.data(), shape_.batch, shape_.seq, config_.channels,
                                  config_.dtype);
}

Status LlamaModel::embedding_backward(gpu::Stream& s, void* shared_grads) {
  STRATA_RETURN_IF_ERROR(s.memset(dpos_.data(), 0, dpos_.size_bytes()));  // unused
  return k_ops_.embedding_backward(s, elem(shared_grads, embed_, config_.dtype), dpos_.data(),
                                   dres_.data(), tokens_.as<int32_t>(), shape_.batch, shape_.seq,
                                   config_.channels, config_.dtype);
}

Status LlamaModel::forward_layer(gpu::Stream& s, int64_t l, const void* params, bool write_output) {
  const DType dt = config_.dtype;
  const int64_t n = rows();
  const int64_t c = config_.channels;
  const int64_t inter = config_.intermediate;
  const auto eps = static_cast<float>(config_.rms_eps);
  void* p = const_cast<void*>(params);  // elem() computes addresses only; nothing is written
  Activations& a = acts(l);
  const void* x = layer_input(l);

  STRATA_RETURN_IF_ERROR(k_ops_.rmsnorm_forward(s, a.ln1.data(), a.rstd1.as<float>(), x,
                                                elem(p, in_norm_, dt), n, c, eps, dt));
  // qkv[n, width] = ln1 . [q; k; v]^T, then q and k rotated in place.
  STRATA_RETURN_IF_ERROR(
      linear(s, a.qkv.data(), a.ln1.data(), elem(p, qkv_w_, dt), nullptr, width_, c));
  STRATA_RETURN_IF_ERROR(k_ops_.rope(s, a.qkv.data(), inv_freq_.as<float>(), shape_.batch,
                                     shape_.seq, config_.heads + config_.kv_heads,
                                     config_.head_size(), width_, false, dt));
  STRATA_RETURN_IF_ERROR(k_ops_.attention_forward(s, a.atty.data(), a.lse.as<float>(), a.qkv.data(),
                                                  shape_.batch, shape_.seq, c, config_.heads,
                                                  config_.kv_heads, dt));
  // res2 = x + atty . o^T
  STRATA_RETURN_IF_ERROR(linear(s, tmp_.data(), a.atty.data(), elem(p, o_w_, dt), nullptr, c, c));
  STRATA_RETURN_IF_ERROR(k_ops_.add(s, a.res2.data(), x, tmp_.data(), n * c, dt));
  STRATA_RETURN_IF_ERROR(k_ops_.rmsnorm_forward(s, a.ln2.data(), a.rstd2.as<float>(), a.res2.data(),
                                                elem(p, post_norm_, dt), n, c, eps, dt));
  // gate_up[n, 2I] = ln2 . [gate; up]^T; h = silu(gate) * up
  STRATA_RETURN_IF_ERROR(
      linear(s, a.gate_up.data(), a.ln2.data(), elem(p, gate_up_w_, dt), nullptr, 2 * inter, c));
  STRATA_RETURN_IF_ERROR(k_ops_.swiglu_forward(s, a.h.data(), a.gate_up.data(), n, inter, dt));
  if (!write_output) return ok_status();
  // out = res2 + h . down^T
  STRATA_RETURN_IF_ERROR(
      linear(s, tmp_.data(), a.h.data(), elem(p, down_w_, dt), nullptr, c, inter));
  return k_ops_.add(s, layer_output(l), a.res2.data(), tmp_.data(), n * c, dt);
}

Status LlamaModel::backward_layer(gpu::Stream& s, int64_t l, const void* params, void* grads) {
  const DType dt = config_.dtype;
  const int64_t n = rows();
  const int64_t c = config_.channels;
  const int64_t inter = config_.intermediate;
  void* p = const_cast<void*>(params);
  void* g = grads;
  Activations& a = acts(l);
  const void* x = layer_input(l);

  // MLP: out = res2 + h . down^T; dres_ = d out.
  STRATA_RETURN_IF_ERROR(weight_grad(s, elem(g, down_w_, dt), dres_.data(), a.h.data(), c, inter));
  STRATA_RETURN_IF_ERROR(input_grad(s, dh_.data(), dres_.data(), elem(p, down_w_, dt), c, inter));
  STRATA_RETURN_IF_ERROR(
      k_ops_.swiglu_backward(s, dgu_.data(), a.gate_up.data(), dh_.data(), n, inter, dt));
  STRATA_RETURN_IF_ERROR(
      weight_grad(s, elem(g, gate_up_w_, dt), dgu_.data(), a.ln2.data(), 2 * inter, c));
  STRATA_RETURN_IF_ERROR(
      input_grad(s, dbuf_.data(), dgu_.data(), elem(p, gate_up_w_, dt), 2 * inter, c));
  // dres_ += the post-attention norm's backward (dres_ is now d res2).
  STRATA_RETURN_IF_ERROR(
      k_ops_.rmsnorm_backward(s, dres_.data(), elem(g, post_norm_, dt), dbuf_.data(), a.res2.data(),
                              elem(p, post_norm_, dt), a.rstd2.as<float>(), n, c, dt));
  // Attention: res2 = x + atty . o^T.
  STRATA_RETURN_IF_ERROR(weight_grad(s, elem(g, o_w_, dt), dres_.data(), a.atty.data(), c, c));
  STRATA_RETURN_IF_ERROR(input_grad(s, dbuf_.data(), dres_.data(), elem(p, o_w_, dt), c, c));
  STRATA_RETURN_IF_ERROR(k_ops_.attention_backward(
      s, dqkv_.data(), dbuf_.data(), a.qkv.data(), a.atty.data(), a.lse.as<float>(), shape_.batch,
      shape_.seq, c, config_.heads, config_.kv_heads, dt));
  // The rotation's backward: the inverse rotation of the rotated q and k's gradients.
  STRATA_RETURN_IF_ERROR(k_ops_.rope(s, dqkv_.data(), inv_freq_.as<float>(), shape_.batch,
                                     shape_.seq, config_.heads + config_.kv_heads,
                                     config_.head_size(), width_, true, dt));
  STRATA_RETURN_IF_ERROR(
      weight_grad(s, elem(g, qkv_w_, dt), dqkv_.data(), a.ln1.data(), width_, c));
  STRATA_RETURN_IF_ERROR(input_grad(s, dbuf_.data(), dqkv_.data(), elem(p, qkv_w_, dt), width_, c));
  // dres_ += the input norm's backward (dres_ is now d x, the layer input).
  return k_ops_.rmsnorm_backward(s, dres_.data(), elem(g, in_norm_, dt), dbuf_.data(), x,
                                 elem(p, in_norm_, dt), a.rstd1.as<float>(), n, c, dt);
}

Status LlamaModel::head_forward(gpu::Stream& s, const void* shared) {
  const DType dt = config_.dtype;
  const int64_t n = rows();
  const int64_t c = config_.channels;
  void* p = const_cast<void*>(shared);
  STRATA_RETURN_IF_ERROR(k_ops_.rmsnorm_forward(s, lnf_.data(), lnf_rstd_.as<float>(),
                                                x_final_.data(), elem(p, norm_, dt), n, c,
                                                static_cast<float>(config_.rms_eps), dt));
  // logits[n, V] = lnf . head^T (lm_head, or the embedding when tied)
  STRATA_RETURN_IF_ERROR(
      linear(s, logits_.data(), lnf_.data(), head_weight(shared), nullptr, config_.vocab, c));
  if (!have_targets()) return ok_status();
  STRATA_RETURN_IF_ERROR(k_ops_.softmax_cross_entropy(s, losses_.as<float>(), logits_.data(),
                                                      targets_.as<int32_t>(), n, config_.vocab,
                                                      config_.vocab, dloss(), dt));
  return copy_losses(s);
}

Status LlamaModel::head_backward(gpu::Stream& s, const void* shared, void* shared_grads) {
  if (!have_targets()) {
    return make_error(ErrorCode::kConfig, "LlamaModel::head_backward needs a forward with targets");
  }
  const DType dt = config_.dtype;
  const int64_t n = rows();
  const int64_t c = config_.channels;
  void* p = const_cast<void*>(shared);
  void* g = shared_grads;
  // logits_ holds dlogits [n, V] (softmax_cross_entropy wrote it).
  STRATA_RETURN_IF_ERROR(weight_grad(s, config_.tied ? tied_head_grad(g) : elem(g, head_, dt),
                                     logits_.data(), lnf_.data(), config_.vocab, c));
  STRATA_RETURN_IF_ERROR(
      input_grad(s, dbuf_.data(), logits_.data(), head_weight(shared), config_.vocab, c));
  STRATA_RETURN_IF_ERROR(s.memset(dres_.data(), 0, dres_.size_bytes()));
  return k_ops_.rmsnorm_backward(s, dres_.data(), elem(g, norm_, dt), dbuf_.data(), x_final_.data(),
                                 elem(p, norm_, dt), lnf_rstd_.as<float>(), n, c, dt);
}

}  // namespace strata::model

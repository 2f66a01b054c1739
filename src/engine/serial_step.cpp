#include "engine/serial_step.h"

#include <cmath>

namespace strata::engine {

Result<std::unique_ptr<SerialStep>> SerialStep::create(model::Model& model,
                                                       OffloadedOptimizer& optimizer,
                                                       const OffloadStepOptions& options) {
  std::unique_ptr<SerialStep> s(new SerialStep(model, optimizer, options));
  STRATA_ASSIGN_OR_RETURN(s->scaling_, StepScaling::create(options, model.dtype()));
  s->blocks_ = partition_blocks(model);
  if (optimizer.num_partitions() != s->blocks_.size()) {
    return make_error(ErrorCode::kConfig, "serial step: the optimizer has ",
                      optimizer.num_partitions(), " partitions for ", s->blocks_.size(),
                      " model blocks");
  }
  const size_t nb = s->blocks_.size();
  const DType dt = model.dtype();
  s->grads_.resize(nb);
  s->master_.resize(nb);
  s->pg_.resize(nb);
  for (size_t p = 0; p < nb; ++p) {
    const auto b = static_cast<size_t>(s->blocks_[p]);
    const auto numel = static_cast<size_t>(model.block_numel(s->blocks_[p]));
    s->grads_[b].resize(numel);
    s->master_[b].resize(numel);
    s->pg_[p].grads = s->grads_[b].data();
    s->pg_[p].grad_dtype = DType::kF32;
    if (dt != DType::kF32) {
      STRATA_ASSIGN_OR_RETURN(auto buf, cpu::default_pinned_pool().allocate(2 * numel));
      s->pg_[p].out16 = buf.data();
      s->pg_[p].out_dtype = dt;
      s->out16_.push_back(std::move(buf));
    }
  }
  return s;
}

Result<StepResult> SerialStep::run(const int32_t* tokens, const int32_t* targets, int64_t step,
                                   int micro_batches) {
  model::Model& m = model_;
  if (micro_batches < 1) {
    return make_error(ErrorCode::kConfig, "SerialStep::run: ", micro_batches,
                      " micro-batches are not accepted (at least 1)");
  }
  STRATA_RETURN_IF_ERROR(m.zero_grad());
  StepResult r;
  r.loss_scale = scaling_.loss_scale();
  m.set_loss_scale(scaling_.loss_scale());
  const size_t bt = static_cast<size_t>(m.shape().batch * m.shape().seq);
  double loss_sum = 0.0;
  for (int k = 0; k < micro_batches; ++k) {
    STRATA_ASSIGN_OR_RETURN(const float loss, m.forward(tokens + k * bt, targets + k * bt));
    STRATA_RETURN_IF_ERROR(m.backward());
    loss_sum += static_cast<double>(loss);
  }
  // A tied head's gradient kept apart over the micro-batches joins the embedding's (model.h).
  STRATA_RETURN_IF_ERROR(m.fold_head_grads(m.stream(), m.grad_block(m.num_layers())));
  STRATA_RETURN_IF_ERROR(m.stream().synchronize());
  r.loss = static_cast<float>(loss_sum / micro_batches);
  double sum = 0.0;
  bool finite = true;
  for (int64_t b = 0; b < m.num_blocks(); ++b) {
    auto& g = grads_[static_cast<size_t>(b)];
    STRATA_RETURN_IF_ERROR(m.download_grads(b, g.data()));
    const cpu::GradStats s = cpu::grad_check(g.data(), DType::kF32, static_cast<int64_t>(g.size()));
    sum += s.sum_squares;
    finite = finite && !s.has_nonfinite;
  }
  STRATA_ASSIGN_OR_RETURN(const StepScaling::Decision d,
                          scaling_.decide(sum, finite, step, micro_batches));
  r.grad_norm = d.norm;
  r.skipped = !d.apply;
  if (!d.apply) return r;  // fp16 overflow: no parameter, no moment changes
  STRATA_RETURN_IF_ERROR(opt_.step(pg_, cpu::AdamStep{d.adam_step, d.grad_scale}));
  for (size_t p = 0; p < blocks_.size(); ++p) {
    const int64_t b = blocks_[p];
    if (pg_[p].out16 != nullptr) {
      STRATA_RETURN_IF_ERROR(m.stream().copy(m.param_block(b), pg_[p].out16,
                                             2 * static_cast<size_t>(m.block_numel(b)),
                                             gpu::CopyKind::kHostToDevice));
    } else {
      auto& host = master_[static_cast<size_t>(b)];
      STRATA_RETURN_IF_ERROR(opt_.read_state(p, host.data(), nullptr, nullptr));
      STRATA_RETURN_IF_ERROR(m.upload_params(b, host.data()));
    }
  }
  STRATA_RETURN_IF_ERROR(m.stream().synchronize());
  return r;
}

}  // namespace strata::engine

#include "evaluation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace strata::train_gpt {

Result<Evaluation> evaluate(const Run& run) {
  Evaluation e;
  const model::AdditionTask* task = run.task();
  const int64_t B = run.batch(), T = run.seq(), V = run.cfg().vocab;
  const int64_t batches = run.data.val_batches();
  std::vector<int32_t> tokens(size_t(B * T)), targets(tokens.size());
  std::vector<float> logits;
  double loss_sum = 0.0;
  int64_t counted = 0;
  for (int64_t i = 0; i < batches; ++i) {
    STRATA_RETURN_IF_ERROR(run.data.val_batch(i, tokens.data(), targets.data()));
    // (the ZeRO step gathers the blocks a stage-3 model does not hold)
    STRATA_RETURN_IF_ERROR(
        run.session.step().forward_inference(tokens.data(), task ? nullptr : targets.data()));
    if (!task) {
      loss_sum += static_cast<double>(run.gpt.mean_loss());
      ++counted;
      continue;
    }
    STRATA_RETURN_IF_ERROR(run.gpt.logits_to_host(logits));
    const auto a = model::AdditionTask::accuracy(logits, V, targets.data(), B, T);
    e.token += a.token / double(batches);
    e.exact_match += a.exact_match / double(batches);
    for (int64_t r = 0; r < B * T; ++r) {
      if (targets[size_t(r)] < 0) continue;
      const float* row = logits.data() + r * V;
      double top = row[0], sum = 0.0;
      for (int64_t v = 1; v < V; ++v) top = std::max(top, double(row[v]));
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - top);
      loss_sum += top + std::log(sum) - double(row[targets[size_t(r)]]);
      ++counted;
    }
  }
  e.val_loss = counted > 0 ? loss_sum / double(counted) : 0.0;
  return e;
}

Result<bool> evaluate_at(const Run& run, int64_t step, MetricsFile& metrics, double& accuracy) {
  // The planned and ZeRO steps apply a step's update in the next one: apply it now (ZeRO stage 3
  // also gathers the whole parameters into the model).
  STRATA_RETURN_IF_ERROR(run.session.step().flush());
  STRATA_ASSIGN_OR_RETURN(const Evaluation e, evaluate(run));
  accuracy = e.token;
  const model::AdditionTask* task = run.task();
  if (run.lead() && task) {
    std::printf(
        "eval  %5lld | held-out answer-token accuracy %.3f | exact match %.3f | val loss %.4f\n",
        static_cast<long long>(step), e.token, e.exact_match, e.val_loss);
  } else if (run.lead()) {
    std::printf("val   %5lld | val loss %.4f (%lld batches)\n", static_cast<long long>(step),
                e.val_loss, static_cast<long long>(run.data.val_batches()));
  }
  nlohmann::json v = {{"step", step}, {"val_loss", e.val_loss}};
  if (task) {
    v["val_accuracy"] = e.token;
    v["val_exact_match"] = e.exact_match;
  }
  metrics.write(v);
  float reached = task && e.token >= run.f.target_accuracy ? 1.0f : 0.0f;
  if (run.ranks() > 1) STRATA_RETURN_IF_ERROR(run.world.broadcast(&reached, 1, DType::kF32, 0));
  if (reached > 0.0f && run.lead()) {
    std::printf("train_gpt: reached accuracy %.3f >= %.3f at step %lld\n", e.token,
                run.f.target_accuracy, static_cast<long long>(step));
  }
  return reached > 0.0f;
}

}  // namespace strata::train_gpt

#include "evaluation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace strata::train_gpt {

namespace {
// Per-rank sums, combined on every rank in rank order (in double, so that the figure does not
// depend on the rank count beyond rounding): the doubles travel as raw bytes in an all-gather.
// Token accuracy and exact match are sums of per-rank fractions: their mean over the global
// batches is sum / (batches x ranks).
struct EvalSums {
  double loss = 0.0, counted = 0.0, token = 0.0, exact = 0.0;
};
static_assert(sizeof(EvalSums) == 8 * sizeof(float));

Result<EvalSums> combine(const Run& run, const EvalSums& mine) {
  if (run.ranks() == 1) return mine;
  std::vector<EvalSums> all(size_t(run.ranks()));
  STRATA_RETURN_IF_ERROR(run.world.all_gather(&mine, all.data(), 8, DType::kF32));
  EvalSums t;
  for (const EvalSums& r : all) {
    t.loss += r.loss;
    t.counted += r.counted;
    t.token += r.token;
    t.exact += r.exact;
  }
  return t;
}
}  // namespace

Result<Evaluation> evaluate(const Run& run) {
  const model::AdditionTask* task = run.task();
  const int64_t B = run.batch(), T = run.seq(), V = run.spec().vocab();
  const int64_t batches = run.data.val_batches();
  const int64_t rank = run.world.rank();
  std::vector<int32_t> tokens(size_t(B * T)), targets(tokens.size());
  std::vector<float> logits;
  EvalSums mine;
  // Each rank evaluates its rows of every global validation batch (TrainData::val_batch), as
  // llm.c shards its validation; the sums are combined over the ranks.
  for (int64_t i = 0; i < batches; ++i) {
    STRATA_RETURN_IF_ERROR(
        run.data.val_batch(i, static_cast<int>(rank), tokens.data(), targets.data()));
    // (the ZeRO step gathers the blocks a stage-3 model does not hold)
    STRATA_RETURN_IF_ERROR(
        run.session.step().forward_inference(tokens.data(), task ? nullptr : targets.data()));
    if (!task) {  // the batch's mean over its targets, weighted by them
      int64_t n = 0;
      for (int32_t t : targets) n += t >= 0 ? 1 : 0;
      mine.loss += static_cast<double>(run.model.mean_loss()) * double(n);
      mine.counted += double(n);
      continue;
    }
    STRATA_RETURN_IF_ERROR(run.model.logits_to_host(logits));
    const auto a = model::AdditionTask::accuracy(logits, V, targets.data(), B, T);
    mine.token += a.token;
    mine.exact += a.exact_match;
    for (int64_t r = 0; r < B * T; ++r) {
      if (targets[size_t(r)] < 0) continue;
      const float* row = logits.data() + r * V;
      double top = row[0], sum = 0.0;
      for (int64_t v = 1; v < V; ++v) top = std::max(top, double(row[v]));
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - top);
      mine.loss += top + std::log(sum) - double(row[targets[size_t(r)]]);
      mine.counted += 1.0;
    }
  }
  STRATA_ASSIGN_OR_RETURN(const EvalSums all, combine(run, mine));
  Evaluation e;
  e.val_loss = all.counted > 0 ? all.loss / all.counted : 0.0;
  if (batches > 0) {
    e.token = all.token / double(batches * run.ranks());
    e.exact_match = all.exact / double(batches * run.ranks());
  }
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

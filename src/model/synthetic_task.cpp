#include "model/synthetic_task.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"  // core/rng.h uses unsigned __int128
#include "core/rng.h"
#pragma GCC diagnostic pop

namespace strata::model {

Result<AdditionTask> AdditionTask::create(int64_t digits, int64_t seq) {
  if (digits < 1 || digits > 9) {
    return make_error(ErrorCode::kConfig, "addition digits ", digits, " must be in [1, 9]");
  }
  if (seq < 3 * digits + 4) {
    return make_error(ErrorCode::kConfig, "sequence length ", seq, " is too short for ", digits,
                      "-digit addition (needs >= ", 3 * digits + 4, ")");
  }
  return AdditionTask(digits, seq);
}

void AdditionTask::make_batch(int64_t batch, uint64_t seed, uint64_t stream, int64_t batch_index,
                              int32_t* tokens, int32_t* targets) const {
  const CounterRng rng(seed, stream);
  int64_t limit = 1;
  for (int64_t d = 0; d < digits_; ++d) limit *= 10;
  for (int64_t i = 0; i < batch; ++i) {
    const auto counter = static_cast<uint64_t>((batch_index * batch + i) * 2);
    const int64_t a = static_cast<int64_t>(rng.below(counter, static_cast<uint64_t>(limit)));
    const int64_t b = static_cast<int64_t>(rng.below(counter + 1, static_cast<uint64_t>(limit)));
    int32_t* tok = tokens + i * seq_;
    int32_t* tgt = targets + i * seq_;
    int64_t pos = 0;
    auto put_digits_msd = [&](int64_t v, int64_t count) {
      int64_t div = 1;
      for (int64_t d = 1; d < count; ++d) div *= 10;
      for (int64_t d = 0; d < count; ++d, div /= 10)
        tok[pos++] = static_cast<int32_t>((v / div) % 10);
    };
    put_digits_msd(a, digits_);
    tok[pos++] = kPlus;
    put_digits_msd(b, digits_);
    tok[pos++] = kEquals;
    const int64_t answer_start = pos;
    int64_t sum = a + b;
    for (int64_t d = 0; d <= digits_; ++d, sum /= 10) tok[pos++] = static_cast<int32_t>(sum % 10);
    tok[pos++] = kEnd;
    for (; pos < seq_; ++pos) tok[pos] = kEnd;
    // Target at t is token t+1 when t+1 is an answer digit or the end mark.
    for (int64_t t = 0; t < seq_; ++t) {
      const int64_t next = t + 1;
      const bool in_answer = next >= answer_start && next <= answer_start + digits_ + 1;
      tgt[t] = in_answer ? tok[next] : -1;
    }
  }
}

std::string AdditionTask::to_text(const int32_t* tokens, int64_t n) {
  std::string s;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = tokens[i];
    s += t < 10 ? static_cast<char>('0' + t) : t == kPlus ? '+' : t == kEquals ? '=' : '.';
  }
  return s;
}

AdditionTask::Accuracy AdditionTask::accuracy(const std::vector<float>& logits, int64_t vocab,
                                              const int32_t* targets, int64_t batch, int64_t seq) {
  int64_t right = 0, total = 0, seq_right = 0;
  for (int64_t b = 0; b < batch; ++b) {
    bool all = true;
    for (int64_t t = 0; t < seq; ++t) {
      const int64_t r = b * seq + t;
      if (targets[r] < 0) continue;
      const float* row = logits.data() + r * vocab;
      int64_t best = 0;
      for (int64_t v = 1; v < vocab; ++v) best = row[v] > row[best] ? v : best;
      const bool ok = best == targets[r];
      right += ok ? 1 : 0;
      all = all && ok;
      ++total;
    }
    seq_right += all ? 1 : 0;
  }
  Accuracy acc;
  acc.token = total > 0 ? static_cast<double>(right) / static_cast<double>(total) : 0.0;
  acc.exact_match = batch > 0 ? static_cast<double>(seq_right) / static_cast<double>(batch) : 0.0;
  return acc;
}

}  // namespace strata::model

// A learnable task that ships with the project: multi-digit addition with a tiny fixed
// vocabulary, so the demo and tests train without downloads.
//
// An example with D digits is "a+b=s." where a and b have exactly D digits (leading zeros
// allowed) and the sum s is written with D+1 digits, least-significant digit first (reversed:
// each answer digit then depends only on digits already seen plus a carry, which small
// transformers learn quickly). Example, D=2: 47+85=231. means 47 + 85 = 132.
// Tokens: '0'..'9' -> 0..9, '+' -> 10, '=' -> 11, '.' -> 12 (vocab 13). The sequence has
// 3D+4 tokens and is padded to T with '.'. Targets are the next token on the answer digits and
// the final '.', and -1 (ignored) elsewhere, so loss and accuracy measure only the answer.
//
// Values; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata::model {

class AdditionTask {
 public:
  static constexpr int64_t kVocab = 13;
  static constexpr int32_t kPlus = 10, kEquals = 11, kEnd = 12;

  // kConfig when digits is not in [1, 9] or seq < 3*digits + 4.
  static Result<AdditionTask> create(int64_t digits, int64_t seq);

  int64_t digits() const { return digits_; }
  int64_t seq() const { return seq_; }
  int64_t example_tokens() const { return 3 * digits_ + 4; }
  // Targets per example that are not ignored (D+1 answer digits and the end mark).
  int64_t answer_tokens() const { return digits_ + 2; }

  // Fills tokens/targets int32 [B*T] with B examples; example i of a batch uses operands drawn
  // from CounterRng(seed, stream) at counters derived from (batch_index, i): deterministic.
  void make_batch(int64_t batch, uint64_t seed, uint64_t stream, int64_t batch_index,
                  int32_t* tokens, int32_t* targets) const;
  // Human-readable text of one example's tokens ("47+85=231.").
  static std::string to_text(const int32_t* tokens, int64_t n);

  struct Accuracy {
    double token = 0.0;        // fraction of non-ignored targets whose argmax logit is right
    double exact_match = 0.0;  // fraction of sequences whose answer tokens are all right
  };
  // Teacher-forced accuracy from logits fp32 [B*T, vocab]. A sequence with all answer tokens
  // right under teacher forcing is exactly one that greedy decoding from its prompt gets right
  // (each greedy step then sees the same prefix), so exact_match is the greedy exact-match rate.
  static Accuracy accuracy(const std::vector<float>& logits, int64_t vocab, const int32_t* targets,
                           int64_t batch, int64_t seq);

 private:
  AdditionTask(int64_t digits, int64_t seq) : digits_(digits), seq_(seq) {}
  int64_t digits_ = 0, seq_ = 0;
};

}  // namespace strata::model

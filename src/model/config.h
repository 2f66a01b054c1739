// GptConfig: the shape of a GPT-2-style decoder (pre-LayerNorm, GELU MLP of 4C, tied input and
// output embedding) and its storage dtype. Values; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace strata::model {

// Bounds on a model's shape, checked before anything is sized by it (a shape read from a file
// is not trusted until it is checked): far beyond any published model, small enough that every
// list of tensors and every product of sizes built from them fits. The parameter bound (4.4
// trillion) is 70 TB of model states.
inline constexpr int64_t kMaxModelLayers = 4096;
inline constexpr int64_t kMaxModelWidth = int64_t{1} << 20;  // channels, intermediate, heads
inline constexpr int64_t kMaxModelSeq = int64_t{1} << 24;    // max_seq (position tables)
inline constexpr int64_t kMaxModelParams = int64_t{1} << 42;

struct GptConfig {
  int64_t vocab = 0;  // V: real vocabulary size (tokens are in [0, V))
  int64_t padded_vocab =
      0;  // Vp >= V: row count of wte and row stride of logits; 0 = V rounded up to 64
  int64_t max_seq = 0;        // maxT: rows of wpe (longest context)
  int64_t layers = 0;         // L
  int64_t heads = 0;          // NH (must divide channels)
  int64_t channels = 0;       // C
  DType dtype = DType::kF32;  // storage of parameters, gradients and activations

  // Vp as used (padded_vocab, or V rounded up to a multiple of 64 when 0).
  int64_t vp() const { return padded_vocab > 0 ? padded_vocab : (vocab + 63) / 64 * 64; }
  // Parameter count: Vp*C + maxT*C + L*(12C^2 + 13C) + 2C (llm.c counts the padded rows too).
  int64_t num_params() const;
  // "L=2 C=64 NH=4 V=13(Vp=64) maxT=16 f32"
  std::string describe() const;
  // kConfig naming the field, its value and what is accepted.
  Status validate() const;
};

// The shape of one forward/backward call: B sequences of T tokens (T <= max_seq), and the
// activation checkpoint interval K: the input of every K-th layer is kept and the other layers'
// activations are recomputed in backward. K = 0 (or K >= L) keeps every layer's activations.
struct RunShape {
  int64_t batch = 0;                // B
  int64_t seq = 0;                  // T
  int64_t checkpoint_interval = 0;  // K

  Status validate(const GptConfig& config) const { return validate(config.max_seq); }
  // T must be at most `max_seq`.
  Status validate(int64_t max_seq) const;
};

}  // namespace strata::model

#include "model/config.h"

#include <sstream>

namespace strata::model {

int64_t GptConfig::num_params() const {
  const int64_t c = channels;
  return vp() * c + max_seq * c + layers * (12 * c * c + 13 * c) + 2 * c;
}

std::string GptConfig::describe() const {
  std::ostringstream os;
  os << "L=" << layers << " C=" << channels << " NH=" << heads << " V=" << vocab << "(Vp=" << vp()
     << ") maxT=" << max_seq << " " << dtype_name(dtype);
  return os.str();
}

Status GptConfig::validate() const {
  if (vocab <= 0) return make_error(ErrorCode::kConfig, "model vocab ", vocab, " must be > 0");
  if (padded_vocab != 0 && padded_vocab < vocab) {
    return make_error(ErrorCode::kConfig, "model padded_vocab ", padded_vocab,
                      " must be 0 (auto) or >= vocab ", vocab);
  }
  if (max_seq <= 0)
    return make_error(ErrorCode::kConfig, "model max_seq ", max_seq, " must be > 0");
  if (layers <= 0) return make_error(ErrorCode::kConfig, "model layers ", layers, " must be > 0");
  if (channels <= 0) {
    return make_error(ErrorCode::kConfig, "model channels ", channels, " must be > 0");
  }
  if (heads <= 0 || channels % heads != 0) {
    return make_error(ErrorCode::kConfig, "model heads ", heads,
                      " must be > 0 and divide channels ", channels);
  }
  if (vocab > 65536) {
    return make_error(ErrorCode::kConfig, "model vocab ", vocab,
                      " is over 65536 (token files hold uint16 tokens)");
  }
  const struct {
    const char* field;
    int64_t value, max;
  } bounds[] = {{"layers", layers, kMaxModelLayers},
                {"channels", channels, kMaxModelWidth},
                {"padded_vocab", padded_vocab, kMaxModelWidth},
                {"max_seq", max_seq, kMaxModelSeq}};
  for (const auto& b : bounds) {
    if (b.value > b.max) {
      return make_error(ErrorCode::kConfig, "model ", b.field, " ", b.value, " is over ", b.max,
                        " (the largest accepted)");
    }
  }
  if (num_params() > kMaxModelParams) {
    return make_error(ErrorCode::kConfig, "model of ", num_params(), " parameters (", describe(),
                      ") is over ", kMaxModelParams, " (the largest accepted)");
  }
  return ok_status();
}

Status RunShape::validate(int64_t max_seq) const {
  if (batch <= 0) return make_error(ErrorCode::kConfig, "batch ", batch, " must be > 0");
  if (seq <= 0 || seq > max_seq) {
    return make_error(ErrorCode::kConfig, "seq ", seq, " must be in [1, max_seq=", max_seq, "]");
  }
  if (checkpoint_interval < 0) {
    return make_error(ErrorCode::kConfig, "checkpoint interval ", checkpoint_interval,
                      " must be >= 0 (0 = keep every layer)");
  }
  return ok_status();
}

}  // namespace strata::model

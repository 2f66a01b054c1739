#include "model/param_layout.h"

namespace strata::model {

int layer_tensors(const GptConfig& config, TensorSpan out[12]) {
  const int64_t c = config.channels;
  const struct {
    const char* name;
    int64_t rows, cols;
  } spec[12] = {{"ln1w", 1, c},     {"ln1b", 1, c},     {"qkvw", 3 * c, c},    {"qkvb", 1, 3 * c},
                {"attprojw", c, c}, {"attprojb", 1, c}, {"ln2w", 1, c},        {"ln2b", 1, c},
                {"fcw", 4 * c, c},  {"fcb", 1, 4 * c},  {"fcprojw", c, 4 * c}, {"fcprojb", 1, c}};
  int64_t offset = 0;
  for (int i = 0; i < 12; ++i) {
    out[i] = {spec[i].name, offset, spec[i].rows * spec[i].cols, spec[i].rows};
    offset += out[i].numel;
  }
  return 12;
}

int shared_tensors(const GptConfig& config, TensorSpan out[4]) {
  const int64_t c = config.channels;
  out[0] = {"wte", 0, config.vp() * c, config.vp()};
  out[1] = {"wpe", out[0].numel, config.max_seq * c, config.max_seq};
  out[2] = {"lnfw", out[1].offset + out[1].numel, c, 1};
  out[3] = {"lnfb", out[2].offset + c, c, 1};
  return 4;
}

LayerLayout layer_layout(const GptConfig& config) {
  TensorSpan t[12];
  layer_tensors(config, t);
  LayerLayout l;
  l.ln1w = t[0].offset;
  l.ln1b = t[1].offset;
  l.qkvw = t[2].offset;
  l.qkvb = t[3].offset;
  l.attprojw = t[4].offset;
  l.attprojb = t[5].offset;
  l.ln2w = t[6].offset;
  l.ln2b = t[7].offset;
  l.fcw = t[8].offset;
  l.fcb = t[9].offset;
  l.fcprojw = t[10].offset;
  l.fcprojb = t[11].offset;
  l.numel = t[11].offset + t[11].numel;
  return l;
}

SharedLayout shared_layout(const GptConfig& config) {
  TensorSpan t[4];
  shared_tensors(config, t);
  SharedLayout s;
  s.wte = t[0].offset;
  s.wpe = t[1].offset;
  s.lnfw = t[2].offset;
  s.lnfb = t[3].offset;
  s.numel = t[3].offset + t[3].numel;
  return s;
}

}  // namespace strata::model

#include "model/dataloader.h"

#include <numeric>
#include <utility>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"  // core/rng.h uses unsigned __int128
#include "core/rng.h"
#pragma GCC diagnostic pop

namespace strata::model {

DataLoader::DataLoader(std::vector<uint16_t> tokens, int64_t batch, int64_t seq, uint64_t seed)
    : tokens_(std::move(tokens)), batch_(batch), seq_(seq), seed_(seed) {
  windows_ = (static_cast<int64_t>(tokens_.size()) - 1) / seq_;
  batches_per_epoch_ = windows_ / batch_;
}

Result<DataLoader> DataLoader::create(std::vector<uint16_t> tokens, int64_t batch, int64_t seq,
                                      uint64_t seed) {
  if (batch <= 0) return make_error(ErrorCode::kConfig, "batch ", batch, " must be > 0");
  if (seq <= 0) return make_error(ErrorCode::kConfig, "seq ", seq, " must be > 0");
  const auto count = static_cast<int64_t>(tokens.size());
  if (count < batch * seq + 1) {
    return make_error(ErrorCode::kConfig, "token stream of ", count, " tokens is too short for ",
                      "one batch of B=", batch, " x T=", seq, " (needs ", batch * seq + 1, ")");
  }
  DataLoader loader(std::move(tokens), batch, seq, seed);
  return loader;
}

Status DataLoader::seek(LoaderPosition pos) {
  if (pos.epoch < 0 || pos.batch < 0 || pos.batch >= batches_per_epoch_) {
    return make_error(ErrorCode::kConfig, "loader position (epoch ", pos.epoch, ", batch ",
                      pos.batch, ") is not valid (batch in [0, ", batches_per_epoch_, "))");
  }
  pos_ = pos;
  return ok_status();
}

void DataLoader::shuffle_epoch() {
  order_.resize(static_cast<size_t>(windows_));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  const CounterRng rng(seed_, static_cast<uint64_t>(pos_.epoch));
  for (int64_t i = windows_ - 1; i > 0; --i) {  // Fisher-Yates
    const auto j =
        static_cast<int64_t>(rng.below(static_cast<uint64_t>(i), static_cast<uint64_t>(i + 1)));
    std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
  }
  order_epoch_ = pos_.epoch;
}

void DataLoader::next(int32_t* inputs, int32_t* targets) {
  if (order_epoch_ != pos_.epoch) shuffle_epoch();
  for (int64_t b = 0; b < batch_; ++b) {
    const int64_t w = order_[static_cast<size_t>(pos_.batch * batch_ + b)];
    const uint16_t* src = tokens_.data() + w * seq_;
    for (int64_t t = 0; t < seq_; ++t) {
      inputs[b * seq_ + t] = src[t];
      targets[b * seq_ + t] = src[t + 1];
    }
  }
  if (++pos_.batch == batches_per_epoch_) {
    pos_.batch = 0;
    ++pos_.epoch;
  }
}

}  // namespace strata::model

#include "data.h"

#include <algorithm>
#include <cstdlib>

namespace strata::train_gpt {

std::string DataSource::describe() const {
  if (task) return "synthetic:addition, " + std::to_string(task->digits()) + " digits";
  std::string s = std::to_string(files.size()) + " token file(s) from " + files.front();
  if (!val_files.empty()) {
    s += ", validation " + std::to_string(val_files.size()) + " file(s) from " + val_files.front();
  }
  return s;
}

Result<DataSource> parse_data(const Flags& f) {
  DataSource src;
  const std::string prefix = "synthetic:";
  if (f.data.rfind(prefix, 0) == 0) {
    const std::string rest = f.data.substr(prefix.size());
    int64_t digits = f.digits;
    if (rest.rfind("addition:", 0) == 0) {
      char* end = nullptr;
      const std::string d = rest.substr(9);
      digits = std::strtoll(d.c_str(), &end, 10);
      if (d.empty() || *end != '\0' || digits < 1 || digits > 9) {
        return make_error(ErrorCode::kConfig, "--data '", f.data,
                          "' is not accepted (the digits of synthetic:addition:DIGITS are 1..9)");
      }
    } else if (rest != "addition") {
      return make_error(ErrorCode::kConfig, "--data '", f.data,
                        "' is not accepted (synthetic tasks: synthetic:addition[:DIGITS])");
    }
    STRATA_ASSIGN_OR_RETURN(src.task, model::AdditionTask::create(digits, 3 * digits + 4));
    return src;
  }
  auto files = model::expand_data_files(f.data);
  if (!files.ok()) return files.status().with_context("--data");
  src.files = std::move(files).value();
  if (!f.val_data.empty()) {
    auto val = model::expand_data_files(f.val_data);
    if (!val.ok()) return val.status().with_context("--val-data");
    src.val_files = std::move(val).value();
  }
  return src;
}

Result<TrainData> TrainData::open(const DataSource& src, const Flags& f, int64_t rows, int64_t seq,
                                  int64_t vocab) {
  TrainData d;
  d.src_ = src;
  d.seed_ = f.seed;
  d.rows_ = rows;
  d.batch_ = f.batch;
  d.seq_ = seq;
  if (src.task) {
    d.val_batches_ = f.val_batches > 0 ? f.val_batches : 8;
    return d;
  }
  const model::DataOrder order =
      f.data_order == "shuffled" ? model::DataOrder::kShuffled : model::DataOrder::kSequential;
  auto train = model::DataLoader::open(src.files, rows, seq, order, f.seed, vocab);
  if (!train.ok()) return train.status().with_context("--data");
  d.train_ = std::move(train).value();
  if (!src.val_files.empty()) {
    auto val =
        model::DataLoader::open(src.val_files, rows, seq, model::DataOrder::kSequential, 0, vocab);
    if (!val.ok()) return val.status().with_context("--val-data");
    d.val_ = std::move(val).value();
    d.val_batches_ = std::min(f.val_batches > 0 ? f.val_batches : 20, d.val_->batches_per_epoch());
  }
  return d;
}

Status TrainData::rank_batches(int64_t step, int64_t micro, int rank, int32_t* tokens,
                               int32_t* targets) {
  const auto n = static_cast<size_t>(batch_ * seq_), all = static_cast<size_t>(rows_ * seq_);
  global_tokens_.resize(all);
  global_targets_.resize(all);
  for (int64_t k = 0; k < micro; ++k) {
    STRATA_RETURN_IF_ERROR(
        train_batch((step - 1) * micro + k + 1, global_tokens_.data(), global_targets_.data()));
    std::copy_n(global_tokens_.begin() + rank * n, n, tokens + k * n);
    std::copy_n(global_targets_.begin() + rank * n, n, targets + k * n);
  }
  return ok_status();
}

Status TrainData::train_batch(int64_t index, int32_t* tokens, int32_t* targets) {
  if (src_.task) {
    src_.task->make_batch(rows_, seed_, /*stream=*/0, index, tokens, targets);
    return ok_status();
  }
  return train_->next(tokens, targets).with_context("--data");
}

Status TrainData::val_batch(int64_t i, int rank, int32_t* tokens, int32_t* targets) {
  const auto n = static_cast<size_t>(batch_ * seq_), all = static_cast<size_t>(rows_ * seq_);
  global_tokens_.resize(all);
  global_targets_.resize(all);
  if (src_.task) {
    src_.task->make_batch(rows_, seed_, /*stream=*/1, i, global_tokens_.data(),
                          global_targets_.data());
  } else {
    STRATA_RETURN_IF_ERROR(val_->seek({0, i}));
    STRATA_RETURN_IF_ERROR(
        val_->next(global_tokens_.data(), global_targets_.data()).with_context("--val-data"));
  }
  std::copy_n(global_tokens_.begin() + rank * n, n, tokens);
  std::copy_n(global_targets_.begin() + rank * n, n, targets);
  return ok_status();
}

Status TrainData::seek(const model::LoaderPosition& pos) {
  return train_ ? train_->seek(pos) : ok_status();
}

std::optional<model::LoaderPosition> TrainData::position() const {
  if (!train_) return std::nullopt;
  return train_->position();
}

}  // namespace strata::train_gpt

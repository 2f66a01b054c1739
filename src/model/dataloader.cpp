#include "model/dataloader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <utility>

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/token_file.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"  // core/rng.h uses unsigned __int128
#include "core/rng.h"
#pragma GCC diagnostic pop

namespace strata::model {
namespace {

// A read-only mapping of a whole file, unmapped when the last owner goes.
Result<std::shared_ptr<const void>> map_file(const std::string& path, uint64_t& size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return make_error(ErrorCode::kIo, "token file ", path, ": cannot open: ", std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(ErrorCode::kIo, "token file ", path, ": not a regular file");
  }
  size = static_cast<uint64_t>(st.st_size);
  if (size < kTokenFileHeaderBytes) {
    ::close(fd);
    return make_error(ErrorCode::kCorrupt, "token file ", path, ": truncated header (", size,
                      " bytes; needs 1024)");
  }
  void* at = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (at == MAP_FAILED) {
    return make_error(ErrorCode::kIo, "token file ", path, ": cannot map: ", std::strerror(err));
  }
  return std::shared_ptr<const void>(
      at, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
}

}  // namespace

Result<std::vector<std::string>> expand_data_files(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> files;
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (files.empty()) {
    return make_error(ErrorCode::kConfig, "'", pattern,
                      "': no file matches (give an llm.c token file or a glob of shards, e.g. "
                      "'data/fineweb_train_*.bin')");
  }
  std::sort(files.begin(), files.end());
  return files;
}

Result<DataLoader> DataLoader::open(const std::vector<std::string>& files, int64_t batch,
                                    int64_t seq, DataOrder order, uint64_t seed, int64_t vocab) {
  DataLoader dl;
  for (const std::string& path : files) {
    uint64_t size = 0;
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const void> map, map_file(path, size));
    STRATA_ASSIGN_OR_RETURN(
        const int64_t count,
        check_token_file_header(path, static_cast<const int32_t*>(map.get()), size));
    const auto* tokens = reinterpret_cast<const uint16_t*>(
        static_cast<const std::byte*>(map.get()) + kTokenFileHeaderBytes);
    ::madvise(const_cast<void*>(map.get()), size, MADV_RANDOM);
    dl.shards_.push_back({path, tokens, count, std::move(map)});
  }
  STRATA_RETURN_IF_ERROR(dl.init(batch, seq, order, seed, vocab));
  return dl;
}

Result<DataLoader> DataLoader::create(std::vector<uint16_t> tokens, int64_t batch, int64_t seq,
                                      uint64_t seed, DataOrder order) {
  DataLoader dl;
  auto owned = std::make_shared<std::vector<uint16_t>>(std::move(tokens));
  dl.shards_.push_back({"(memory)", owned->data(), static_cast<int64_t>(owned->size()), owned});
  STRATA_RETURN_IF_ERROR(dl.init(batch, seq, order, seed, 0));
  return dl;
}

Status DataLoader::init(int64_t batch, int64_t seq, DataOrder order, uint64_t seed, int64_t vocab) {
  if (batch <= 0) return make_error(ErrorCode::kConfig, "batch ", batch, " must be > 0");
  if (seq <= 0) return make_error(ErrorCode::kConfig, "seq ", seq, " must be > 0");
  batch_ = batch;
  seq_ = seq;
  order_kind_ = order;
  seed_ = seed;
  vocab_ = vocab;
  int64_t total = 0;
  for (const Shard& s : shards_) {
    first_.push_back(total);
    if (order == DataOrder::kSequential) {
      if (s.count < batch * seq + 1) {
        return make_error(ErrorCode::kConfig, "token file ", s.path, ": ", s.count,
                          " tokens are fewer than one batch needs (B*T+1 = ", batch, "*", seq,
                          "+1 = ", batch * seq + 1, ")");
      }
      total += (s.count - 1) / (batch * seq);
    } else {
      total += std::max<int64_t>(0, (s.count - 1) / seq);
    }
  }
  batches_per_epoch_ = order == DataOrder::kSequential ? total : total / batch;
  if (batches_per_epoch_ == 0) {
    return make_error(ErrorCode::kConfig, "token data of ", tokens(), " tokens in ", shards_.size(),
                      " file(s) is too short for one batch of B=", batch, " x T=", seq, " (needs ",
                      batch * seq + 1, ")");
  }
  return ok_status();
}

int64_t DataLoader::tokens() const {
  int64_t n = 0;
  for (const Shard& s : shards_) n += s.count;
  return n;
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
  int64_t all = 0;
  for (const Shard& s : shards_) all += std::max<int64_t>(0, (s.count - 1) / seq_);
  order_.resize(static_cast<size_t>(all));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  const CounterRng rng(seed_, static_cast<uint64_t>(pos_.epoch));
  for (int64_t i = all - 1; i > 0; --i) {  // Fisher-Yates
    const auto j =
        static_cast<int64_t>(rng.below(static_cast<uint64_t>(i), static_cast<uint64_t>(i + 1)));
    std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
  }
  order_epoch_ = pos_.epoch;
}

std::pair<size_t, int64_t> DataLoader::locate(int64_t batch, int64_t row) {
  // The shard holding global index g (a window, or a sequential batch): the last first_ <= g.
  auto shard_of = [this](int64_t g) {
    return static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), g) - first_.begin() -
                               1);
  };
  if (order_kind_ == DataOrder::kSequential) {
    const size_t k = shard_of(batch);
    return {k, (batch - first_[k]) * batch_ * seq_ + row * seq_};
  }
  if (order_epoch_ != pos_.epoch) shuffle_epoch();
  const int64_t w = order_[static_cast<size_t>(batch * batch_ + row)];
  const size_t k = shard_of(w);
  return {k, (w - first_[k]) * seq_};
}

Status DataLoader::next(int32_t* inputs, int32_t* targets) {
  for (int64_t b = 0; b < batch_; ++b) {
    const auto [k, start] = locate(pos_.batch, b);
    const Shard& s = shards_[k];
    const uint16_t* src = s.tokens + start;
    for (int64_t t = 0; t <= seq_; ++t) {
      if (vocab_ > 0 && src[t] >= vocab_) {
        return make_error(ErrorCode::kCorrupt, "token file ", s.path, ": token ", src[t],
                          " at index ", start + t, " is not below the vocabulary size ", vocab_);
      }
    }
    for (int64_t t = 0; t < seq_; ++t) {
      inputs[b * seq_ + t] = src[t];
      targets[b * seq_ + t] = src[t + 1];
    }
  }
  if (++pos_.batch == batches_per_epoch_) {
    pos_.batch = 0;
    ++pos_.epoch;
  }
  return ok_status();
}

}  // namespace strata::model

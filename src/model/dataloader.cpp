#include "model/dataloader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <utility>

#include <fcntl.h>
#include <glob.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/token_file.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"  // core/rng.h uses unsigned __int128
#include "core/rng.h"
#pragma GCC diagnostic pop

namespace strata::model {
namespace {

// An open token file, closed when the last loader holding it goes. Files are read, not mapped,
// so that one truncated under a running job is an error naming it, not a SIGBUS.
struct OpenFile {
  int fd = -1;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

Result<std::shared_ptr<const OpenFile>> open_token_file(const std::string& path, uint64_t& size) {
  auto f = std::make_shared<OpenFile>();
  // Without blocking: a FIFO without a writer is refused below, not waited on.
  f->fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f->fd < 0) {
    return make_error(ErrorCode::kIo, "token file ", path, ": cannot open: ", std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return make_error(ErrorCode::kIo, "token file ", path, ": not a regular file");
  }
  size = static_cast<uint64_t>(st.st_size);
  if (size < kTokenFileHeaderBytes) {
    return make_error(ErrorCode::kCorrupt, "token file ", path, ": truncated header (", size,
                      " bytes; needs 1024)");
  }
  ::posix_fadvise(f->fd, 0, 0, POSIX_FADV_RANDOM);
  return std::shared_ptr<const OpenFile>(std::move(f));
}

// Every shard stays open for the run (one descriptor each): a data set of thousands of shards
// needs more than the usual soft limit of 1024, which is raised to the hard one when it must.
Status room_for_open_files(size_t shards) {
  constexpr rlim_t kSpare = 256;  // the run's other files: swap, checkpoints, MPI, the trace
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY ||
      lim.rlim_cur >= shards + kSpare) {
    return ok_status();
  }
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < shards + kSpare) {
    return make_error(ErrorCode::kConfig, "token data of ", shards,
                      " files needs as many open files, and this process may open at most ",
                      lim.rlim_max, " (ulimit -Hn): raise it, or join shards");
  }
  lim.rlim_cur = lim.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) {
    return make_error(ErrorCode::kIo, "token data of ", shards,
                      " files: cannot raise the open-file limit: ", std::strerror(errno));
  }
  return ok_status();
}

// Reads `bytes` at `offset`; fewer means the file shrank since it was opened.
Status read_at(int fd, void* dst, size_t bytes, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, static_cast<char*>(dst) + done, bytes - done,
                              static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return make_error(ErrorCode::kIo, "token file ", path, ": read at offset ", offset + done,
                        ": ", std::strerror(errno));
    }
    if (n == 0) {
      struct stat st {};
      ::fstat(fd, &st);
      return make_error(ErrorCode::kCorrupt, "token file ", path, ": changed under the run (now ",
                        st.st_size, " bytes; ", bytes, " bytes at offset ", offset,
                        " are gone); stopped");
    }
    done += static_cast<size_t>(n);
  }
  return ok_status();
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
  STRATA_RETURN_IF_ERROR(room_for_open_files(files.size()));
  DataLoader dl;
  for (const std::string& path : files) {
    uint64_t size = 0;
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const OpenFile> file, open_token_file(path, size));
    int32_t header[kTokenFileHeaderBytes / 4];
    STRATA_RETURN_IF_ERROR(read_at(file->fd, header, sizeof(header), 0, path));
    STRATA_ASSIGN_OR_RETURN(const TokenFileFormat fmt, token_file_format(path, header, size));
    const int fd = file->fd;
    // One data set is of one tokenizer: GPT-2's uint16 shards and llama-3's uint32 ones together
    // are two data sets.
    if (!dl.shards_.empty() && fmt.token_bytes != dl.shards_[0].token_bytes) {
      auto kind = [](int64_t bytes) {
        return bytes == 2 ? std::string("uint16 tokens (GPT-2's)")
                          : std::string("uint32 tokens (llama-3's)");
      };
      return make_error(ErrorCode::kConfig, "token file ", path, " holds ", kind(fmt.token_bytes),
                        " and ", dl.shards_[0].path, " ", kind(dl.shards_[0].token_bytes),
                        ": the files of one data set are of one kind");
    }
    dl.shards_.push_back({path, nullptr, fd, fmt.count, std::move(file), fmt.token_bytes});
  }
  STRATA_RETURN_IF_ERROR(dl.init(batch, seq, order, seed, vocab));
  return dl;
}

Result<DataLoader> DataLoader::create(std::vector<uint16_t> tokens, int64_t batch, int64_t seq,
                                      uint64_t seed, DataOrder order) {
  DataLoader dl;
  auto owned = std::make_shared<std::vector<uint16_t>>(std::move(tokens));
  dl.shards_.push_back({"(memory)", owned->data(), -1, static_cast<int64_t>(owned->size()), owned});
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
    row_.resize(static_cast<size_t>(seq_ + 1));
    if (s.tokens != nullptr) {
      std::copy_n(s.tokens + start, row_.size(), row_.begin());
    } else {  // a file: this row's T+1 tokens
      const auto tb = static_cast<size_t>(s.token_bytes);
      raw_.resize(row_.size() * tb);
      STRATA_RETURN_IF_ERROR(read_at(s.fd, raw_.data(), raw_.size(),
                                     kTokenFileHeaderBytes + static_cast<uint64_t>(start) * tb,
                                     s.path));
      decode_tokens(raw_.data(), s.token_bytes, row_.size(), row_.data());
    }
    const uint32_t* src = row_.data();
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

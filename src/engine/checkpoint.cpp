#include "engine/checkpoint.h"

#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

namespace strata::engine {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'C', 'K'};
constexpr int kVersion = 1;

// Tests of crash safety: with STRATA_TEST_CHECKPOINT_KILL=k in the environment, the process
// kills itself (SIGKILL) at the k-th point of a save (each write, sync, rename and removal).
void kill_point() {
  static const char* env = std::getenv("STRATA_TEST_CHECKPOINT_KILL");
  static long at = env != nullptr ? std::atol(env) : 0;
  static long seen = 0;
  if (at > 0 && ++seen == at) ::kill(::getpid(), SIGKILL);
}

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

Status io_error(const std::string& path, const char* what) {
  return make_error(ErrorCode::kIo, "checkpoint ", path, ": ", what, ": ", std::strerror(errno));
}

Status fsync_path(const std::string& path) {
  kill_point();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path, "cannot open to sync");
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? ok_status() : io_error(path, "fsync failed");
}

// A file written in one go and synced, its xxh3 taken as it is written.
class HashedFile {
 public:
  static Result<HashedFile> create(const std::string& path) {
    HashedFile f;
    f.path_ = path;
    f.fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f.fd_ < 0) return io_error(path, "cannot create");
    f.state_ = XXH3_createState();
    XXH3_64bits_reset(f.state_);
    return f;
  }
  HashedFile() = default;
  HashedFile(HashedFile&& o) noexcept { *this = std::move(o); }
  HashedFile& operator=(HashedFile&& o) noexcept {
    std::swap(fd_, o.fd_);
    std::swap(state_, o.state_);
    std::swap(path_, o.path_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~HashedFile() {
    if (fd_ >= 0) ::close(fd_);
    if (state_ != nullptr) XXH3_freeState(state_);
  }
  Status write(const void* data, size_t n) {
    kill_point();
    const auto* p = static_cast<const char*>(data);
    XXH3_64bits_update(state_, p, n);
    bytes_ += n;
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return io_error(path_, "write failed");
      p += w;
      n -= static_cast<size_t>(w);
    }
    return ok_status();
  }
  // Synced and closed; its entry for the manifest.
  Result<json> finish() {
    kill_point();
    if (::fsync(fd_) != 0) return io_error(path_, "fsync failed");
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return io_error(path_, "close failed");
    return json{{"bytes", bytes_}, {"xxh3", hex(XXH3_64bits_digest(state_))}};
  }
  static std::string hex(uint64_t h) {
    char buf[20];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
    return buf;
  }

 private:
  int fd_ = -1;
  XXH3_state_t* state_ = nullptr;
  std::string path_;
  uint64_t bytes_ = 0;
};

Status write_text(const std::string& path, const std::string& text, json* entry) {
  STRATA_ASSIGN_OR_RETURN(HashedFile f, HashedFile::create(path));
  STRATA_RETURN_IF_ERROR(f.write(text.data(), text.size()));
  STRATA_ASSIGN_OR_RETURN(json e, f.finish());
  if (entry != nullptr) *entry = e;
  return ok_status();
}

// The size and xxh3 of a file as it is on disk.
Result<json> hash_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kCorrupt, "checkpoint ", path, ": missing");
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(1 << 20);
  uint64_t bytes = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = static_cast<size_t>(in.gcount());
    XXH3_64bits_update(st, buf.data(), got);
    bytes += got;
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return json{{"bytes", bytes}, {"xxh3", HashedFile::hex(h)}};
}

// Every rank agrees: false anywhere makes it false everywhere.
Result<bool> all_ok(comm::Communicator& comm, bool ok) {
  float mine = ok ? 0.0f : 1.0f, failed = mine;
  if (comm.size() > 1) STRATA_RETURN_IF_ERROR(comm.all_reduce(&mine, &failed, 1, DType::kF32));
  return failed == 0.0f;
}

json scaling_json(const StepScaling::State& s) {
  return {{"adam_steps", s.applied},
          {"loss_scale", s.scaler.scale},
          {"hysteresis_left", s.scaler.hysteresis_left},
          {"scaler_iter", s.scaler.iter},
          {"last_overflow_iter", s.scaler.last_overflow_iter},
          {"skipped", s.scaler.skipped}};
}

// This rank's files into dir; their manifest entries into `entries`.
Status write_rank_files(const std::string& dir, int rank, OffloadedOptimizer& opt,
                        const StepScaling::State& scaling, json& entries) {
  const std::string name = "optimizer-rank" + std::to_string(rank) + ".bin";
  STRATA_ASSIGN_OR_RETURN(HashedFile f, HashedFile::create(dir + "/" + name));
  const auto parts = static_cast<int64_t>(opt.num_partitions());
  STRATA_RETURN_IF_ERROR(f.write(kMagic, sizeof(kMagic)));
  const int64_t head[2] = {kVersion, parts};
  STRATA_RETURN_IF_ERROR(f.write(head, sizeof(head)));
  // Partition p+1 is read (from NVMe, for the partitions there) while p is written: two buffers,
  // the optimizer used by one thread at a time.
  std::vector<float> buf[2];
  auto read = [&opt, &buf](size_t p) {
    const int64_t n = opt.numel(p);
    std::vector<float>& st = buf[p % 2];
    st.resize(3 * static_cast<size_t>(n));
    return opt.read_state(p, st.data(), st.data() + n, st.data() + 2 * n)
        .with_context("checkpoint: reading partition " + std::to_string(p));
  };
  Status pending = parts > 0 ? read(0) : ok_status();
  for (size_t p = 0; p < opt.num_partitions(); ++p) {
    STRATA_RETURN_IF_ERROR(pending);
    std::future<Status> next;
    if (p + 1 < opt.num_partitions()) next = std::async(std::launch::async, read, p + 1);
    const int64_t n = opt.numel(p);
    Status st = f.write(&n, sizeof(n));
    if (st.ok()) st = f.write(buf[p % 2].data(), buf[p % 2].size() * sizeof(float));
    pending = next.valid() ? next.get() : ok_status();
    STRATA_RETURN_IF_ERROR(st);
  }
  STRATA_RETURN_IF_ERROR(pending);
  STRATA_ASSIGN_OR_RETURN(entries[name], f.finish());
  const std::string state = "state-rank" + std::to_string(rank) + ".json";
  json e;
  STRATA_RETURN_IF_ERROR(write_text(dir + "/" + state, scaling_json(scaling).dump(2), &e));
  entries[state] = e;
  return ok_status();
}

// Complete checkpoints under root (DONE present), oldest first.
std::vector<fs::path> complete_checkpoints(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step_", 0) == 0 && n.find('.') == std::string::npos &&
        fs::exists(e.path() / "DONE")) {
      out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Status save_checkpoint(const std::string& root, int keep, comm::Communicator& comm,
                       const CheckpointInfo& info, OffloadedOptimizer& opt,
                       const StepScaling::State& scaling,
                       const std::function<Status(const std::string& dir)>& write_shared) {
  const int rank = comm.rank();
  const fs::path final_dir = fs::path(root) / step_name(info.step);
  const fs::path tmp = fs::path(root) / (step_name(info.step) + ".tmp");
  std::error_code ec;
  if (rank == 0) {  // leftovers of interrupted saves (no DONE), and a fresh temporary directory
    for (const auto& e : fs::directory_iterator(root, ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("step_", 0) == 0 && !fs::exists(e.path() / "DONE")) fs::remove_all(e.path(), ec);
    }
    ec.clear();
    fs::create_directories(tmp, ec);
  }
  STRATA_RETURN_IF_ERROR(comm.barrier());
  json entries = json::object();
  Status st = ec ? make_error(ErrorCode::kIo, "checkpoint ", tmp.string(),
                              ": cannot create: ", ec.message())
                 : write_rank_files(tmp.string(), rank, opt, scaling, entries);
  // The shared files (every rank takes part; rank 0 writes).
  const Status shared = write_shared(tmp.string());
  if (st.ok()) st = shared;
  if (st.ok()) {
    json e;
    st = write_text((tmp / ("sums-rank" + std::to_string(rank) + ".json")).string(), entries.dump(),
                    &e);
  }
  STRATA_ASSIGN_OR_RETURN(const bool written, all_ok(comm, st.ok()));
  if (rank == 0 && written) {
    // The manifest: every rank's files (from their sums), the shared ones hashed here.
    json files = json::object();
    for (int r = 0; r < comm.size() && st.ok(); ++r) {
      std::ifstream in(tmp / ("sums-rank" + std::to_string(r) + ".json"));
      json sums = json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (sums.is_discarded()) {
        st = make_error(ErrorCode::kIo, "checkpoint ", tmp.string(), ": rank ", r,
                        "'s checksums are unreadable");
      }
      for (const auto& [k, v] : sums.items()) files[k] = v;
      fs::remove(tmp / ("sums-rank" + std::to_string(r) + ".json"), ec);
    }
    for (const auto& e : fs::directory_iterator(tmp, ec)) {
      const std::string n = e.path().filename().string();
      if (!st.ok() || files.contains(n) || n.rfind("sums-rank", 0) == 0) continue;
      auto h = hash_file(e.path().string());
      if (!h.ok()) st = h.status();
      if (h.ok()) files[n] = *h;
    }
    json manifest = {{"format", "strata-checkpoint"},
                     {"version", kVersion},
                     {"step", info.step},
                     {"ranks", info.ranks},
                     {"stage", info.stage},
                     {"model", info.model},
                     {"extra", json::parse(info.extra_json.empty() ? "{}" : info.extra_json)},
                     {"files", files}};
    json mentry;
    if (st.ok()) st = write_text((tmp / "manifest.json").string(), manifest.dump(2), &mentry);
    if (st.ok()) st = fsync_path(tmp.string());
    if (st.ok()) {
      fs::remove_all(final_dir, ec);  // an older save of the same step, never complete
      kill_point();
      fs::rename(tmp, final_dir, ec);
      if (ec)
        st = make_error(ErrorCode::kIo, "checkpoint ", final_dir.string(), ": ", ec.message());
    }
    if (st.ok()) st = fsync_path(root);
    // DONE holds the manifest's checksum: a damaged manifest is caught too.
    if (st.ok()) {
      st = write_text((final_dir / "DONE").string(), mentry["xxh3"].get<std::string>() + "\n",
                      nullptr);
    }
    if (st.ok()) st = fsync_path(final_dir.string());
  }
  STRATA_ASSIGN_OR_RETURN(const bool done, all_ok(comm, st.ok()));
  if (rank == 0) {
    if (!done) {
      fs::remove_all(tmp, ec);
    } else {  // only now: the complete checkpoints beyond `keep`, oldest first
      std::vector<fs::path> all = complete_checkpoints(root);
      for (size_t i = 0; keep > 0 && i + static_cast<size_t>(keep) < all.size(); ++i) {
        kill_point();
        fs::remove_all(all[i], ec);
      }
    }
  }
  if (!st.ok()) return st;
  if (!done) {
    return make_error(ErrorCode::kIo, "checkpoint ", final_dir.string(),
                      ": another rank failed to write its part (its error is printed by it)");
  }
  return ok_status();
}

Result<std::string> find_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / "DONE")) return path;
  const std::vector<fs::path> all = complete_checkpoints(path);
  if (all.empty()) {
    return make_error(ErrorCode::kConfig, "--resume ", path,
                      ": no complete checkpoint there (a step_N directory with a DONE marker)");
  }
  return all.back().string();
}

Result<CheckpointInfo> verify_checkpoint(const std::string& dir, int rank,
                                         const CheckpointInfo& expect) {
  const std::string mpath = dir + "/manifest.json";
  if (!fs::exists(fs::path(dir) / "DONE")) {
    return make_error(ErrorCode::kCorrupt, "checkpoint ", dir, ": no DONE marker (incomplete)");
  }
  std::ifstream in(mpath);
  if (!in) return make_error(ErrorCode::kCorrupt, "checkpoint ", mpath, ": missing");
  {
    std::ifstream done(fs::path(dir) / "DONE");
    std::string want;
    done >> want;
    STRATA_ASSIGN_OR_RETURN(const json have, hash_file(mpath));
    if (have["xxh3"].get<std::string>() != want) {
      return make_error(ErrorCode::kCorrupt, "checkpoint ", mpath, ": xxh3 ",
                        have["xxh3"].get<std::string>(), ", the DONE marker says '", want, "'");
    }
  }
  const json m = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object() || m.value("format", "") != "strata-checkpoint" ||
      m.value("version", 0) != kVersion || !m.contains("files")) {
    return make_error(ErrorCode::kCorrupt, "checkpoint ", mpath,
                      ": not a strata checkpoint manifest of version ", kVersion);
  }
  CheckpointInfo got;
  got.step = m.value("step", int64_t{-1});
  got.ranks = m.value("ranks", 0);
  got.stage = m.value("stage", -1);
  got.model = m.value("model", "");
  got.extra_json = m.value("extra", json::object()).dump();
  if (got.ranks != expect.ranks) {
    return make_error(ErrorCode::kConfig, "checkpoint ", dir, " was written by ", got.ranks,
                      " ranks; this run has ", expect.ranks,
                      " (resume with the same number of ranks)");
  }
  if (got.stage != expect.stage) {
    return make_error(ErrorCode::kConfig, "checkpoint ", dir, " is of ZeRO stage ", got.stage,
                      "; this run is of stage ", expect.stage, " (resume with the same stage)");
  }
  if (got.model != expect.model) {
    return make_error(ErrorCode::kConfig, "checkpoint ", dir, " holds the model ", got.model,
                      "; this run's is ", expect.model);
  }
  // This rank's files and the shared ones (not other ranks'), as the manifest says.
  for (const auto& [name, want] : m["files"].items()) {
    const bool other_rank = name.find("-rank") != std::string::npos &&
                            name.find("-rank" + std::to_string(rank) + ".") == std::string::npos;
    // The optimizer file is checked by load_checkpoint as it reads it (one pass, not two).
    if (other_rank || name == "optimizer-rank" + std::to_string(rank) + ".bin") continue;
    STRATA_ASSIGN_OR_RETURN(const json have, hash_file(dir + "/" + name));
    if (have != want) {
      return make_error(ErrorCode::kCorrupt, "checkpoint ", dir, "/", name, ": ",
                        have["bytes"].get<uint64_t>(), " bytes with xxh3 ",
                        have["xxh3"].get<std::string>(), ", the manifest says ",
                        want.value("bytes", uint64_t{0}), " bytes with xxh3 ",
                        want.value("xxh3", std::string("?")));
    }
  }
  return got;
}

Result<StepScaling::State> load_checkpoint(const std::string& dir, int rank,
                                           OffloadedOptimizer& opt) {
  const std::string name = "optimizer-rank" + std::to_string(rank) + ".bin";
  const std::string path = dir + "/" + name;
  std::ifstream mi(dir + "/manifest.json");
  const json manifest = json::parse(mi, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.contains("files") || !manifest["files"].contains(name)) {
    return make_error(ErrorCode::kCorrupt, "checkpoint ", dir, "/manifest.json: no entry for ",
                      name);
  }
  std::ifstream in(path, std::ios::binary);
  auto corrupt = [&path](const std::string& what) {
    return make_error(ErrorCode::kCorrupt, "checkpoint ", path, ": ", what);
  };
  // Hashed as it is read; checked against the manifest at the end.
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(),
                                                                &XXH3_freeState);
  XXH3_64bits_reset(hash.get());
  uint64_t bytes = 0;
  auto read = [&](void* to, size_t n) {
    in.read(static_cast<char*>(to), static_cast<std::streamsize>(n));
    const auto got = static_cast<size_t>(in.gcount());
    XXH3_64bits_update(hash.get(), to, got);
    bytes += got;
    return got == n;
  };
  char magic[8] = {};
  int64_t head[2] = {};
  read(magic, sizeof(magic));
  read(head, sizeof(head));
  if (!in || std::memcmp(magic, kMagic, sizeof(magic)) != 0 || head[0] != kVersion) {
    return corrupt("not a strata optimizer file of version " + std::to_string(kVersion));
  }
  if (head[1] != static_cast<int64_t>(opt.num_partitions())) {
    return corrupt("holds " + std::to_string(head[1]) + " partitions; this run has " +
                   std::to_string(opt.num_partitions()));
  }
  std::vector<float> st;
  for (size_t p = 0; p < opt.num_partitions(); ++p) {
    int64_t n = 0;
    if (!read(&n, sizeof(n)) || n != opt.numel(p)) {
      return corrupt("partition " + std::to_string(p) + " holds " + std::to_string(n) +
                     " elements; this run's has " + std::to_string(opt.numel(p)));
    }
    st.resize(3 * static_cast<size_t>(n));
    if (!read(st.data(), st.size() * 4)) {
      return corrupt("truncated in partition " + std::to_string(p));
    }
    STRATA_RETURN_IF_ERROR(opt.load(p, st.data(), st.data() + n, st.data() + 2 * n));
  }
  char extra = 0;
  read(&extra, 1);  // the end of the file, counted if it is not
  const json have = {{"bytes", bytes}, {"xxh3", HashedFile::hex(XXH3_64bits_digest(hash.get()))}};
  const json& want = manifest["files"][name];
  if (have != want) {
    return corrupt(std::to_string(bytes) + " bytes with xxh3 " + have["xxh3"].get<std::string>() +
                   ", the manifest says " + std::to_string(want.value("bytes", uint64_t{0})) +
                   " bytes with xxh3 " + want.value("xxh3", std::string("?")));
  }
  const std::string spath = dir + "/state-rank" + std::to_string(rank) + ".json";
  std::ifstream sin(spath);
  const json s = json::parse(sin, nullptr, /*allow_exceptions=*/false);
  if (s.is_discarded() || !s.contains("adam_steps")) {
    return make_error(ErrorCode::kCorrupt, "checkpoint ", spath, ": unreadable");
  }
  StepScaling::State out;
  out.applied = s["adam_steps"].get<int64_t>();
  out.scaler.scale = s["loss_scale"].get<double>();
  out.scaler.hysteresis_left = s["hysteresis_left"].get<int>();
  out.scaler.iter = s["scaler_iter"].get<int64_t>();
  out.scaler.last_overflow_iter = s["last_overflow_iter"].get<int64_t>();
  out.scaler.skipped = s["skipped"].get<int64_t>();
  return out;
}

}  // namespace strata::engine

// Saving a checkpoint (engine/checkpoint.h): start_checkpoint, the background writer of the
// optimizer file, and CheckpointSave::finish.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "cpu/pinned_memory.h"
#include "engine/checkpoint.h"
#include "engine/checkpoint_file.h"

namespace strata::engine {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace ckpt;

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
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

}  // namespace

CheckpointSave::CheckpointSave(std::string root, int keep, comm::Communicator& comm,
                               CheckpointInfo info, OffloadedOptimizer& opt)
    : root_(std::move(root)),
      keep_(keep),
      comm_(comm),
      info_(std::move(info)),
      opt_(opt),
      hold_(opt.num_partitions()) {
  tmp_ = (fs::path(root_) / (step_name(info_.step) + ".tmp")).string();
  final_ = (fs::path(root_) / step_name(info_.step)).string();
}

CheckpointSave::~CheckpointSave() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_ = true;
  }
  shared_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  hold_.release_all();
  opt_.set_hold(nullptr);
}

// The optimizer file, partition by partition in the order the hold gives them. An NVMe
// partition is read into one of two buffers while the previous one is written; each partition is
// released as soon as its state is copied out (into the file's write buffers, or a buffer).
void CheckpointSave::write_optimizer(const json& scaling) {
  const auto t0 = std::chrono::steady_clock::now();
  auto run = [&]() -> Status {
    const std::string name = "optimizer-rank" + std::to_string(comm_.rank()) + ".bin";
    STRATA_ASSIGN_OR_RETURN(HashedFile f, HashedFile::create(tmp_ + "/" + name, /*direct=*/true));
    const auto parts = static_cast<int64_t>(opt_.num_partitions());
    STRATA_RETURN_IF_ERROR(f.write(kMagic, sizeof(kMagic)));
    const int64_t head[2] = {kVersion, parts};
    STRATA_RETURN_IF_ERROR(f.write(head, sizeof(head)));
    int64_t max_nvme = 0;
    for (size_t p = 0; p < opt_.num_partitions(); ++p) {
      if (opt_.on_nvme(p)) max_nvme = std::max(max_nvme, opt_.numel(p));
    }
    // The NVMe partitions are read into these with direct I/O (huge pages: cpu/pinned_memory.h).
    cpu::PinnedBuffer buf[2];
    for (auto& one : buf) {
      auto made = cpu::allocate_io_buffer(12 * uint64_t(max_nvme));
      if (!made.ok()) return made.status().with_context("checkpoint " + tmp_);
      one = std::move(*made);
    }
    auto data_of = [&](int b) { return static_cast<std::byte*>(buf[b].data()); };
    auto begin = [&](std::optional<size_t> p, int b) {
      return p && opt_.on_nvme(*p) ? opt_.read_partition(*p, data_of(b)) : nvme::IoHandle();
    };
    std::optional<size_t> cur = hold_.pick();
    int b = 0;
    nvme::IoHandle cur_io = begin(cur, b);
    Status st;
    while (cur && st.ok()) {
      std::optional<size_t> next = hold_.pick();
      nvme::IoHandle next_io = begin(next, 1 - b);
      const size_t p = *cur;
      const bool nvme = opt_.on_nvme(p);
      const std::byte* data = nvme ? data_of(b) : opt_.host_state(p);
      if (nvme) {  // captured once read into the writer's buffer
        st = cur_io.wait().with_context("checkpoint: reading optimizer partition " +
                                        std::to_string(p));
        hold_.release(p);
      }
      if (st.ok() && cancel_) st = make_error(ErrorCode::kIo, "checkpoint ", tmp_, ": cancelled");
      const int64_t rec[2] = {static_cast<int64_t>(p), opt_.numel(p)};
      if (st.ok()) st = f.write(rec, sizeof(rec));
      if (st.ok()) st = f.write(data, opt_.state_bytes(p));
      if (!nvme) hold_.release(p);  // captured once copied into the file's write buffers
      if (next_io.valid() && !st.ok()) (void)next_io.wait();  // no read left into a freed buffer
      cur = next;
      cur_io = std::move(next_io);
      b = 1 - b;
    }
    STRATA_RETURN_IF_ERROR(st);
    STRATA_ASSIGN_OR_RETURN(entries_[name], f.finish());
    const std::string state = "state-rank" + std::to_string(comm_.rank()) + ".json";
    json e;
    STRATA_RETURN_IF_ERROR(write_text(tmp_ + "/" + state, scaling.dump(2), &e));
    entries_[state] = e;
    // The shared files, once the training thread has written them: synced here, off its path,
    // by rank 0, which wrote them. Not the other ranks' files (each syncs its own; they may be
    // renamed or not there yet while this lists the directory, from another machine too), nor
    // temporaries of a file being written.
    std::unique_lock<std::mutex> lock(mu_);
    shared_cv_.wait(lock, [this] { return shared_done_ || cancel_.load(); });
    if (comm_.rank() != 0) return ok_status();
    std::error_code ec;
    for (const auto& shared : fs::directory_iterator(tmp_, ec)) {
      const std::string n = shared.path().filename().string();
      const bool ranks_own = n.find("-rank") != std::string::npos;
      const bool temporary = n.find(".tmp") != std::string::npos;
      if (shared.is_regular_file() && !entries_.contains(n) && !ranks_own && !temporary) {
        STRATA_RETURN_IF_ERROR(fsync_path(shared.path().string()));
      }
    }
    return ok_status();
  };
  written_status_ = run();
  hold_.release_all();
  write_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  written_ = true;
}

Result<std::unique_ptr<CheckpointSave>> start_checkpoint(
    const std::string& root, int keep, comm::Communicator& comm, const CheckpointInfo& info,
    OffloadedOptimizer& opt, const StepScaling::State& scaling, const WriteShared& write_shared) {
  std::unique_ptr<CheckpointSave> s(new CheckpointSave(root, keep, comm, info, opt));
  const int rank = comm.rank();
  std::error_code ec;
  if (rank == 0) {  // leftovers of interrupted saves (no DONE), and a fresh temporary directory
    for (const auto& e : fs::directory_iterator(root, ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("step_", 0) == 0 && !fs::exists(e.path() / "DONE")) fs::remove_all(e.path(), ec);
    }
    ec.clear();
    fs::create_directories(s->tmp_, ec);
  }
  STRATA_RETURN_IF_ERROR(comm.barrier());
  if (ec) {
    s->setup_ =
        make_error(ErrorCode::kIo, "checkpoint ", s->tmp_, ": cannot create: ", ec.message());
  }
  if (s->setup_.ok()) {
    opt.set_hold(&s->hold_);
    s->writer_ = std::thread([p = s.get(), j = scaling_json(scaling)] { p->write_optimizer(j); });
  } else {
    s->written_ = true;
  }
  // The shared files (every rank takes part; rank 0 writes), beside the writer, which syncs them.
  s->shared_ = write_shared(s->tmp_);
  {
    std::lock_guard<std::mutex> lock(s->mu_);
    s->shared_done_ = true;
  }
  s->shared_cv_.notify_all();
  return s;
}

Status CheckpointSave::finish() {
  if (finished_) return make_error(ErrorCode::kInternal, "checkpoint ", final_, ": finished twice");
  finished_ = true;
  if (writer_.joinable()) writer_.join();
  opt_.set_hold(nullptr);
  const int rank = comm_.rank();
  const fs::path tmp(tmp_), final_dir(final_);
  std::error_code ec;
  Status st = setup_;
  if (st.ok()) st = written_status_;
  if (st.ok()) st = shared_;
  if (st.ok()) {  // read by rank 0 and removed before the rename: not synced
    st = write_text((tmp / ("sums-rank" + std::to_string(rank) + ".json")).string(),
                    entries_.dump(), nullptr, /*sync=*/false);
  }
  STRATA_ASSIGN_OR_RETURN(const bool written, all_ok(comm_, st.ok()));
  if (rank == 0 && written) {
    // The manifest: every rank's files (from their sums), the shared ones hashed here.
    json files = json::object();
    for (int r = 0; r < comm_.size() && st.ok(); ++r) {
      std::ifstream in(tmp / ("sums-rank" + std::to_string(r) + ".json"));
      json sums = json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (sums.is_discarded()) {
        st = make_error(ErrorCode::kIo, "checkpoint ", tmp_, ": rank ", r,
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
                     {"step", info_.step},
                     {"ranks", info_.ranks},
                     {"stage", info_.stage},
                     {"model", info_.model},
                     {"extra", json::parse(info_.extra_json.empty() ? "{}" : info_.extra_json)},
                     {"files", files}};
    json mentry;
    if (st.ok()) st = write_text((tmp / "manifest.json").string(), manifest.dump(2), &mentry);
    if (st.ok()) st = fsync_path(tmp_);
    if (st.ok()) {
      fs::remove_all(final_dir, ec);  // an older save of the same step, never complete
      kill_point();
      fs::rename(tmp, final_dir, ec);
      if (ec) st = make_error(ErrorCode::kIo, "checkpoint ", final_, ": ", ec.message());
    }
    if (st.ok()) st = fsync_path(root_);
    // DONE holds the manifest's checksum: a damaged manifest is caught too.
    if (st.ok()) {
      st = write_text((final_dir / "DONE").string(), mentry["xxh3"].get<std::string>() + "\n",
                      nullptr);
    }
    if (st.ok()) st = fsync_path(final_);
  }
  STRATA_ASSIGN_OR_RETURN(const bool done, all_ok(comm_, st.ok()));
  if (rank == 0) {
    if (!done) {
      fs::remove_all(tmp, ec);
    } else {  // only now: the complete checkpoints beyond `keep`, oldest first
      std::vector<fs::path> all = complete_checkpoints(root_);
      for (size_t i = 0; keep_ > 0 && i + static_cast<size_t>(keep_) < all.size(); ++i) {
        kill_point();
        fs::remove_all(all[i], ec);
      }
    }
  }
  if (!st.ok()) return st;
  if (!done) {
    return make_error(ErrorCode::kIo, "checkpoint ", final_,
                      ": another rank failed to write its part (its error is printed by it)");
  }
  return ok_status();
}

Status save_checkpoint(const std::string& root, int keep, comm::Communicator& comm,
                       const CheckpointInfo& info, OffloadedOptimizer& opt,
                       const StepScaling::State& scaling, const WriteShared& write_shared) {
  STRATA_ASSIGN_OR_RETURN(auto save,
                          start_checkpoint(root, keep, comm, info, opt, scaling, write_shared));
  return save->finish();
}

}  // namespace strata::engine

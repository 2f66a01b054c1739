#include "nvme/swap_store.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/check.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/xxh3.h"
#include "nvme/swap_owner.h"

namespace strata::nvme {

Result<std::vector<std::string>> parse_nvme_paths(const std::string& flag_value) {
  std::vector<std::string> dirs;
  size_t start = 0;
  for (;;) {
    const size_t comma = flag_value.find(',', start);
    std::string piece =
        flag_value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (piece.empty()) {
      return make_error(ErrorCode::kConfig, "the directory list '", flag_value,
                        "' has an empty directory; expected DIR[,DIR...]");
    }
    dirs.push_back(std::move(piece));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return dirs;
}

IoHandle IoHandle::failed(Status status) {
  auto s = std::make_shared<State>();
  s->done = true;
  s->status = std::move(status);
  return IoHandle(std::move(s));
}

bool IoHandle::ready() const {
  if (!state_) return false;
  std::lock_guard lock(state_->mu);
  return state_->done;
}

Status IoHandle::wait() const {
  if (!state_) return make_error(ErrorCode::kInternal, "wait() on an empty IoHandle");
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  return state_->status;
}

namespace {

void complete(IoHandle::State& s, Status status) {
  {
    std::lock_guard lock(s.mu);
    s.status = std::move(status);
    s.done = true;
  }
  s.cv.notify_all();
}

struct Extent {
  uint32_t file = 0;
  uint64_t offset = 0;
};

struct Object {
  uint64_t size_bytes = 0;
  std::vector<Extent> extents;
  std::vector<uint64_t> checksums;
};

struct AlignedFree {
  void operator()(std::byte* p) const { std::free(p); }
};

struct Job;
struct Piece {
  Job* job = nullptr;
  uint32_t file = 0;
  uint64_t file_offset = 0;
  std::byte* buffer = nullptr;
  size_t size_bytes = 0;
  uint32_t extent = 0;  // index into Job::extents
};

struct Job {
  IoOp op = IoOp::kRead;
  uint64_t key = 0;
  std::byte* user = nullptr;
  uint64_t size_bytes = 0;
  std::vector<Extent> extents;
  std::vector<uint64_t> checksums;
  std::vector<Piece> pieces;
  size_t next_piece = 0;
  size_t pending = 0;
  bool started = false;
  Status error;
  std::unique_ptr<std::byte, AlignedFree> bounce;  // 4 KiB for an odd tail
  size_t tail_bytes = 0;
  std::vector<uint32_t> extent_pending;  // pieces of each extent not yet completed
  std::vector<size_t> extent_end;        // one past the last piece of each extent
  size_t hashed = 0;                     // a write's extents hashed so far
  std::vector<uint32_t> to_verify;       // a read's completed extents, in completion order
  size_t verified = 0;                   // of to_verify, checked so far
  std::shared_ptr<IoHandle::State> handle;
};

struct SwapFile {
  std::string path;
  int fd = -1;
  bool direct = false;
  uint64_t size_bytes = 0;             // of data; the owner record follows (swap_owner.h)
  int cleanup_slot = -1;               // core/interrupt.h: removed on an interrupted exit
  std::vector<uint64_t> free_offsets;  // a stack: back() is the lowest offset
};

// The error for a reservation that failed, with what the file system has and what other runs'
// swap files hold there.
Status reservation_error(const std::string& path, const std::string& dir, uint64_t bytes, int rc,
                         const SwapScan& scan) {
  std::string where;
  struct statvfs vfs {};
  if (statvfs(dir.c_str(), &vfs) == 0) {
    where = "; " + std::to_string(uint64_t(vfs.f_bavail) * vfs.f_frsize) + " bytes free there";
  }
  if (!scan.kept.empty()) {
    where += ", " + std::to_string(scan.kept_bytes()) + " held by " +
             std::to_string(scan.kept.size()) + " swap file(s) of other runs (" +
             scan.kept.front().owner + (scan.kept.size() > 1 ? ", ..." : "") + ")";
  }
  return make_error(ErrorCode::kIo, "nvme swap: cannot reserve ", bytes, " bytes in ", path, ": ",
                    std::strerror(rc), where);
}

// Writes the owner record after the data (O_DIRECT: from an aligned buffer, at an aligned
// offset).
Status write_owner_record(const SwapFile& f, const std::string& record) {
  void* buf = nullptr;
  if (posix_memalign(&buf, kSwapAlignment, kSwapOwnerRecordBytes) != 0) {
    return make_error(ErrorCode::kOutOfMemory, "nvme swap: no memory for the owner record");
  }
  std::memcpy(buf, record.data(), kSwapOwnerRecordBytes);
  const ssize_t n = pwrite(f.fd, buf, kSwapOwnerRecordBytes, static_cast<off_t>(f.size_bytes));
  const int err = errno;
  std::free(buf);
  if (n != static_cast<ssize_t>(kSwapOwnerRecordBytes)) {
    return make_error(ErrorCode::kIo, "nvme swap: cannot write the owner record of ", f.path, ": ",
                      n < 0 ? std::strerror(err) : "short write");
  }
  return ok_status();
}

std::atomic<uint64_t> g_store_counter{0};

constexpr uint64_t kHashBytesPerPass = 4 << 20;  // about 0.15 ms of xxh3 between two reaps

}  // namespace

struct SwapStore::Impl {
  SwapStoreOptions options;
  std::vector<SwapFile> files;
  std::vector<std::string> paths;
  bool any_direct = false;
  uint64_t rr = 0;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::unordered_map<uint64_t, Object> objects;
  std::deque<std::shared_ptr<Job>> incoming;
  std::optional<std::vector<BufferRegion>> pending_register;
  Status register_result;
  bool register_done = false;
  bool logged_registration = false;
  std::optional<FaultInjection> pending_fault;
  bool stop = false;
  std::string queue_desc;
  uint64_t used_extents = 0;

  std::optional<IoQueue> queue;  // used only by the I/O thread after open (but for wake())
  // The I/O thread is (about to be) blocked in reap(): a new job wakes it, so its requests are
  // submitted at once instead of after the next completion.
  std::atomic<bool> io_waiting{false};
  // SwapQueueStats, in nanoseconds, written by the I/O thread.
  std::atomic<uint64_t> busy_ns{0}, in_flight_ns{0}, requests{0};
  std::thread io_thread;

  ~Impl() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (io_thread.joinable()) io_thread.join();
    queue.reset();
    for (auto& f : files) {
      if (f.fd >= 0) close(f.fd);
      if (!f.path.empty()) unlink(f.path.c_str());
      unregister_cleanup_path(f.cleanup_slot);
    }
  }

  // After queueing a job: wakes the I/O thread, idle (cv) or reaping (the queue).
  void notify_io_thread() {
    cv.notify_all();
    if (io_waiting.load()) queue->wake();
  }
  void start_job(Job& job);
  void finish_job(Job& job);
  void extent_done(Job& job, uint32_t k);
  bool verify_completed(Job& job, uint64_t& budget);
  bool hash_submitted(Job& job, uint64_t& budget);
  void run();
};

void SwapStore::Impl::start_job(Job& job) {
  job.started = true;
  const uint64_t extent = options.extent_bytes;
  const uint64_t block = options.block_bytes;
  for (size_t k = 0; k < job.extents.size(); ++k) {
    const uint64_t begin = k * extent;
    const uint64_t len = std::min(extent, job.size_bytes - begin);
    const size_t first_piece = job.pieces.size();
    const uint64_t aligned = len & ~uint64_t{kSwapAlignment - 1};
    for (uint64_t off = 0; off < aligned; off += block) {
      job.pieces.push_back(Piece{&job, job.extents[k].file, job.extents[k].offset + off,
                                 job.user + begin + off, std::min(block, aligned - off),
                                 static_cast<uint32_t>(k)});
    }
    if (aligned < len) {
      job.tail_bytes = len - aligned;
      job.bounce.reset(static_cast<std::byte*>(std::aligned_alloc(kSwapAlignment, kSwapAlignment)));
      STRATA_CHECK(job.bounce != nullptr, "out of memory for a 4 KiB bounce block");
      std::memset(job.bounce.get(), 0, kSwapAlignment);
      if (job.op == IoOp::kWrite)
        std::memcpy(job.bounce.get(), job.user + begin + aligned, job.tail_bytes);
      job.pieces.push_back(Piece{&job, job.extents[k].file, job.extents[k].offset + aligned,
                                 job.bounce.get(), kSwapAlignment, static_cast<uint32_t>(k)});
    }
    job.extent_pending.push_back(static_cast<uint32_t>(job.pieces.size() - first_piece));
    job.extent_end.push_back(job.pieces.size());
  }
  job.checksums.resize(job.extents.size(), 0);
  if (job.op == IoOp::kWrite && !options.verify_checksums) job.hashed = job.extents.size();
}

// Hashes a write's extents whose pieces have all been submitted, up to `budget` bytes (less
// what it hashed): the kernel reads the buffer while it is hashed (the caller leaves it
// untouched until the handle completes), so hashing overlaps the transfers instead of delaying
// each object's first request. Returns whether submitted extents are left unhashed.
bool SwapStore::Impl::hash_submitted(Job& job, uint64_t& budget) {
  if (job.op != IoOp::kWrite || !job.error.ok()) return false;
  const uint64_t extent = options.extent_bytes;
  while (job.hashed < job.extents.size() && job.extent_end[job.hashed] <= job.next_piece) {
    if (budget == 0) return true;
    const uint64_t begin = job.hashed * extent;
    const uint64_t len = std::min(extent, job.size_bytes - begin);
    job.checksums[job.hashed] = XXH3_64bits(job.user + begin, len);
    budget -= std::min(budget, len);
    ++job.hashed;
  }
  return false;
}

// A read verifies each extent once its last piece completed: oldest job first, and at most
// `budget` bytes per pass of the I/O loop (less what was hashed). A disk that completes a deep
// queue in one burst hands over whole objects at once; verified in slices, the first object
// completes (its caller can queue the next one) while the next waits its turn, and requests
// queued meanwhile go out between two slices, so verification overlaps the transfers instead
// of idling the disk. Returns whether completed extents are left unverified.
bool SwapStore::Impl::verify_completed(Job& job, uint64_t& budget) {
  if (job.op != IoOp::kRead) return false;
  const uint64_t extent = options.extent_bytes;
  while (job.error.ok() && job.verified < job.to_verify.size()) {
    if (budget == 0) return true;
    const uint32_t k = job.to_verify[job.verified++];
    const uint64_t len = std::min(extent, job.size_bytes - k * extent);
    const uint64_t got = XXH3_64bits(job.user + k * extent, len);
    budget -= std::min(budget, len);
    if (got != job.checksums[k]) {
      job.error = make_error(ErrorCode::kCorrupt, "nvme swap: checksum mismatch reading key ",
                             job.key, " from ", files[job.extents[k].file].path, " at offset ",
                             job.extents[k].offset, " (", len, " bytes): stored ", std::hex,
                             job.checksums[k], ", read ", got);
    }
  }
  return false;
}

// Extent k of a job has all its pieces done: a read's odd tail is copied out of the bounce
// block, and the extent joins those waiting for verification.
void SwapStore::Impl::extent_done(Job& job, uint32_t k) {
  if (!job.error.ok() || job.op != IoOp::kRead) return;
  if (k + 1 == job.extents.size() && job.tail_bytes > 0) {
    std::memcpy(job.user + job.size_bytes - job.tail_bytes, job.bounce.get(), job.tail_bytes);
  }
  if (options.verify_checksums) job.to_verify.push_back(k);
}

void SwapStore::Impl::finish_job(Job& job) {
  Status st = job.error;
  if (st.ok() && job.op == IoOp::kWrite) {
    std::lock_guard lock(mu);
    auto it = objects.find(job.key);
    if (it != objects.end() && it->second.size_bytes == job.size_bytes) {
      it->second.checksums = job.checksums;
    }
  }
  complete(*job.handle, std::move(st));
}

void SwapStore::Impl::run() {
  std::deque<std::shared_ptr<Job>> active;
  std::vector<IoCompletion> completions;
  auto last = std::chrono::steady_clock::now();
  size_t last_in_flight = 0;  // requests in flight since `last`
  // Adds the time since `last` to the queue statistics (busy if anything was in flight).
  const auto account_queue = [&] {
    const auto now = std::chrono::steady_clock::now();
    if (last_in_flight > 0) {
      const auto ns = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - last).count());
      busy_ns.fetch_add(ns, std::memory_order_relaxed);
      in_flight_ns.fetch_add(ns * last_in_flight, std::memory_order_relaxed);
    }
    last = now;
    last_in_flight = queue->in_flight();
  };
  for (;;) {
    {
      std::unique_lock lock(mu);
      const auto idle = [&] { return active.empty() && queue->in_flight() == 0; };
      if (idle() && pending_register) {
        register_result = queue->register_buffers(*pending_register);
        pending_register.reset();
        queue_desc = queue->describe();
        register_done = true;
        // Said once per store; callers that register buffer after buffer (bench_nvme, per
        // pass) would fill the log.
        if (logged_registration) {
          STRATA_LOG(kDebug, "nvme swap: staging buffers registered; " << queue_desc);
        } else {
          STRATA_LOG(kInfo, "nvme swap: staging buffers registered; " << queue_desc);
          logged_registration = true;
        }
        cv.notify_all();
      }
      if (idle()) {
        cv.wait(lock, [&] { return stop || !incoming.empty() || pending_register; });
        if (pending_register) continue;
        if (incoming.empty() && stop) break;
      }
      if (pending_fault) {
        queue->set_fault_injection(*pending_fault);
        pending_fault.reset();
      }
      if (!pending_register) {
        while (!incoming.empty()) {
          active.push_back(std::move(incoming.front()));
          incoming.pop_front();
        }
      }
    }
    Status queue_status;
    for (auto& job : active) {
      if (!job->started) start_job(*job);
      while (queue_status.ok() && queue->can_submit() && job->next_piece < job->pieces.size()) {
        Piece& p = job->pieces[job->next_piece];
        IoRequest req{files[p.file].fd, job->op,       p.buffer,
                      p.size_bytes,     p.file_offset, reinterpret_cast<uint64_t>(&p)};
        queue_status = queue->submit(req);
        if (!queue_status.ok()) break;
        requests.fetch_add(1, std::memory_order_relaxed);
        ++job->next_piece;
        ++job->pending;
      }
      if (!queue->can_submit() || !queue_status.ok()) break;
    }
    if (queue_status.ok()) queue_status = queue->flush();
    account_queue();  // the requests just submitted are in flight from here on
    // Hashing (writes) and verification (reads) come after the freed queue slots were refilled
    // and submitted, so they overlap the transfers; bounded between two reaps, so completions
    // are reaped, new jobs taken in and slots refilled while a deep queue's worth waits.
    uint64_t hash_budget = kHashBytesPerPass;
    bool unhashed = false;
    for (auto& job : active) {
      if (!job->started) continue;
      unhashed = hash_submitted(*job, hash_budget) || unhashed;
      unhashed = verify_completed(*job, hash_budget) || unhashed;
    }
    // Jobs with every piece done and verified (a read) or hashed (a write).
    for (auto it = active.begin(); it != active.end();) {
      Job& job = **it;
      const bool hashed = job.op == IoOp::kRead ? job.verified == job.to_verify.size()
                                                : job.hashed == job.extents.size();
      if (job.started && job.next_piece == job.pieces.size() && job.pending == 0 &&
          (hashed || !job.error.ok())) {
        finish_job(job);
        it = active.erase(it);
      } else {
        ++it;
      }
    }
    completions.clear();
    account_queue();
    if (queue_status.ok() && queue->in_flight() > 0) {
      bool wait = !unhashed;
      if (wait) {
        io_waiting.store(true);
        std::lock_guard lock(mu);  // after the flag: a job queued from here on wakes the reap
        wait = incoming.empty() && !stop;
      }
      queue_status = queue->reap(completions, wait);
      io_waiting.store(false);
      account_queue();  // before any job it completes is finished: its caller sees the time
    }
    for (auto& c : completions) {
      auto* p = reinterpret_cast<Piece*>(c.tag);
      Job& job = *p->job;
      --job.pending;
      const bool extent_complete = --job.extent_pending[p->extent] == 0;
      if (!c.status.ok() && job.error.ok()) {
        job.error = c.status.with_context(
            "nvme swap " + std::string(job.op == IoOp::kWrite ? "write" : "read") + " of key " +
            std::to_string(job.key) + " in " + files[p->file].path);
      }
      if (extent_complete) extent_done(job, p->extent);
    }
    if (!queue_status.ok()) {
      // The queue itself failed: nothing more can be trusted; fail every job not yet finished.
      for (auto& job : active) {
        if (job->error.ok()) job->error = queue_status;
        job->next_piece = job->pieces.size();
      }
      if (queue->in_flight() > 0) continue;
    }
  }
}

SwapStore::SwapStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SwapStore::~SwapStore() = default;

Result<std::unique_ptr<SwapStore>> SwapStore::open(const SwapStoreOptions& options) {
  if (options.dirs.empty()) {
    return make_error(ErrorCode::kConfig, "the swap store has no directory; expected DIR[,DIR...]");
  }
  if (options.extent_bytes == 0 || options.extent_bytes % kSwapAlignment != 0) {
    return make_error(ErrorCode::kConfig, "swap extent size ", options.extent_bytes,
                      " is not accepted (a positive multiple of 4096)");
  }
  if (options.block_bytes == 0 || options.block_bytes % kSwapAlignment != 0 ||
      options.block_bytes > (uint64_t{1} << 30)) {
    return make_error(ErrorCode::kConfig, "nvme block size ", options.block_bytes,
                      " is not accepted (a multiple of 4096, at most 1 GiB)");
  }
  if (options.capacity_bytes == 0) {
    return make_error(ErrorCode::kConfig, "swap capacity of 0 bytes is not accepted");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  STRATA_ASSIGN_OR_RETURN(IoQueue q, IoQueue::create(options.queue));
  impl->queue.emplace(std::move(q));

  const uint64_t n = options.dirs.size();
  const uint64_t extents_total =
      (options.capacity_bytes + options.extent_bytes - 1) / options.extent_bytes;
  const uint64_t extents_per_file = (extents_total + n - 1) / n;
  const uint64_t id = g_store_counter.fetch_add(1);
  const std::string owner_record = SwapOwner::self().encode();
  bool all_direct = true;
  for (uint64_t i = 0; i < n; ++i) {
    // Files left by runs that are gone go first; what other live runs hold is said on failure.
    STRATA_ASSIGN_OR_RETURN(const SwapScan scan, clean_stale_swap_files(options.dirs[i]));
    SwapFile f;
    f.path = options.dirs[i] + "/" + swap_file_prefix() + std::to_string(id) + "_" +
             std::to_string(i) + ".bin";
    const int base = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
    f.fd = options.direct_io ? ::open(f.path.c_str(), base | O_DIRECT, 0600) : -1;
    f.direct = f.fd >= 0;
    if (f.fd < 0) {
      const int err = errno;
      if (options.direct_io && err != EINVAL) {
        return make_error(ErrorCode::kIo, "nvme swap: cannot create ", f.path, ": ",
                          std::strerror(err));
      }
      if (options.direct_io) {
        STRATA_LOG(kWarn, "nvme swap: the filesystem of "
                              << options.dirs[i] << " refuses O_DIRECT; using buffered I/O");
      }
      f.fd = ::open(f.path.c_str(), base, 0600);
      if (f.fd < 0) {
        return make_error(ErrorCode::kIo, "nvme swap: cannot create ", f.path, ": ",
                          std::strerror(errno));
      }
    }
    all_direct = all_direct && f.direct;
    impl->any_direct = impl->any_direct || f.direct;
    f.size_bytes = extents_per_file * options.extent_bytes;
    f.cleanup_slot = register_cleanup_path(f.path, /*open_only=*/true);
    impl->files.push_back(f);  // registered first so the destructor removes it on failure
    const int rc =
        posix_fallocate(f.fd, 0, static_cast<off_t>(f.size_bytes + kSwapOwnerRecordBytes));
    if (rc != 0) {
      return reservation_error(f.path, options.dirs[i], f.size_bytes + kSwapOwnerRecordBytes, rc,
                               scan);
    }
    STRATA_RETURN_IF_ERROR(write_owner_record(f, owner_record));
    auto& fr = impl->files.back().free_offsets;
    for (uint64_t e = extents_per_file; e > 0; --e) fr.push_back((e - 1) * options.extent_bytes);
    impl->paths.push_back(f.path);
  }
  impl->queue_desc = impl->queue->describe();
  auto store = std::unique_ptr<SwapStore>(new SwapStore(std::move(impl)));
  store->capacity_bytes_ = extents_per_file * n * options.extent_bytes;
  store->direct_io_ = all_direct;
  Impl* raw = store->impl_.get();
  raw->io_thread = std::thread([raw] { raw->run(); });
  STRATA_LOG(kInfo, "nvme swap: " << store->describe());
  return store;
}

IoHandle SwapStore::write(uint64_t key, const void* buffer, size_t size_bytes) {
  Impl& im = *impl_;
  if (im.any_direct && reinterpret_cast<uintptr_t>(buffer) % kSwapAlignment != 0) {
    return IoHandle::failed(make_error(ErrorCode::kConfig, "nvme swap write of key ", key,
                                       ": buffer is not 4096-byte aligned (O_DIRECT)"));
  }
  auto job = std::make_shared<Job>();
  job->op = IoOp::kWrite;
  job->key = key;
  job->user = static_cast<std::byte*>(const_cast<void*>(buffer));
  job->size_bytes = size_bytes;
  job->handle = std::make_shared<IoHandle::State>();
  IoHandle handle(job->handle);
  {
    std::lock_guard lock(im.mu);
    const uint64_t needed = (size_bytes + im.options.extent_bytes - 1) / im.options.extent_bytes;
    auto it = im.objects.find(key);
    if (it != im.objects.end() && it->second.size_bytes != size_bytes) {
      for (const auto& e : it->second.extents) im.files[e.file].free_offsets.push_back(e.offset);
      im.used_extents -= it->second.extents.size();
      im.objects.erase(it);
      it = im.objects.end();
    }
    if (it == im.objects.end()) {
      Object obj;
      obj.size_bytes = size_bytes;
      for (uint64_t k = 0; k < needed; ++k) {
        bool found = false;
        for (size_t t = 0; t < im.files.size() && !found; ++t) {
          const size_t f = (im.rr + t) % im.files.size();
          if (!im.files[f].free_offsets.empty()) {
            obj.extents.push_back(
                Extent{static_cast<uint32_t>(f), im.files[f].free_offsets.back()});
            im.files[f].free_offsets.pop_back();
            im.rr = f + 1;
            found = true;
          }
        }
        if (!found) {
          for (const auto& e : obj.extents) im.files[e.file].free_offsets.push_back(e.offset);
          return IoHandle::failed(make_error(
              ErrorCode::kOutOfMemory, "nvme swap: out of reserved space writing key ", key, " (",
              size_bytes, " bytes); capacity ", capacity_bytes_, " bytes, in use ",
              im.used_extents * im.options.extent_bytes, " bytes; reserve more swap"));
        }
      }
      obj.checksums.assign(obj.extents.size(), 0);
      im.used_extents += obj.extents.size();
      it = im.objects.emplace(key, std::move(obj)).first;
    }
    job->extents = it->second.extents;
    if (job->extents.empty()) {
      complete(*job->handle, ok_status());
      return handle;
    }
    im.incoming.push_back(std::move(job));
  }
  im.notify_io_thread();
  return handle;
}

IoHandle SwapStore::read(uint64_t key, void* buffer, size_t size_bytes) {
  Impl& im = *impl_;
  if (im.any_direct && reinterpret_cast<uintptr_t>(buffer) % kSwapAlignment != 0) {
    return IoHandle::failed(make_error(ErrorCode::kConfig, "nvme swap read of key ", key,
                                       ": buffer is not 4096-byte aligned (O_DIRECT)"));
  }
  auto job = std::make_shared<Job>();
  job->op = IoOp::kRead;
  job->key = key;
  job->user = static_cast<std::byte*>(buffer);
  job->size_bytes = size_bytes;
  job->handle = std::make_shared<IoHandle::State>();
  IoHandle handle(job->handle);
  {
    std::lock_guard lock(im.mu);
    auto it = im.objects.find(key);
    if (it == im.objects.end()) {
      return IoHandle::failed(make_error(ErrorCode::kInternal, "nvme swap: read of key ", key,
                                         ", which was never written"));
    }
    if (it->second.size_bytes != size_bytes) {
      return IoHandle::failed(make_error(ErrorCode::kInternal, "nvme swap: read of key ", key,
                                         " with ", size_bytes, " bytes; it holds ",
                                         it->second.size_bytes));
    }
    job->extents = it->second.extents;
    job->checksums = it->second.checksums;
    if (job->extents.empty()) {
      complete(*job->handle, ok_status());
      return handle;
    }
    im.incoming.push_back(std::move(job));
  }
  im.notify_io_thread();
  return handle;
}

Status SwapStore::remove(uint64_t key) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->objects.find(key);
  if (it == impl_->objects.end()) return ok_status();
  for (const auto& e : it->second.extents) impl_->files[e.file].free_offsets.push_back(e.offset);
  impl_->used_extents -= it->second.extents.size();
  impl_->objects.erase(it);
  return ok_status();
}

Status SwapStore::register_buffers(std::vector<BufferRegion> regions) {
  std::unique_lock lock(impl_->mu);
  impl_->register_done = false;
  impl_->pending_register = std::move(regions);
  impl_->cv.notify_all();
  impl_->cv.wait(lock, [&] { return impl_->register_done; });
  return impl_->register_result;
}

Result<std::vector<ExtentLocation>> SwapStore::locate(uint64_t key) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->objects.find(key);
  if (it == impl_->objects.end()) {
    return make_error(ErrorCode::kConfig, "nvme swap: key ", key, " is not stored");
  }
  std::vector<ExtentLocation> out;
  const uint64_t extent = impl_->options.extent_bytes;
  for (size_t k = 0; k < it->second.extents.size(); ++k) {
    const auto& e = it->second.extents[k];
    out.push_back(ExtentLocation{impl_->files[e.file].path, e.offset,
                                 std::min(extent, it->second.size_bytes - k * extent)});
  }
  return out;
}

SwapQueueStats SwapStore::queue_stats() const {
  return SwapQueueStats{impl_->busy_ns.load() * 1e-9, impl_->in_flight_ns.load() * 1e-9,
                        impl_->requests.load()};
}

uint64_t SwapStore::used_bytes() const {
  std::lock_guard lock(impl_->mu);
  return impl_->used_extents * impl_->options.extent_bytes;
}

const std::vector<std::string>& SwapStore::paths() const { return impl_->paths; }

void SwapStore::set_fault_injection(FaultInjection fault) {
  std::lock_guard lock(impl_->mu);
  impl_->pending_fault = fault;
}

std::string SwapStore::describe() const {
  std::lock_guard lock(impl_->mu);
  const auto& o = impl_->options;
  std::string s = std::to_string(impl_->files.size()) + " file(s), " +
                  std::to_string(capacity_bytes_) + " bytes reserved, extent " +
                  std::to_string(o.extent_bytes) + " B, block " + std::to_string(o.block_bytes) +
                  " B, " + impl_->queue_desc + ", " + (direct_io_ ? "O_DIRECT" : "buffered I/O") +
                  ", checksums " + (o.verify_checksums ? "verified" : "not verified");
  return s;
}

}  // namespace strata::nvme

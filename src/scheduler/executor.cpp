#include "scheduler/executor.h"

#include <algorithm>
#include <exception>

#include "core/check.h"
#include "core/log.h"

namespace strata::sched {

struct Executor::HostLane {
  Lane lane = Lane::kCpu;
  int workers = 1;
  std::vector<TaskId> heap;  // ready tasks, a min-heap on plan position (capacity reserved)
  std::condition_variable cv;
};

namespace {
Status run_task(const Plan::Task& task, const TaskContext& ctx) {
  try {
    Status st = task.fn(ctx);
    if (!st.ok()) return st.with_context("task '" + task.name + "'");
    return st;
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInternal, "task '", task.name, "' threw: ", e.what());
  } catch (...) {
    return make_error(ErrorCode::kInternal, "task '", task.name, "' threw");
  }
}
}  // namespace

Executor::Executor(gpu::Device& device, Plan plan, const ExecutorOptions& options)
    : device_(device), plan_(std::move(plan)), options_(options), trace_on_(options.trace) {}

Result<std::unique_ptr<Executor>> Executor::create(gpu::Device& device, Plan plan,
                                                   const ExecutorOptions& options) {
  if (!plan.finalized()) {
    return make_error(ErrorCode::kConfig, "Executor::create needs a finalized plan");
  }
  if (options.cpu_threads < 1 || options.cpu_workers < 1 || options.nvme_workers < 1 ||
      options.cpu_workers > 64 || options.nvme_workers > 64) {
    return make_error(ErrorCode::kConfig, "executor: cpu_threads ", options.cpu_threads,
                      ", cpu_workers ", options.cpu_workers, ", nvme_workers ",
                      options.nvme_workers, " are not accepted (threads >= 1, workers 1..64)");
  }
  std::unique_ptr<Executor> ex(new Executor(device, std::move(plan), options));
  STRATA_RETURN_IF_ERROR(ex->init());
  return ex;
}

Status Executor::init() {
  const size_t n = plan_.num_tasks();
  for (int l = 0; l < kNumStreamLanes; ++l) {  // the link lane's only when the plan uses it
    if (Lane(l) == Lane::kLink && plan_.lane_tasks(Lane::kLink).empty()) continue;
    STRATA_ASSIGN_OR_RETURN(streams_[l], device_.create_stream());
  }
  const uint64_t device_peak = plan_.peak_bytes(Tier::kDevice);
  const uint64_t host_peak = plan_.peak_bytes(Tier::kPinnedHost);
  if (device_peak > 0) {
    STRATA_ASSIGN_OR_RETURN(device_arena_, device_.allocate(device_peak));
  }
  if (host_peak > 0) {
    cpu::PinnedPool& pool = options_.pool != nullptr ? *options_.pool : cpu::default_pinned_pool();
    STRATA_ASSIGN_OR_RETURN(host_arena_, pool.allocate(host_peak));
  }
  for (size_t b = 0; b < plan_.num_buffers(); ++b) {
    const Plan::Buffer& buf = plan_.buffer(BufferId(b));
    std::byte* base = buf.tier == Tier::kDevice ? static_cast<std::byte*>(device_arena_.data())
                                                : host_arena_.bytes();
    buffer_ptrs_.push_back(base + buf.offset);
  }
  pos_.assign(n, 0);
  for (size_t i = 0; i < plan_.order().size(); ++i)
    pos_[static_cast<size_t>(plan_.order()[i])] = int32_t(i);
  waits_.assign(n, 0);
  succ_.assign(n, {});
  stream_waits_.assign(n, {});
  notify_.assign(n, 0);
  std::vector<uint8_t> needs_event(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const auto t = static_cast<TaskId>(i);
    const Lane lane = plan_.task(t).lane;
    plan_.for_each_predecessor(t, [&](TaskId p) {
      const Lane pl = plan_.task(p).lane;
      if (!is_stream_lane(lane) || !is_stream_lane(pl)) {
        ++waits_[i];
        succ_[static_cast<size_t>(p)].push_back(t);
        if (is_stream_lane(pl)) notify_[static_cast<size_t>(p)] = 1;
      } else if (pl != lane) {
        auto& w = stream_waits_[i];
        if (std::find(w.begin(), w.end(), p) == w.end()) w.push_back(p);
        needs_event[static_cast<size_t>(p)] = 1;
      }
    });
    if (!is_stream_lane(lane)) ++num_host_tasks_;
  }
  events_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (needs_event[i] || notify_[i]) {
      STRATA_ASSIGN_OR_RETURN(events_[i], device_.create_event());
    }
  }
  remaining_.assign(n, 0);
  enqueued_.assign(n, 0);
  stream_done_.reserve(n);
  trace_.spans.assign(n, Span{});
  cpu_arena_.initialize(options_.cpu_threads);
  for (int l = kNumStreamLanes; l < kNumLanes; ++l) {
    const Lane lane = Lane(l);
    if (plan_.lane_tasks(lane).empty()) continue;
    auto hl = std::make_unique<HostLane>();
    hl->lane = lane;
    // More cpu workers than arena threads would only queue inside the arena.
    hl->workers = lane == Lane::kCpu    ? std::min(options_.cpu_workers, options_.cpu_threads)
                  : lane == Lane::kNvme ? options_.nvme_workers
                                        : 1;
    hl->heap.reserve(plan_.lane_tasks(lane).size());
    host_lanes_[l] = std::move(hl);
  }
  for (auto& hl : host_lanes_) {
    if (!hl) continue;
    for (int w = 0; w < hl->workers; ++w) {
      HostLane* lane = hl.get();
      threads_.emplace_back([this, lane, w] { worker_loop(*lane, w); });
    }
  }
  return ok_status();
}

gpu::Stream& Executor::stream(Lane lane) {
  STRATA_CHECK(is_stream_lane(lane) && streams_[static_cast<int>(lane)] != nullptr,
               "Executor::stream(" << lane_name(lane) << "): not a stream lane of this plan");
  return *streams_[static_cast<int>(lane)];
}

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (auto& hl : host_lanes_) {
      if (hl) hl->cv.notify_all();
    }
  }
  for (auto& t : threads_) t.join();
  for (auto& s : streams_) {
    if (s) (void)s->synchronize();
  }
}

int64_t Executor::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              t0_)
      .count();
}

void Executor::complete_locked(TaskId t) {
  for (TaskId s : succ_[static_cast<size_t>(t)]) {
    if (--remaining_[static_cast<size_t>(s)] != 0) continue;
    const Lane lane = plan_.task(s).lane;
    if (!is_stream_lane(lane)) push_ready_locked(s);  // the dispatcher enqueues stream tasks
  }
}

bool Executor::later(TaskId a, TaskId b) const { return pos_[size_t(a)] > pos_[size_t(b)]; }

void Executor::push_ready_locked(TaskId t) {
  HostLane& hl = *host_lanes_[static_cast<int>(plan_.task(t).lane)];
  hl.heap.push_back(t);
  std::push_heap(hl.heap.begin(), hl.heap.end(),
                 [this](TaskId a, TaskId b) { return later(a, b); });
  hl.cv.notify_one();
}

void Executor::fail_locked(Status st) {
  if (!failed_) {
    failed_ = true;
    error_ = std::move(st);
  }
  dispatch_cv_.notify_one();
}

void Executor::worker_loop(HostLane& hl, int worker) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    hl.cv.wait(lock, [&] { return stop_ || (!failed_ && !hl.heap.empty()); });
    if (stop_) return;
    std::pop_heap(hl.heap.begin(), hl.heap.end(),
                  [this](TaskId a, TaskId b) { return later(a, b); });
    const TaskId t = hl.heap.back();
    hl.heap.pop_back();
    ++running_;
    const int64_t step = step_;
    const void* args = args_;
    lock.unlock();
    const int64_t start = now_ns();
    const TaskContext ctx{nullptr, step, worker, buffer_ptrs_.data(), args};
    const Plan::Task& task = plan_.task(t);
    Status st;
    if (hl.lane == Lane::kCpu) {
      cpu_arena_.execute([&] { st = run_task(task, ctx); });
    } else {
      st = run_task(task, ctx);
    }
    const int64_t end = now_ns();
    lock.lock();
    trace_.spans[static_cast<size_t>(t)] = Span{start, end, worker};
    --running_;
    --host_pending_;
    if (st.ok()) {
      complete_locked(t);
    } else {
      fail_locked(std::move(st));
    }
    dispatch_cv_.notify_one();
    if (running_ == 0) idle_cv_.notify_all();
  }
}

void Executor::on_stream_task_done(TaskId t) {
  if (trace_on_.load()) trace_.spans[static_cast<size_t>(t)].end_ns = now_ns();
  if (!notify_[static_cast<size_t>(t)]) return;
  std::lock_guard<std::mutex> lock(mu_);
  stream_done_.push_back(t);
  dispatch_cv_.notify_one();
}

Status Executor::enqueue_stream_task(TaskId t) {
  const Plan::Task& task = plan_.task(t);
  gpu::Stream& s = *streams_[static_cast<int>(task.lane)];
  for (TaskId w : stream_waits_[static_cast<size_t>(t)]) {
    STRATA_RETURN_IF_ERROR(s.wait(*events_[static_cast<size_t>(w)]));
  }
  if (trace_on_.load()) {
    STRATA_RETURN_IF_ERROR(s.host_callback([this, t] {
      Span& span = trace_.spans[static_cast<size_t>(t)];
      span.start_ns = now_ns();
    }));
  }
  const TaskContext ctx{&s, step_, 0, buffer_ptrs_.data(), args_};
  STRATA_RETURN_IF_ERROR(run_task(task, ctx));
  // The end stamp comes before the event, so a task that waits on the event starts after it.
  // The dispatcher enqueues the record before it looks at the callback's report, and the
  // event's synchronize() then waits for that record.
  if (trace_on_.load() || notify_[static_cast<size_t>(t)]) {
    STRATA_RETURN_IF_ERROR(s.host_callback([this, t] { on_stream_task_done(t); }));
  }
  if (events_[static_cast<size_t>(t)]) {
    STRATA_RETURN_IF_ERROR(s.record(*events_[static_cast<size_t>(t)]));
  }
  return ok_status();
}

Status Executor::replay(const void* args) {
  if (!broken_.ok()) return broken_;
  const size_t n = plan_.num_tasks();
  std::unique_lock<std::mutex> lock(mu_);
  ++step_;
  args_ = args;
  std::copy(waits_.begin(), waits_.end(), remaining_.begin());
  std::fill(enqueued_.begin(), enqueued_.end(), uint8_t{0});
  std::fill(trace_.spans.begin(), trace_.spans.end(), Span{});
  stream_done_.clear();
  stream_done_read_ = 0;
  host_pending_ = num_host_tasks_;
  failed_ = false;
  error_ = ok_status();
  t0_ = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i) {
    if (remaining_[i] == 0 && !is_stream_lane(plan_.task(TaskId(i)).lane)) {
      push_ready_locked(TaskId(i));
    }
  }
  size_t cursor[kNumStreamLanes] = {};
  for (;;) {
    while (stream_done_read_ < stream_done_.size()) {
      const TaskId t = stream_done_[stream_done_read_++];
      lock.unlock();
      Status st = events_[static_cast<size_t>(t)]->synchronize();
      lock.lock();
      if (st.ok()) {
        complete_locked(t);
      } else {
        fail_locked(st.with_context("task '" + plan_.task(t).name + "'"));
      }
    }
    if (failed_) break;
    bool progressed = false, streams_done = true;
    for (int l = 0; l < kNumStreamLanes && !failed_; ++l) {
      const auto& tasks = plan_.lane_tasks(Lane(l));
      while (cursor[l] < tasks.size()) {
        const TaskId t = tasks[cursor[l]];
        if (remaining_[static_cast<size_t>(t)] > 0) break;
        bool ready = true;
        for (TaskId w : stream_waits_[static_cast<size_t>(t)]) {
          ready = ready && enqueued_[static_cast<size_t>(w)];
        }
        if (!ready) break;
        lock.unlock();
        Status st = enqueue_stream_task(t);
        lock.lock();
        if (!st.ok()) {
          fail_locked(std::move(st));
          break;
        }
        enqueued_[static_cast<size_t>(t)] = 1;
        ++cursor[l];
        progressed = true;
      }
      streams_done = streams_done && cursor[l] == tasks.size();
    }
    if (failed_) break;
    if (streams_done && host_pending_ == 0) break;
    if (progressed) continue;
    if (stream_done_read_ < stream_done_.size()) continue;
    dispatch_cv_.wait(lock);
  }
  // Drain: no new host task starts once failed_ is set; wait for those running.
  idle_cv_.wait(lock, [&] { return running_ == 0; });
  for (auto& hl : host_lanes_) {
    if (hl) hl->heap.clear();
  }
  Status result = failed_ ? error_ : ok_status();
  args_ = nullptr;  // every task of this replay has been run or enqueued
  lock.unlock();
  for (auto& s : streams_) {
    if (!s) continue;  // the link lane of a plan without link tasks
    Status st = s->synchronize();
    if (result.ok() && !st.ok()) result = std::move(st);
  }
  trace_.step = step_;
  trace_.step_ns = now_ns();
  if (!result.ok()) {
    broken_ = result;
    STRATA_LOG(kError, "scheduler: replay " << step_ << " failed: " << result.to_string());
  }
  return result;
}

}  // namespace strata::sched

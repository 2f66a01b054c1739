#include "run_report.h"

#include <cstdio>

#include "comm/gather_text.h"
#include "cpu/pinned_memory.h"
#include "ds_config.h"
#include "step_report.h"

namespace strata::train_gpt {

namespace {
double mib(uint64_t bytes) { return double(bytes) / double(1 << 20); }
unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }
}  // namespace

void print_banner(const Run& run) {
  if (!run.lead()) return;
  const Flags& f = run.f;
  const ModelSpec& spec = run.spec();
  const engine::Session& session = run.session;
  const engine::OffloadedOptimizer& opt = session.optimizer();
  std::printf("train_gpt: %s, %lld params, device %s, B=%lld T=%lld K=%lld\n",
              spec.describe().c_str(), static_cast<long long>(spec.num_params()),
              run.dev.name().c_str(), static_cast<long long>(f.batch),
              static_cast<long long>(run.seq()),
              static_cast<long long>(run.model.checkpoint_interval()));
  const long long global = static_cast<long long>(f.batch * f.grad_accum * run.ranks());
  std::printf(
      "batch: micro-batch %lld x accumulation %lld x %d rank%s = global batch %lld sequences "
      "(%lld tokens)\n",
      static_cast<long long>(f.batch), static_cast<long long>(f.grad_accum), run.ranks(),
      run.ranks() > 1 ? "s" : "", global, global * static_cast<long long>(run.seq()));
  if (!f.config.empty()) {
    std::printf("config: %s, in effect: %s\n", f.config.c_str(),
                effective_config(f).dump().c_str());
  }
  std::printf("data: %s%s\n", run.source.describe().c_str(),
              run.task() ? "" : (", order " + f.data_order).c_str());
  if (run.zero) {
    const auto ms = session.partitioning().model_state_bytes(f.zero_stage);
    std::printf(
        "zero: stage %d over %d ranks (%s), global batch %lld; per rank: %lld bytes of 16-bit "
        "params, %lld of grads, %lld of fp32 optimizer state (DESIGN.md §1)\n",
        f.zero_stage, run.ranks(), std::string(run.world.backend()).c_str(), global,
        static_cast<long long>(ms.ok() ? ms->params16 : 0),
        static_cast<long long>(ms.ok() ? ms->grads16 : 0),
        static_cast<long long>(ms.ok() ? ms->optimizer : 0));
    const bool on_device = session.config().zero.collectives == engine::Collectives::kDevice;
    const std::string over = on_device && run.dev.kind() == gpu::DeviceKind::kCuda
                                 ? "nccl"
                                 : std::string(run.world.backend());
    std::printf("collectives: %s (%s, --comm): %s\n", on_device ? "device" : "host", over.c_str(),
                on_device ? "only each rank's shard crosses between host and device"
                          : "on pinned host memory; whole blocks cross between host and device");
  }
  const engine::EngineConfig& config = session.config();
  if (config.optimizer.offload == engine::Home::kDevice) {
    std::printf(
        "optimizer: %llu state bytes on the device, updated there (the host copy only "
        "held the initial state)\n",
        ull(opt.host_state_bytes()));
  } else {
    std::printf("optimizer: %llu state bytes in host RAM, %llu on NVMe, %llu pinned staging%s",
                ull(opt.host_state_bytes()), ull(opt.nvme_state_bytes()), ull(opt.staging_bytes()),
                run.ranks() > 1 ? " (rank 0)" : "");
    // Shares are whole partitions: what the fraction became.
    const double fraction =
        config.optimizer.offload == engine::Home::kNvme ? config.optimizer.nvme_fraction : 0.0;
    std::printf(
        "%s\n",
        nvme_share_text(fraction, opt.nvme_state_bytes(), session.partition_numel()).c_str());
  }
  if (session.store()) std::printf("nvme: %s\n", session.store()->describe().c_str());
  if (const auto memory = session.step().memory_report(); run.zero && memory) {
    std::printf("memory (rank 0): %s\n", memory->describe().c_str());
  }
  if (const sched::Executor* executor = run.session.step().executor()) {
    const sched::Plan& plan = executor->plan();
    std::printf(
        "schedule: planned, %zu tasks, %llu bytes of pinned host buffers, %llu of device "
        "buffers (the plan's peaks)\n",
        plan.num_tasks(), ull(plan.peak_bytes(sched::Tier::kPinnedHost)),
        ull(plan.peak_bytes(sched::Tier::kDevice)));
  } else {
    std::printf("schedule: serial\n");
  }
}

void print_step_line(const Run& run, const StepLine& l) {
  const gpu::MemoryInfo mi = run.dev.memory_info();
  std::printf("step %5lld/%lld | loss %.4f | norm %.3f | lr %.2e | %.1f ms | %.0f tok/s",
              static_cast<long long>(l.step), static_cast<long long>(run.f.steps), l.result.loss,
              l.result.grad_norm, l.lr, l.ms, l.tokens_per_s);
  if (l.mfu > 0.0) std::printf(" | MFU %.1f%%", 100.0 * l.mfu);
  std::printf(" | mem device %.0f MiB, pinned %.0f MiB", mib(mi.used_bytes),
              mib(cpu::default_pinned_pool().held_bytes()));
  if (const nvme::SwapStore* store = run.session.store()) {
    std::printf(", nvme %.0f MiB", mib(store->used_bytes()));
  }
  if (run.spec().dtype() == DType::kF16) {
    std::printf(" | scale %g%s", l.result.loss_scale, l.result.skipped ? " | skipped" : "");
  }
  std::printf("\n");
}

void print_summary(const Run& run, int64_t steps_done, double seconds, const std::string& versus) {
  if (!run.lead()) return;
  const double tokens = static_cast<double>(steps_done * run.step_tokens());
  const gpu::MemoryInfo mi = run.dev.memory_info();
  const nvme::SwapStore* store = run.session.store();
  std::printf(
      "train_gpt: summary: %lld steps, %.0f tokens in %.1f s, %.0f tok/s; peak memory per rank: "
      "device %.1f MiB, pinned host %.1f MiB; NVMe in use %.1f MiB\n",
      static_cast<long long>(steps_done), tokens, seconds, tokens / std::max(seconds, 1e-9),
      mib(mi.peak_bytes), mib(cpu::default_pinned_pool().peak_bytes()),
      store ? mib(store->used_bytes()) : 0.0);
  if (!versus.empty()) std::printf("%s\n", versus.c_str());
}

bool traced_step(const Flags& f, int64_t step) {
  return !f.trace.empty() && step >= 2 && step < 2 + f.trace_steps;
}

Status record_trace(const Run& run, sched::TraceWriter& trace, int64_t step) {
  const sched::Executor* executor = run.session.step().executor();
  if (executor == nullptr || !traced_step(run.f, step)) return ok_status();
  trace.add_step(executor->plan(), executor->last_trace());
  if (run.lead()) {
    std::printf(
        "trace step %lld: %s\n", static_cast<long long>(step),
        sched::compute_metrics(executor->plan(), executor->last_trace()).describe().c_str());
    if (const auto traffic = run.session.step().traffic_report(); run.zero && traffic) {
      print_step_traffic(step, *traffic, run.world);
    }
  }
  if (step + 1 != 2 + run.f.trace_steps && step != run.f.steps) return ok_status();
  if (run.ranks() == 1) {
    STRATA_RETURN_IF_ERROR(trace.write(run.f.trace).with_context("--trace"));
    std::printf("trace: %zu spans written to %s (open in ui.perfetto.dev)\n", trace.num_events(),
                run.f.trace.c_str());
    return ok_status();
  }
  // Every rank's steps in one file, a process per rank (collective: every rank traces the same
  // steps). Each rank's times run from its own step starts, which the step's collectives align.
  STRATA_ASSIGN_OR_RETURN(
      std::vector<std::string> ranks,
      comm::gather_text(run.world,
                        trace.events_json(run.rank() + 1, "rank " + std::to_string(run.rank()))));
  float spans = static_cast<float>(trace.num_events());
  STRATA_RETURN_IF_ERROR(run.world.all_reduce(&spans, &spans, 1, DType::kF32));
  if (!run.lead()) return ok_status();
  STRATA_RETURN_IF_ERROR(
      sched::TraceWriter::write_joined(run.f.trace, ranks).with_context("--trace"));
  std::printf(
      "trace: %.0f spans of %d ranks written to %s, a process per rank (open in "
      "ui.perfetto.dev)\n",
      double(spans), run.ranks(), run.f.trace.c_str());
  return ok_status();
}

nlohmann::json step_record(const StepLine& l, double elapsed_s) {
  nlohmann::json j = {
      {"step", l.step}, {"loss", l.result.loss},         {"norm", l.result.grad_norm}, {"lr", l.lr},
      {"ms", l.ms},     {"tokens_per_s", l.tokens_per_s}};
  if (l.mfu > 0.0) j["mfu"] = l.mfu;
  j["elapsed_s"] = elapsed_s;
  return j;
}

}  // namespace strata::train_gpt

#include "step_report.h"

#include <algorithm>
#include <csignal>
#include <cstdio>

namespace strata::train_gpt {

void print_step_traffic(int64_t step, const engine::StepTraffic& traffic,
                        const comm::Communicator& world) {
  const engine::ZeroTraffic& t = traffic.last;
  std::printf(
      "comm step %lld: sent %llu bytes (grad reduce-scatter %llu, grad all-gather %llu, "
      "param all-gather %llu, statistics %llu; theory %llu)\n",
      static_cast<long long>(step), static_cast<unsigned long long>(t.total()),
      static_cast<unsigned long long>(t.grad_reduce_scatter),
      static_cast<unsigned long long>(t.grad_all_gather),
      static_cast<unsigned long long>(t.param_all_gather), static_cast<unsigned long long>(t.stats),
      static_cast<unsigned long long>(traffic.expected.total()));
  const engine::ZeroLaneBytes& lb = traffic.lanes;
  std::printf(
      "lanes step %lld: h2d (PCIe up) %llu bytes, d2h (down) %llu, nvme read %llu, nvme write "
      "%llu, device links %llu (--comm: collectives on the %s)\n",
      static_cast<long long>(step), static_cast<unsigned long long>(lb.h2d),
      static_cast<unsigned long long>(lb.d2h), static_cast<unsigned long long>(lb.nvme_read),
      static_cast<unsigned long long>(lb.nvme_write),
      static_cast<unsigned long long>(t.device_link),
      t.device_link > 0 || traffic.expected.device_link > 0 ? "device" : "host");
  for (size_t k = 0; k < comm::kNumCollectiveKinds; ++k) {
    const auto ck = static_cast<comm::CollectiveKind>(k);
    const comm::CollectiveStats cs = world.stats(ck);
    if (cs.calls == 0) continue;
    std::printf("  %-14s %4llu calls, sent %llu bytes, received %llu bytes\n",
                std::string(comm::collective_name(ck)).c_str(),
                static_cast<unsigned long long>(cs.calls),
                static_cast<unsigned long long>(cs.bytes_sent),
                static_cast<unsigned long long>(cs.bytes_received));
  }
}

std::string out_of_memory_advice(const engine::EngineConfig& config) {
  const int stage = config.zero.stage;
  const std::string fewer_blocks =
      stage < 2    ? "keep fewer blocks there with --zero-stage 2 or 3, "
      : stage == 2 ? "keep fewer blocks there with --zero-stage 3, "
      : config.param_home() == engine::Home::kDevice || config.zero.param_gpu_fraction > 0.0
          ? "keep fewer parameters there with --offload-param cpu and a lower "
            "--param-gpu-fraction, "
          : "";
  const std::string fewer_acts =
      config.zero.offload_activations == engine::Home::kDevice ? "--offload-activations cpu, " : "";
  return "the model does not fit the device (raise --gpu-memory-limit, " + fewer_blocks +
         "or fewer activations with --checkpoint-interval, " + fewer_acts + "or a smaller --batch)";
}

std::string nvme_share_text(double fraction, uint64_t nvme_state_bytes,
                            const std::vector<int64_t>& numel) {
  if (fraction <= 0.0) return "";
  uint64_t all = 0;
  for (int64_t n : numel) all += 12 * static_cast<uint64_t>(n);
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "; NVMe share %.3f (--optimizer-nvme-fraction %g, rounded to whole partitions of "
                "%zu)",
                double(nvme_state_bytes) / double(std::max<uint64_t>(all, 1)), fraction,
                numel.size());
  return buf;
}

void print_stop(const StopReport& r) {
  const std::string kept =
      r.saved_step > 0
          ? "the checkpoint of step " + std::to_string(r.saved_step) + " under " +
                r.checkpoint_dir + " (--resume " + r.checkpoint_dir + " continues from it)"
      : !r.resume_dir.empty() ? "the checkpoint resumed from, " + r.resume_dir
                              : "no checkpoint (--checkpoint-every saves them)";
  std::printf("train_gpt: %s %s %lld of %lld; %lld steps done this run; kept: %s%s%s\n",
              r.signal == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)",
              r.next_step > r.steps ? "after step" : "before step",
              static_cast<long long>(std::min(r.next_step, r.steps)),
              static_cast<long long>(r.steps), static_cast<long long>(r.steps_done), kept.c_str(),
              r.outputs ? "; --save-model/--export-safetensors not written" : "",
              r.swap_files ? "; swap files removed" : "");
}

}  // namespace strata::train_gpt

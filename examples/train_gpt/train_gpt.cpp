// train_gpt: trains a small GPT on the synthetic addition task (model/synthetic_task.h) with the
// optimizer state offloaded to host RAM and, for a chosen share, to NVMe. The forward and
// backward run on the Device (a CUDA GPU when there is one, else the CpuDevice); after each
// backward the gradients come to the host, the global norm and the non-finite check run there
// (cpu::grad_check), and the OffloadedOptimizer's pipelined CPU Adam updates the fp32 masters and
// writes the new 16-bit parameters, which go back to the device.
//
// This is the first, small form of the trainer: one rank, whole model resident on the device, no
// ZeRO partitioning or parameter offload yet. Every flag is checked before memory is touched.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cpu/cpu_adam.h"
#include "cpu/pinned_memory.h"
#include "engine/offloaded_optimizer.h"
#include "gpu/device.h"
#include "model/gpt.h"
#include "model/synthetic_task.h"
#include "nvme/swap_store.h"

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string device = "auto";
  std::string precision = "bf16";
  std::string offload_optimizer = "cpu";
  double nvme_fraction = 0.0;
  std::string nvme_path;
  int64_t steps = 1000, digits = 2, layers = 2, channels = 64, heads = 4, batch = 32;
  int64_t checkpoint_interval = 0, eval_every = 50;
  float lr = 3e-3f, weight_decay = 0.0f, grad_clip = 1.0f;
  double target_accuracy = 0.95;
  uint64_t seed = 1234;
};

int fail(const Status& st) {
  std::fprintf(stderr, "train_gpt: %s\n", st.to_string().c_str());
  return 1;
}

Status check_flags(const Flags& f) {
  if (f.precision != "bf16" && f.precision != "fp32") {
    return make_error(ErrorCode::kConfig, "--precision '", f.precision,
                      "' is not accepted (use bf16 or fp32; fp16 needs loss scaling, which this "
                      "trainer does not have yet)");
  }
  if (f.offload_optimizer != "cpu" && f.offload_optimizer != "nvme") {
    return make_error(ErrorCode::kConfig, "--offload-optimizer '", f.offload_optimizer,
                      "' is not accepted (use cpu or nvme)");
  }
  if (f.offload_optimizer == "nvme" && f.nvme_path.empty()) {
    return make_error(ErrorCode::kConfig,
                      "--offload-optimizer nvme needs --nvme-path DIR[,DIR...] (a directory on "
                      "the disk that holds the optimizer state)");
  }
  if (f.channels % f.heads != 0) {
    return make_error(ErrorCode::kConfig, "--heads ", f.heads, " does not divide --channels ",
                      f.channels, " (use a head count that divides the channel count)");
  }
  if (f.offload_optimizer == "cpu" && f.nvme_fraction > 0.0) {
    return make_error(ErrorCode::kConfig, "--optimizer-nvme-fraction ", f.nvme_fraction,
                      " needs --offload-optimizer nvme");
  }
  return ok_status();
}

// Sum of squares of every block's gradient; false in `finite` when any value is NaN/Inf.
double grad_sum_squares(const std::vector<std::vector<float>>& grads, bool& finite) {
  double sum = 0.0;
  finite = true;
  for (const auto& g : grads) {
    const cpu::GradStats s = cpu::grad_check(g.data(), DType::kF32, static_cast<int64_t>(g.size()));
    sum += s.sum_squares;
    finite = finite && !s.has_nonfinite;
  }
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"train_gpt: a small GPT on the synthetic addition task, optimizer offloaded"};
  Flags f;
  app.add_option("--device", f.device, "auto|cpu|cuda")->capture_default_str();
  app.add_option("--precision", f.precision, "bf16|fp32: parameters and activations")
      ->capture_default_str();
  app.add_option("--offload-optimizer", f.offload_optimizer,
                 "cpu|nvme: where the fp32 masters and Adam moments live")
      ->capture_default_str();
  app.add_option("--optimizer-nvme-fraction", f.nvme_fraction,
                 "share of the optimizer state on NVMe (with --offload-optimizer nvme)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--nvme-path", f.nvme_path, "DIR[,DIR...]: where the swap files go");
  app.add_option("--steps", f.steps, "most training steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--digits", f.digits, "digits per operand (1..9)")
      ->check(CLI::Range(1, 9))
      ->capture_default_str();
  app.add_option("--layers", f.layers, "L")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--channels", f.channels, "C")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--heads", f.heads, "NH (divides C)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--batch", f.batch, "B")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--checkpoint-interval", f.checkpoint_interval,
                 "K: keep every K-th layer's input, recompute the rest (0 = keep all)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--lr", f.lr, "Adam learning rate")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  app.add_option("--weight-decay", f.weight_decay, "AdamW decoupled weight decay")
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--grad-clip", f.grad_clip, "clip the global gradient norm to this (0 = off)")
      ->check(CLI::Range(0.0f, 1e6f))
      ->capture_default_str();
  app.add_option("--eval-every", f.eval_every, "steps between held-out evaluations")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  app.add_option("--target-accuracy", f.target_accuracy,
                 "stop when the held-out answer-token accuracy reaches this")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--seed", f.seed, "initialisation and data seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (Status st = check_flags(f); !st.ok()) return fail(st);

  auto task_r = model::AdditionTask::create(f.digits, 3 * f.digits + 4);
  if (!task_r.ok()) return fail(task_r.status());
  const model::AdditionTask task = task_r.value();
  model::GptConfig cfg;
  cfg.vocab = model::AdditionTask::kVocab;
  cfg.max_seq = task.seq();
  cfg.layers = f.layers;
  cfg.heads = f.heads;
  cfg.channels = f.channels;
  cfg.dtype = f.precision == "bf16" ? DType::kBF16 : DType::kF32;
  const model::RunShape shape{f.batch, task.seq(), f.checkpoint_interval};
  if (Status st = cfg.validate(); !st.ok()) return fail(st);
  if (Status st = shape.validate(cfg); !st.ok()) return fail(st);
  std::vector<std::string> nvme_dirs;
  if (!f.nvme_path.empty()) {
    auto dirs = nvme::parse_nvme_paths(f.nvme_path);
    if (!dirs.ok()) return fail(dirs.status());
    for (const auto& d : *dirs) {
      if (!std::filesystem::is_directory(d)) {
        return fail(make_error(ErrorCode::kConfig, "--nvme-path: '", d, "' is not a directory"));
      }
    }
    nvme_dirs = *dirs;
  }

  auto kind = gpu::parse_device_kind(f.device);
  if (!kind.ok()) return fail(kind.status().with_context("--device"));
  auto dev_r = gpu::create_device(*kind, {});
  if (!dev_r.ok()) return fail(dev_r.status());
  gpu::Device& dev = *dev_r.value();
  auto model_r = model::GptModel::create(dev, cfg, shape);
  if (!model_r.ok()) return fail(model_r.status());
  model::GptModel& gpt = *model_r.value();
  if (Status st = gpt.init_params(f.seed); !st.ok()) return fail(st);

  // One optimizer partition per parameter block (L layers + the shared block).
  const int64_t nb = gpt.num_blocks();
  std::vector<int64_t> numel(static_cast<size_t>(nb));
  int64_t max_numel = 0;
  for (int64_t b = 0; b < nb; ++b) {
    numel[b] = gpt.block_numel(b);
    max_numel = std::max(max_numel, numel[b]);
  }
  std::unique_ptr<nvme::SwapStore> store;
  if (f.offload_optimizer == "nvme") {
    nvme::SwapStoreOptions so;
    so.dirs = nvme_dirs;
    so.capacity_bytes = 12ull * static_cast<uint64_t>(cfg.num_params()) + (8ull << 20) * nb;
    auto s = nvme::SwapStore::open(so);
    if (!s.ok()) return fail(s.status());
    store = std::move(s).value();
  }
  cpu::AdamHyper hyper;
  hyper.lr = f.lr;
  hyper.weight_decay = f.weight_decay;
  engine::OffloadedOptimizerOptions oo;
  oo.nvme_fraction = f.offload_optimizer == "nvme" ? f.nvme_fraction : 0.0;
  oo.store = store.get();
  auto opt_r = engine::OffloadedOptimizer::create(numel, cpu::CpuAdam(hyper), oo);
  if (!opt_r.ok()) return fail(opt_r.status());
  engine::OffloadedOptimizer& opt = opt_r.value();

  // Host copies: fp32 gradients (downloaded), 16-bit updated params (uploaded as they are).
  cpu::PinnedPool& pool = cpu::default_pinned_pool();
  std::vector<std::vector<float>> grads(static_cast<size_t>(nb)), master(static_cast<size_t>(nb));
  std::vector<cpu::PinnedBuffer> out16;
  std::vector<engine::PartitionGrad> pg(static_cast<size_t>(nb));
  const bool bf16 = cfg.dtype == DType::kBF16;
  for (int64_t b = 0; b < nb; ++b) {
    grads[b].resize(static_cast<size_t>(numel[b]));
    master[b].resize(static_cast<size_t>(numel[b]));
    if (Status st = gpt.download_params(b, master[b].data()); !st.ok()) return fail(st);
    if (Status st = opt.load(static_cast<size_t>(b), master[b].data(), nullptr, nullptr); !st.ok())
      return fail(st);
    pg[b].grads = grads[b].data();
    pg[b].grad_dtype = DType::kF32;
    if (bf16) {
      auto buf = pool.allocate(2 * static_cast<size_t>(numel[b]));
      if (!buf.ok()) return fail(buf.status());
      pg[b].out16 = buf->data();
      pg[b].out_dtype = DType::kBF16;
      out16.push_back(std::move(buf).value());
    }
  }

  std::printf("train_gpt: %s, %lld params, device %s, B=%lld T=%lld K=%lld\n",
              cfg.describe().c_str(), static_cast<long long>(cfg.num_params()), dev.name().c_str(),
              static_cast<long long>(f.batch), static_cast<long long>(task.seq()),
              static_cast<long long>(gpt.checkpoint_interval()));
  std::printf("optimizer: %llu state bytes in host RAM, %llu on NVMe, %llu pinned staging\n",
              static_cast<unsigned long long>(opt.host_state_bytes()),
              static_cast<unsigned long long>(opt.nvme_state_bytes()),
              static_cast<unsigned long long>(opt.staging_bytes()));
  if (store) std::printf("nvme: %s\n", store->describe().c_str());

  const int64_t B = f.batch, T = task.seq();
  std::vector<int32_t> tokens(B * T), targets(B * T);
  std::vector<float> logits;
  auto evaluate = [&]() -> Result<model::AdditionTask::Accuracy> {
    model::AdditionTask::Accuracy acc;
    const int kBatches = 8;
    for (int i = 0; i < kBatches; ++i) {
      task.make_batch(B, f.seed, /*stream=*/1, i, tokens.data(), targets.data());
      STRATA_RETURN_IF_ERROR(gpt.forward(tokens.data(), nullptr).status());
      STRATA_RETURN_IF_ERROR(gpt.logits_to_host(logits));
      const auto a = model::AdditionTask::accuracy(logits, cfg.vocab, targets.data(), B, T);
      acc.token += a.token / kBatches;
      acc.exact_match += a.exact_match / kBatches;
    }
    return acc;
  };

  double acc_token = 0.0;
  for (int64_t step = 1; step <= f.steps; ++step) {
    const auto t0 = Clock::now();
    task.make_batch(B, f.seed, /*stream=*/0, step, tokens.data(), targets.data());
    if (Status st = gpt.zero_grad(); !st.ok()) return fail(st);
    auto loss = gpt.forward(tokens.data(), targets.data());
    if (!loss.ok()) return fail(loss.status());
    if (Status st = gpt.backward(); !st.ok()) return fail(st);
    for (int64_t b = 0; b < nb; ++b) {
      if (Status st = gpt.download_grads(b, grads[b].data()); !st.ok()) return fail(st);
    }
    bool finite = true;
    const double norm = std::sqrt(grad_sum_squares(grads, finite));
    if (!finite) {
      return fail(
          make_error(ErrorCode::kInternal, "step ", step, ": non-finite gradient (lower --lr)"));
    }
    const float clip =
        f.grad_clip > 0.0f && norm > f.grad_clip ? static_cast<float>(f.grad_clip / norm) : 1.0f;
    if (Status st = opt.step(pg, cpu::AdamStep{step, clip}); !st.ok()) return fail(st);
    for (int64_t b = 0; b < nb; ++b) {
      Status st;
      if (bf16) {
        st = gpt.stream().copy(gpt.param_block(b), out16[b].data(), 2 * numel[b],
                               gpu::CopyKind::kHostToDevice);
      } else {
        st = opt.read_state(static_cast<size_t>(b), master[b].data(), nullptr, nullptr);
        if (st.ok()) st = gpt.upload_params(b, master[b].data());
      }
      if (!st.ok()) return fail(st);
    }
    if (Status st = gpt.stream().synchronize(); !st.ok()) return fail(st);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const bool eval = step % f.eval_every == 0 || step == f.steps;
    if (step == 1 || step % 10 == 0 || eval) {
      std::printf("step %5lld | loss %.4f | norm %.3f | lr %.2e | %.1f ms | %.0f tok/s\n",
                  static_cast<long long>(step), *loss, norm, f.lr, ms, B * T / (ms / 1e3));
    }
    if (eval) {
      auto acc = evaluate();
      if (!acc.ok()) return fail(acc.status());
      acc_token = acc->token;
      std::printf("eval  %5lld | held-out answer-token accuracy %.3f | exact match %.3f\n",
                  static_cast<long long>(step), acc->token, acc->exact_match);
      if (acc->token >= f.target_accuracy) {
        std::printf("train_gpt: reached accuracy %.3f >= %.3f at step %lld\n", acc->token,
                    f.target_accuracy, static_cast<long long>(step));
        return 0;
      }
    }
  }
  std::printf("train_gpt: %lld steps done, held-out accuracy %.3f (target %.3f not reached)\n",
              static_cast<long long>(f.steps), acc_token, f.target_accuracy);
  return 0;
}

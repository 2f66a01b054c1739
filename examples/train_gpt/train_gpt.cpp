// train_gpt: trains a GPT on llm.c token files or the synthetic addition task (data.h) with the
// optimizer state offloaded to host RAM and, for a chosen share, to NVMe. The forward and
// backward run on the Device (a CUDA GPU when there is one, else the CpuDevice). The step is a
// scheduler plan by default (engine/session.h, engine/zero_step.h): each block's 16-bit gradient
// comes to the host as soon as backward has produced it, the CPU Adam of that block runs while
// backward goes on (after the global norm when clipping), NVMe state is read ahead and written
// behind, and the new parameters go back up as soon as they are ready. --schedule serial runs the
// reference step (engine/serial_step.h) with the same results, bit for bit. --trace writes a
// Perfetto timeline.
//
// Data parallelism (engine/zero_step.h): under `mpirun -np N` every rank trains on its share of a
// global batch of N x --batch sequences, with ZeRO stage --zero-stage (0-3) over the ranks;
// rank 0 prints. One rank at stage 0 runs the single-rank planned (or serial) step. Parameters
// are on the device, or at stage 3 sharded (--offload-param: on the device, in pinned host memory
// or on NVMe) and gathered per layer. Every flag is checked before memory is touched (flags.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "auto_plan.h"
#include "comm/comm.h"
#include "comm/mpi_comm.h"
#include "config_fields.h"
#include "core/dtype.h"
#include "core/file_identity.h"
#include "core/interrupt.h"
#include "cpu/cpu_adam.h"
#include "cpu/pinned_memory.h"
#include "data.h"
#include "ds_config.h"
#include "engine/checkpoint.h"
#include "engine/memory_budget.h"
#include "engine/offloaded_optimizer.h"
#include "engine/session.h"
#include "file_guard.h"
#include "flags.h"
#include "gpu/device.h"
#include "gpu/planning_device.h"
#include "lr_schedule.h"
#include "metrics_file.h"
#include "mfu.h"
#include "model/gpt.h"
#include "model/init.h"
#include "model/model_file.h"
#include "model/safetensors_export.h"
#include "model/synthetic_task.h"
#include "model_setup.h"
#include "nvme/swap_store.h"
#include "planning.h"
#include "progress.h"
#include "resume_check.h"
#include "scheduler/trace.h"
#include "step_report.h"

namespace {

using namespace strata;
using train_gpt::add_flags;
using train_gpt::check_flags;
using train_gpt::Flags;
using Clock = std::chrono::steady_clock;

// One line on stderr; with more than one rank, naming the rank that failed.
int fail(const Status& engine_status, int rank = -1) {
  const Status st = train_gpt::with_flag_names(engine_status);  // the engine names fields
  if (rank >= 0) {
    std::fprintf(stderr, "train_gpt: rank %d: %s\n", rank, st.to_string().c_str());
  } else {
    std::fprintf(stderr, "train_gpt: %s\n", st.to_string().c_str());
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Step lines reach a log file as they are printed, whatever ends the run.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // SIGINT/SIGTERM: at once (removing swap and partial files) until training starts, then at
  // the next step (core/interrupt.h).
  install_interrupt_handlers();
  CLI::App app{
      "train_gpt: trains a GPT (llm.c token files or a synthetic task) with ZeRO and offload"};
  Flags f;
  add_flags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // One line, as every other refusal (CLI11's own adds a second one).
    std::fprintf(stderr, "train_gpt: %s\n", e.what());
    return e.get_exit_code();
  }
  // --config: a DeepSpeed JSON config under the flags given beside it.
  train_gpt::ConfigDeferred deferred;
  if (!f.config.empty()) {
    auto given = [&app](const std::string& flag) { return app.count(flag) > 0; };
    if (Status st = train_gpt::apply_config(f.config, f, deferred, given); !st.ok()) {
      return fail(st);
    }
  }
  if (Status st = check_flags(f); !st.ok()) return fail(st);

  auto src_r = train_gpt::parse_data(f);
  if (!src_r.ok()) return fail(src_r.status());
  const train_gpt::DataSource& source = src_r.value();
  const model::AdditionTask* task = source.task ? &*source.task : nullptr;
  // The model's shape and initial values (--model, the shape flags, --init-from, --resume).
  auto setup_r = train_gpt::setup_model(f, app, source, deferred);
  if (!setup_r.ok()) return fail(setup_r.status());
  train_gpt::ModelSetup& setup = setup_r.value();
  const model::GptConfig& cfg = setup.cfg;
  model::RunShape shape = setup.shape;  // --auto may choose its checkpoint interval
  const int64_t T = shape.seq;
  const std::vector<std::vector<float>>& initial = setup.initial;
  const std::string& resume_dir = setup.resume_dir;
  std::vector<std::string> nvme_dirs;
  if (!f.nvme_path.empty()) {
    auto dirs = nvme::parse_nvme_paths(f.nvme_path);
    if (!dirs.ok()) return fail(dirs.status().with_context("--nvme-path"));
    for (const auto& d : *dirs) {
      if (!std::filesystem::is_directory(d)) {
        return fail(make_error(ErrorCode::kConfig, "--nvme-path: '", d, "' is not a directory"));
      }
    }
    nvme_dirs = *dirs;
  }
  // Inputs are never written, and every output can be written now (file_guard.h).
  if (Status st = train_gpt::check_files(f, source, resume_dir, nvme_dirs, cfg); !st.ok()) {
    return fail(st);
  }
  if (!f.checkpoint_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(f.checkpoint_dir, ec);
    if (ec) {
      return fail(make_error(ErrorCode::kIo, "--checkpoint-dir ", f.checkpoint_dir,
                             ": cannot create: ", ec.message()));
    }
  }
  // The communicator: MPI under mpirun (or with --comm-backend mpi), else one local rank.
  const bool use_mpi =
      f.comm_backend == "mpi" || (f.comm_backend == "auto" && comm::launched_by_mpirun());
  auto comm_r = comm::create_communicator(use_mpi ? comm::Backend::kMpi : comm::Backend::kLocal);
  if (!comm_r.ok()) return fail(comm_r.status());
  comm::Communicator& world = *comm_r.value();
  const int rank = world.rank(), ranks = world.size();
  const bool lead = rank == 0;  // rank 0 prints
  // Past this point every rank must stop together: a failing rank ends the whole job.
  auto die = [&](const Status& st) -> int {
    fail(st, ranks > 1 ? rank : -1);
    if (ranks > 1) {
      remove_cleanup_paths();  // MPI_Abort runs no destructors: this rank's swap files go now
      world.abort(st);
    }
    return 1;
  };
  // One run writes a checkpoint directory at a time: rank 0 holds a lock on it (flock on the
  // directory itself, so that no file is left; released by any exit).
  DirectoryLock checkpoint_lock;
  if (lead && !f.checkpoint_dir.empty() && f.checkpoint_every > 0 && !f.plan) {
    if (Status st = checkpoint_lock.lock(f.checkpoint_dir, "--checkpoint-dir"); !st.ok()) {
      return die(st);
    }
    for (const std::string& p : engine::remove_incomplete_checkpoints(f.checkpoint_dir)) {
      std::printf("checkpoint: removed %s, left by a save that did not complete\n", p.c_str());
    }
  }
  // The data: token files opened and their headers checked before anything large is allocated.
  auto data_r = train_gpt::TrainData::open(source, f, f.batch * ranks, T, cfg.vocab);
  if (!data_r.ok()) return die(data_r.status());
  train_gpt::TrainData& data = data_r.value();
  // The checkpoint to resume: its manifest against this run, this rank's files' checksums.
  // ZeroStep for more than one rank, a stage above 0, or offloaded activations; the stage it runs.
  const bool zero = ranks > 1 || f.zero_stage > 0 || f.offload_activations != "none";
  const int stage = zero ? f.zero_stage : 0;
  engine::CheckpointInfo resumed;
  if (!resume_dir.empty()) {
    engine::CheckpointInfo expect;
    expect.ranks = ranks;
    expect.stage = stage;
    expect.model = cfg.describe();
    auto v = engine::verify_checkpoint(resume_dir, rank, expect);
    if (!v.ok()) return die(v.status().with_context("--resume"));
    resumed = *v;
    const auto extra = nlohmann::json::parse(resumed.extra_json);
    if (extra.contains("data_epoch") && !setup.restart_data) {
      const model::LoaderPosition pos{extra["data_epoch"].get<int64_t>(),
                                      extra["data_batch"].get<int64_t>()};
      if (Status st = data.seek(pos); !st.ok()) return die(st.with_context("--resume"));
    }
  }
  // Ranks on one machine share its cores: each gets its share unless told otherwise.
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int share = std::max(1, cores / std::max(1, world.local_size()));
  const int host_threads =
      f.host_threads > 0 ? f.host_threads : (ranks > 1 ? share : std::max(1, cores));

  auto kind = gpu::parse_device_kind(f.device);
  if (!kind.ok()) return die(kind.status().with_context("--device"));
  gpu::DeviceOptions dev_opts;
  dev_opts.threads = f.device_threads > 0 ? f.device_threads : (ranks > 1 ? share : 0);
  dev_opts.memory_limit_bytes = f.gpu_memory_limit;
  // One GPU per rank (CudaDevice); ranks share GPUs round-robin when there are fewer.
  const int gpus = gpu::cuda_device_count();
  dev_opts.ordinal = gpus > 0 ? world.local_rank() % gpus : 0;
  // Ranks on one GPU divide its default pool (gpu/pool_size.h) instead of the first taking it.
  dev_opts.sharing = gpus > 0 ? (world.local_size() - dev_opts.ordinal + gpus - 1) / gpus : 1;
  auto dev_r = gpu::create_device(*kind, dev_opts);
  // --plan allocates nothing: a limit the real pool cannot reserve (a model far larger than
  // this machine) is planned against anyway, on a device with its default pool.
  size_t plan_limit = 0;
  if (f.plan && !dev_r.ok() && dev_r.status().code() == ErrorCode::kOutOfMemory) {
    plan_limit = f.gpu_memory_limit;
    dev_opts.memory_limit_bytes = 0;
    dev_r = gpu::create_device(*kind, dev_opts);
  }
  if (!dev_r.ok()) return die(dev_r.status());
  // --plan: the model and the engine lay themselves out on a device that only accounts, with an
  // optimizer that allocates nothing (engine/plan_report.h).
  std::unique_ptr<gpu::PlanningDevice> planning;
  if (f.plan) planning = std::make_unique<gpu::PlanningDevice>(*dev_r.value(), plan_limit);
  gpu::Device& dev = f.plan ? *planning : *dev_r.value();
  if (f.auto_plan) {  // the stage-3 settings: rank 0 chooses, every rank takes its choice
    if (Status st =
            train_gpt::run_auto(f, *dev_r.value(), cfg, shape, world, nvme_dirs, host_threads);
        !st.ok()) {
      return die(st);
    }
  }
  // The engine's settings (checked by check_flags, as every rank's).
  engine::EngineConfig config = train_gpt::engine_config(f).value();
  // The blocks are split over the ranks (engine/partition.h); the model holds on the device only
  // what the ZeRO stage keeps there (at stage 3: no sharded parameters; from 2: no gradients).
  auto parts = engine::Session::partition(config, cfg, ranks);
  if (!parts.ok()) return die(parts.status());
  auto model_r =
      model::GptModel::create(dev, cfg, shape, engine::Session::block_storage(config, *parts));
  if (!model_r.ok() && model_r.status().code() == ErrorCode::kOutOfMemory) {
    // Advice for this run: what it has not tried yet.
    return die(model_r.status().with_context(train_gpt::out_of_memory_advice(f, stage)));
  }
  if (!model_r.ok()) return die(model_r.status());
  model::GptModel& gpt = *model_r.value();
  if (Status st = f.plan ? ok_status() : gpt.init_params(f.seed); !st.ok()) return die(st);
  for (size_t b = 0; b < initial.size() && !f.plan; ++b) {  // --init-from's values, where held
    if (gpt.param_block(int64_t(b)) == nullptr) continue;
    if (Status st = gpt.upload_params(int64_t(b), initial[b].data()); !st.ok()) return die(st);
  }
  // DeepSpeed's keys that need the partitions (train_batch_size, sub_group_size).
  {
    const std::vector<int64_t> numel = engine::ZeroStep::optimizer_numel(gpt, *parts, stage);
    if (Status st = train_gpt::check_rank_keys(deferred, f, ranks,
                                               *std::max_element(numel.begin(), numel.end()));
        !st.ok()) {
      return die(st);
    }
  }
  // The engine: swap store, optimizer, masters, the checkpoint resumed, the step
  // (engine/session.h).
  engine::SessionInputs inputs;
  inputs.plan_only = f.plan;
  inputs.host_threads = host_threads;
  // The masters start from the initialisation (model/init.h), also of blocks not on the device.
  inputs.init = [&](int64_t b, float* host) {
    const std::vector<float> v =
        initial.empty() ? model::init_block(cfg, b, f.seed) : initial[size_t(b)];
    std::copy(v.begin(), v.end(), host);
    return ok_status();
  };
  // Resuming: the exact fp32 masters and moments (the 16-bit parameters are their rounding).
  if (!resume_dir.empty()) {
    inputs.restore = [&](engine::OffloadedOptimizer& o) -> Result<engine::StepScaling::State> {
      auto s = engine::load_checkpoint(resume_dir, rank, o);
      if (!s.ok()) return s.status().with_context("--resume");
      return s;
    };
  }
  auto session_r = engine::Session::create(config, dev, world, gpt, inputs);
  if (!session_r.ok()) return die(session_r.status());
  engine::Session& session = *session_r.value();
  engine::TrainStep& train_step = session.step();
  engine::OffloadedOptimizer& opt = session.optimizer();
  nvme::SwapStore* store = session.store();
  const std::vector<int64_t>& numel = session.partition_numel();
  if (!resume_dir.empty() && lead) {
    std::printf("resume: from %s (step %lld)\n", resume_dir.c_str(),
                static_cast<long long>(resumed.step));
  }
  // The predicted step time (calibrated rates, cached per machine); --plan prints the plan.
  const engine::ZeroStep* zero_step = session.zero();
  std::optional<sched::Prediction> predicted;
  if (zero_step != nullptr) {
    predicted = train_gpt::predict(*zero_step,
                                   train_gpt::calibration_request(f, *dev_r.value(), cfg, shape,
                                                                  world, nvme_dirs, host_threads),
                                   f, lead);
  }
  if (f.plan) {
    train_gpt::print_plan(*zero_step, opt, dev, train_gpt::plan_budgets(f, T, ranks, nvme_dirs),
                          predicted, rank, ranks);
    return 0;
  }
  if (lead && predicted) std::printf("plan: %s\n", predicted->describe().c_str());
  train_gpt::StepTimes step_times;
  sched::TraceWriter trace;
  const sched::Executor* executor = train_step.executor();

  if (lead) {
    std::printf("train_gpt: %s, %lld params, device %s, B=%lld T=%lld K=%lld\n",
                cfg.describe().c_str(), static_cast<long long>(cfg.num_params()),
                dev.name().c_str(), static_cast<long long>(f.batch), static_cast<long long>(T),
                static_cast<long long>(gpt.checkpoint_interval()));
    if (!f.config.empty()) {
      std::printf("config: %s, in effect: %s\n", f.config.c_str(),
                  train_gpt::effective_config(f).dump().c_str());
    }
    std::printf("data: %s%s\n", source.describe().c_str(),
                task ? "" : (", order " + f.data_order).c_str());
    if (zero) {
      const auto ms = parts->model_state_bytes(f.zero_stage);
      std::printf(
          "zero: stage %d over %d ranks (%s), global batch %lld; per rank: %lld bytes of 16-bit "
          "params, %lld of grads, %lld of fp32 optimizer state (DESIGN.md §1)\n",
          f.zero_stage, ranks, std::string(world.backend()).c_str(),
          static_cast<long long>(f.batch * ranks),
          static_cast<long long>(ms.ok() ? ms->params16 : 0),
          static_cast<long long>(ms.ok() ? ms->grads16 : 0),
          static_cast<long long>(ms.ok() ? ms->optimizer : 0));
    }
    if (f.offload_optimizer == "none") {
      std::printf(
          "optimizer: %llu state bytes on the device, updated there (the host copy only "
          "held the initial state)\n",
          static_cast<unsigned long long>(opt.host_state_bytes()));
    } else {
      std::printf("optimizer: %llu state bytes in host RAM, %llu on NVMe, %llu pinned staging%s",
                  static_cast<unsigned long long>(opt.host_state_bytes()),
                  static_cast<unsigned long long>(opt.nvme_state_bytes()),
                  static_cast<unsigned long long>(opt.staging_bytes()),
                  ranks > 1 ? " (rank 0)" : "");
      // Shares are whole partitions: what the fraction became.
      std::printf("%s\n", train_gpt::nvme_share_text(config.offload_optimizer == engine::Home::kNvme
                                                         ? config.optimizer_nvme_fraction
                                                         : 0.0,
                                                     opt.nvme_state_bytes(), numel)
                              .c_str());
    }
    if (store) std::printf("nvme: %s\n", store->describe().c_str());
    if (zero) std::printf("memory (rank 0): %s\n", zero_step->memory().describe().c_str());
    if (executor != nullptr) {
      const sched::Plan& plan = executor->plan();
      std::printf(
          "schedule: planned, %zu tasks, %llu bytes of pinned host buffers, %llu of device "
          "buffers (the plan's peaks)\n",
          plan.num_tasks(),
          static_cast<unsigned long long>(plan.peak_bytes(sched::Tier::kPinnedHost)),
          static_cast<unsigned long long>(plan.peak_bytes(sched::Tier::kDevice)));
    } else {
      std::printf("schedule: serial\n");
    }
  }

  const int64_t B = f.batch;
  const int64_t K = f.grad_accum;  // micro-batches per step
  std::vector<int32_t> tokens(K * B * T), targets(K * B * T);
  std::vector<int32_t> global_tokens(B * T * ranks), global_targets(B * T * ranks);
  std::vector<float> logits;
  // --save-model, --export-safetensors: the current parameters (a pending update applied;
  // every rank takes part in the gathers of a sharded model, in the writer's block order, and
  // rank 0 writes). False after an error (printed).
  // The current parameters, block by block, to `write` on rank 0 (every rank takes part in the
  // gathers of a sharded model, in the writer's block order: the shared block first or last).
  using Writer = std::function<Status(const model::BlockSource&)>;
  auto write_blocks = [&](bool shared_first, const Writer& write) -> Status {
    auto block = [&](int64_t b, float* host) { return train_step.gather_params(b, host); };
    if (lead) return write(block);
    std::vector<float> scratch;
    for (int64_t k = 0; k <= cfg.layers; ++k) {
      const int64_t b = shared_first ? (k == 0 ? cfg.layers : k - 1) : k;
      scratch.resize(static_cast<size_t>(gpt.block_numel(b)));
      STRATA_RETURN_IF_ERROR(block(b, scratch.data()));
    }
    return ok_status();
  };
  auto save_model = [&]() -> bool {
    set_interrupt_polled(false);  // a signal now exits at once, removing the partial files
    if (f.save_model.empty() && f.export_safetensors.empty()) return true;
    if (Status st = train_step.flush(); !st.ok()) return die(st) == 0;
    const DType stored = cfg.dtype == DType::kF32 ? DType::kF32 : DType::kBF16;
    auto save = [&](const std::string& path, const char* flag, bool shared_first,
                    const Writer& write) -> bool {
      if (path.empty()) return true;
      const Status st = write_blocks(shared_first, write);
      if (!st.ok()) return die(st.with_context(flag)) == 0;
      if (lead) std::printf("train_gpt: %s %s written\n", flag, path.c_str());
      return true;
    };
    return save(f.save_model, "--save-model", false,
                [&](const model::BlockSource& src) {
                  return model::write_model_file(f.save_model, cfg, stored, src);
                }) &&
           save(f.export_safetensors, "--export-safetensors", true,
                [&](const model::BlockSource& src) {
                  return model::write_safetensors(f.export_safetensors, cfg, stored, src);
                });
  };
  // Held-out loss: token data, the model's own (the mean cross-entropy computed on the device,
  // averaged over the batches, all of whose targets count); the synthetic task, the mean over
  // its answer tokens on the host from the logits (float64 sums), with the accuracy.
  double val_loss = 0.0;
  auto evaluate = [&]() -> Result<model::AdditionTask::Accuracy> {
    model::AdditionTask::Accuracy acc;
    const int64_t kBatches = data.val_batches();
    double loss_sum = 0.0;
    int64_t counted = 0;
    for (int64_t i = 0; i < kBatches; ++i) {
      STRATA_RETURN_IF_ERROR(data.val_batch(i, tokens.data(), targets.data()));
      const int32_t* scored = task ? nullptr : targets.data();
      // (the ZeRO step gathers the blocks a stage-3 model does not hold)
      STRATA_RETURN_IF_ERROR(train_step.forward_inference(tokens.data(), scored));
      if (!task) {
        loss_sum += static_cast<double>(gpt.mean_loss());
        ++counted;
        continue;
      }
      STRATA_RETURN_IF_ERROR(gpt.logits_to_host(logits));
      if (task) {
        const auto a = model::AdditionTask::accuracy(logits, cfg.vocab, targets.data(), B, T);
        acc.token += a.token / double(kBatches);
        acc.exact_match += a.exact_match / double(kBatches);
      }
      for (int64_t r = 0; r < B * T; ++r) {
        if (targets[size_t(r)] < 0) continue;
        const float* row = logits.data() + r * cfg.vocab;
        double top = row[0], sum = 0.0;
        for (int64_t v = 1; v < cfg.vocab; ++v) top = std::max(top, double(row[v]));
        for (int64_t v = 0; v < cfg.vocab; ++v) sum += std::exp(double(row[v]) - top);
        loss_sum += top + std::log(sum) - double(row[targets[size_t(r)]]);
        ++counted;
      }
    }
    val_loss = counted > 0 ? loss_sum / double(counted) : 0.0;
    return acc;
  };
  // --metrics: rank 0 writes one JSON object per line, flushed as it goes.
  std::ofstream metrics;
  if (lead && !f.metrics.empty()) {
    // A resumed run adds to the file of the run it continues, less the records of the steps it
    // is about to train again.
    if (!resume_dir.empty()) {
      auto dropped = train_gpt::trim_metrics(f.metrics, resumed.step);
      if (!dropped.ok()) return die(dropped.status());
      if (*dropped > 0) train_gpt::say_trimmed(f.metrics, resumed.step, *dropped);
    }
    metrics.open(f.metrics, resume_dir.empty() ? std::ios::trunc : std::ios::app);
    if (!metrics) {
      return die(make_error(ErrorCode::kIo, "--metrics ", f.metrics, ": cannot create the file"));
    }
  }
  auto metric = [&](const nlohmann::json& j) {
    if (metrics.is_open()) metrics << j.dump() << std::endl;
  };
  // The final summary (rank 0): steps, tokens, time, mean tokens/s, peak memory per tier.
  train_gpt::Progress progress(!use_mpi);
  const auto t_train = Clock::now();
  int64_t steps_done = 0;
  auto summary = [&]() {
    if (!lead) return;
    const double s = std::chrono::duration<double>(Clock::now() - t_train).count();
    const double tokens_done = static_cast<double>(steps_done * K * B * T * ranks);
    const gpu::MemoryInfo mi = dev.memory_info();
    progress.clear();
    std::printf(
        "train_gpt: summary: %lld steps, %.0f tokens in %.1f s, %.0f tok/s; peak memory per rank: "
        "device %.1f MiB, pinned host %.1f MiB; NVMe in use %.1f MiB\n",
        static_cast<long long>(steps_done), tokens_done, s, tokens_done / std::max(s, 1e-9),
        double(mi.peak_bytes) / double(1 << 20),
        double(cpu::default_pinned_pool().peak_bytes()) / double(1 << 20),
        store ? double(store->used_bytes()) / double(1 << 20) : 0.0);
    if (const std::string v = step_times.versus(predicted); !v.empty()) {
      std::printf("%s\n", v.c_str());
    }
  };
  // MFU: the step's model FLOPs (all ranks) over its time, against the ranks' peak rate.
  double peak = f.peak_flops;
  if (peak == 0.0 && lead) {
    auto rate = train_gpt::measure_matmul_rate(dev, cfg.dtype);
    peak = rate.ok() ? rate.value() : 0.0;  // without room for the buffers: no MFU column
    if (rate.ok()) {
      std::printf(
          "mfu: against the device's measured %s matmul rate, %.3g FLOP/s per rank "
          "(--peak-flops sets it)\n",
          std::string(dtype_name(cfg.dtype)).c_str(), peak);
    }
  }
  const double step_flops =
      train_gpt::flops_per_token(cfg, T) * static_cast<double>(K * B * T * ranks);
  const train_gpt::LrSchedule schedule = train_gpt::schedule_of(f);

  double acc_token = 0.0;
  // --checkpoint-every: the state after `step` (a pending update applied first), the 16-bit
  // parameters as an llm.c model file (fp32 for fp16 models, whose values bf16 would round). The
  // optimizer file is written in the background during the next step (engine/checkpoint.h) and
  // the save completed after it (finish_save).
  std::unique_ptr<engine::CheckpointSave> pending_save;
  int64_t saved_step = 0;     // the last checkpoint this run completed
  double save_start_s = 0.0;  // its time in the training thread so far
  auto checkpoint = [&](int64_t step) -> Status {
    STRATA_RETURN_IF_ERROR(train_step.flush());
    nlohmann::json extra = {{"seed", f.seed},
                            {"config", train_gpt::effective_config(f)},
                            {"run", train_gpt::run_record(f, T)}};
    if (const auto pos = data.position()) {
      extra["data_epoch"] = pos->epoch;
      extra["data_batch"] = pos->batch;
    }
    const engine::CheckpointInfo info{step, ranks, stage, cfg.describe(), extra.dump()};
    const engine::StepScaling::State scaling = train_step.scaling_state();
    const DType kept = cfg.dtype == DType::kBF16 ? DType::kBF16 : DType::kF32;
    STRATA_ASSIGN_OR_RETURN(
        pending_save, engine::start_checkpoint(
                          f.checkpoint_dir, f.keep_checkpoints, world, info, opt, scaling,
                          [&](const std::string& dir) {
                            return write_blocks(false, [&](const model::BlockSource& src) {
                              // synced by the checkpoint's writer
                              return model::write_model_file(dir + "/params.bin", cfg, kept, src,
                                                             /*sync=*/false);
                            });
                          }));
    return ok_status();
  };
  auto finish_save = [&]() -> Status {
    if (!pending_save) return ok_status();
    const auto t = Clock::now();
    Status st = pending_save->finish();
    const double finish_s = std::chrono::duration<double>(Clock::now() - t).count();
    if (st.ok() && lead) {
      progress.clear();
      std::printf(
          "checkpoint: step %lld saved under %s; exposed %.3f s (start %.3f, updates waiting "
          "%.3f, finish %.3f), written in the background in %.3f s\n",
          static_cast<long long>(pending_save->step()), f.checkpoint_dir.c_str(),
          save_start_s + pending_save->update_wait_seconds() + finish_s, save_start_s,
          pending_save->update_wait_seconds(), finish_s, pending_save->write_seconds());
    }
    if (st.ok()) saved_step = pending_save->step();
    pending_save.reset();
    return st.with_context("--checkpoint-dir");
  };
  // A signal to any rank stops every rank before the same step (one tiny all-reduce a step).
  auto interrupted = [&]() -> Result<int> {
    const float mine = static_cast<float>(interrupt_signal());
    float any = mine;
    if (ranks > 1) {
      STRATA_RETURN_IF_ERROR(world.all_reduce(&mine, &any, 1, DType::kF32, comm::ReduceOp::kMax));
    }
    return static_cast<int>(any);
  };
  // At a step boundary: whether a signal stops the run (every rank agrees), and its exit code
  // once the save in progress is complete and the stop is said.
  auto stop_code = [&](int64_t next) -> Result<int> {
    STRATA_ASSIGN_OR_RETURN(const int sig, interrupted());
    if (sig == 0) return 0;
    STRATA_RETURN_IF_ERROR(finish_save());
    if (lead) {
      progress.clear();
      train_gpt::print_stop(
          {sig, next, f.steps, next - 1 - resumed.step, saved_step, f.checkpoint_dir, resume_dir,
           !f.save_model.empty() || !f.export_safetensors.empty(), store != nullptr});
    }
    summary();
    return 128 + sig;
  };
  set_interrupt_polled(true);
  for (int64_t step = resumed.step + 1; step <= f.steps; ++step) {
    auto stop = stop_code(step);
    if (!stop.ok()) return die(stop.status());
    if (*stop != 0) return *stop;
    const auto t0 = Clock::now();
    // The K global batches of this step (one per micro-batch); of each, this rank trains on rows
    // [rank*B, (rank+1)*B).
    for (int64_t k = 0; k < K; ++k) {
      if (Status st =
              data.train_batch((step - 1) * K + k + 1, global_tokens.data(), global_targets.data());
          !st.ok()) {
        return die(st);
      }
      std::copy_n(global_tokens.begin() + rank * B * T, B * T, tokens.begin() + k * B * T);
      std::copy_n(global_targets.begin() + rank * B * T, B * T, targets.begin() + k * B * T);
    }
    const auto lr = static_cast<float>(train_gpt::lr_at(schedule, step));
    train_step.set_lr(lr);
    world.reset_stats();  // per-step bytes by collective kind (printed with --trace)
    // Only the steps --trace keeps pay for the trace (two stream callbacks a task).
    const bool traced = !f.trace.empty() && step >= 2 && step < 2 + f.trace_steps;
    train_step.set_trace(traced);
    const int micro = static_cast<int>(K);
    auto result = train_step.run(tokens.data(), targets.data(), step, micro);
    if (!result.ok()) return die(result.status());
    if (Status st = finish_save(); !st.ok()) return die(st);  // the save after the last step
    const float loss = result->loss;
    if (!std::isfinite(loss)) {  // the same mean on every rank: all stop here
      return die(make_error(
          ErrorCode::kInternal, "step ", step, ": the loss is ", loss,
          " (training diverged, or the model holds non-finite values); stopped",
          saved_step > 0 ? ", the checkpoint of step " + std::to_string(saved_step) + " is kept"
                         : std::string()));
    }
    const double norm = result->grad_norm;
    if (executor != nullptr && traced) {
      if (lead) progress.clear();
      trace.add_step(executor->plan(), executor->last_trace());
      if (lead) {
        std::printf(
            "trace step %lld: %s\n", static_cast<long long>(step),
            sched::compute_metrics(executor->plan(), executor->last_trace()).describe().c_str());
      }
      if (lead && zero) train_gpt::print_step_traffic(step, *zero_step, world);
      if (lead && (step + 1 == 2 + f.trace_steps || step == f.steps)) {
        if (Status st = trace.write(f.trace); !st.ok()) return die(st.with_context("--trace"));
        std::printf("trace: %zu spans written to %s (open in ui.perfetto.dev)\n",
                    trace.num_events(), f.trace.c_str());
      }
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    step_times.add(step, resumed.step + 1, ms);
    const bool eval = data.val_batches() > 0 && (step % f.val_every == 0 || step == f.steps);
    steps_done = step;
    const double tok_s = static_cast<double>(K * B * T * ranks) / (ms / 1e3);
    const double mfu = peak > 0.0 ? step_flops / (ms / 1e3) / (peak * ranks) : 0.0;
    nlohmann::json line = {{"step", step}, {"loss", loss}, {"norm", norm},
                           {"lr", lr},     {"ms", ms},     {"tokens_per_s", tok_s}};
    if (mfu > 0.0) line["mfu"] = mfu;
    // Wall-clock seconds since training started, at the end of this step's work (before the
    // line below): the step's time with everything the trainer does around the engine.
    line["elapsed_s"] = std::chrono::duration<double>(Clock::now() - t_train).count();
    metric(line);
    if (lead && (step == 1 || step % f.log_every == 0 || eval || step == f.steps)) {
      const gpu::MemoryInfo mi = dev.memory_info();
      progress.clear();
      std::printf("step %5lld/%lld | loss %.4f | norm %.3f | lr %.2e | %.1f ms | %.0f tok/s",
                  static_cast<long long>(step), static_cast<long long>(f.steps), loss, norm, lr, ms,
                  tok_s);
      if (mfu > 0.0) std::printf(" | MFU %.1f%%", 100.0 * mfu);
      std::printf(" | mem device %.0f MiB, pinned %.0f MiB", double(mi.used_bytes) / (1 << 20),
                  double(cpu::default_pinned_pool().held_bytes()) / (1 << 20));
      if (store) std::printf(", nvme %.0f MiB", double(store->used_bytes()) / (1 << 20));
      if (cfg.dtype == DType::kF16) {
        std::printf(" | scale %g%s", result->loss_scale, result->skipped ? " | skipped" : "");
      }
      std::printf("\n");
    } else if (lead) {
      progress.update(step, f.steps, std::chrono::duration<double>(Clock::now() - t_train).count());
    }
    if (f.checkpoint_every > 0 && step % f.checkpoint_every == 0) {
      const auto t = Clock::now();
      if (Status st = checkpoint(step); !st.ok()) return die(st.with_context("--checkpoint-dir"));
      save_start_s = std::chrono::duration<double>(Clock::now() - t).count();
      // The last step's save: nothing left to overlap it with.
      if (step == f.steps) {
        if (Status st = finish_save(); !st.ok()) return die(st);
      }
    }
    if (eval) {
      // The planned and ZeRO steps apply a step's update in the next one: apply it now (ZeRO
      // stage 3 also gathers the whole parameters into the model). Every rank evaluates the
      // same parameters on the same held-out batches, so every rank stops at the same step.
      if (Status st = train_step.flush(); !st.ok()) return die(st);
      auto acc = evaluate();
      if (!acc.ok()) return die(acc.status());
      acc_token = acc->token;
      if (lead && task) {
        std::printf(
            "eval  %5lld | held-out answer-token accuracy %.3f | exact match %.3f | val loss "
            "%.4f\n",
            static_cast<long long>(step), acc->token, acc->exact_match, val_loss);
      } else if (lead) {
        std::printf("val   %5lld | val loss %.4f (%lld batches)\n", static_cast<long long>(step),
                    val_loss, static_cast<long long>(data.val_batches()));
      }
      nlohmann::json v = {{"step", step}, {"val_loss", val_loss}};
      if (task) {
        v["val_accuracy"] = acc->token;
        v["val_exact_match"] = acc->exact_match;
      }
      metric(v);
      // Every rank stops on rank 0's figure, so that none goes on alone.
      float reached = task && acc->token >= f.target_accuracy ? 1.0f : 0.0f;
      if (ranks > 1) {
        if (Status st = world.broadcast(&reached, 1, DType::kF32, 0); !st.ok()) return die(st);
      }
      if (reached > 0.0f) {
        if (lead) {
          std::printf("train_gpt: reached accuracy %.3f >= %.3f at step %lld\n", acc->token,
                      f.target_accuracy, static_cast<long long>(step));
        }
        if (Status st = finish_save(); !st.ok()) return die(st);
        summary();
        return save_model() ? 0 : 1;
      }
    }
  }
  // A signal during the last step stops the run too (the outputs are not written).
  if (auto stop = stop_code(f.steps + 1); !stop.ok() || *stop != 0) {
    return stop.ok() ? *stop : die(stop.status());
  }
  if (lead && task) {
    std::printf("train_gpt: %lld steps done, held-out accuracy %.3f (target %.3f not reached)\n",
                static_cast<long long>(f.steps), acc_token, f.target_accuracy);
  } else if (lead) {
    std::printf("train_gpt: %lld steps done\n", static_cast<long long>(f.steps));
  }
  if (Status st = finish_save(); !st.ok()) return die(st);
  summary();
  return save_model() ? 0 : 1;
}

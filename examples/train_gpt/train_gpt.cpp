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
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config_fields.h"
#include "core/file_identity.h"
#include "core/interrupt.h"
#include "data.h"
#include "ds_config.h"
#include "engine/checkpoint.h"
#include "engine/session.h"
#include "evaluation.h"
#include "file_guard.h"
#include "flags.h"
#include "lr_schedule.h"
#include "metrics_file.h"
#include "mfu.h"
#include "model/gpt.h"
#include "model_setup.h"
#include "plan_choice.h"
#include "planning.h"
#include "progress.h"
#include "rank_agreement.h"
#include "resume_check.h"
#include "run.h"
#include "run_env.h"
#include "run_outputs.h"
#include "run_report.h"
#include "step_report.h"

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;

// One line on stderr (the engine's field references as flags); with more than one rank, naming
// the rank that failed.
int fail(const Status& engine_status, int rank = -1) {
  const Status st = train_gpt::with_flag_names(engine_status);
  if (rank >= 0) {
    std::fprintf(stderr, "train_gpt: rank %d: %s\n", rank, st.to_string().c_str());
  } else {
    std::fprintf(stderr, "train_gpt: %s\n", st.to_string().c_str());
  }
  return 1;
}

// The rank mpirun's launcher gave this process when it started several, else -1.
int launcher_rank() {
  for (const auto& [rank, size] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                   std::pair{"PMI_RANK", "PMI_SIZE"}}) {
    const char* r = std::getenv(rank);
    const char* n = std::getenv(size);
    if (r != nullptr && n != nullptr && std::atoi(n) > 1) return std::atoi(r);
  }
  return -1;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
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
  train_gpt::Flags f;
  train_gpt::add_flags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // One line, as every other refusal (CLI11's own adds a second one); under mpirun with the
    // rank its launcher gave (no communicator exists yet).
    if (const int r = launcher_rank(); r >= 0) {
      std::fprintf(stderr, "train_gpt: rank %d: %s\n", r, e.what());
    } else {
      std::fprintf(stderr, "train_gpt: %s\n", e.what());
    }
    return e.get_exit_code();
  }
  // The ranks first: a DeepSpeed config's batch arithmetic counts them.
  auto world_r = train_gpt::open_communicator(f);
  if (!world_r.ok()) return fail(world_r.status());
  comm::Communicator& world = *world_r.value();
  const int rank = world.rank(), ranks = world.size();
  const bool lead = rank == 0;  // rank 0 prints
  // Under mpirun every rank says its refusal with its rank (a node's own file may differ).
  auto fail_rank = [&](const Status& st) { return fail(st, ranks > 1 ? rank : -1); };
  // --config: a DeepSpeed JSON config under the flags given beside it.
  train_gpt::ConfigDeferred deferred;
  train_gpt::ConfigReport config_report;
  if (!f.config.empty()) {
    auto given = [&app](const std::string& flag) { return app.count(flag) > 0; };
    if (Status st = train_gpt::apply_config(f.config, f, deferred, given, ranks, config_report);
        !st.ok()) {
      return fail_rank(st);
    }
    if (lead) std::printf("%s", train_gpt::describe(config_report).c_str());
    train_gpt::name_config_keys(f.config_keys);
  }
  if (Status st = train_gpt::check_flags(f); !st.ok()) return fail_rank(st);
  auto source = train_gpt::parse_data(f);
  if (!source.ok()) return fail_rank(source.status());
  // The model's shape and initial values (--model, the shape flags, --init-from, --resume).
  auto setup_r = train_gpt::setup_model(f, app, *source, deferred);
  if (!setup_r.ok()) return fail_rank(setup_r.status());
  train_gpt::ModelSetup& setup = setup_r.value();
  const train_gpt::ModelSpec& spec = setup.spec;
  auto nvme_dirs = train_gpt::nvme_dirs_of(f);
  if (!nvme_dirs.ok()) return fail_rank(nvme_dirs.status());
  // Inputs are never written, and every output can be written now (file_guard.h).
  if (Status st = train_gpt::check_files(f, *source, setup.resume_dir, *nvme_dirs, spec);
      !st.ok()) {
    return fail_rank(st);
  }
  // Every rank runs the same settings and data (rank_agreement.h).
  if (Status st = train_gpt::check_ranks_agree(app, *source, config_report, world); !st.ok()) {
    return lead ? fail_rank(st) : 1;  // the same line on every rank: rank 0 says it
  }
  if (Status st = train_gpt::make_checkpoint_dir(f); !st.ok()) return fail_rank(st);
  // Past this point every rank must stop together: a failing rank ends the whole job.
  auto die = [&](const Status& st) -> int {
    fail(st, ranks > 1 ? rank : -1);
    if (ranks > 1) {
      remove_cleanup_paths();  // MPI_Abort runs no destructors: this rank's swap files go now
      world.abort(st);
    }
    return 1;
  };
  // The rank's GPU, cores and memory node, bound before any thread pool or large buffer exists.
  auto placement = train_gpt::place_this_rank(f, world, *nvme_dirs);
  if (!placement.ok()) return die(placement.status());
  // One run writes a checkpoint directory at a time: rank 0 holds a lock on it (flock on the
  // directory itself, so that no file is left; released by any exit).
  DirectoryLock checkpoint_lock;
  if (Status st = train_gpt::lock_checkpoint_dir(f, lead, checkpoint_lock); !st.ok()) {
    return die(st);
  }
  // The same verdict on every rank: rank 0 says it, every rank stops.
  if (Status st = train_gpt::check_checkpoint_dir_shared(f, world); !st.ok()) {
    return lead ? fail_rank(st) : 1;
  }
  // The data: token files opened and their headers checked before anything large is allocated.
  auto data =
      train_gpt::TrainData::open(*source, f, f.batch * ranks, setup.shape.seq, spec.vocab());
  if (!data.ok()) return die(data.status());
  // The ZeRO step's reports for more than one rank, a stage above 0 or offloaded activations.
  const bool zero = ranks > 1 || f.zero_stage > 0 || f.offload_activations != "none";
  auto resumed = train_gpt::open_resume(setup, rank, ranks, zero ? f.zero_stage : 0, *data);
  if (!resumed.ok()) return die(resumed.status());
  if (f.steps > 0 && resumed->step > f.steps) {  // --steps 0: only the outputs are written
    return die(make_error(ErrorCode::kConfig, "--steps ", f.steps,
                          " is before the step of the checkpoint --resume reads (", resumed->step,
                          "): nothing to train (give --steps ", resumed->step,
                          " or more, or 0 to write the outputs only)"));
  }
  const int host_threads = train_gpt::host_threads_of(f, *placement);
  auto devices = train_gpt::open_devices(f, *placement);
  if (!devices.ok()) return die(devices.status());
  gpu::Device& dev = devices->dev();
  // The engine's settings (accepted by check_flags), with what they leave to the planner
  // resolved: --auto's stage-3 settings, --microbatch-order auto (rank 0 chooses, every rank takes
  // its choice); then the model holding on the device only what the ZeRO stage keeps there, and
  // the engine's session (engine/session.h).
  engine::EngineConfig config = train_gpt::engine_config(f).value();
  auto device_comm = train_gpt::open_device_comm(f, config, dev, world, *placement);
  if (!device_comm.ok()) return die(device_comm.status());
  if (Status st = train_gpt::resolve_auto(f, config, *devices->real, spec, setup.shape, world,
                                          *nvme_dirs, host_threads, device_comm->get());
      !st.ok()) {
    return die(st);
  }
  auto layout = engine::Session::prepare(config, spec.block_numels(), ranks);
  if (!layout.ok()) return die(layout.status());
  auto model = train_gpt::build_model(f, setup, dev, layout->storage, config);
  if (!model.ok()) return die(model.status());
  const std::vector<int64_t>& numel = layout->optimizer_numel;
  if (Status st = train_gpt::check_rank_keys(deferred, f, ranks,
                                             *std::max_element(numel.begin(), numel.end()));
      !st.ok()) {
    return die(st);
  }
  engine::SessionInputs inputs = train_gpt::session_inputs(f, setup, rank, host_threads);
  inputs.device_comm = device_comm->get();
  auto session = engine::Session::create(config, dev, world, *model.value(), inputs);
  if (!session.ok()) return die(session.status());
  engine::TrainStep& train_step = session.value()->step();
  if (!setup.resume_dir.empty() && lead) {
    std::printf("resume: from %s (step %lld)\n", setup.resume_dir.c_str(),
                static_cast<long long>(resumed->step));
  }
  // The predicted step time (calibrated rates, cached per machine); --plan prints the plan.
  std::optional<sched::Prediction> predicted;
  if (config.planned()) {
    predicted = train_gpt::predict(**session, *devices->real, f.calibrate, lead);
  }
  if (f.plan) {
    train_gpt::print_plan(**session, dev,
                          train_gpt::plan_budgets(f, setup.shape.seq, ranks, *nvme_dirs), predicted,
                          rank, ranks);
    return 0;
  }
  if (lead && predicted) std::printf("plan: %s\n", predicted->describe().c_str());
  const train_gpt::Run run{f,     *source, setup, world, dev, *model.value(), *session.value(),
                           *data, zero};
  train_gpt::print_banner(run);

  const int64_t K = run.micro();
  std::vector<int32_t> tokens(size_t(K * run.batch() * run.seq())), targets(tokens.size());
  train_gpt::MetricsFile metrics;  // --metrics: rank 0's JSON lines
  if (Status st = metrics.open(lead ? f.metrics : "", !setup.resume_dir.empty(), resumed->step);
      !st.ok()) {
    return die(st);
  }
  train_gpt::Progress progress(world.backend() == "local");  // not under mpirun
  train_gpt::Checkpoints checkpoints(run, progress);
  train_gpt::StepTimes step_times;
  sched::TraceWriter trace;
  const auto t_train = Clock::now();
  // MFU: the step's model FLOPs (all ranks) over its time, against the ranks' peak rate.
  const double peak = train_gpt::peak_flops_of(f.peak_flops, dev, spec.dtype(), lead);
  const double step_flops = train_gpt::flops_per_token(spec, run.seq()) * double(run.step_tokens());
  const train_gpt::LrSchedule schedule = train_gpt::schedule_of(f);
  int64_t steps_done = 0, steps_applied = 0;
  double accuracy = 0.0;
  auto summary = [&] {
    if (lead) progress.clear();
    train_gpt::print_summary(run, steps_done, seconds_since(t_train), step_times.versus(predicted));
  };
  auto finish = [&]() -> int {  // the save in progress completed, the summary, the outputs
    if (Status st = checkpoints.finish(); !st.ok()) return die(st);
    summary();
    // A run whose every step was skipped (fp16 overflow at a fixed loss scale) trained nothing:
    // no output is written and the exit says so.
    if (steps_done > resumed->step && steps_applied == 0) {
      return die(make_error(ErrorCode::kConfig, "every step of this run (",
                            steps_done - resumed->step,
                            ") overflowed fp16 and was skipped: nothing was trained and no "
                            "output is written (lower --loss-scale, or give --loss-scale "
                            "dynamic)"));
    }
    const Status saved = train_gpt::save_outputs(run);
    return saved.ok() ? 0 : die(saved);
  };
  // At a step boundary: a signal to any rank stops every rank before the same step (one tiny
  // all-reduce a step), once the save in progress is complete and the stop is said.
  auto stop_code = [&](int64_t next) -> Result<int> {
    const auto mine = static_cast<float>(interrupt_signal());
    float any = mine;
    if (ranks > 1) {
      STRATA_RETURN_IF_ERROR(world.all_reduce(&mine, &any, 1, DType::kF32, comm::ReduceOp::kMax));
    }
    const int sig = static_cast<int>(any);
    if (sig == 0) return 0;
    STRATA_RETURN_IF_ERROR(checkpoints.finish());
    if (lead) {
      progress.clear();
      train_gpt::print_stop({sig, next, f.steps, next - 1 - resumed->step, checkpoints.saved_step(),
                             f.checkpoint_dir, setup.resume_dir,
                             !f.save_model.empty() || !f.export_safetensors.empty(),
                             session.value()->store() != nullptr});
    }
    summary();
    return 128 + sig;
  };
  set_interrupt_polled(true);
  for (int64_t step = resumed->step + 1; step <= f.steps; ++step) {
    auto stop = stop_code(step);
    if (!stop.ok() || *stop != 0) return stop.ok() ? *stop : die(stop.status());
    const auto t0 = Clock::now();
    // The K global batches of this step; of each, this rank's rows.
    if (Status st = data->rank_batches(step, K, rank, tokens.data(), targets.data()); !st.ok()) {
      return die(st);
    }
    const auto lr = static_cast<float>(train_gpt::lr_at(schedule, step));
    train_step.set_lr(lr);
    world.reset_stats();  // per-step bytes by collective kind (printed with --trace)
    train_step.set_trace(train_gpt::traced_step(f, step));
    auto result = train_step.run(tokens.data(), targets.data(), step, static_cast<int>(K));
    if (!result.ok()) return die(result.status());
    if (Status st = checkpoints.finish(); !st.ok()) return die(st);  // the last step's save
    if (!std::isfinite(result->loss)) {  // the same mean on every rank: all stop here
      const int64_t kept = checkpoints.saved_step();
      return die(make_error(ErrorCode::kInternal, "step ", step, ": the loss is ", result->loss,
                            " (training diverged, or the model holds non-finite values); stopped",
                            kept > 0
                                ? ", the checkpoint of step " + std::to_string(kept) + " is kept"
                                : std::string()));
    }
    if (lead && train_gpt::traced_step(f, step)) progress.clear();
    if (Status st = train_gpt::record_trace(run, trace, step); !st.ok()) return die(st);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    step_times.add(step, resumed->step + 1, ms);
    const bool eval = data->val_batches() > 0 && (step % f.val_every == 0 || step == f.steps);
    steps_done = step;
    if (!result->skipped) ++steps_applied;
    const train_gpt::StepLine line{step,
                                   *result,
                                   lr,
                                   ms,
                                   double(run.step_tokens()) / (ms / 1e3),
                                   peak > 0.0 ? step_flops / (ms / 1e3) / (peak * ranks) : 0.0};
    metrics.write(train_gpt::step_record(line, seconds_since(t_train)));
    if (lead && (step == 1 || step % f.log_every == 0 || eval || step == f.steps)) {
      progress.clear();
      train_gpt::print_step_line(run, line);
    } else if (lead) {
      progress.update(step, f.steps, seconds_since(t_train));
    }
    if (f.checkpoint_every > 0 && step % f.checkpoint_every == 0) {
      if (Status st = checkpoints.start(step); !st.ok()) {
        return die(st.with_context("--checkpoint-dir"));
      }
      // The last step's save: nothing left to overlap it with.
      if (step == f.steps) {
        if (Status st = checkpoints.finish(); !st.ok()) return die(st);
      }
    }
    if (eval) {
      auto reached = train_gpt::evaluate_at(run, step, metrics, accuracy);
      if (!reached.ok()) return die(reached.status());
      if (*reached) return finish();
    }
  }
  // A signal during the last step stops the run too (the outputs are not written).
  if (auto stop = stop_code(f.steps + 1); !stop.ok() || *stop != 0) {
    return stop.ok() ? *stop : die(stop.status());
  }
  if (lead && run.task()) {
    std::printf("train_gpt: %lld steps done, held-out accuracy %.3f (target %.3f not reached)\n",
                static_cast<long long>(f.steps), accuracy, f.target_accuracy);
  } else if (lead) {
    std::printf("train_gpt: %lld steps done\n", static_cast<long long>(f.steps));
  }
  return finish();
}

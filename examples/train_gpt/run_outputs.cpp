#include "run_outputs.h"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/interrupt.h"
#include "ds_config.h"
#include "model/llama_layout.h"
#include "model/safetensors_export.h"
#include "resume_check.h"

namespace strata::train_gpt {

namespace {
using Clock = std::chrono::steady_clock;
// Hugging Face's save_pretrained shards at 5 GB by default.
constexpr int64_t kMaxShardBytes = int64_t{5} * 1000 * 1000 * 1000;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

Status write_blocks(const Run& run, bool shared_first, const BlockWriter& write) {
  auto block = [&run](int64_t b, float* host) { return run.session.step().gather_params(b, host); };
  if (run.lead()) return write(block);
  std::vector<float> scratch;
  const int64_t layers = run.spec().layers();
  for (int64_t k = 0; k <= layers; ++k) {
    const int64_t b = shared_first ? (k == 0 ? layers : k - 1) : k;
    scratch.resize(static_cast<size_t>(run.model.block_numel(b)));
    STRATA_RETURN_IF_ERROR(block(b, scratch.data()));
  }
  return ok_status();
}

Status save_outputs(const Run& run) {
  set_interrupt_polled(false);  // a signal now exits at once, removing the partial files
  const Flags& f = run.f;
  if (f.save_model.empty() && f.export_safetensors.empty()) return ok_status();
  STRATA_RETURN_IF_ERROR(run.session.step().flush());
  const ModelSpec& spec = run.spec();
  const DType stored = spec.dtype() == DType::kF32 ? DType::kF32 : DType::kBF16;
  auto save = [&](const std::string& path, const char* flag, bool shared_first,
                  const BlockWriter& write) -> Status {
    if (path.empty()) return ok_status();
    STRATA_RETURN_IF_ERROR(write_blocks(run, shared_first, write).with_context(flag));
    if (run.lead()) std::printf("train_gpt: %s %s written\n", flag, path.c_str());
    return ok_status();
  };
  if (spec.llama) {  // Hugging Face checkpoint directories, in state_dict order
    auto llama_dir = [&](const std::string& dir) {
      return [&, dir](const model::BlockSource& src) {
        return model::write_llama_checkpoint(dir, spec.lcfg, stored, kMaxShardBytes, src).status();
      };
    };
    STRATA_RETURN_IF_ERROR(save(f.save_model, "--save-model", true, llama_dir(f.save_model)));
    return save(f.export_safetensors, "--export-safetensors", true,
                llama_dir(f.export_safetensors));
  }
  const model::GptConfig& cfg = spec.gpt;
  STRATA_RETURN_IF_ERROR(
      save(f.save_model, "--save-model", false, [&](const model::BlockSource& src) {
        return model::write_model_file(f.save_model, cfg, stored, src);
      }));
  return save(f.export_safetensors, "--export-safetensors", true,
              [&](const model::BlockSource& src) {
                return model::write_safetensors(f.export_safetensors, cfg, stored, src);
              });
}

Status Checkpoints::start(int64_t step) {
  const auto t = Clock::now();
  const Run& run = run_;
  STRATA_RETURN_IF_ERROR(run.session.step().flush());
  nlohmann::json extra = {{"seed", run.f.seed},
                          {"config", effective_config(run.f)},
                          {"run", run_record(run.f, run.seq())}};
  if (const auto pos = run.data.position()) {
    extra["data_epoch"] = pos->epoch;
    extra["data_batch"] = pos->batch;
  }
  const ModelSpec& spec = run.spec();
  const engine::CheckpointInfo info{step, run.ranks(), run.stage(), spec.describe(), extra.dump()};
  const DType kept = spec.dtype() == DType::kBF16 ? DType::kBF16 : DType::kF32;
  STRATA_ASSIGN_OR_RETURN(
      pending_,
      engine::start_checkpoint(
          run.f.checkpoint_dir, run.f.keep_checkpoints, run.world, info, run.session.optimizer(),
          run.session.step().scaling_state(), [&run, &spec, kept](const std::string& dir) {
            // A GPT's as an llm.c model file, a Llama's as one safetensors file with its config;
            // synced by the checkpoint's writer.
            return write_blocks(run, spec.llama, [&](const model::BlockSource& src) {
              return spec.llama ? model::write_llama_params_file(dir + "/params.safetensors",
                                                                 spec.lcfg, kept, src,
                                                                 /*sync=*/false)
                                : model::write_model_file(dir + "/params.bin", spec.gpt, kept, src,
                                                          /*sync=*/false);
            });
          }));
  start_s_ = seconds_since(t);
  return ok_status();
}

Status Checkpoints::finish() {
  if (!pending_) return ok_status();
  const auto t = Clock::now();
  Status st = pending_->finish();
  const double finish_s = seconds_since(t);
  if (st.ok() && run_.lead()) {
    progress_.clear();
    std::printf(
        "checkpoint: step %lld saved under %s; exposed %.3f s (start %.3f, updates waiting "
        "%.3f, finish %.3f), written in the background in %.3f s\n",
        static_cast<long long>(pending_->step()), run_.f.checkpoint_dir.c_str(),
        start_s_ + pending_->update_wait_seconds() + finish_s, start_s_,
        pending_->update_wait_seconds(), finish_s, pending_->write_seconds());
  }
  if (st.ok()) saved_step_ = pending_->step();
  pending_.reset();
  return st.with_context("--checkpoint-dir");
}

}  // namespace strata::train_gpt

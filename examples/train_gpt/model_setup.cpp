#include "model_setup.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "engine/checkpoint.h"
#include "model/gpt.h"
#include "model/init.h"
#include "model/llama_layout.h"
#include "model/model_file.h"
#include "resume_check.h"
#include "step_report.h"

namespace strata::train_gpt {

namespace {

DType precision_dtype(const Flags& f) {
  return f.precision == "bf16" ? DType::kBF16 : f.precision == "fp16" ? DType::kF16 : DType::kF32;
}

// The checkpoint interval (default: keep all without activation offload; about sqrt(L) with it,
// at least 1 and below L so that something moves) and the refusals that need L.
Result<int64_t> checkpoint_interval_of(const Flags& f, int64_t layers) {
  const int64_t interval = f.checkpoint_interval >= 0 ? f.checkpoint_interval
                           : f.offload_activations == "none"
                               ? 0
                               : std::clamp<int64_t>(std::llround(std::sqrt(double(layers))), 1,
                                                     std::max<int64_t>(1, layers - 1));
  if (f.offload_activations != "none" && layers < 2) {
    return (make_error(ErrorCode::kConfig, "--offload-activations ", f.offload_activations,
                       " needs --layers 2 or more (one layer is one segment, kept for its "
                       "backward)"));
  }
  // The model's layers are known now (a preset, --init-from or --resume may set them).
  if (f.offload_activations != "none" && f.checkpoint_interval >= 0 &&
      (f.checkpoint_interval == 0 || f.checkpoint_interval >= layers)) {
    return make_error(ErrorCode::kConfig, "--offload-activations ", f.offload_activations,
                      " moves nothing with --checkpoint-interval ", f.checkpoint_interval,
                      " and --layers ", layers,
                      " (one segment, whose activations stay for its backward): use an interval "
                      "from 1 to ",
                      layers - 1, ", or leave it out");
  }
  return interval;
}

// --init-from DIR (a Hugging Face checkpoint) gives the shape: a shape flag beside it would not
// be read, and is refused.
Status shape_flags_unread(const Flags& f, const CLI::App& app) {
  const struct {
    const char* flag;
    bool given;
  } shape[] = {{"--layers", app.count("--layers") > 0},
               {"--heads", app.count("--heads") > 0},
               {"--channels", app.count("--channels") > 0},
               {"--kv-heads", f.kv_heads != 0},
               {"--intermediate", f.intermediate != 0}};
  for (const auto& s : shape) {
    if (!s.given) continue;
    return make_error(ErrorCode::kConfig, s.flag, " is a shape flag, and --init-from ", f.init_from,
                      " gives the shape (leave ", s.flag, " out)");
  }
  return ok_status();
}

// A Llama: a preset (shape flags beside it win) or a Hugging Face directory (its config.json the
// shape, its weights the initial values).
Result<ModelSetup> setup_llama(Flags& f, const CLI::App& app, const DataSource& source,
                               const ConfigDeferred& deferred, ModelSetup m, bool hf_dir) {
  const model::AdditionTask* task = source.task ? &*source.task : nullptr;
  model::LlamaConfig& c = m.spec.lcfg;
  m.spec.llama = true;
  // --resume: the checkpoint's parameters file holds the shape (its metadata) and the values.
  const std::string params = m.resume_dir.empty() ? "" : m.resume_dir + "/params.safetensors";
  if (!params.empty()) {
    // Its checksum first: the shape its metadata holds is trusted only in the file the
    // checkpoint's manifest records.
    STRATA_RETURN_IF_ERROR(engine::verify_checkpoint_file(m.resume_dir, "params.safetensors")
                               .with_context("--resume"));
    auto read = model::read_llama_params_config(params);
    if (!read.ok()) return read.status().with_context("--resume");
    c = *read;
  } else if (hf_dir) {
    if (!f.model_preset.empty()) {
      return make_error(ErrorCode::kConfig, "--model ", f.model_preset, " and --init-from ",
                        f.init_from, " both give the shape (give one)");
    }
    STRATA_RETURN_IF_ERROR(shape_flags_unread(f, app));
    auto read = model::read_hf_llama_config(f.init_from);
    if (!read.ok()) return read.status().with_context("--init-from");
    c = *read;
  } else {
    if (app.count("--layers") > 0) c.layers = f.layers;
    if (app.count("--heads") > 0) c.heads = f.heads;
    if (app.count("--channels") > 0) c.channels = f.channels;
    if (f.kv_heads != 0) c.kv_heads = f.kv_heads;
    if (app.count("--heads") > 0 && f.kv_heads == 0 && c.heads % c.kv_heads != 0) {
      c.kv_heads = c.heads;  // a preset's NKV that does not divide the NH given: multi-head
    }
    if (f.intermediate != 0) c.intermediate = f.intermediate;
    if (f.vocab != 0) c.vocab = f.vocab;
    if (f.seq_len != 0) c.max_seq = f.seq_len;
  }
  c.dtype = precision_dtype(f);
  if (task && c.vocab < model::AdditionTask::kVocab) {
    // Named where the value came from: the checkpoint's config, or the flag (or preset).
    const std::string named = !params.empty() ? "--resume " + m.resume_dir + ": vocab_size"
                              : hf_dir        ? "--init-from " + f.init_from + ": vocab_size"
                                              : std::string("--vocab");
    return make_error(ErrorCode::kConfig, named, " ", c.vocab,
                      " is smaller than the data's vocabulary (", model::AdditionTask::kVocab,
                      " tokens for synthetic:addition)");
  }
  if (Status st = c.validate(); !st.ok()) {
    return st.with_context(hf_dir ? "--init-from" : "--model " + f.model_preset);
  }
  if (hf_dir || !params.empty()) {  // every tensor checked now, each block read when asked for
    const std::string flag = params.empty() ? "--init-from" : "--resume";
    auto ck = params.empty() ? model::SafetensorsCheckpoint::open(f.init_from)
                             : model::SafetensorsCheckpoint::open_file(params);
    if (!ck.ok()) return ck.status().with_context(flag);
    if (Status st = model::check_llama_checkpoint(**ck, c, /*headers=*/true); !st.ok()) {
      return st.with_context(flag);
    }
    std::shared_ptr<model::SafetensorsCheckpoint> shared = std::move(ck).value();
    m.initial = [shared, c, flag](int64_t b, model::ElementRange r, float* host) {
      return model::read_llama_elements(*shared, c, b, r, host).with_context(flag);
    };
  }
  if (!m.resume_dir.empty()) {
    STRATA_ASSIGN_OR_RETURN(m.restart_data, check_resume(f, app, source, m.resume_dir, m.spec));
  }
  resolve_model_keys(deferred, f, c.layers, model::llama_block_numel(c, 0), c.channels);
  STRATA_ASSIGN_OR_RETURN(const int64_t interval, checkpoint_interval_of(f, c.layers));
  // T: the data's, or --seq-len, or the context up to 1024 (Llama 3's is 131072).
  const int64_t T = task ? task->seq() : (f.seq_len != 0 ? f.seq_len : m.spec.default_seq());
  m.shape = model::RunShape{f.batch, T, interval};
  STRATA_RETURN_IF_ERROR(m.shape.validate(c.max_seq).with_context("--seq-len"));
  return m;
}

}  // namespace

Result<ModelSetup> setup_model(Flags& f, const CLI::App& app, const DataSource& source,
                               const ConfigDeferred& deferred) {
  ModelSetup m;
  // The synthetic task fixes T and needs its vocabulary; token data is GPT-2's (V 50257), with
  // T the model's context unless --seq-len asks for less.
  const model::AdditionTask* task = source.task ? &*source.task : nullptr;
  constexpr int64_t kAddVocab = model::AdditionTask::kVocab;
  // --model: a preset shape; the shape flags given beside it win.
  const bool llama_preset = f.model_preset.rfind("llama-", 0) == 0;
  if (llama_preset) {
    auto preset = model::llama_preset(f.model_preset);
    if (!preset.ok()) return preset.status().with_context("--model");
    m.spec.llama = true;
    m.spec.lcfg = *preset;
  } else if (!f.model_preset.empty()) {
    struct Preset {
      const char* name;
      int64_t layers, heads, channels, seq;
    };
    const Preset presets[] = {{"gpt2-124m", 12, 12, 768, 1024},  {"gpt2-350m", 24, 16, 1024, 1024},
                              {"gpt2-774m", 36, 20, 1280, 1024}, {"gpt2-1.5b", 48, 25, 1600, 1024},
                              {"gpt-7b", 32, 32, 4096, 2048},    {"gpt-13b", 40, 40, 5120, 2048}};
    const Preset* p = nullptr;
    for (const Preset& q : presets) p = f.model_preset == q.name ? &q : p;
    if (p == nullptr) {
      return (make_error(ErrorCode::kConfig, "--model '", f.model_preset,
                         "' is not accepted (gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b, "
                         "gpt-7b, gpt-13b, llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, "
                         "llama-3.1-70b, llama-2-7b, llama-2-13b)"));
    }
    if (app.count("--layers") == 0) f.layers = p->layers;
    if (app.count("--heads") == 0) f.heads = p->heads;
    if (app.count("--channels") == 0) f.channels = p->channels;
    if (f.seq_len == 0) f.seq_len = p->seq;
    if (f.vocab == 0) f.vocab = 50257;
  }
  // --resume: the newest complete checkpoint; its parameters (an llm.c model file, or a Llama's
  // safetensors file) are read as --init-from's, its optimizer state replaces the masters.
  if (app.count("--resume") > 0) {
    if (!f.init_from.empty()) {
      return (make_error(ErrorCode::kConfig, "--resume and --init-from ", f.init_from,
                         " both set the parameters (give one)"));
    }
    if (f.resume.empty() && f.checkpoint_dir.empty()) {
      return (
          make_error(ErrorCode::kConfig, "--resume needs a DIR, or --checkpoint-dir to look in"));
    }
    auto found = engine::find_checkpoint(f.resume.empty() ? f.checkpoint_dir : f.resume);
    if (!found.ok())
      return make_error(found.status().code(), "--resume ", found.status().message());
    m.resume_dir = *found;
  }
  const bool llama_resume =
      !m.resume_dir.empty() && std::filesystem::exists(m.resume_dir + "/params.safetensors");
  // A Hugging Face directory for --init-from: a Llama, its config.json the shape.
  const bool hf_dir = !f.init_from.empty() && std::filesystem::is_directory(f.init_from);
  if (llama_preset && !m.resume_dir.empty() && !llama_resume) {
    return make_error(ErrorCode::kConfig, "--model ", f.model_preset, ": the checkpoint --resume ",
                      "reads (", m.resume_dir, ") holds a GPT, not a Llama");
  }
  if (hf_dir || llama_resume || llama_preset) {
    return setup_llama(f, app, source, deferred, std::move(m), hf_dir);
  }
  if (f.kv_heads != 0 || f.intermediate != 0) {
    return make_error(ErrorCode::kConfig, f.kv_heads != 0 ? "--kv-heads " : "--intermediate ",
                      f.kv_heads != 0 ? f.kv_heads : f.intermediate,
                      " is a Llama setting (--model llama-..., or --init-from a Hugging Face "
                      "directory); the GPT shape has NKV = NH and I = 4C");
  }
  if (f.channels % f.heads != 0) {
    return (make_error(ErrorCode::kConfig, "--heads ", f.heads, " does not divide --channels ",
                       f.channels, " (use a head count that divides the channel count)"));
  }
  if (task && f.seq_len != 0 && f.seq_len < task->seq()) {
    return (make_error(ErrorCode::kConfig, "--seq-len ", f.seq_len,
                       " is shorter than the data's sequences (", task->seq(),
                       " tokens for synthetic:addition with --digits ", f.digits, ")"));
  }
  if (task && f.vocab != 0 && f.vocab < kAddVocab) {
    return (make_error(ErrorCode::kConfig, "--vocab ", f.vocab,
                       " is smaller than the data's vocabulary (", kAddVocab,
                       " tokens for synthetic:addition)"));
  }
  model::GptConfig& cfg = m.spec.gpt;
  cfg.vocab = f.vocab != 0 ? f.vocab : (task ? kAddVocab : 50257);
  cfg.max_seq = f.seq_len != 0 ? f.seq_len : (task ? task->seq() : 1024);
  cfg.layers = f.layers;
  cfg.heads = f.heads;
  cfg.channels = f.channels;
  cfg.dtype = precision_dtype(f);
  // --resume: the newest complete checkpoint; its 16-bit parameters (an llm.c model file) are
  // read as --init-from's, its optimizer state replaces the masters below.
  if (!m.resume_dir.empty()) f.init_from = m.resume_dir + "/params.bin";
  // --init-from: the file's shape, its values as every block's initial parameters.
  if (!f.init_from.empty()) {
    if (!m.resume_dir.empty()) {  // the checksum first, then what the file says of its shape
      STRATA_RETURN_IF_ERROR(
          engine::verify_checkpoint_file(m.resume_dir, "params.bin").with_context("--resume"));
    }
    auto fc = model::read_model_file_config(f.init_from);
    // Resuming, the file is the checkpoint's: errors name --resume.
    const char* flag = m.resume_dir.empty() ? "--init-from" : "--resume";
    if (!fc.ok()) return fc.status().with_context(flag);
    if (task && (fc->vocab < kAddVocab || fc->max_seq < task->seq())) {
      return (make_error(
          ErrorCode::kConfig, "--init-from ", f.init_from, ": its model (", fc->describe(),
          ") does not fit the data (synthetic:addition: V=", kAddVocab, ", T=", task->seq(), ")"));
    }
    if (!task && f.seq_len > fc->max_seq) {
      return (make_error(ErrorCode::kConfig, "--seq-len ", f.seq_len,
                         " is longer than the context of --init-from ", f.init_from, " (",
                         fc->describe(), ")"));
    }
    const DType dt = cfg.dtype;
    cfg = *fc;
    cfg.dtype = dt;
    auto blocks = std::make_shared<std::vector<std::vector<float>>>();
    Status st = model::read_model_file(f.init_from, cfg, [&](int64_t, const float* v) {
      blocks->emplace_back(v, v + model::GptModel::block_numel(cfg, int64_t(blocks->size())));
      return ok_status();
    });
    if (!st.ok()) return st.with_context(flag);
    m.initial = engine::slices_of([blocks](int64_t b) { return (*blocks)[size_t(b)]; });
  }
  // --resume: the flags beside it against the run the checkpoint recorded (resume_check.h).
  if (!m.resume_dir.empty()) {
    STRATA_ASSIGN_OR_RETURN(m.restart_data, check_resume(f, app, source, m.resume_dir, m.spec));
  }
  resolve_model_keys(deferred, f, cfg.layers, model::GptModel::block_numel(cfg, 0), cfg.channels);
  STRATA_ASSIGN_OR_RETURN(const int64_t interval, checkpoint_interval_of(f, cfg.layers));
  const int64_t T = task ? task->seq() : (f.seq_len != 0 ? f.seq_len : cfg.max_seq);
  m.shape = model::RunShape{f.batch, T, interval};
  STRATA_RETURN_IF_ERROR(cfg.validate());
  STRATA_RETURN_IF_ERROR(m.shape.validate(cfg));
  return m;
}

Result<std::unique_ptr<model::Model>> build_model(const Flags& f, const ModelSetup& setup,
                                                  gpu::Device& dev,
                                                  const model::BlockStorage& storage,
                                                  const engine::EngineConfig& config) {
  auto m = setup.spec.create(dev, setup.shape, storage, !f.plan, f.seed);
  if (!m.ok() && m.status().code() == ErrorCode::kOutOfMemory) {
    return m.status().with_context(out_of_memory_advice(config));
  }
  if (!m.ok() || f.plan) return m;
  model::Model& model = *m.value();
  if (!setup.initial) return m;
  std::vector<float> values;
  for (int64_t b = 0; b < model.num_blocks(); ++b) {  // --init-from's values, where held
    if (model.param_block(b) == nullptr) continue;
    values.assign(static_cast<size_t>(model.block_numel(b)), 0.0f);
    STRATA_RETURN_IF_ERROR(setup.initial(b, {0, model.block_numel(b)}, values.data()));
    STRATA_RETURN_IF_ERROR(model.upload_params(b, values.data()));
  }
  return m;
}

engine::SessionInputs session_inputs(const Flags& f, const ModelSetup& setup, int rank,
                                     int host_threads) {
  engine::SessionInputs in;
  in.plan_only = f.plan;
  in.host_threads = host_threads;
  in.init = setup.initial ? setup.initial : engine::slices_of([&setup, seed = f.seed](int64_t b) {
    return setup.spec.init_block(b, seed);
  });
  if (!setup.resume_dir.empty()) {
    in.restore = [&setup,
                  rank](engine::OffloadedOptimizer& o) -> Result<engine::StepScaling::State> {
      auto s = engine::load_checkpoint(setup.resume_dir, rank, o);
      if (!s.ok()) return s.status().with_context("--resume");
      return s;
    };
  }
  return in;
}

}  // namespace strata::train_gpt

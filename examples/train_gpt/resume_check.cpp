#include "resume_check.h"

#include <vector>

#include "core/file_identity.h"
#include "engine/checkpoint.h"
#include "model/dataloader.h"

namespace strata::train_gpt {
namespace {
using json = nlohmann::json;

// The recorded run: extra.run, or what older checkpoints kept (the seed and the batch keys).
// The manifest is checked against its DONE marker first (a damaged one is refused as such).
Result<json> recorded_run(const std::string& dir) {
  STRATA_ASSIGN_OR_RETURN(const json m, engine::read_manifest(dir));
  const json extra = m.value("extra", json::object());
  if (extra.contains("run")) return extra["run"];
  json run = json::object();
  if (extra.contains("seed")) run["seed"] = extra["seed"];
  const json cfg = extra.value("config", json::object());
  if (cfg.contains("train_micro_batch_size_per_gpu")) {
    run["batch"] = cfg["train_micro_batch_size_per_gpu"];
  }
  if (cfg.contains("gradient_accumulation_steps")) {
    run["grad_accum"] = cfg["gradient_accumulation_steps"];
  }
  return run;
}

// The same data: the same string, or patterns that name the same files in the same order.
bool same_data(const std::string& a, const std::string& b) {
  if (a == b) return true;
  if (a.empty() || b.empty() || a.rfind("synthetic:", 0) == 0 || b.rfind("synthetic:", 0) == 0) {
    return false;
  }
  auto fa = model::expand_data_files(a), fb = model::expand_data_files(b);
  if (!fa.ok() || !fb.ok() || fa->size() != fb->size()) return false;
  for (size_t i = 0; i < fa->size(); ++i) {
    if (!same_file((*fa)[i], (*fb)[i])) return false;
  }
  return true;
}

std::string shown(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace

json run_record(const Flags& f, int64_t seq) {
  return {{"seed", f.seed},
          {"batch", f.batch},
          {"grad_accum", f.grad_accum},
          {"seq", seq},
          {"data", f.data},
          {"val_data", f.val_data},
          {"data_order", f.data_order},
          {"digits", f.digits}};
}

Result<bool> check_resume(Flags& f, const CLI::App& app, const DataSource& source,
                          const std::string& dir, const ModelSpec& saved) {
  std::vector<std::string> refused, overridden;
  // The shape: the checkpoint's parameters define it.
  const Flags defaults;
  auto shape = [&](const char* flag, int64_t mine, int64_t def, int64_t theirs) {
    const bool given = app.count(flag) > 0 || mine != def;
    if (given && mine != theirs) {
      refused.push_back(std::string(flag) + " " + std::to_string(mine) + " (the checkpoint's " +
                        std::to_string(theirs) + ")");
    }
  };
  shape("--layers", f.layers, defaults.layers, saved.layers());
  shape("--channels", f.channels, defaults.channels, saved.channels());
  shape("--heads", f.heads, defaults.heads, saved.heads());
  if (f.vocab != 0) shape("--vocab", f.vocab, f.vocab, saved.vocab());
  if (saved.llama && f.kv_heads != 0) {
    shape("--kv-heads", f.kv_heads, f.kv_heads, saved.lcfg.kv_heads);
  }
  if (saved.llama && f.intermediate != 0) {
    shape("--intermediate", f.intermediate, f.intermediate, saved.lcfg.intermediate);
  }
  // The run: taken from the checkpoint when not given.
  STRATA_ASSIGN_OR_RETURN(const json run, recorded_run(dir));
  bool restart = false, damaged = false;
  // `restarts`: a difference changes what the loader reads (its position is then meaningless).
  auto check = [&](const char* flag, const char* key, auto& mine, auto def, bool adoptable,
                   bool restarts) {
    if (!run.contains(key)) return;
    using T = std::decay_t<decltype(mine)>;
    T theirs{};
    try {
      theirs = run[key].get<T>();
    } catch (const json::exception&) {
      damaged = true;
      return;
    }
    const bool given = app.count(flag) > 0 || mine != static_cast<T>(def);
    bool same = mine == theirs;
    if constexpr (std::is_same_v<T, std::string>) same = same || same_data(mine, theirs);
    if (same) return;
    if (!given && adoptable) {
      mine = theirs;
      return;
    }
    json m = mine;
    const std::string line = std::string(flag) + " " + shown(m) + (given ? "" : " (the default)") +
                             " (the checkpoint's " + shown(run[key]) + ")";
    (f.resume_override ? overridden : refused).push_back(line);
    restart = restart || restarts;
  };
  // The data was read before the checkpoint was found, so it is never taken from it: a run
  // resumed without the --data its checkpoint trained on is refused, --resume-override or not
  // (it would train on the synthetic task).
  if (run.contains("data") && run["data"].is_string() && app.count("--data") == 0 &&
      f.data == defaults.data && !same_data(f.data, run["data"].get<std::string>())) {
    const std::string theirs = run["data"].get<std::string>();
    return make_error(ErrorCode::kConfig, "--resume ", dir, ": the checkpoint trained on --data ",
                      theirs, " and no --data is given; give --data ", theirs,
                      " (the data is not taken from the checkpoint)");
  }
  check("--seed", "seed", f.seed, defaults.seed, true, false);
  check("--batch", "batch", f.batch, defaults.batch, true, true);
  check("--grad-accum", "grad_accum", f.grad_accum, defaults.grad_accum, true, true);
  check("--data-order", "data_order", f.data_order, defaults.data_order, true, true);
  // The data was read before the checkpoint was found: given or default, it must match.
  check("--data", "data", f.data, defaults.data, false, true);
  check("--val-data", "val_data", f.val_data, defaults.val_data, false, false);
  if (source.task) check("--digits", "digits", f.digits, defaults.digits, false, false);
  if (damaged) {
    return make_error(ErrorCode::kCorrupt, "--resume ", dir,
                      ": manifest.json's extra.run holds a value of the wrong type");
  }
  if (run.contains("seq") && run["seq"].is_number_integer()) {
    const int64_t seq = run["seq"].get<int64_t>();
    const int64_t mine =
        source.task ? source.task->seq() : (f.seq_len != 0 ? f.seq_len : saved.default_seq());
    if (mine != seq && !source.task) {
      if (app.count("--seq-len") == 0 && f.seq_len == 0) {
        f.seq_len = seq;
      } else {
        (f.resume_override ? overridden : refused)
            .push_back("--seq-len " + std::to_string(mine) + " (the checkpoint's " +
                       std::to_string(seq) + ")");
        restart = true;
      }
    }
  }
  if (!refused.empty()) {
    std::string all;
    for (const std::string& r : refused) all += (all.empty() ? "" : ", ") + r;
    const std::string preset =
        f.model_preset.empty() ? "" : " (--model " + f.model_preset + " sets the shape flags)";
    return make_error(ErrorCode::kConfig, "--resume ", dir, ": ", all, preset,
                      "; give the checkpoint's values or leave them out",
                      f.resume_override ? " (the shape cannot be overridden)"
                                        : " (--resume-override lets the run flags differ)");
  }
  for (const std::string& o : overridden) {
    std::fprintf(stderr, "train_gpt: resume: %s, as --resume-override allows\n", o.c_str());
  }
  return restart;
}

Result<engine::CheckpointInfo> open_resume(const ModelSetup& setup, int rank, int ranks, int stage,
                                           TrainData& data) {
  if (setup.resume_dir.empty()) return engine::CheckpointInfo{};
  engine::CheckpointInfo expect;
  expect.ranks = ranks;
  expect.stage = stage;
  expect.model = setup.spec.describe();
  auto v = engine::verify_checkpoint(setup.resume_dir, rank, expect);
  if (!v.ok()) return v.status().with_context("--resume");
  const auto extra = nlohmann::json::parse(v->extra_json);
  if (extra.contains("data_epoch") && !setup.restart_data) {
    const model::LoaderPosition pos{extra["data_epoch"].get<int64_t>(),
                                    extra["data_batch"].get<int64_t>()};
    STRATA_RETURN_IF_ERROR(data.seek(pos).with_context("--resume"));
  }
  return v;
}

}  // namespace strata::train_gpt

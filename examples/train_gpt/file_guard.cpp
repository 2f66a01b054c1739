#include "file_guard.h"

#include <filesystem>

#include "core/dtype.h"
#include "core/file_identity.h"
#include "core/temp_file.h"
#include "model/llama_layout.h"
#include "model/safetensors_write.h"

namespace strata::train_gpt {
namespace {

namespace fs = std::filesystem;

struct Named {
  const char* flag;
  std::string path;
};

// An output as the files it writes or removes: a file output is its path (and its temporary
// names); a Llama model output is a Hugging Face directory, the set of files a save there writes
// or removes (model/llama_layout.h), and a shard-named or temporary file that appears there later
// would be removed too.
struct Output {
  const char* flag;
  std::string path;
  bool directory = false;
  std::vector<std::string> names;  // a directory's files, by name (the directory read once)
  std::vector<std::string> files;  // paths
};

// Whether writing `out` writes or removes the file at `path` (by identity: any spelling, links).
bool touches(const Output& out, const std::string& path) {
  const fs::path p(path);
  const std::string name = p.filename().string();
  for (const std::string& file : out.files) {
    if (same_file(file, path) || within_tree(path, file)) return true;
    // A temporary name beside the file, which a later save removes when its run is gone.
    const fs::path f(file);
    if (is_temp_name_of(name, f.filename().string()) &&
        within_tree(p.parent_path(), f.parent_path()) &&
        within_tree(f.parent_path(), p.parent_path())) {
      return true;
    }
  }
  if (!out.directory) return false;
  const std::string parent = p.parent_path().empty() ? "." : p.parent_path().string();
  const bool in_dir = same_file(parent, out.path) ||
                      (within_tree(parent, out.path) && within_tree(out.path, parent));
  return in_dir && model::is_shard_file_name(name);
}

Output output(const Named& n, bool directory) {
  Output o{n.flag, n.path, directory, {}, {}};
  if (n.path.empty()) return o;
  if (!directory) {
    o.files.push_back(n.path);
    return o;
  }
  o.names = model::llama_checkpoint_names(n.path);
  for (const std::string& name : o.names) o.files.push_back((fs::path(n.path) / name).string());
  return o;
}

}  // namespace

Status check_files(const Flags& f, const DataSource& source, const std::string& resume_dir,
                   const std::vector<std::string>& nvme_dirs, const ModelSpec& spec) {
  if (!f.checkpoint_dir.empty() && f.checkpoint_every == 0 && resume_dir.empty()) {
    return make_error(ErrorCode::kConfig, "--checkpoint-dir ", f.checkpoint_dir,
                      " saves nothing without --checkpoint-every N (give N, or leave the "
                      "directory out)");
  }
  std::vector<Named> inputs;
  for (const auto& p : source.files) inputs.push_back({"--data", p});
  for (const auto& p : source.val_files) inputs.push_back({"--val-data", p});
  if (!f.config.empty()) inputs.push_back({"--config", f.config});
  if (resume_dir.empty() && !f.init_from.empty()) inputs.push_back({"--init-from", f.init_from});
  // Written in place: --metrics, --trace; through a temporary file: the model files (a Llama's
  // are Hugging Face directories).
  const std::vector<Output> outputs = {
      output({"--metrics", f.metrics}, false), output({"--trace", f.trace}, false),
      output({"--save-model", f.save_model}, spec.llama),
      output({"--export-safetensors", f.export_safetensors}, spec.llama)};
  for (size_t o = 0; o < outputs.size(); ++o) {
    const Output& out = outputs[o];
    if (out.path.empty()) continue;
    for (const Named& in : inputs) {
      // A directory read (a Hugging Face checkpoint) takes no output inside it either.
      if (touches(out, in.path) || (fs::is_directory(in.path) && within_tree(out.path, in.path))) {
        return make_error(ErrorCode::kConfig, out.flag, " ", out.path,
                          out.directory ? " writes or removes the file " : " is the file ", in.flag,
                          " reads (", in.path, "); give another path (inputs are never written)");
      }
    }
    if (!resume_dir.empty() && within_tree(out.path, resume_dir)) {
      return make_error(ErrorCode::kConfig, out.flag, " ", out.path,
                        " lies in the checkpoint --resume reads (", resume_dir,
                        "); give another path");
    }
    for (size_t p = 0; p < o; ++p) {
      const Output& prev = outputs[p];
      if (prev.path.empty()) continue;
      // A directory output and a file in it clash only where the save writes that file.
      const bool nested = out.directory && prev.directory
                              ? within_tree(out.path, prev.path) || within_tree(prev.path, out.path)
                              : !prev.directory && within_tree(out.path, prev.path);
      if (same_file(out.path, prev.path) || nested || touches(out, prev.path) ||
          touches(prev, out.path)) {
        return make_error(ErrorCode::kConfig, out.flag, " ", out.path, " is also ", prev.flag,
                          "'s file; give each output its own path");
      }
    }
  }
  // Directories this run writes (checkpoints, swap files) lie in no directory it reads.
  for (const Named& in : inputs) {
    if (!fs::is_directory(in.path)) continue;
    std::vector<Named> dirs;
    if (!f.checkpoint_dir.empty()) dirs.push_back({"--checkpoint-dir", f.checkpoint_dir});
    for (const std::string& d : nvme_dirs) dirs.push_back({"--nvme-path", d});
    for (const Named& d : dirs) {
      if (within_tree(d.path, in.path)) {
        return make_error(ErrorCode::kConfig, d.flag, " ", d.path, " lies in ", in.flag, " ",
                          in.path,
                          ", which this run reads; give a directory elsewhere "
                          "(inputs are never written)");
      }
    }
  }
  // Checkpoints: old ones are removed as new ones are saved (--keep-checkpoints), and a save
  // writes its step directory afresh, so nothing this run reads may live there (--resume's
  // checkpoint, which is read before the first save, excepted).
  if (!f.checkpoint_dir.empty()) {
    for (const Named& in : inputs) {
      if (within_tree(in.path, f.checkpoint_dir)) {
        return make_error(ErrorCode::kConfig, in.flag, " ", in.path, " lies in --checkpoint-dir ",
                          f.checkpoint_dir,
                          ", where this run saves and removes checkpoints; keep inputs elsewhere");
      }
    }
  }
  // Swap files of runs that are gone are removed from the NVMe directories (nvme/swap_owner.h).
  for (const std::string& dir : nvme_dirs) {
    for (const Named& in : inputs) {
      const std::string name = std::filesystem::path(in.path).filename().string();
      if (name.rfind("strata_swap_", 0) == 0 && within_tree(in.path, dir)) {
        return make_error(ErrorCode::kConfig, in.flag, " ", in.path, " is named as a swap file in",
                          " --nvme-path ", dir, ", where stale swap files are removed; rename it");
      }
    }
    STRATA_RETURN_IF_ERROR(probe_directory("--nvme-path", dir));
  }
  // Every output can be written now (--plan writes none).
  if (f.plan) return ok_status();
  // The model files' bytes: llm.c's (a 1024-byte header) and safetensors' (less header).
  const DType stored = spec.dtype() == DType::kF32 ? DType::kF32 : DType::kBF16;
  const uint64_t bytes = static_cast<uint64_t>(spec.num_params()) * dtype_size(stored);
  const uint64_t needs[] = {0, 0, 1024 + bytes, bytes};
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (outputs[o].path.empty()) continue;
    // A Llama's model outputs are checkpoint directories (each file in it replaced whole).
    if (outputs[o].directory) {
      STRATA_RETURN_IF_ERROR(
          probe_output_directory(outputs[o].flag, outputs[o].path, outputs[o].names, needs[o]));
      continue;
    }
    const OutputWrite how = o < 2 ? OutputWrite::kInPlace : OutputWrite::kReplace;
    STRATA_RETURN_IF_ERROR(probe_writable(outputs[o].flag, outputs[o].path, how, needs[o]));
  }
  if (!f.checkpoint_dir.empty() && fs::is_directory(f.checkpoint_dir)) {
    STRATA_RETURN_IF_ERROR(probe_directory("--checkpoint-dir", f.checkpoint_dir));
  }
  return ok_status();
}

}  // namespace strata::train_gpt

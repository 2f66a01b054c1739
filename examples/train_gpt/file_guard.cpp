#include "file_guard.h"

#include <filesystem>

#include "core/dtype.h"
#include "core/file_identity.h"

namespace strata::train_gpt {
namespace {

struct Named {
  const char* flag;
  std::string path;
};

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
  // Written in place: --metrics, --trace; through a temporary file: the model files.
  const std::vector<Named> outputs = {{"--metrics", f.metrics},
                                      {"--trace", f.trace},
                                      {"--save-model", f.save_model},
                                      {"--export-safetensors", f.export_safetensors}};
  for (size_t o = 0; o < outputs.size(); ++o) {
    const Named& out = outputs[o];
    if (out.path.empty()) continue;
    for (const Named& in : inputs) {
      // A directory read (a Hugging Face checkpoint) takes no output inside it either.
      if (same_file(out.path, in.path) ||
          (std::filesystem::is_directory(in.path) && within_tree(out.path, in.path))) {
        return make_error(ErrorCode::kConfig, out.flag, " ", out.path, " is the file ", in.flag,
                          " reads (", in.path, "); give another path (inputs are never written)");
      }
    }
    if (!resume_dir.empty() && within_tree(out.path, resume_dir)) {
      return make_error(ErrorCode::kConfig, out.flag, " ", out.path,
                        " lies in the checkpoint --resume reads (", resume_dir,
                        "); give another path");
    }
    for (size_t p = 0; p < o; ++p) {
      const Named& prev = outputs[p];
      if (prev.path.empty()) continue;
      if (same_file(out.path, prev.path) || within_tree(out.path, prev.path)) {
        return make_error(ErrorCode::kConfig, out.flag, " ", out.path, " is also ", prev.flag,
                          "'s file; give each output its own path");
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
    // A Llama's model outputs are checkpoint directories: an existing one takes new files.
    if (spec.llama && o >= 2 && std::filesystem::is_directory(outputs[o].path)) {
      STRATA_RETURN_IF_ERROR(probe_directory(outputs[o].flag, outputs[o].path));
      continue;
    }
    const OutputWrite how = o < 2 ? OutputWrite::kInPlace : OutputWrite::kReplace;
    STRATA_RETURN_IF_ERROR(probe_writable(outputs[o].flag, outputs[o].path, how, needs[o]));
  }
  if (!f.checkpoint_dir.empty() && std::filesystem::is_directory(f.checkpoint_dir)) {
    STRATA_RETURN_IF_ERROR(probe_directory("--checkpoint-dir", f.checkpoint_dir));
  }
  return ok_status();
}

}  // namespace strata::train_gpt

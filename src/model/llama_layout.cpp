#include "model/llama_layout.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <set>

#include "model/safetensors_write.h"

namespace strata::model {

namespace {

// Layer tensors in block order: (suffix, rows, cols; rows 0 = a 1-D norm of cols).
struct LayerPart {
  const char* suffix;
  int64_t rows, cols;
};

std::vector<LayerPart> layer_parts(const LlamaConfig& c) {
  const int64_t C = c.channels, HS = c.head_size(), I = c.intermediate;
  return {{"input_layernorm.weight", 0, C},
          {"self_attn.q_proj.weight", c.heads * HS, C},
          {"self_attn.k_proj.weight", c.kv_heads * HS, C},
          {"self_attn.v_proj.weight", c.kv_heads * HS, C},
          {"self_attn.o_proj.weight", C, C},
          {"post_attention_layernorm.weight", 0, C},
          {"mlp.gate_proj.weight", I, C},
          {"mlp.up_proj.weight", I, C},
          {"mlp.down_proj.weight", C, I}};
}

// Hugging Face's state_dict order of a layer's tensors, as indices into layer_parts.
constexpr int kStateDictOrder[] = {1, 2, 3, 4, 6, 7, 8, 0, 5};

}  // namespace

std::vector<LlamaTensor> llama_block_tensors(const LlamaConfig& c, int64_t block) {
  std::vector<LlamaTensor> out;
  int64_t at = 0;
  if (block == c.layers) {
    const int64_t VC = c.vocab * c.channels;
    out.push_back({"model.embed_tokens.weight", block, 0, {c.vocab, c.channels}, false});
    out.push_back({"model.norm.weight", block, VC, {c.channels}, true});
    if (!c.tied) {
      out.push_back({"lm_head.weight", block, VC + c.channels, {c.vocab, c.channels}, false});
    }
    return out;
  }
  const std::string prefix = "model.layers." + std::to_string(block) + ".";
  for (const LayerPart& p : layer_parts(c)) {
    LlamaTensor t{prefix + p.suffix, block, at, {}, p.rows == 0};
    t.shape = p.rows == 0 ? std::vector<int64_t>{p.cols} : std::vector<int64_t>{p.rows, p.cols};
    at += numel_of(t.shape);
    out.push_back(std::move(t));
  }
  return out;
}

int64_t llama_block_numel(const LlamaConfig& c, int64_t block) {
  return block == c.layers ? c.shared_params() : c.layer_params();
}

std::vector<LlamaTensor> llama_tensors(const LlamaConfig& c) {
  const std::vector<LlamaTensor> shared = llama_block_tensors(c, c.layers);
  std::vector<LlamaTensor> out{shared[0]};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::vector<LlamaTensor> layer = llama_block_tensors(c, l);
    for (int i : kStateDictOrder) out.push_back(layer[static_cast<size_t>(i)]);
  }
  out.insert(out.end(), shared.begin() + 1, shared.end());
  return out;
}

Status check_llama_checkpoint(SafetensorsCheckpoint& checkpoint, const LlamaConfig& c,
                              bool headers) {
  STRATA_RETURN_IF_ERROR(c.validate());
  const std::vector<LlamaTensor> tensors = llama_tensors(c);
  // A tensor the config does not name is refused, not ignored: config.json and the weights of two
  // models (a save killed between its renames, a config edited by hand). Buffers older
  // checkpoints carry (rotary inverse frequencies) and a tied model's head are not weights.
  std::set<std::string> named;
  for (const LlamaTensor& t : tensors) named.insert(t.name);
  for (const std::string& name : checkpoint.names()) {
    const bool buffer = name.size() >= 20 && name.ends_with("rotary_emb.inv_freq");
    if (named.count(name) != 0 || buffer || (c.tied && name == "lm_head.weight")) continue;
    return make_error(ErrorCode::kConfig, "checkpoint ", checkpoint.dir(), ": holds tensor ", name,
                      ", which its config (", c.describe(),
                      ") does not name: the config and the weights are of different models "
                      "(a save interrupted between them?)");
  }
  for (const LlamaTensor& t : tensors) {
    if (!checkpoint.has(t.name)) {
      return make_error(ErrorCode::kConfig, "checkpoint ", checkpoint.dir(), ": no tensor ", t.name,
                        " (shape ", shape_text(t.shape), ")",
                        t.name == "lm_head.weight" ? " (an untied head: tie_word_embeddings is "
                                                     "false in config.json)"
                                                   : "");
    }
    if (!headers) continue;
    STRATA_ASSIGN_OR_RETURN(const SafetensorInfo* info, checkpoint.info(t.name));
    if (info->shape != t.shape || !info->readable) {  // read() names the file and the tensor
      STRATA_RETURN_IF_ERROR(checkpoint.read(t.name, t.shape, nullptr, 0, 0));
    }
  }
  return ok_status();
}

Status read_llama_block(SafetensorsCheckpoint& checkpoint, const LlamaConfig& c, int64_t block,
                        float* host) {
  return read_llama_elements(checkpoint, c, block, {0, llama_block_numel(c, block)}, host);
}

Status read_llama_elements(SafetensorsCheckpoint& checkpoint, const LlamaConfig& c, int64_t block,
                           ElementRange r, float* host) {
  if (r.begin < 0 || r.end < r.begin || r.end > llama_block_numel(c, block)) {
    return make_error(ErrorCode::kInternal, "llama block ", block, ": elements [", r.begin, ", ",
                      r.end, ") of ", llama_block_numel(c, block));
  }
  for (const LlamaTensor& t : llama_block_tensors(c, block)) {
    const int64_t lo = std::max(r.begin, t.offset), hi = std::min(r.end, t.offset + t.numel());
    if (lo >= hi) continue;
    float* out = host + (lo - r.begin);
    STRATA_RETURN_IF_ERROR(checkpoint.read(t.name, t.shape, out, lo - t.offset, hi - lo));
    // An fp16 model holds no value beyond fp16's range (it would become an infinity).
    if (c.dtype != DType::kF16) continue;
    for (int64_t i = 0; i < hi - lo; ++i) {
      if (std::fabs(out[i]) > 65504.0f) {
        return make_error(ErrorCode::kConfig, "checkpoint ", checkpoint.dir(), ": tensor ", t.name,
                          " holds ", out[i], " at element ", lo - t.offset + i,
                          ", beyond fp16's range (65504): train it in bf16 or fp32");
      }
    }
  }
  return ok_status();
}

Status read_llama_checkpoint(SafetensorsCheckpoint& checkpoint, const LlamaConfig& c,
                             const BlockSink& sink, const std::vector<bool>& wanted) {
  // Every tensor first, so a checkpoint that lacks one fails before any block is handed on.
  STRATA_RETURN_IF_ERROR(check_llama_checkpoint(checkpoint, c, /*headers=*/false));
  std::vector<float> values;
  for (int64_t b = 0; b <= c.layers; ++b) {
    if (!wanted.empty() && !wanted[static_cast<size_t>(b)]) continue;
    values.assign(static_cast<size_t>(llama_block_numel(c, b)), 0.0f);
    STRATA_RETURN_IF_ERROR(read_llama_block(checkpoint, c, b, values.data()));
    STRATA_RETURN_IF_ERROR(sink(b, values.data()));
  }
  return ok_status();
}

namespace {
std::vector<TensorOut> llama_tensors_out(const LlamaConfig& c, const BlockSource& source) {
  auto blocks = std::make_shared<HeldBlocks>([c](int64_t b) { return llama_block_numel(c, b); },
                                             c.layers, source);
  std::vector<TensorOut> tensors;
  for (const LlamaTensor& t : llama_tensors(c)) {
    tensors.push_back({t.name, t.shape, [t, blocks](float* out) -> Status {
                         STRATA_ASSIGN_OR_RETURN(const float* held, blocks->get(t.block));
                         std::copy(held + t.offset, held + t.offset + t.numel(), out);
                         return ok_status();
                       }});
  }
  return tensors;
}
}  // namespace

Status write_llama_params_file(const std::string& path, const LlamaConfig& c, DType stored,
                               const BlockSource& source, bool sync) {
  STRATA_RETURN_IF_ERROR(c.validate());
  return write_safetensors_file(path, llama_tensors_out(c, source), stored,
                                {{"config", hf_llama_config_json(c)}}, sync);
}

Result<LlamaConfig> read_llama_params_config(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(path));
  const auto it = file->metadata().find("config");
  if (it == file->metadata().end()) {
    return make_error(ErrorCode::kCorrupt, "safetensors file ", path,
                      ": no \"config\" in its metadata (not a strata Llama checkpoint)");
  }
  return parse_hf_llama_config(it->second, "safetensors file " + path + " (its config)");
}

std::vector<std::string> llama_checkpoint_names(const std::string& dir) {
  std::vector<std::string> names = {"config.json", SafetensorsCheckpoint::kSingleFile,
                                    SafetensorsCheckpoint::kIndexFile};
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (is_shard_file_name(name)) names.push_back(std::move(name));
  }
  return names;
}

Result<std::vector<std::string>> write_llama_checkpoint(const std::string& dir,
                                                        const LlamaConfig& c, DType stored,
                                                        int64_t max_shard_bytes,
                                                        const BlockSource& source) {
  STRATA_RETURN_IF_ERROR(c.validate());
  // The weights first; config.json last, so a directory with a config has its weights.
  STRATA_ASSIGN_OR_RETURN(
      std::vector<std::string> files,
      write_safetensors_dir(dir, llama_tensors_out(c, source), stored, max_shard_bytes));
  LlamaConfig written = c;
  written.dtype = stored;
  STRATA_RETURN_IF_ERROR(write_text_file((std::filesystem::path(dir) / "config.json").string(),
                                         hf_llama_config_json(written)));
  files.push_back("config.json");
  return files;
}

}  // namespace strata::model

// Writing safetensors files and Hugging Face checkpoint directories (the format: safetensors.h).
//
// Tensors are written in the order given, each produced when its turn comes (fill), so a writer
// never holds more than one tensor in memory beyond what the caller keeps. Every file goes to a
// temporary name in its directory (removed by an interrupted exit, core/interrupt.h), is synced
// and renamed: an existing file is replaced whole or not at all. The header is padded with spaces
// to a multiple of 8 bytes and carries {"__metadata__": {"format": "pt"}}, as PyTorch's writer.
// Free functions; thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/model_file.h"

namespace strata::model {

struct TensorOut {
  std::string name;
  std::vector<int64_t> shape;
  // Writes the tensor's numel fp32 values, row-major in `shape`.
  std::function<Status(float* out)> fill;
};

int64_t numel_of(const std::vector<int64_t>& shape);

// One file at `path`; values stored as `stored` (F32, BF16 or F16; rounded to nearest even).
// `metadata`: more string entries of __metadata__. With sync false the caller syncs the file
// and its directory (a checkpoint does it in the background).
Status write_safetensors_file(const std::string& path, const std::vector<TensorOut>& tensors,
                              DType stored,
                              const std::vector<std::pair<std::string, std::string>>& metadata = {},
                              bool sync = true);

// A checkpoint directory `dir` (created if missing) as Hugging Face's save_pretrained lays it
// out: model.safetensors when every tensor fits in `max_shard_bytes`, else shards
// model-00001-of-0000n.safetensors, filled in order up to the limit (a tensor is never split; one
// larger than the limit is a shard of its own), and model.safetensors.index.json ({"metadata":
// {"total_size": bytes of values}, "weight_map": {tensor: file}}), written last. The layout it
// replaces (a single file, or an index and shards the new index does not name) is removed once
// the new one is complete, so the loader never finds both. Returns the files written (names within
// dir).
Result<std::vector<std::string>> write_safetensors_dir(const std::string& dir,
                                                       const std::vector<TensorOut>& tensors,
                                                       DType stored, int64_t max_shard_bytes);

// The blocks a writer's tensors are cut from, asked of `source` one at a time: the shared block
// (asked once, then kept) and the last other block asked for. For fill functions written in
// block order. Not thread-safe.
class HeldBlocks {
 public:
  HeldBlocks(std::function<int64_t(int64_t block)> numel, int64_t shared_block, BlockSource source)
      : numel_(std::move(numel)), shared_block_(shared_block), source_(std::move(source)) {}
  // Block b's fp32 values (valid until the next call for another non-shared block).
  Result<const float*> get(int64_t b);

 private:
  std::function<int64_t(int64_t)> numel_;
  int64_t shared_block_;
  BlockSource source_;
  std::vector<float> shared_, layer_;
  int64_t loaded_ = -1;  // the block in layer_
  bool have_shared_ = false;
};

// A small text file (config.json, an index) at `path`: a temporary name, synced, renamed.
Status write_text_file(const std::string& path, const std::string& text);

// Hugging Face's shard name: model-00002-of-00005.safetensors, and whether a name is one.
std::string shard_file_name(int64_t k, int64_t n);
bool is_shard_file_name(const std::string& name);

}  // namespace strata::model

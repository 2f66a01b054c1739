// llm.c's GPT-2 model file (REFERENCE.md): a header of 256 little-endian int32 (magic 20240326,
// version 3 for fp32 values or 5 for bf16, maxT, V, L, NH, C, Vp), then the parameters tensor by
// tensor across the layers: wte, wpe, then ln1w of every layer, ln1b of every layer, ... fcprojb
// of every layer (the per-layer order of param_layout.h), then lnfw, lnfb. Weights are
// row-major with the output dimension first, as in strata's blocks, so a tensor moves as it is.
// Reading checks the magic, the version, the shape against the file size (exactly 1024 bytes
// plus the values), and returns one-line errors naming the file. Writing goes to a temporary
// name in the same directory, is synced and then renamed, so an existing file is replaced
// whole or not at all. Free functions; thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "model/config.h"

namespace strata::model {

inline constexpr int32_t kModelFileMagic = 20240326;
inline constexpr int32_t kModelFileVersionF32 = 3;
inline constexpr int32_t kModelFileVersionBF16 = 5;

// The shape in the header (padded_vocab = Vp) with dtype the stored values' (kF32 or kBF16).
// Errors: kIo (cannot open or read), kCorrupt (magic, version, an impossible shape, a size that
// does not match the shape).
Result<GptConfig> read_model_file_config(const std::string& path);

// Block b's values (b < L: layer b; b = L: the shared block) as fp32, for b = 0..L in order.
using BlockSink = std::function<Status(int64_t block, const float* values)>;
// Reads every block. `expect` must have the file's shape (read_model_file_config's, any dtype).
Status read_model_file(const std::string& path, const GptConfig& expect, const BlockSink& sink);

// source(b, host) writes block b's fp32 values (block_numel(config, b) of them).
using BlockSource = std::function<Status(int64_t block, float* host)>;
// Writes a model file of `config`'s shape with values stored as `stored` (kF32: version 3,
// kBF16: version 5, rounded to nearest even). Written under a temporary name, synced and renamed
// (its directory synced too); with sync false the caller syncs the file and directory itself
// (a checkpoint does it in the background).
Status write_model_file(const std::string& path, const GptConfig& config, DType stored,
                        const BlockSource& source, bool sync = true);

}  // namespace strata::model

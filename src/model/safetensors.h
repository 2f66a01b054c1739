// Reading safetensors files and Hugging Face checkpoint directories.
//
// The format (huggingface/safetensors' description): an 8-byte little-endian header length N, N
// bytes of JSON mapping each tensor's name to {"dtype", "shape", "data_offsets": [begin, end]}
// (byte offsets into the data that follows the header; an optional "__metadata__" of strings),
// then the data, row-major, little-endian. A checkpoint directory holds either model.safetensors
// or shards named in model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor:
// file}}), e.g. model-00001-of-00004.safetensors.
//
// A file is opened read-only (an input is never opened for writing; only a regular file, opened
// without blocking) and its header checked whole on open, one entry at a time (parsing holds one
// entry's JSON, whatever the header's size): the JSON, a name given twice, every tensor's dtype,
// its shape's size against its offsets, and the offsets against the file's length (a truncated
// file is refused naming the first tensor it cuts). Values are read with pread, a part of a
// tensor at a time, converted to fp32 (F32, BF16 and F16 are accepted; other dtypes are refused
// naming the tensor) and checked finite (a NaN or an infinity is refused naming the tensor and
// the element), so loading never needs the whole model in host memory and a file cut or
// rewritten under the reader is an error, not a SIGBUS. A checkpoint opens a shard only when one
// of its tensors is first read: a rank that reads only its own tensors opens only their shards.
// Errors are one line naming the file and the tensor.
//
// Threads: a SafetensorsFile is immutable after open and may be read from several threads; a
// SafetensorsCheckpoint opens shards lazily and is for one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace strata::model {

struct SafetensorInfo {
  std::string name;
  std::string stored;     // the file's dtype name: "F32", "BF16", "F16", "I64", ...
  bool readable = false;  // stored is F32, BF16 or F16 (then `dtype` is it)
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t numel = 1;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

// "[4096, 128]"
std::string shape_text(const std::vector<int64_t>& shape);

class SafetensorsFile {
 public:
  // Errors: kIo (cannot open or map), kCorrupt (header, an unknown dtype, offsets, a truncated
  // file). Tensors of other known dtypes (I64, F64, ...) are listed; reading one is refused.
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorInfo>& tensors() const { return tensors_; }  // in header order
  const SafetensorInfo* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Elements [first, first + count) of tensor `name` (row-major) as fp32 into `out`. The tensor
  // must have exactly `shape` (count = -1: all of it). Errors name the file and the tensor.
  Status read(const std::string& name, const std::vector<int64_t>& shape, float* out,
              int64_t first = 0, int64_t count = -1) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  int fd_ = -1;               // open read-only while the object lives
  uint64_t data_offset_ = 0;  // of the data section: 8 + the header's length
  std::vector<SafetensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face checkpoint directory: model.safetensors, or model.safetensors.index.json and
// the shards it names (every one must exist; checked on open, opened when first read).
class SafetensorsCheckpoint {
 public:
  static constexpr const char* kSingleFile = "model.safetensors";
  static constexpr const char* kIndexFile = "model.safetensors.index.json";

  // Errors: kIo (neither file, a shard the index names is missing), kCorrupt (the index).
  static Result<std::unique_ptr<SafetensorsCheckpoint>> open(const std::string& dir);
  // One safetensors file read as a checkpoint (every tensor in it).
  static Result<std::unique_ptr<SafetensorsCheckpoint>> open_file(const std::string& path);
  // The metadata of the file holding `name` (opening it); empty when absent.
  Result<std::map<std::string, std::string>> metadata_of(const std::string& name);

  const std::string& dir() const { return dir_; }
  bool sharded() const { return sharded_; }
  bool has(const std::string& name) const { return weight_map_.count(name) != 0; }
  std::vector<std::string> names() const;  // sorted
  // The file (name within dir) that holds `name`; empty when none does.
  std::string file_of(const std::string& name) const;
  // As SafetensorsFile::read; a tensor the index names but its shard lacks is an error naming
  // both. `name` missing: kConfig naming the directory and the tensor.
  Status read(const std::string& name, const std::vector<int64_t>& shape, float* out,
              int64_t first = 0, int64_t count = -1);
  // The tensor's description (opening its shard); null when absent.
  Result<const SafetensorInfo*> info(const std::string& name);
  // Files opened so far (names within dir).
  std::vector<std::string> opened() const;

 private:
  Result<SafetensorsFile*> shard(const std::string& file);
  std::string dir_;
  bool sharded_ = false;
  std::map<std::string, std::string> weight_map_;  // tensor -> file
  std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

}  // namespace strata::model

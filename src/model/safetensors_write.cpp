#include "model/safetensors_write.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "model/replace_file.h"
#include "model/safetensors.h"

namespace strata::model {

namespace {

namespace fs = std::filesystem;

const char* stored_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
  }
  return "?";
}

// Shards of an earlier save that `keep` does not list (the index no longer names them).
void remove_stale_shards(const std::string& dir, const std::vector<std::string>& keep) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (is_shard_file_name(name) && std::find(keep.begin(), keep.end(), name) == keep.end()) {
      stale.push_back(e.path());
    }
  }
  for (const fs::path& p : stale) fs::remove(p, ec);
}

}  // namespace

Status write_text_file(const std::string& path, const std::string& text) {
  const std::string what = "file " + path;
  return write_replacing(path, what, /*sync=*/true,
                         [&](int fd) { return write_all(fd, text.data(), text.size(), what); });
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<const float*> HeldBlocks::get(int64_t b) {
  const bool is_shared = b == shared_block_;
  std::vector<float>& held = is_shared ? shared_ : layer_;
  if (is_shared ? !have_shared_ : loaded_ != b) {
    held.assign(static_cast<size_t>(numel_(b)), 0.0f);
    STRATA_RETURN_IF_ERROR(source_(b, held.data()));
    if (is_shared) {
      have_shared_ = true;
    } else {
      loaded_ = b;
    }
  }
  return held.data();
}

bool is_shard_file_name(const std::string& name) {
  static const std::regex shard_name(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return std::regex_match(name, shard_name);
}

std::string shard_file_name(int64_t k, int64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05lld-of-%05lld.safetensors", static_cast<long long>(k),
                static_cast<long long>(n));
  return buf;
}

Status write_safetensors_file(const std::string& path, const std::vector<TensorOut>& tensors,
                              DType stored,
                              const std::vector<std::pair<std::string, std::string>>& metadata,
                              bool sync) {
  const size_t es = dtype_size(stored);
  // The header, by hand so the tensors keep their order (data offsets ascend with it).
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"";
  for (const auto& [key, value] : metadata) {
    header += "," + nlohmann::json(key).dump() + ":" + nlohmann::json(value).dump();
  }
  header += "}";
  uint64_t at = 0;
  for (const TensorOut& t : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(numel_of(t.shape)) * es;
    header += ",";
    header += nlohmann::json(t.name).dump();
    header += ":{\"dtype\":\"";
    header += stored_name(stored);
    header += "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      header += (i ? "," : "") + std::to_string(t.shape[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + bytes) + "]}";
    at += bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string what = "safetensors file " + path;
  return write_replacing(path, what, sync, [&](int fd) -> Status {
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(header.size() >> (8 * i));
    STRATA_RETURN_IF_ERROR(write_all(fd, len, 8, what));
    STRATA_RETURN_IF_ERROR(write_all(fd, header.data(), header.size(), what));
    std::vector<float> values;
    std::vector<std::byte> raw;
    for (const TensorOut& t : tensors) {
      const auto n = static_cast<size_t>(numel_of(t.shape));
      values.assign(n, 0.0f);
      STRATA_RETURN_IF_ERROR(t.fill(values.data()));
      raw.resize(n * es);
      convert(values.data(), DType::kF32, raw.data(), stored, n);
      STRATA_RETURN_IF_ERROR(write_all(fd, raw.data(), raw.size(), what));
    }
    return ok_status();
  });
}

Result<std::vector<std::string>> write_safetensors_dir(const std::string& dir,
                                                       const std::vector<TensorOut>& tensors,
                                                       DType stored, int64_t max_shard_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec)) {
    return make_error(ErrorCode::kIo, "checkpoint directory ", dir, ": cannot create it");
  }
  const auto es = static_cast<int64_t>(dtype_size(stored));
  // Shards in order: a new one when the next tensor would pass the limit.
  std::vector<std::vector<size_t>> shards;
  int64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t bytes = numel_of(tensors[i].shape) * es;
    if (shards.empty() || (in_shard > 0 && in_shard + bytes > max_shard_bytes)) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += bytes;
    total += bytes;
  }
  const auto n = static_cast<int64_t>(shards.size());
  const fs::path single = fs::path(dir) / SafetensorsCheckpoint::kSingleFile;
  const fs::path index = fs::path(dir) / SafetensorsCheckpoint::kIndexFile;
  std::vector<std::string> written;
  if (n <= 1) {
    STRATA_RETURN_IF_ERROR(write_safetensors_file(single.string(), tensors, stored));
    fs::remove(index, ec);  // a sharded layout written before
    remove_stale_shards(dir, {});
    written.push_back(SafetensorsCheckpoint::kSingleFile);
    return written;
  }
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  for (int64_t k = 0; k < n; ++k) {
    std::vector<TensorOut> part;
    const std::string file = shard_file_name(k + 1, n);
    for (size_t i : shards[static_cast<size_t>(k)]) {
      part.push_back(tensors[i]);
      map[tensors[i].name] = file;
    }
    STRATA_RETURN_IF_ERROR(write_safetensors_file((fs::path(dir) / file).string(), part, stored));
    written.push_back(file);
  }
  nlohmann::ordered_json j;
  j["metadata"] = {{"total_size", total}};
  j["weight_map"] = std::move(map);
  STRATA_RETURN_IF_ERROR(write_text_file(index.string(), j.dump(2) + "\n"));
  fs::remove(single, ec);  // a single-file layout written before
  remove_stale_shards(dir, written);
  sync_directory(dir);  // the removals too
  written.push_back(SafetensorsCheckpoint::kIndexFile);
  return written;
}

}  // namespace strata::model

#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "model/json_input.h"

namespace strata::model {

namespace {

using nlohmann::json;

// Every dtype of the format's description and its element size.
struct StoredType {
  const char* name;
  int bytes;
};
constexpr StoredType kStoredTypes[] = {{"BOOL", 1},    {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1},
                                       {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
                                       {"BF16", 2},    {"I32", 4}, {"U32", 4}, {"F32", 4},
                                       {"F64", 8},     {"I64", 8}, {"U64", 8}};

// The largest header the format's reference reader accepts (100 MB).
constexpr uint64_t kMaxHeader = 100'000'000;

std::string errno_text() { return std::strerror(errno); }

Status corrupt(const std::string& path, const std::string& what) {
  return make_error(ErrorCode::kCorrupt, "safetensors file ", path, ": ", what);
}

}  // namespace

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// pread until `bytes` are read; a short file is kCorrupt (truncated under the reader).
Status read_at(int fd, const std::string& path, uint64_t offset, void* out, size_t bytes) {
  auto* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return make_error(ErrorCode::kIo, "safetensors file ", path, ": read: ", errno_text());
    }
    if (got == 0) {
      return corrupt(path, "ends at byte " + std::to_string(offset) +
                               ": truncated (or rewritten) while being read");
    }
    p += got;
    offset += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return ok_status();
}

// One entry of the header: a tensor's description, checked.
Result<SafetensorInfo> tensor_entry(const std::string& path, const std::string& name,
                                    const json& t) {
  const std::string where = "tensor " + name + ": ";
  if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") ||
      !t.contains("data_offsets") || !t["dtype"].is_string() || !t["shape"].is_array() ||
      !t["data_offsets"].is_array() || t["data_offsets"].size() != 2) {
    return corrupt(path, where +
                             "needs \"dtype\" (a string), \"shape\" (an array) and "
                             "\"data_offsets\" (two numbers)");
  }
  SafetensorInfo info;
  info.name = name;
  info.stored = t["dtype"].get<std::string>();
  int elem = 0;
  for (const StoredType& st : kStoredTypes) {
    if (info.stored == st.name) elem = st.bytes;
  }
  if (elem == 0) return corrupt(path, where + "unknown dtype \"" + info.stored + "\"");
  info.readable = info.stored == "F32" || info.stored == "BF16" || info.stored == "F16";
  info.dtype = info.stored == "F32"    ? DType::kF32
               : info.stored == "BF16" ? DType::kBF16
                                       : DType::kF16;
  if (t["shape"].size() > 8) {
    return corrupt(path, where + "shape " + t["shape"].dump() + " has over 8 dimensions");
  }
  for (const json& d : t["shape"]) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0)) {
      return corrupt(path, where + "shape " + t["shape"].dump() + " is not a list of sizes");
    }
    const auto n = d.get<int64_t>();
    if (n != 0 && info.numel > (int64_t{1} << 50) / n) {
      return corrupt(path, where + "shape " + t["shape"].dump() + " is too large");
    }
    info.shape.push_back(n);
    info.numel *= n;
  }
  const json& off = t["data_offsets"];
  if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
    return corrupt(path, where + "data_offsets " + off.dump() + " are not two byte offsets");
  }
  info.begin = off[0].get<uint64_t>();
  info.end = off[1].get<uint64_t>();
  if (info.end < info.begin ||
      info.end - info.begin != static_cast<uint64_t>(info.numel) * static_cast<uint64_t>(elem)) {
    return corrupt(path, where + "data_offsets " + off.dump() + " hold " +
                             std::to_string(info.end - info.begin) + " bytes, shape " +
                             shape_text(info.shape) + " of " + info.stored + " needs " +
                             std::to_string(info.numel * elem));
  }
  return info;
}

}  // namespace

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  // Without blocking (a FIFO without a writer), and only a regular file.
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f->fd_ < 0) {
    return make_error(ErrorCode::kIo, "safetensors file ", path, ": cannot open: ", errno_text());
  }
  struct stat sb {};
  if (::fstat(f->fd_, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    return make_error(ErrorCode::kIo, "safetensors file ", path, ": not a regular file");
  }
  const auto file_bytes = static_cast<uint64_t>(sb.st_size);
  if (file_bytes < 8) {
    return corrupt(path, "only " + std::to_string(file_bytes) +
                             " bytes (the header's length alone takes 8): truncated or not "
                             "safetensors");
  }
  uint8_t len[8];
  STRATA_RETURN_IF_ERROR(read_at(f->fd_, path, 0, len, 8));
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | len[i];
  if (header_bytes > kMaxHeader || header_bytes > file_bytes - 8) {
    return corrupt(path, "header length " + std::to_string(header_bytes) + " does not fit the " +
                             std::to_string(file_bytes) +
                             "-byte file (at most 100000000 and the file's size less 8): "
                             "truncated or not safetensors");
  }
  f->data_offset_ = 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - 8 - header_bytes;
  std::string text(header_bytes, '\0');
  STRATA_RETURN_IF_ERROR(read_at(f->fd_, path, 8, text.data(), text.size()));
  // Each entry is checked and dropped from the parsed document as soon as it is complete, so
  // parsing holds one entry's JSON at a time, whatever the header's size; a name given twice is
  // refused.
  Status bad;
  std::string key;
  std::set<std::string> seen;
  auto entry = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    if (depth != 1 || !bad.ok()) return depth != 1 || event == json::parse_event_t::key;
    if (event == json::parse_event_t::key) {
      key = parsed.get<std::string>();
      if (!seen.insert(key).second) bad = corrupt(path, "tensor " + key + " is named twice");
      return true;
    }
    if (event != json::parse_event_t::object_end && event != json::parse_event_t::value &&
        event != json::parse_event_t::array_end) {
      return true;
    }
    if (key == "__metadata__") {
      if (!parsed.is_object()) {
        bad = corrupt(path, "__metadata__ is not an object");
        return false;
      }
      for (auto m = parsed.begin(); m != parsed.end(); ++m) {
        if (!m.value().is_string()) {
          bad = corrupt(path, "__metadata__ entry " + m.key() + " is not a string");
          return false;
        }
        f->metadata_[m.key()] = m.value().get<std::string>();
      }
      return false;
    }
    auto info = tensor_entry(path, key, parsed);
    if (!info.ok()) {
      bad = info.status();
    } else {
      f->tensors_.push_back(std::move(info).value());
    }
    return false;
  };
  json header;
  try {
    header = json::parse(text, entry);
  } catch (const json::exception& e) {
    return corrupt(path, std::string("the header is not JSON: ") + e.what());
  }
  if (!bad.ok()) return bad;
  if (!header.is_object()) return corrupt(path, "the header is not a JSON object");
  text = std::string();
  // In data order, so a truncated file names the first tensor it cuts.
  std::vector<const SafetensorInfo*> by_offset;
  for (const auto& t : f->tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const SafetensorInfo* a, const SafetensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 0; i < by_offset.size(); ++i) {
    const SafetensorInfo& t = *by_offset[i];
    if (t.end > data_bytes) {
      return corrupt(path, "tensor " + t.name + " needs bytes up to " + std::to_string(t.end) +
                               " of the data, the file holds " + std::to_string(data_bytes) +
                               ": truncated");
    }
    if (i > 0 && t.begin < by_offset[i - 1]->end) {
      return corrupt(path, "tensors " + by_offset[i - 1]->name + " and " + t.name + " overlap");
    }
  }
  for (size_t i = 0; i < f->tensors_.size(); ++i) f->index_[f->tensors_[i].name] = i;
  return f;
}

const SafetensorInfo* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Status SafetensorsFile::read(const std::string& name, const std::vector<int64_t>& shape, float* out,
                             int64_t first, int64_t count) const {
  const SafetensorInfo* t = find(name);
  if (t == nullptr) {
    return make_error(ErrorCode::kConfig, "safetensors file ", path_, ": no tensor ", name);
  }
  if (t->shape != shape) {
    return make_error(ErrorCode::kConfig, "safetensors file ", path_, ": tensor ", name,
                      " has shape ", shape_text(t->shape), ", the model needs ", shape_text(shape));
  }
  if (!t->readable) {
    return make_error(ErrorCode::kUnsupported, "safetensors file ", path_, ": tensor ", name,
                      " is ", t->stored, " (F32, BF16 or F16 are read)");
  }
  if (count < 0) count = t->numel - first;
  if (first < 0 || first + count > t->numel) {
    return make_error(ErrorCode::kConfig, "safetensors file ", path_, ": tensor ", name,
                      ": elements [", first, ", ", first + count, ") are outside its ", t->numel);
  }
  const size_t es = dtype_size(t->dtype);
  // Read in pieces with pread (a file cut under the reader is an error, not a SIGBUS), each
  // converted and checked: a weight that is not finite is refused naming it.
  constexpr int64_t kPiece = int64_t{1} << 20;
  std::vector<std::byte> raw(static_cast<size_t>(std::min(kPiece, count)) * es);
  for (int64_t at = 0; at < count; at += kPiece) {
    const int64_t n = std::min(kPiece, count - at);
    const uint64_t offset = data_offset_ + t->begin + static_cast<uint64_t>(first + at) * es;
    STRATA_RETURN_IF_ERROR(read_at(fd_, path_, offset, raw.data(), static_cast<size_t>(n) * es));
    convert(raw.data(), t->dtype, out + at, DType::kF32, static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(out[at + i])) {
        return make_error(ErrorCode::kCorrupt, "safetensors file ", path_, ": tensor ", name,
                          " holds ", out[at + i], " at element ", first + at + i,
                          " (weights must be finite)");
      }
    }
  }
  return ok_status();
}

Result<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::open(const std::string& dir) {
  namespace fs = std::filesystem;
  auto c = std::make_unique<SafetensorsCheckpoint>();
  c->dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return make_error(ErrorCode::kIo, "checkpoint directory ", dir, ": not a directory");
  }
  const fs::path single = fs::path(dir) / kSingleFile;
  const fs::path index = fs::path(dir) / kIndexFile;
  if (fs::exists(single, ec)) {
    // Hugging Face's loader prefers the single file when both are there.
    auto f = SafetensorsFile::open(single.string());
    if (!f.ok()) return f.status();
    for (const auto& t : f.value()->tensors()) c->weight_map_[t.name] = kSingleFile;
    c->open_[kSingleFile] = std::move(f).value();
    return c;
  }
  if (!fs::exists(index, ec)) {
    return make_error(ErrorCode::kIo, "checkpoint directory ", dir, ": neither ", kSingleFile,
                      " nor ", kIndexFile, " is there");
  }
  c->sharded_ = true;
  // The index of a 405B model is 100 KB; 64 MiB bounds what its parse may take.
  STRATA_ASSIGN_OR_RETURN(const json j, read_json_input(index.string(), "index " + index.string(),
                                                        {.max_bytes = uint64_t{64} << 20}));
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return make_error(ErrorCode::kCorrupt, "index ", index.string(),
                      ": needs a \"weight_map\" object of tensor names to files");
  }
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) {
      return make_error(ErrorCode::kCorrupt, "index ", index.string(), ": tensor ", it.key(),
                        " maps to ", it.value().dump(), ", not a file name");
    }
    const auto file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return make_error(ErrorCode::kCorrupt, "index ", index.string(), ": tensor ", it.key(),
                        " maps to \"", file, "\", not a file of the directory");
    }
    c->weight_map_[it.key()] = file;
  }
  std::map<std::string, std::string> files;  // file -> a tensor it holds (for the error)
  for (const auto& [name, file] : c->weight_map_) files.emplace(file, name);
  for (const auto& [file, name] : files) {
    const fs::file_status st = fs::status(fs::path(dir) / file, ec);
    if (!fs::exists(st)) {
      return make_error(ErrorCode::kIo, "index ", index.string(), ": tensor ", name, " is in ",
                        file, ", which is not in ", dir);
    }
    if (!fs::is_regular_file(st)) {
      return make_error(ErrorCode::kConfig, "index ", index.string(), ": tensor ", name, " is in ",
                        file, ", which is ",
                        fs::is_directory(st) ? "a directory" : "not a regular file",
                        " (a shard is a file)");
    }
  }
  return c;
}

Result<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::open_file(
    const std::string& path) {
  namespace fs = std::filesystem;
  auto c = std::make_unique<SafetensorsCheckpoint>();
  c->dir_ = fs::path(path).parent_path().string();
  if (c->dir_.empty()) c->dir_ = ".";
  const std::string file = fs::path(path).filename().string();
  auto f = SafetensorsFile::open(path);
  if (!f.ok()) return f.status();
  for (const auto& t : f.value()->tensors()) c->weight_map_[t.name] = file;
  c->open_[file] = std::move(f).value();
  return c;
}

Result<std::map<std::string, std::string>> SafetensorsCheckpoint::metadata_of(
    const std::string& name) {
  const std::string file = file_of(name);
  if (file.empty()) return std::map<std::string, std::string>{};
  auto f = shard(file);
  if (!f.ok()) return f.status();
  return f.value()->metadata();
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : weight_map_) out.push_back(name);
  return out;
}

std::string SafetensorsCheckpoint::file_of(const std::string& name) const {
  const auto it = weight_map_.find(name);
  return it == weight_map_.end() ? std::string() : it->second;
}

std::vector<std::string> SafetensorsCheckpoint::opened() const {
  std::vector<std::string> out;
  for (const auto& [file, f] : open_) out.push_back(file);
  return out;
}

Result<SafetensorsFile*> SafetensorsCheckpoint::shard(const std::string& file) {
  auto it = open_.find(file);
  if (it == open_.end()) {
    auto f = SafetensorsFile::open((std::filesystem::path(dir_) / file).string());
    if (!f.ok()) return f.status();
    it = open_.emplace(file, std::move(f).value()).first;
  }
  return it->second.get();
}

Result<const SafetensorInfo*> SafetensorsCheckpoint::info(const std::string& name) {
  const std::string file = file_of(name);
  if (file.empty()) return static_cast<const SafetensorInfo*>(nullptr);
  auto f = shard(file);
  if (!f.ok()) return f.status();
  const SafetensorInfo* t = f.value()->find(name);
  if (t == nullptr) {
    return make_error(ErrorCode::kCorrupt, "index ", dir_, "/", kIndexFile, ": tensor ", name,
                      " is in ", file, ", which does not hold it");
  }
  return t;
}

Status SafetensorsCheckpoint::read(const std::string& name, const std::vector<int64_t>& shape,
                                   float* out, int64_t first, int64_t count) {
  auto t = info(name);
  if (!t.ok()) return t.status();
  if (t.value() == nullptr) {
    return make_error(ErrorCode::kConfig, "checkpoint directory ", dir_, ": no tensor ", name,
                      " (shape ", shape_text(shape), ")");
  }
  return open_.at(file_of(name))->read(name, shape, out, first, count);
}

}  // namespace strata::model

#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

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
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return make_error(ErrorCode::kIo, "safetensors file ", path, ": cannot open: ", errno_text());
  }
  struct stat sb {};
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    return make_error(ErrorCode::kIo, "safetensors file ", path, ": not a regular file");
  }
  const auto file_bytes = static_cast<uint64_t>(sb.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    return corrupt(path, "only " + std::to_string(file_bytes) +
                             " bytes (the header's length alone takes 8): truncated or not "
                             "safetensors");
  }
  void* m = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) {
    return make_error(ErrorCode::kIo, "safetensors file ", path, ": mmap: ", errno_text());
  }
  f->map_ = m;
  f->map_bytes_ = file_bytes;
  const auto* bytes = static_cast<const std::byte*>(m);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) {
    header_bytes = (header_bytes << 8) | std::to_integer<uint64_t>(bytes[i]);
  }
  if (header_bytes > kMaxHeader || header_bytes > file_bytes - 8) {
    return corrupt(path, "header length " + std::to_string(header_bytes) + " does not fit the " +
                             std::to_string(file_bytes) +
                             "-byte file (at most 100000000 and the file's size less 8): "
                             "truncated or not safetensors");
  }
  f->data_ = bytes + 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - 8 - header_bytes;
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(bytes + 8),
                         reinterpret_cast<const char*>(bytes + 8 + header_bytes));
  } catch (const json::exception& e) {
    return corrupt(path, std::string("the header is not JSON: ") + e.what());
  }
  if (!header.is_object()) return corrupt(path, "the header is not a JSON object");
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& t = it.value();
    if (name == "__metadata__") {
      if (!t.is_object()) return corrupt(path, "__metadata__ is not an object");
      for (auto m2 = t.begin(); m2 != t.end(); ++m2) {
        if (!m2.value().is_string()) {
          return corrupt(path, "__metadata__ entry " + m2.key() + " is not a string");
        }
        f->metadata_[m2.key()] = m2.value().get<std::string>();
      }
      continue;
    }
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
    f->tensors_.push_back(std::move(info));
  }
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
  const std::byte* src = data_ + t->begin + static_cast<uint64_t>(first) * es;
  // Converted in pieces, each piece's pages dropped after it is read: the mapping never holds
  // more than a piece of the checkpoint in memory.
  constexpr int64_t kPiece = int64_t{1} << 22;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (int64_t at = 0; at < count; at += kPiece) {
    const int64_t n = std::min(kPiece, count - at);
    const std::byte* p = src + static_cast<uint64_t>(at) * es;
    convert(p, t->dtype, out + at, DType::kF32, static_cast<size_t>(n));
    // Whole pages inside this piece only (a neighbour's page may be read next).
    const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
    const uintptr_t hi =
        (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(n) * es) & ~(page - 1);
    if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
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
  std::ifstream in(index);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    return make_error(ErrorCode::kCorrupt, "index ", index.string(), ": not JSON: ", e.what());
  }
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
    if (!fs::is_regular_file(fs::path(dir) / file, ec)) {
      return make_error(ErrorCode::kIo, "index ", index.string(), ": tensor ", name, " is in ",
                        file, ", which is not in ", dir);
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

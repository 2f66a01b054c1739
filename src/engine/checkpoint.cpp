// Finding, verifying and loading a checkpoint (engine/checkpoint.h); saving is in
// checkpoint_save.cpp.
#include "engine/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/xxh3.h"
#include "engine/checkpoint_file.h"
#include "nvme/direct_reader.h"

namespace strata::engine {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace ckpt;

std::vector<std::string> remove_incomplete_checkpoints(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    // Only the names saves make: step_ and digits, with .tmp while being written.
    if (!e.is_directory() || n.rfind("step_", 0) != 0) continue;
    const bool partial = n.size() > 9 && n.substr(n.size() - 4) == ".tmp";
    const std::string digits = n.substr(5, n.size() - 5 - (partial ? 4 : 0));
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const bool incomplete =
        !fs::exists(e.path() / "DONE") || !fs::exists(e.path() / "manifest.json");
    if (!partial && !incomplete) continue;
    std::error_code rec;
    fs::remove_all(e.path(), rec);
    if (!rec) removed.push_back(e.path().string());
  }
  return removed;
}

Result<std::string> find_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / "DONE")) return path;
  const std::vector<fs::path> all = complete_checkpoints(path);
  if (all.empty()) {
    return make_error(ErrorCode::kConfig, path,
                      ": no complete checkpoint there (a step_N directory with a DONE marker)");
  }
  return all.back().string();
}

Result<json> read_manifest(const std::string& dir) {
  const std::string mpath = dir + "/manifest.json";
  if (!fs::exists(fs::path(dir) / "DONE")) {
    return make_error(ErrorCode::kCorrupt, "checkpoint ", dir, ": no DONE marker (incomplete)");
  }
  std::ifstream in(mpath);
  if (!in) return make_error(ErrorCode::kCorrupt, "checkpoint ", mpath, ": missing");
  {
    std::ifstream done(fs::path(dir) / "DONE");
    std::string want;
    done >> want;
    STRATA_ASSIGN_OR_RETURN(const json have, hash_file(mpath));
    if (have["xxh3"].get<std::string>() != want) {
      return make_error(ErrorCode::kCorrupt, "checkpoint ", mpath, ": xxh3 ",
                        have["xxh3"].get<std::string>(), ", the DONE marker says '", want, "'");
    }
  }
  // Bounded before it is parsed (a manifest names a few files per rank).
  constexpr uintmax_t kMaxManifestBytes = uintmax_t{64} << 20;
  std::error_code ec;
  if (fs::file_size(mpath, ec) > kMaxManifestBytes) {
    return make_error(ErrorCode::kCorrupt, "checkpoint ", mpath, ": over ", kMaxManifestBytes,
                      " bytes (not a strata manifest)");
  }
  json m = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object() || m.value("format", "") != "strata-checkpoint" ||
      m.value("version", 0) != kVersion || !m.contains("files")) {
    return make_error(ErrorCode::kCorrupt, "checkpoint ", mpath,
                      ": not a strata checkpoint manifest of version ", kVersion);
  }
  return m;
}

namespace {
// dir/name against the manifest's entry `want` ({"bytes", "xxh3"}).
Status check_hash(const std::string& dir, const std::string& name, const json& want) {
  STRATA_ASSIGN_OR_RETURN(const json have, hash_file(dir + "/" + name));
  if (have == want) return ok_status();
  return make_error(
      ErrorCode::kCorrupt, "checkpoint ", dir, "/", name, ": ", have["bytes"].get<uint64_t>(),
      " bytes with xxh3 ", have["xxh3"].get<std::string>(), ", the manifest says ",
      want.value("bytes", uint64_t{0}), " bytes with xxh3 ", want.value("xxh3", std::string("?")));
}
}  // namespace

Result<CheckpointInfo> verify_checkpoint(const std::string& dir, int rank,
                                         const CheckpointInfo& expect) {
  STRATA_ASSIGN_OR_RETURN(const json m, read_manifest(dir));
  CheckpointInfo got;
  got.step = m.value("step", int64_t{-1});
  got.ranks = m.value("ranks", 0);
  got.stage = m.value("stage", -1);
  got.model = m.value("model", "");
  got.extra_json = m.value("extra", json::object()).dump();
  if (got.ranks != expect.ranks) {
    return make_error(ErrorCode::kConfig, "checkpoint ", dir, " was written by ", got.ranks,
                      " ranks; this run has ", expect.ranks,
                      " (resume with the same number of ranks)");
  }
  if (got.stage != expect.stage) {
    return make_error(ErrorCode::kConfig, "checkpoint ", dir, " is of ZeRO stage ", got.stage,
                      "; this run is of stage ", expect.stage, " (resume with the same stage)");
  }
  if (got.model != expect.model) {
    return make_error(ErrorCode::kConfig, "checkpoint ", dir, " holds the model ", got.model,
                      "; this run's is ", expect.model);
  }
  // This rank's files and the shared ones (not other ranks'), as the manifest says.
  for (const auto& [name, want] : m["files"].items()) {
    const bool other_rank = name.find("-rank") != std::string::npos &&
                            name.find("-rank" + std::to_string(rank) + ".") == std::string::npos;
    // The optimizer file is checked by load_checkpoint as it reads it (one pass, not two).
    if (other_rank || name == "optimizer-rank" + std::to_string(rank) + ".bin") continue;
    STRATA_RETURN_IF_ERROR(check_hash(dir, name, want));
  }
  return got;
}

Status verify_checkpoint_file(const std::string& dir, const std::string& name) {
  STRATA_ASSIGN_OR_RETURN(const json m, read_manifest(dir));
  if (!m["files"].is_object() || !m["files"].contains(name)) {
    return make_error(ErrorCode::kCorrupt, "checkpoint ", dir, "/manifest.json: no entry for ",
                      name);
  }
  return check_hash(dir, name, m["files"][name]);
}

Result<StepScaling::State> load_checkpoint(const std::string& dir, int rank,
                                           OffloadedOptimizer& opt) {
  const std::string name = "optimizer-rank" + std::to_string(rank) + ".bin";
  const std::string path = dir + "/" + name;
  std::ifstream mi(dir + "/manifest.json");
  const json manifest = json::parse(mi, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.contains("files") || !manifest["files"].contains(name)) {
    return make_error(ErrorCode::kCorrupt, "checkpoint ", dir, "/manifest.json: no entry for ",
                      name);
  }
  if (!fs::exists(path)) return make_error(ErrorCode::kCorrupt, "checkpoint ", path, ": missing");
  auto opened = nvme::DirectReader::open(path);
  if (!opened.ok()) {
    return make_error(opened.status().code(), "checkpoint ", opened.status().message());
  }
  nvme::DirectReader in = std::move(*opened);
  Status io;  // a failed read: its error, not "truncated"
  auto corrupt = [&path](const std::string& what) {
    return make_error(ErrorCode::kCorrupt, "checkpoint ", path, ": ", what);
  };
  // Hashed as it is read; checked against the manifest at the end.
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(),
                                                                &XXH3_freeState);
  XXH3_64bits_reset(hash.get());
  uint64_t bytes = 0;
  auto read = [&](void* to, size_t n) {
    auto r = in.read(to, n);
    if (!r.ok() && io.ok()) io = r.status();
    const size_t got = r.ok() ? *r : 0;
    XXH3_64bits_update(hash.get(), to, got);
    bytes += got;
    return got == n;
  };
  char magic[8] = {};
  int64_t head[2] = {};
  read(magic, sizeof(magic));
  const bool whole = read(head, sizeof(head));
  STRATA_RETURN_IF_ERROR(io);
  if (!whole || std::memcmp(magic, kMagic, sizeof(magic)) != 0 || head[0] != kVersion) {
    return corrupt("not a strata optimizer file of version " + std::to_string(kVersion));
  }
  if (head[1] != static_cast<int64_t>(opt.num_partitions())) {
    return corrupt("holds " + std::to_string(head[1]) + " partitions; this run has " +
                   std::to_string(opt.num_partitions()));
  }
  std::vector<float> st;
  std::vector<bool> seen(opt.num_partitions(), false);
  for (size_t k = 0; k < opt.num_partitions(); ++k) {
    int64_t rec[2] = {-1, 0};  // partition, elements
    if (!read(rec, sizeof(rec))) {
      STRATA_RETURN_IF_ERROR(io);
      return corrupt("truncated after " + std::to_string(k) + " partitions");
    }
    if (rec[0] < 0 || rec[0] >= head[1] || seen[static_cast<size_t>(rec[0])]) {
      return corrupt("record " + std::to_string(k) + " names partition " + std::to_string(rec[0]) +
                     " (of " + std::to_string(head[1]) + ", each once)");
    }
    const auto p = static_cast<size_t>(rec[0]);
    seen[p] = true;
    const int64_t n = rec[1];
    if (n != opt.numel(p)) {
      return corrupt("partition " + std::to_string(p) + " holds " + std::to_string(n) +
                     " elements; this run's has " + std::to_string(opt.numel(p)));
    }
    st.resize(3 * static_cast<size_t>(n));
    if (!read(st.data(), st.size() * 4)) {
      STRATA_RETURN_IF_ERROR(io);
      return corrupt("truncated in partition " + std::to_string(p));
    }
    STRATA_RETURN_IF_ERROR(opt.load(p, st.data(), st.data() + n, st.data() + 2 * n));
  }
  char extra = 0;
  read(&extra, 1);  // the end of the file, counted if it is not
  STRATA_RETURN_IF_ERROR(io);
  const json have = {{"bytes", bytes}, {"xxh3", hex(XXH3_64bits_digest(hash.get()))}};
  const json& want = manifest["files"][name];
  if (have != want) {
    return corrupt(std::to_string(bytes) + " bytes with xxh3 " + have["xxh3"].get<std::string>() +
                   ", the manifest says " + std::to_string(want.value("bytes", uint64_t{0})) +
                   " bytes with xxh3 " + want.value("xxh3", std::string("?")));
  }
  const std::string spath = dir + "/state-rank" + std::to_string(rank) + ".json";
  std::ifstream sin(spath);
  const json s = json::parse(sin, nullptr, /*allow_exceptions=*/false);
  if (s.is_discarded() || !s.contains("adam_steps")) {
    return make_error(ErrorCode::kCorrupt, "checkpoint ", spath, ": unreadable");
  }
  StepScaling::State out;
  out.applied = s["adam_steps"].get<int64_t>();
  out.scaler.scale = s["loss_scale"].get<double>();
  out.scaler.hysteresis_left = s["hysteresis_left"].get<int>();
  out.scaler.iter = s["scaler_iter"].get<int64_t>();
  out.scaler.last_overflow_iter = s["last_overflow_iter"].get<int64_t>();
  out.scaler.skipped = s["skipped"].get<int64_t>();
  return out;
}

}  // namespace strata::engine

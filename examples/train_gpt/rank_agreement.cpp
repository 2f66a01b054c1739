#include "rank_agreement.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <vector>

#include "comm/gather_text.h"

namespace strata::train_gpt {
namespace {

// A data file's identity: its size and a hash of its first and last 64 KiB.
std::string file_identity(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "cannot open";
  struct stat st {};
  std::string bytes;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    constexpr off_t kEdge = 64 << 10;
    char buf[kEdge];
    for (const off_t at : {off_t{0}, std::max<off_t>(0, st.st_size - kEdge)}) {
      const ssize_t got = ::pread(fd, buf, sizeof buf, at);
      if (got > 0) bytes.append(buf, static_cast<size_t>(got));
    }
  }
  ::close(fd);
  std::ostringstream os;
  os << st.st_size << " bytes, hash " << std::hex << std::hash<std::string>{}(bytes);
  return os.str();
}

// "name\tvalue" lines, one per setting, in the same order on every rank.
std::string settings_of(const CLI::App& app, const DataSource& source, const ConfigReport& config) {
  std::ostringstream os;
  for (const CLI::Option* opt : app.get_options()) {
    const std::string name = opt->get_name();
    if (name == "--help" || name == "--nvme-path") continue;
    std::string value;
    if (opt->count() > 0) {
      for (const std::string& r : opt->results()) value += (value.empty() ? "" : " ") + r;
    } else {
      value = opt->get_default_str() + " (default)";
    }
    os << name << '\t' << value << '\n';
  }
  os << "--config's content\thash " << std::hex << std::hash<std::string>{}(config.content)
     << std::dec << '\n';
  const std::pair<const char*, const std::vector<std::string>*> sets[] = {
      {"--data", &source.files}, {"--val-data", &source.val_files}};
  for (const auto& [flag, files] : sets) {
    os << flag << " files\t" << files->size() << '\n';
    for (const std::string& path : *files) {
      os << flag << " file " << path << '\t' << file_identity(path) << '\n';
    }
  }
  return os.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Rank 0: the first setting the ranks differ on, with every rank's value; empty when they agree.
std::string first_difference(const std::vector<std::string>& texts) {
  std::vector<std::vector<std::string>> ranks;
  size_t n = 0;
  for (const std::string& t : texts) {
    ranks.push_back(lines_of(t));
    n = std::max(n, ranks.back().size());
  }
  for (size_t i = 0; i < n; ++i) {
    auto at = [&](size_t r) { return i < ranks[r].size() ? ranks[r][i] : std::string("\t(none)"); };
    bool same = true;
    for (size_t r = 1; r < ranks.size(); ++r) same = same && at(r) == at(0);
    if (same) continue;
    // The setting's name (the first rank's), then the ranks grouped by value.
    const std::string line0 = at(0);
    std::map<std::string, std::string> by_value;  // value -> "rank 0, rank 2"
    for (size_t r = 0; r < ranks.size(); ++r) {
      const std::string line = at(r);
      const size_t tab = line.find('\t');
      const std::string value = line.substr(tab == std::string::npos ? 0 : tab + 1);
      std::string& who = by_value[value];
      who += (who.empty() ? "rank " : ", rank ") + std::to_string(r);
    }
    std::ostringstream os;
    os << line0.substr(0, line0.find('\t')) << " differs between the ranks:";
    int shown = 0;
    for (const auto& [value, who] : by_value) {
      if (shown++ == 4) {
        os << " ...";
        break;
      }
      os << (shown > 1 ? ";" : "") << " " << who << " has " << value;
    }
    os << " (every rank runs the same settings and data)";
    return os.str();
  }
  return std::string();
}

}  // namespace

Status check_ranks_agree(const CLI::App& app, const DataSource& source, const ConfigReport& config,
                         comm::Communicator& world) {
  if (world.size() < 2) return ok_status();
  STRATA_ASSIGN_OR_RETURN(const std::vector<std::string> texts,
                          comm::gather_text(world, settings_of(app, source, config)));
  std::string verdict = world.rank() == 0 ? first_difference(texts) : std::string();
  // Rank 0's verdict on every rank: its length, then its bytes (in 4-byte words).
  float len = static_cast<float>(verdict.size());
  STRATA_RETURN_IF_ERROR(world.broadcast(&len, 1, DType::kF32, 0));
  const auto n = static_cast<size_t>(len);
  if (n == 0) return ok_status();
  std::vector<float> words((n + 3) / 4, 0.0f);
  if (world.rank() == 0) std::memcpy(words.data(), verdict.data(), n);
  STRATA_RETURN_IF_ERROR(world.broadcast(words.data(), words.size(), DType::kF32, 0));
  verdict.assign(reinterpret_cast<const char*>(words.data()), n);
  return make_error(ErrorCode::kConfig, verdict);
}

}  // namespace strata::train_gpt

// Test helper: a fresh directory (mkdtemp) under $TMPDIR if set, else under the test's build
// directory (a real disk); removed with everything in it on destruction.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace strata::test {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& parent = "") {
    std::string base = parent;
    if (base.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      base = (tmp != nullptr && *tmp != '\0') ? tmp : STRATA_TEST_SCRATCH_DIR;
    }
    std::string templ = base + "/strata_nvme_test_XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) != nullptr) path_ = buf.data();
  }
  ~ScratchDir() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace strata::test

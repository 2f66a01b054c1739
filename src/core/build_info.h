// What this binary was built with. build_info.cpp is the one registry file that knows which
// backends were compiled in; everything else asks here at run time (DESIGN.md §2).
#pragma once

#include <string>

namespace strata {

struct BuildInfo {
  bool has_cuda = false;
  bool has_nccl = false;
  const char* cuda_architectures = "";
  const char* sanitizer = "";
  const char* build_type = "";
};

const BuildInfo& build_info();
std::string build_info_string();  // one line, for logs and --version

}  // namespace strata

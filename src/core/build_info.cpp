#include "core/build_info.h"

namespace strata {

const BuildInfo& build_info() {
  static const BuildInfo info{
      .has_cuda = STRATA_BUILD_HAS_CUDA != 0,
      .has_nccl = STRATA_BUILD_HAS_NCCL != 0,
      .cuda_architectures = STRATA_BUILD_CUDA_ARCHS,
      .sanitizer = STRATA_BUILD_SANITIZER,
      .build_type = STRATA_BUILD_TYPE,
  };
  return info;
}

std::string build_info_string() {
  const BuildInfo& b = build_info();
  std::string s = "strata: cuda=";
  s += b.has_cuda ? "yes" : "no";
  if (b.has_cuda) {
    s += " (arch ";
    s += b.cuda_architectures;
    s += ")";
  }
  s += " nccl=";
  s += b.has_nccl ? "yes" : "no";
  s += " build=";
  s += b.build_type;
  if (b.sanitizer[0] != '\0') {
    s += " sanitize=";
    s += b.sanitizer;
  }
  return s;
}

}  // namespace strata

// Run-time detection and parsing of the SIMD path (declared in cpu_adam.h).
#include "cpu/cpu_adam.h"

namespace strata::cpu {

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

Isa detect_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return Isa::kAvx512;
  }
  // F16C is present on every AVX2 CPU made so far, but the AVX2 kernels use it, so ask.
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    return Isa::kAvx2;
  }
  return Isa::kScalar;
}

Result<Isa> parse_isa(std::string_view name) {
  Isa isa;
  if (name == "auto") return detect_isa();
  if (name == "scalar") {
    isa = Isa::kScalar;
  } else if (name == "avx2") {
    isa = Isa::kAvx2;
  } else if (name == "avx512") {
    isa = Isa::kAvx512;
  } else {
    return make_error(ErrorCode::kConfig, "ISA '", name,
                      "' is not accepted (use auto, scalar, avx2 or avx512)");
  }
  if (static_cast<int>(isa) > static_cast<int>(detect_isa())) {
    return make_error(ErrorCode::kUnsupported, "ISA '", name,
                      "' is not supported by this CPU (best: ", isa_name(detect_isa()), ")");
  }
  return isa;
}

}  // namespace strata::cpu

// Kernels' matmul epilogues (kernels.h) as a sequence of kernels, and their argument checks.
// Inline, and included only at the end of kernels.h (never on its own): the CUDA backend's
// library, linked after strata_gpu's, calls them too.
#pragma once

#include <cstdint>

namespace strata::gpu {

inline Status Kernels::check_epilogue(const MatmulArgs& args) {
  if (args.epilogue == Epilogue::kNone) return ok_status();
  if (args.epilogue != Epilogue::kGelu && args.epilogue != Epilogue::kGeluBackward) {
    return make_error(ErrorCode::kConfig, "matmul: epilogue ", static_cast<int>(args.epilogue),
                      " is not one of none, gelu, gelu backward");
  }
  if (args.aux == nullptr) {
    return make_error(ErrorCode::kConfig,
                      "matmul: the GELU epilogues need aux (the pre-activation)");
  }
  if (args.beta != 0.0f) {
    return make_error(ErrorCode::kConfig, "matmul: beta ", args.beta,
                      " with a GELU epilogue (accepted: 0)");
  }
  if (args.epilogue == Epilogue::kGeluBackward && args.bias != nullptr) {
    return make_error(ErrorCode::kConfig, "matmul: a bias with the GELU backward epilogue");
  }
  const auto bytes = static_cast<uintptr_t>(args.m * args.n) * dtype_size(args.dtype_c);
  const auto c = reinterpret_cast<uintptr_t>(args.c), aux = reinterpret_cast<uintptr_t>(args.aux);
  if (c < aux + bytes && aux < c + bytes) {
    return make_error(ErrorCode::kConfig, "matmul: aux overlaps C (an epilogue writes both)");
  }
  return ok_status();
}

inline Status Kernels::matmul_in_sequence(Stream& s, const MatmulArgs& args) {
  MatmulArgs plain = args;
  plain.epilogue = Epilogue::kNone;
  plain.aux = nullptr;
  const int64_t n = args.m * args.n;
  switch (args.epilogue) {
    case Epilogue::kNone: return matmul(s, plain);
    case Epilogue::kGelu:
      plain.c = args.aux;
      STRATA_RETURN_IF_ERROR(matmul(s, plain));
      return gelu_forward(s, args.c, args.aux, n, args.dtype_c);
    case Epilogue::kGeluBackward:
      STRATA_RETURN_IF_ERROR(matmul(s, plain));
      return gelu_backward(s, args.c, args.aux, args.c, n, args.dtype_c);
  }
  return ok_status();
}

}  // namespace strata::gpu

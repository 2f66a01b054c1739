// The backend registry: the one file of src/comm that knows whether NCCL was built.
#include "comm/comm.h"
#include "comm/local_comm.h"
#include "comm/mpi_comm.h"
#include "cpu/topology.h"

#if STRATA_WITH_NCCL
#include "comm/nccl_comm.h"
#endif

namespace strata::comm {

std::string_view backend_name(Backend backend) {
  switch (backend) {
    case Backend::kAuto: return "auto";
    case Backend::kLocal: return "local";
    case Backend::kMpi: return "mpi";
    case Backend::kNccl: return "nccl";
  }
  return "?";
}

Result<Backend> parse_backend(std::string_view name) {
  if (name == "auto") return Backend::kAuto;
  if (name == "local") return Backend::kLocal;
  if (name == "mpi") return Backend::kMpi;
  if (name == "nccl") return Backend::kNccl;
  return make_error(ErrorCode::kConfig, "communicator backend '", name,
                    "' is not accepted (use auto, local, mpi or nccl)");
}

bool nccl_built() { return STRATA_WITH_NCCL != 0; }

Result<std::unique_ptr<Communicator>> create_communicator(Backend backend, CommOptions options,
                                                          int device_ordinal) {
  if (backend == Backend::kAuto) {
#if STRATA_WITH_NCCL
    // NCCL needs a GPU per rank of this machine (it refuses two ranks on one GPU).
    if (nccl_device_count() >= cpu::local_rank_from_env().local_size) backend = Backend::kNccl;
#endif
    if (backend == Backend::kAuto) backend = launched_by_mpirun() ? Backend::kMpi : Backend::kLocal;
  }
  switch (backend) {
    case Backend::kLocal: return create_local_comm(options);
    case Backend::kMpi: return create_mpi_comm(options);
    case Backend::kNccl:
#if STRATA_WITH_NCCL
      return create_nccl_comm(options, device_ordinal);
#else
      (void)device_ordinal;
      return make_error(ErrorCode::kUnsupported,
                        "the NCCL communicator was not built (configure with CUDA and NCCL)");
#endif
    case Backend::kAuto: break;
  }
  return make_error(ErrorCode::kInternal, "unhandled communicator backend");
}

}  // namespace strata::comm

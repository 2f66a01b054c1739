// NcclComm: the Communicator over NCCL for CUDA device buffers (built only when NCCL is found;
// ask comm::nccl_built() or use create_communicator in comm.h, which knows).
//
// Start-up: an MpiComm over the MPI job is the bootstrap: rank 0 makes the ncclUniqueId and
// broadcasts it; every rank then calls ncclCommInitRank on its GPU (device_ordinal, or
// local_rank % GPU count when -1). If any rank cannot start (no GPU, CUDA or NCCL error), every
// rank gets a kComm/kUnsupported error instead of waiting.
//
// Collectives are enqueued on a CUDA stream owned by the communicator, in call order; a handle
// completes when a CUDA event recorded after the collective has completed (test() queries it and
// NCCL's asynchronous error). enqueue() puts them on the caller's stream instead (the executor's
// link lane), with nothing to wait for: a failure after that surfaces when the stream is
// synchronised; a peer that never arrives (or an asynchronous NCCL error) is caught by a
// watchdog thread (nccl_watchdog.h) that aborts the job past CommOptions::timeout_s, naming the
// collective, as a host wait does. 16-bit types
// are reduced natively by NCCL (ncclFloat16, ncclBfloat16). Gather and scatter are grouped
// ncclSend/ncclRecv. Barrier is a one-element all-reduce on the stream. Byte counts use the
// formulas of communicator.h. Checked mode agrees on the call through the MPI bootstrap. abort()
// aborts the NCCL communicator and the MPI job. Thread safety: as Communicator; the calling
// thread's current CUDA device is set to the communicator's device on each call.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace strata::comm {

// Number of CUDA devices visible to this process; 0 when there is no driver or device.
int nccl_device_count();

Result<std::unique_ptr<Communicator>> create_nccl_comm(
    CommOptions options = CommOptions::from_env(), int device_ordinal = -1);

}  // namespace strata::comm

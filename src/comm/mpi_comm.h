// MpiComm: the Communicator over MPI (OpenMPI) for host buffers (and CpuDevice memory, which is
// host memory). Collectives are MPI non-blocking collectives on a private duplicate of
// MPI_COMM_WORLD with MPI_ERRORS_RETURN, so MPI failures come back as kComm Status values.
//
// 16-bit reductions (f16/bf16 sum and max): the input is widened to fp32 scratch, reduced with
// MPI_FLOAT and narrowed once when the handle completes (accuracy bound in communicator.h).
// Other collectives move 16-bit data as MPI_UINT16_T.
//
// Progress: OpenMPI progresses non-blocking collectives only inside MPI calls, so work overlapped
// with a pending handle should call handle.test() now and then (wait() polls with back-off).
//
// MPI start-up: the first MpiComm initialises MPI with MPI_THREAD_MULTIPLE when MPI is not yet
// initialised (and finalises it at process exit); an already initialised MPI is used as it is
// (a thread level below MULTIPLE is logged: then only one thread may use MPI at a time).
// Counts are MPI ints: a collective whose count (times the rank count where buffers are n*c) is
// above INT_MAX is refused with kUnsupported; split it.
// Thread safety: as Communicator.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace strata::comm {

// True when this process was started by mpirun/mpiexec (OpenMPI, PMI or PMIx environment).
bool launched_by_mpirun();

// A communicator over all processes of the MPI job (a job of one when not under mpirun).
Result<std::unique_ptr<Communicator>> create_mpi_comm(
    CommOptions options = CommOptions::from_env());

}  // namespace strata::comm

// Internal to src/comm: the MpiComm class, for the NCCL backend's bootstrap (it includes mpi.h,
// which only src/comm may include).
#pragma once

#include <mpi.h>

#include <memory>

#include "comm/communicator.h"
#include "comm/scratch_pool.h"

namespace strata::comm {

// Maps an MPI return code to a Status (kComm with MPI's error string); ok for MPI_SUCCESS.
Status mpi_status(int rc, std::string_view what);

// Initialises MPI once per process (MPI_THREAD_MULTIPLE requested) unless already initialised.
Status ensure_mpi_initialized();

class MpiComm final : public Communicator {
 public:
  // Takes ownership of `comm` (a duplicate made by the factory) and frees it when destroyed.
  MpiComm(MPI_Comm comm, CommOptions options);
  ~MpiComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string_view backend() const override { return "mpi"; }
  [[noreturn]] void abort(const Status& reason) override;

  MPI_Comm handle() const { return comm_; }
  // Checked-mode agreement on the call (public so that NcclComm can use it).
  Status verify_call(const CollectiveCall& call, bool locally_valid) override;

 protected:
  Result<std::unique_ptr<PendingOp>> start_impl(const CollectiveCall& call) override;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  // The widened copies of 16-bit reductions, reused from call to call.
  std::shared_ptr<ScratchPool> scratch_ = ScratchPool::create();
};

Result<std::unique_ptr<MpiComm>> create_mpi_comm_impl(CommOptions options);

}  // namespace strata::comm

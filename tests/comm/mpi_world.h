// Test helper: the MPI communicator of a test run under mpirun (created on first use, kept for
// the process), with a watchdog of 120 s: a hang in a test becomes an abort with a message.
#pragma once

#include <memory>

#include "comm/mpi_comm.h"
#include "core/check.h"

namespace strata::comm::testing {

inline Communicator& mpi_world() {
  static std::unique_ptr<Communicator> comm = [] {
    CommOptions o;
    o.timeout_s = 120.0;
    auto r = create_mpi_comm(o);
    STRATA_CHECK(r.ok(), r.status().to_string());
    return std::move(r).value();
  }();
  return *comm;
}

}  // namespace strata::comm::testing

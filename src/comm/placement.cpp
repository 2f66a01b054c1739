#include "comm/placement.h"

namespace strata::comm {

Result<cpu::RankPlacement> place_rank(const Communicator& comm, bool bind) {
  return cpu::place_and_bind(comm.rank(), comm.local_rank(), comm.local_size(), bind);
}

}  // namespace strata::comm

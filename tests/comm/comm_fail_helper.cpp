// Run under mpirun by test_comm_failure: rank 1 fails in the way named by argv[1] while the other
// ranks enter a collective; the job must end (non-zero) within a bounded time with a message.
//   abort  rank 1 calls Communicator::abort with a message
//   hang   rank 1 never joins the all-reduce; the others' watchdog (2 s) aborts the job
//   crash  rank 1 ends abnormally (std::abort) without a message of ours
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_comm.h"

int main(int argc, char** argv) {
  using namespace strata;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "abort" && mode != "hang" && mode != "crash") {
    std::fprintf(stderr, "usage: comm_fail_helper abort|hang|crash (got '%s')\n", mode.c_str());
    return 2;
  }
  comm::CommOptions options;
  options.timeout_s = 2.0;
  auto created = comm::create_mpi_comm(options);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().to_string().c_str());
    return 2;
  }
  comm::Communicator& c = **created;
  if (!c.barrier().ok()) return 2;
  std::vector<float> in(1024, 1.0f);
  std::vector<float> out(1024, 0.0f);
  if (c.rank() == 1) {
    if (mode == "abort") c.abort(make_error(ErrorCode::kInternal, "injected failure on rank 1"));
    if (mode == "crash") std::abort();
    // hang: stay alive without joining; the job is ended by another rank's watchdog.
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  const Status s = c.all_reduce(in.data(), out.data(), in.size(), DType::kF32);
  std::fprintf(stderr, "rank %d: all_reduce returned %s\n", c.rank(), s.to_string().c_str());
  return 0;
}

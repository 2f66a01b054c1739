// Run under mpirun by test_comm_nccl_failure with 2 ranks, a CUDA device each (a GPU or the
// emulated runtime): rank 1 never joins an all-reduce that rank 0 enqueues on its own stream
// (Communicator::enqueue, as the executor's link lane does). Nothing on the host waits on that
// collective and rank 0's stream synchronisation would wait forever: its watchdog (2 s) must end
// the job with a message naming the collective. Exit 3: no device to run on (the test skips).
#include <chrono>
#include <cstdio>
#include <thread>

#include "comm/nccl_comm.h"
#include "cpu/topology.h"
#include "gpu/device.h"

int main() {
  using namespace strata;
  const cpu::LocalRankInfo local = cpu::local_rank_from_env();
  if (comm::nccl_device_count() < local.local_size) return 3;
  gpu::DeviceOptions dopt;
  dopt.ordinal = local.local_rank;
  dopt.memory_limit_bytes = size_t{64} << 20;
  auto dev = gpu::create_device(gpu::DeviceKind::kCuda, dopt);
  if (!dev.ok()) {
    std::fprintf(stderr, "%s\n", dev.status().to_string().c_str());
    return 2;
  }
  auto stream = (*dev)->create_stream();
  auto buf = (*dev)->allocate(1024 * sizeof(float));
  comm::CommOptions options;
  options.timeout_s = 2.0;
  auto created = comm::create_nccl_comm(options, local.local_rank);
  if (!stream.ok() || !buf.ok() || !created.ok()) {
    std::fprintf(stderr, "set-up failed: %s\n", created.status().to_string().c_str());
    return 2;
  }
  comm::Communicator& c = **created;
  if (!c.barrier().ok()) return 2;
  if (c.rank() == 1) {  // alive, never joining; the job is ended by rank 0's watchdog
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  comm::CollectiveCall call;
  call.kind = comm::CollectiveKind::kAllReduce;
  call.send = call.recv = buf->data();
  call.count = 1024;
  call.dtype = DType::kF32;
  const Status enqueued = c.enqueue(call, (*stream)->native_handle());
  std::fprintf(stderr, "rank 0: enqueue returned %s\n", enqueued.to_string().c_str());
  const Status synced = (*stream)->synchronize();
  std::fprintf(stderr, "rank 0: synchronize returned %s\n", synced.to_string().c_str());
  return 0;
}

// Calibration: this machine's rates for the cost model (sched::Rates, scheduler/cost_model.h),
// measured by short runs and cached in a file keyed by the machine.
//
// What is measured (each the median of three timed runs after one warm-up; compute, of 2-15,
// disk of five: this disk's rate swings by half from one second to the next):
//   compute       the model's own entry points on one- and two-layer copies of the model (same
//                 width, heads, vocabulary, batch, sequence and dtype) on the real device,
//                 replayed through the Executor back to back and as a step replays them
//                 (compute_probe.h: each op a task after a gather and an upload, with several
//                 ranks the waits at the collectives), the four alternating after a quarter of
//                 a second of warm-up: the back-to-back difference gives a layer's forward +
//                 backward FLOPs over their time (Work::kFlops), the rest the shared block's
//                 (embedding, head, loss: kFlopsHead); the step shape's extra time per op, less
//                 what the cost model charges for it, is Rates::handoff_s;
//   link          32 MiB copies host->device and device->host through a stream (kH2DBytes,
//                 kD2HBytes); on the CpuDevice they are held to its link rate when it has one;
//   host          the gradient check over 64 MiB of 16-bit values in the cpu lane's arena
//                 (kHostBytes);
//   adam          CpuAdam over 4M elements in the cpu lane's arena (kAdamElements), and the
//                 device's Adam kernel over 4M elements (kDeviceAdamElements), and the
//                 device's fp32 += bf16 sum (Kernels::accumulate) over them (kDeviceBytes);
//   disk          (with NVMe directories) 4 objects of 32 MiB written, then read, at once
//                 through a swap store of 144 MiB opened for it in those directories, as the
//                 nvme lane does (kNvmeWriteBytes, kNvmeReadBytes), and a request's latency:
//                 a 4 KiB write and read, alone, 9 times (kNvmeOps; each NVMe task is one);
//                 and the process's CPU time meanwhile, per request from the small ones and per
//                 byte from the rest of the large ones' (Rates::nvme_cpu_op_s, nvme_cpu_byte_s);
//                 and whether the disk drains (Rates::disk_drains): a 64 KiB read issued with a
//                 2 MiB one completing with it (at 0.7x its time or later; median of 9);
//   network       (more than one rank; collective, so measured every time, not cached):
//                 all-gathers and reduce-scatters of 2048 and 256Ki 16-bit elements per rank:
//                 a latency per call (kNetCalls, kNetReduceCalls) and a rate for the bytes
//                 sent (kNetBytes, kNetReduceBytes), the reductions apart (they sum as they go:
//                 at 32 KiB five times an all-gather's time on the test machine); the same
//                 four for the device links (kLinkBytes, ...) with the device communicator
//                 (CalibrationRequest::device_comm, on device buffers), else the network's;
//   overhead      a plan of 64 empty tasks on the compute and cpu lanes replayed by the executor
//                 (Rates::task_overhead_s).
// The rates of one lane are aggregate rates (a lane's concurrent tasks share its cores, link or
// disk), so the returned Rates run one task at a time on the cpu lane, and the nvme lane's
// tasks share the disk (Rates::shared_disk: the executor's workers issue their requests at
// once); on the CpuDevice the compute and cpu lanes share the same cores (Rates::shared_cores).
//
// Ranks: the ranks of one machine share its cores, memory bandwidth and disks, and run their
// steps at the same time, so they measure at the same time: an entry is measured when any rank
// lacks it, by every rank, after a barrier; each rate is what one rank gets while the others
// do the same (on the 2-vCPU test machine two ranks each compute at about 0.55x the rate of one
// alone, which a rate measured alone predicted as 0.55x the step). Then every rank takes the
// slowest rank's rates (the largest task overhead and hand-off): a step waits at its collectives
// for the slowest rank, and the ranks predict, plan and choose alike.
//
// Cache: one JSON file ($STRATA_CACHE_DIR, else $XDG_CACHE_HOME/strata, else ~/.cache/strata:
// calibration.json), an object per machine (host name, CPU model, cores, device, and the ranks
// on this machine when more than one), an entry per measurement and its parameters (the
// model's shape, threads, the filesystems of the store's directories: type, id and device
// number, so that a fresh temporary directory on a measured disk is not measured again). A
// missing entry is measured and added; `redo` (--calibrate) measures every entry this
// configuration uses again. An entry keeps its last five measurements (rows, oldest first; an
// array of numbers is one row) and its value is their median, value by value: the test
// machine's speed flips for seconds at a time, and one calibration has read 0.6x or 1.6x its
// typical compute rate. Rows of another form (another version's: fewer or more values) are left
// out, and an entry without any is measured again. The file is replaced atomically (rank 0
// writes it).
//
// Thread safety: none; calibrate() from one thread (every rank, when ranks > 1).
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "gpu/device.h"
#include "model/config.h"
#include "model/model.h"
#include "nvme/swap_store.h"
#include "scheduler/cost_model.h"

namespace strata::planner {

struct CalibrationRequest {
  gpu::Device* device = nullptr;  // the real device (required)
  model::ModelProbe probe;        // the model (the compute probe: one and two of its layers)
  model::RunShape shape;
  // The disk: a small swap store of its own in these directories (--nvme-path), with these
  // settings; none: the disk is not measured.
  std::vector<std::string> nvme_dirs;
  uint64_t nvme_block_bytes = 1 << 20;
  uint32_t nvme_queue_depth = 32;
  comm::Communicator* comm = nullptr;  // network rate when size() > 1; collective
  // The device collectives' communicator (NCCL), measured for the device links; null: the
  // links are priced at the network's rates (the CpuDevice's device collectives are the host
  // communicator's). Collective too.
  comm::Communicator* device_comm = nullptr;
  int host_threads = 1;    // the cpu lane's arena
  std::string cache_path;  // empty: the default file above
  bool redo = false;       // --calibrate
};

struct Calibration {
  sched::Rates rates;
  int measured = 0, cached = 0;  // entries measured now, taken from the cache
  std::string cache_path;
  std::string describe() const;  // one line per rate
};

Result<Calibration> calibrate(const CalibrationRequest& request);

// The default cache file (see above).
std::string default_calibration_path();

}  // namespace strata::planner

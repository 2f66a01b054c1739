// Lanes and memory tiers of the scheduler (DESIGN.md §4). A lane is where a task runs:
//   compute, h2d, d2h: one device Stream each (in order; work is enqueued ahead, and a
//                      dependency between two of them is an event record/wait);
//   link:              a device Stream too, for collectives a device communicator enqueues on
//                      a stream (NCCL): ordered by events like the copy lanes;
//   nvme, cpu, comm:   host threads (nvme and cpu run several tasks at once, comm one at a time
//                      in plan order so that collectives are issued in the same order on every
//                      rank).
// Values; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

namespace strata::sched {

enum class Lane : uint8_t { kCompute = 0, kH2D, kD2H, kLink, kNvme, kCpu, kComm };
inline constexpr int kNumLanes = 7;
inline constexpr int kNumStreamLanes = 4;

inline bool is_stream_lane(Lane lane) { return static_cast<int>(lane) < kNumStreamLanes; }
// Tasks of this lane start in plan order, one after the other.
inline bool is_in_order_lane(Lane lane) { return is_stream_lane(lane) || lane == Lane::kComm; }
// A transfer lane: time the compute lane waits on one of these is "exposed transfer".
inline bool is_transfer_lane(Lane lane) {
  return lane == Lane::kH2D || lane == Lane::kD2H || lane == Lane::kLink || lane == Lane::kNvme ||
         lane == Lane::kComm;
}
std::string_view lane_name(Lane lane);  // "compute", "h2d", "d2h", "link", "nvme", "cpu", "comm"

// Where a plan buffer lives: device memory (Device::allocate) or pinned host memory.
enum class Tier : uint8_t { kDevice = 0, kPinnedHost };
inline constexpr int kNumTiers = 2;
std::string_view tier_name(Tier tier);  // "device", "pinned host"

}  // namespace strata::sched

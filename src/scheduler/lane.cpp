#include "scheduler/lane.h"

namespace strata::sched {

std::string_view lane_name(Lane lane) {
  switch (lane) {
    case Lane::kCompute: return "compute";
    case Lane::kH2D: return "h2d";
    case Lane::kD2H: return "d2h";
    case Lane::kLink: return "link";
    case Lane::kNvme: return "nvme";
    case Lane::kCpu: return "cpu";
    case Lane::kComm: return "comm";
  }
  return "?";
}

std::string_view tier_name(Tier tier) { return tier == Tier::kDevice ? "device" : "pinned host"; }

}  // namespace strata::sched

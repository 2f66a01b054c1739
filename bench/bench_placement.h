// Bound against unbound, side by side in one run: a measurement repeated alternately with the
// process unbound (every PU, the default memory policy) and bound as train_gpt binds a rank
// (cpu/rank_placement.h, --bind cores: the rank's share of the cores, its memory preferred on
// their NUMA node), the local rank and count taken from the launcher's environment, so that
// under mpirun each process takes its share as a trainer's rank would. One warm-up of each; the
// bound run first on even repeats, the unbound first on odd ones; medians.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "cpu/rank_placement.h"

namespace strata::bench {

struct BindComparison {
  double unbound_s = 0.0, bound_s = 0.0;  // medians
  int threads = 1;                        // the rank's share: both runs use it
  std::string placement;                  // the rank's placement line
  double bound_over_unbound() const { return bound_s > 0 ? unbound_s / bound_s : 0.0; }
};

// `measure(threads)`: one timed run on that many threads, seconds.
inline Result<BindComparison> compare_bound(int repeats,
                                            const std::function<Result<double>(int)>& measure) {
  STRATA_ASSIGN_OR_RETURN(cpu::Topology topo, cpu::Topology::discover());
  const cpu::LocalRankInfo local = cpu::local_rank_from_env();
  cpu::PlacementRequest rq;
  rq.local_rank = local.local_rank;
  rq.local_size = local.local_size;
  rq.bind = cpu::BindMode::kCores;
  STRATA_ASSIGN_OR_RETURN(cpu::Placement p, cpu::place_local_rank(topo, rq));
  BindComparison c;
  c.threads = p.threads();
  c.placement = p.describe(local.local_rank);
  std::vector<double> bound, unbound;
  auto one = [&](bool bind, std::vector<double>* out) -> Status {
    STRATA_RETURN_IF_ERROR(bind ? cpu::apply_placement(topo, p) : topo.unbind());
    STRATA_ASSIGN_OR_RETURN(double s, measure(c.threads));
    if (out != nullptr) out->push_back(s);
    return ok_status();
  };
  for (int r = -1; r < repeats; ++r) {  // r = -1: the warm-up of each
    const bool bound_first = r % 2 == 0;
    STRATA_RETURN_IF_ERROR(one(bound_first, r < 0 ? nullptr : bound_first ? &bound : &unbound));
    STRATA_RETURN_IF_ERROR(one(!bound_first, r < 0 ? nullptr : bound_first ? &unbound : &bound));
  }
  STRATA_RETURN_IF_ERROR(topo.unbind());
  c.bound_s = median(bound);
  c.unbound_s = median(unbound);
  return c;
}

}  // namespace strata::bench

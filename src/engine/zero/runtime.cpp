#include "engine/zero/runtime.h"

namespace strata::engine::zero {

Runtime::Runtime(model::Model& m, OffloadedOptimizer& optimizer, comm::Communicator& c,
                 SwapKeys swap_keys, int64_t inject_inf)
    : model(m),
      opt(optimizer),
      comm(c),
      swap(swap_keys),
      rank(c.rank()),
      ranks(c.size()),
      inject_inf_step(inject_inf) {}

void Runtime::count(const comm::CollectiveCall& call, uint64_t ZeroTraffic::*field) {
  traffic_.*field += comm::textbook_bytes(call, rank, ranks).sent;
}

Status Runtime::on_device(const comm::CollectiveCall& call, uint64_t ZeroTraffic::*field,
                          gpu::Stream* stream) {
  count(call, field);
  traffic_.device_link += comm::textbook_bytes(call, rank, ranks).sent;
  if (stream != nullptr) return dcomm->enqueue(call, stream->native_handle());
  return dcomm->start(call).wait();
}

void Runtime::reset_counts() {
  traffic_ = ZeroTraffic{};
  for (auto& c : lanes_) c.store(0, std::memory_order_relaxed);
}

ZeroLaneBytes Runtime::lane_bytes() const {
  return ZeroLaneBytes{lanes_[0].load(), lanes_[1].load(), lanes_[2].load(), lanes_[3].load()};
}

}  // namespace strata::engine::zero

#include "comm/local_comm.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace strata::comm {
namespace {

class LocalComm final : public Communicator {
 public:
  explicit LocalComm(CommOptions options) : Communicator(options) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string_view backend() const override { return "local"; }

  [[noreturn]] void abort(const Status& reason) override {
    std::fprintf(stderr, "strata: rank 0 of 1 aborting: %s\n", reason.to_string().c_str());
    std::fflush(stderr);
    std::abort();
  }

 protected:
  Result<std::unique_ptr<PendingOp>> start_impl(const CollectiveCall& call) override {
    const size_t bytes = call.count * dtype_size(call.dtype);
    switch (call.kind) {
      case CollectiveKind::kBroadcast:
      case CollectiveKind::kBarrier: break;
      default:
        // With one rank every other collective's result is its input; memmove allows in place.
        if (bytes > 0 && call.send != call.recv) std::memmove(call.recv, call.send, bytes);
        break;
    }
    return std::unique_ptr<PendingOp>();
  }
};

}  // namespace

std::unique_ptr<Communicator> create_local_comm(CommOptions options) {
  return std::make_unique<LocalComm>(options);
}

}  // namespace strata::comm

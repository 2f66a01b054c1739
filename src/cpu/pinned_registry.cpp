#include "cpu/pinned_registry.h"

#include <map>
#include <mutex>
#include <optional>

#include "core/log.h"

namespace strata::cpu {
namespace {

struct Live {
  size_t bytes = 0;
  bool attached = false;
};

struct Registry {
  std::mutex mu;
  std::map<void*, Live> live;
  std::optional<PinnedHook> hook;
  bool warned = false;
};

Registry& registry() {
  static Registry* r = new Registry;  // outlives every static buffer (never destroyed)
  return *r;
}

// Under the registry's lock.
void attach_locked(Registry& r, void* data, Live& l) {
  const Status st = r.hook->attach(data, l.bytes);
  l.attached = st.ok();
  if (!st.ok() && !r.warned) {
    r.warned = true;
    STRATA_LOG(kWarn, "pinned pool: " << r.hook->name << " refused to register " << l.bytes
                                      << " bytes of pinned memory (" << st.to_string()
                                      << "); such buffers are pageable for the device: its "
                                         "copies from and to them do not overlap");
  }
}

}  // namespace

Status install_pinned_hook(PinnedHook hook) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (r.hook) {
    return make_error(ErrorCode::kConfig, "pinned memory is already registered with ", r.hook->name,
                      "; ", hook.name, " cannot register it too");
  }
  r.hook = std::move(hook);
  for (auto& [data, l] : r.live) attach_locked(r, data, l);
  return ok_status();
}

void remove_pinned_hook() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (!r.hook) return;
  for (auto& [data, l] : r.live) {
    if (l.attached) r.hook->detach(data, l.bytes);
    l.attached = false;
  }
  r.hook.reset();
  r.warned = false;
}

size_t live_pinned_buffers() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return r.live.size();
}

size_t attached_pinned_buffers() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  size_t n = 0;
  for (const auto& [data, l] : r.live) n += l.attached ? 1 : 0;
  return n;
}

void track_pinned(void* data, size_t bytes) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  Live& l = r.live[data];
  l.bytes = bytes;
  if (r.hook) attach_locked(r, data, l);
}

void untrack_pinned(void* data) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  const auto it = r.live.find(data);
  if (it == r.live.end()) return;
  if (it->second.attached && r.hook) r.hook->detach(data, it->second.bytes);
  r.live.erase(it);
}

}  // namespace strata::cpu

// Pinned buffers and the device backend that must know them. CUDA copies asynchronously only
// from and to host memory registered with its driver (cudaHostRegister): from pageable memory
// a host-to-device copy is staged through driver buffers at reduced bandwidth, and a
// device-to-host copy returns only when done, blocking the thread that enqueued it, so nothing
// overlaps. src/cpu does not depend on CUDA: a backend installs a hook here, and every pinned
// buffer the pools hand out (cpu::PinnedPool; not allocate_io_buffer's, which only the disk
// sees) is registered with it while it lives, buffers made before the hook included.
//
// A registration the hook refuses is logged once and the buffer used as it is (pageable for the
// device: slower, still correct).
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "core/status.h"

namespace strata::cpu {

struct PinnedHook {
  std::string name;                                        // "CUDA", for messages
  std::function<Status(void* data, size_t bytes)> attach;  // register
  std::function<void(void* data, size_t bytes)> detach;    // unregister
};

// Installs `hook` and attaches every live pinned buffer to it. kConfig when another hook is
// installed (one device backend per process).
Status install_pinned_hook(PinnedHook hook);
// Detaches every live buffer and removes the hook (tests; a backend keeps its hook).
void remove_pinned_hook();
// Live pinned buffers, and how many of them the hook holds now.
size_t live_pinned_buffers();
size_t attached_pinned_buffers();

// pinned_memory.cpp: a buffer made and one about to be unmapped.
void track_pinned(void* data, size_t bytes);
void untrack_pinned(void* data);

}  // namespace strata::cpu

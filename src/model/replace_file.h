// Writing a file so that an existing one is replaced whole or not at all: the content goes to a
// temporary name in the same directory (PATH.tmpPID, created exclusively and never through a
// link, core/temp_file.h; removed by an interrupted exit, core/interrupt.h, and on any error;
// one a killed process left is removed by the next save), is synced, renamed over PATH, and the
// directory synced. With sync false the caller syncs the file and its directory itself (a
// checkpoint does it in the background). Used by the llm.c model files, safetensors files and
// config.json. Free functions; thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "core/status.h"

namespace strata::model {

// `what` begins every error ("model file out.bin"); `body` writes the content to `fd`.
Status write_replacing(const std::string& path, const std::string& what, bool sync,
                       const std::function<Status(int fd)>& body);

// Syncs the directory `dir` (what was created, renamed or removed in it becomes durable).
void sync_directory(const std::string& dir);

// write(2) until all `bytes` are written (EINTR retried); errors begin with `what`.
Status write_all(int fd, const void* p, size_t bytes, const std::string& what);

}  // namespace strata::model

// Reading a small input file whole (a JSON config, an index), as every input is read: opened
// read-only and without blocking, only a regular file (or, where the caller allows it, a pipe:
// `--config <(...)`) is read, never more than a bound on its size, and with pread (a file
// truncated under the reader is an error, never a SIGBUS). A FIFO without a writer, a device
// (/dev/zero) or a directory is refused at once naming the file. Free functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace strata {

struct InputRead {
  uint64_t max_bytes = 64ull << 20;  // larger is refused (kConfig)
  bool allow_pipe = false;           // a pipe (anonymous or named) is read to its end
};

// The file's bytes. Errors begin with `what` (e.g. "config run/config.json") and say what is
// accepted: kIo (cannot open or read), kConfig (not a regular file, larger than the bound).
Result<std::string> read_input_file(const std::string& path, const std::string& what,
                                    const InputRead& how = {});

// That `path` names a regular file (after links) that opens read-only now without blocking;
// errors as above. For inputs read later in pieces (token files, safetensors files).
Status check_regular_input(const std::string& path, const std::string& what);

}  // namespace strata

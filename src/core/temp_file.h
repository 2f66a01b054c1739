// The temporary file an output is written to before it is renamed over its path: PATH.tmpPID in
// the same directory, created exclusively and never through a link (O_EXCL | O_NOFOLLOW: a name
// planted in a shared directory, a symbolic link to another file included, is removed and never
// opened), after the temporary files of PATH left by processes that are gone (a SIGKILLed save)
// are removed. Free functions; thread-safe (no shared state).
#pragma once

#include <string>

#include "core/status.h"

namespace strata {

// PATH.tmpPID for this process.
std::string temp_path_for(const std::string& path);

// Whether `name` is a temporary name of the file named `base` (base.tmp followed by digits).
bool is_temp_name_of(const std::string& name, const std::string& base);

// Creates temp_path_for(path) for writing (mode 0644) and returns its descriptor; errors (kIo)
// begin with `what`. Removes PATH.tmpN of processes N that no longer run first.
Result<int> create_temp_file(const std::string& path, const std::string& what);

}  // namespace strata

// llm.c token files: a header of 256 little-endian int32 (magic 20240520, version 1, token
// count), then the tokens as uint16. Reading checks the magic, the version, that the file size
// is exactly 1024 + 2 * count, and that every token is below the vocabulary size.
// Free functions; thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata::model {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr size_t kTokenFileHeaderBytes = 256 * 4;

// The token count of a file whose first 1024 bytes are `header` and whose size is `file_size`;
// kCorrupt naming the file for a bad magic, version or count, or a size that does not match.
Result<int64_t> check_token_file_header(const std::string& path, const int32_t* header,
                                        uint64_t file_size);
// Errors: kIo (cannot open/read), kCorrupt (bad magic, bad version, truncated or oversized,
// a token >= vocab), each message naming the file and the offending value.
Result<std::vector<uint16_t>> read_token_file(const std::string& path, int64_t vocab);
// Writes a token file (for tests and tools).
Status write_token_file(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace strata::model

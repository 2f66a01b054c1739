// llm.c token files: a header of 256 little-endian int32 (magic, version, token count), then the
// tokens: GPT-2's (magic 20240520, version 1) as uint16, llama-3's (magic 20240801, version 7,
// vocabularies past 65536) as uint32. Reading checks the magic and version pair, that the file
// size is exactly 1024 + count * token size, and that every token is below the vocabulary size.
// Free functions; thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata::model {

inline constexpr int32_t kTokenFileMagic = 20240520;  // GPT-2 tokens, uint16
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int32_t kTokenFileMagicLlama3 = 20240801;  // llama-3 tokens, uint32
inline constexpr int32_t kTokenFileVersionLlama3 = 7;
inline constexpr size_t kTokenFileHeaderBytes = 256 * 4;

struct TokenFileFormat {
  int64_t count = 0;    // tokens
  int token_bytes = 2;  // 2 (GPT-2's uint16) or 4 (llama-3's uint32)
};
// The format of a file whose first 1024 bytes are `header` and whose size is `file_size`;
// kCorrupt naming the file for a bad magic, version or count, or a size that does not match.
Result<TokenFileFormat> token_file_format(const std::string& path, const int32_t* header,
                                          uint64_t file_size);
// `count` little-endian tokens of `token_bytes` (2 or 4) bytes each from `raw` into `out`.
void decode_tokens(const std::byte* raw, int token_bytes, size_t count, uint32_t* out);
// A whole file's tokens (either format). Errors: kIo (cannot open/read), kCorrupt (bad magic,
// bad version, truncated or oversized, a token >= vocab), each naming the file and the value.
Result<std::vector<uint32_t>> read_token_file(const std::string& path, int64_t vocab);
// Writes a token file in GPT-2's format (uint16), or llama-3's (uint32) (for tests and tools).
Status write_token_file(const std::string& path, const std::vector<uint16_t>& tokens);
Status write_token_file32(const std::string& path, const std::vector<uint32_t>& tokens);

}  // namespace strata::model

// core/xxh3.h routes xxh3 through libxxhash's run-time dispatch on x86-64; the checksums stored
// in swap stores and checkpoints must not change with it. Compared with the library's default
// (SSE2) entry points, and with the specification's value for the empty input.
#include "core/xxh3.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace {

#if defined(__x86_64__)
TEST(Xxh3, DispatchedEqualsDefaultOnEverySizeClass) {
  std::mt19937_64 rng(11);
  std::vector<unsigned char> data((3 << 20) + 77);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  // Sizes across xxh3's code paths: 0-16, 17-128, 129-240, long inputs, odd tails, and offsets
  // that leave the input unaligned.
  const size_t sizes[] = {0,   1,   3,   8,    16,   17,   100,   128,           129,
                          200, 240, 241, 1000, 1024, 4096, 65537, (1 << 20) + 3, 3 << 20};
  for (size_t size : sizes) {
    for (size_t offset : {size_t{0}, size_t{1}, size_t{13}}) {
      const unsigned char* p = data.data() + offset;
      EXPECT_EQ(XXH3_64bits_dispatch(p, size), (XXH3_64bits)(p, size))
          << "size " << size << " offset " << offset;
    }
  }
  // Streaming through the dispatched update, in uneven pieces, equals the one-shot hash.
  XXH3_state_t* st = XXH3_createState();
  ASSERT_NE(st, nullptr);
  ASSERT_EQ(XXH3_64bits_reset(st), XXH_OK);
  size_t at = 0;
  for (size_t piece = 1; at < data.size(); piece = piece * 3 + 7) {
    const size_t n = std::min(piece, data.size() - at);
    ASSERT_EQ(XXH3_64bits_update(st, data.data() + at, n), XXH_OK);
    at += n;
  }
  EXPECT_EQ(XXH3_64bits_digest(st), (XXH3_64bits)(data.data(), data.size()));
  XXH3_freeState(st);
}
#endif

TEST(Xxh3, EmptyInputHasTheSpecifiedValue) {
  EXPECT_EQ(XXH3_64bits(nullptr, 0), 0x2D06800538D394C2ull);
}

}  // namespace

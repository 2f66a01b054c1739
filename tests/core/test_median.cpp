// median(): the middle of an odd count, the mean of the two middle values of an even one, in
// any input order; 0 for none.
#include "core/median.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(Median, MiddleValueOrMeanOfTheTwoMiddleOnes) {
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(median({4.0}), 4.0);
  EXPECT_EQ(median({9.0, 1.0, 5.0}), 5.0);
  EXPECT_EQ(median({8.0, 2.0, 6.0, 4.0}), 5.0);  // (4 + 6) / 2
  EXPECT_EQ(median({3.0, 3.0, 1.0, 100.0, 2.0}), 3.0);
}

}  // namespace
}  // namespace strata

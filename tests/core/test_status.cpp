#include <gtest/gtest.h>

#include "core/status.h"

namespace strata {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return make_error(ErrorCode::kConfig, "--n ", v, " is not accepted (use n > 0)");
  return v;
}

Status twice(int v, int* out) {
  STRATA_ASSIGN_OR_RETURN(int x, parse_positive(v));
  *out = 2 * x;
  return ok_status();
}

TEST(Status, OkAndErrorCarryCategoryAndMessage) {
  EXPECT_TRUE(ok_status().ok());
  Status s = make_error(ErrorCode::kIo, "read ", "f.bin", " failed");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kIo);
  EXPECT_EQ(s.to_string(), "io: read f.bin failed");
  EXPECT_EQ(s.with_context("swap").to_string(), "io: swap: read f.bin failed");
}

TEST(Status, AssignOrReturnPropagates) {
  int out = 0;
  EXPECT_TRUE(twice(4, &out).ok());
  EXPECT_EQ(out, 8);
  Status s = twice(-1, &out);
  EXPECT_EQ(s.code(), ErrorCode::kConfig);
  EXPECT_EQ(s.message(), "--n -1 is not accepted (use n > 0)");
}

TEST(Status, ResultFromOkStatusBecomesInternalError) {
  Result<int> r{Status()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInternal);
}

}  // namespace
}  // namespace strata

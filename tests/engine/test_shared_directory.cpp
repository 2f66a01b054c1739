// engine::check_shared_directory (shared_directory.h) under mpirun at 1, 2 and 4 ranks: one
// directory for every rank passes and is left as it was; a directory of each rank's own (what
// ranks on machines of their own see in a directory that is not on a shared filesystem) is
// refused on every rank, naming exactly the ranks other than 0; a directory rank 0 cannot write
// into is refused on every rank too.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "engine/shared_directory.h"
#include "mpi_world.h"

namespace strata::engine {
namespace {

namespace fs = std::filesystem;

std::string base() { return std::string(STRATA_TEST_SCRATCH_DIR) + "/shared_directory_test"; }

TEST(SharedDirectory, OneDirectoryForEveryRankPassesAndIsLeftAsItWas) {
  comm::Communicator& comm = comm::testing::mpi_world();
  const std::string dir = base() + "/one";
  fs::create_directories(dir);
  ASSERT_TRUE(comm.barrier().ok());
  const Status st = check_shared_directory(dir, comm);
  EXPECT_TRUE(st.ok()) << st.to_string();
  ASSERT_TRUE(comm.barrier().ok());
  EXPECT_TRUE(fs::is_empty(dir)) << "the probe file was left";
}

TEST(SharedDirectory, ADirectoryOfEachRanksOwnNamesTheRanksThatDoNotSeeIt) {
  comm::Communicator& comm = comm::testing::mpi_world();
  const std::string dir = base() + "/own" + std::to_string(comm.rank());
  fs::create_directories(dir);
  const Status st = check_shared_directory(dir, comm);
  if (comm.size() == 1) {
    EXPECT_TRUE(st.ok()) << st.to_string();
    return;
  }
  ASSERT_EQ(st.code(), ErrorCode::kConfig) << st.to_string();
  const std::string want = comm.size() == 2 ? "rank 1 does not see" : "ranks 1, 2, 3 do not see";
  EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(dir), std::string::npos) << st.message();
  ASSERT_TRUE(comm.barrier().ok());
  EXPECT_TRUE(fs::is_empty(dir)) << "the probe file was left";
}

TEST(SharedDirectory, ADirectoryRankZeroCannotWriteIsRefusedOnEveryRank) {
  comm::Communicator& comm = comm::testing::mpi_world();
  const Status st = check_shared_directory(base() + "/not_there/deeper", comm);
  if (comm.size() == 1) {
    EXPECT_TRUE(st.ok());  // one rank has nothing to compare
    return;
  }
  EXPECT_EQ(st.code(), ErrorCode::kIo) << st.to_string();
  EXPECT_NE(st.message().find("rank 0 cannot make a file there"), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace strata::engine

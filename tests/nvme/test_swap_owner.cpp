// Stale swap files (nvme/swap_owner.h): a file whose owner is gone is removed by the next store
// opened on its directory; a live owner's file is kept; a pid reused by another process does
// not keep a file alive.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "nvme/swap_owner.h"
#include "swap_test_util.h"

namespace strata::nvme::test {
namespace {

// A pid that no longer runs: a child that exited and was reaped.
int64_t gone_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

// A child that sleeps until killed.
struct LiveChild {
  pid_t pid = fork();
  LiveChild() {
    if (pid == 0) {
      pause();
      _exit(0);
    }
  }
  ~LiveChild() {
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
  }
};

// A swap file of `data` bytes, then `owner`'s record when given.
std::string make_swap_file(const std::string& dir, int64_t name_pid, uint64_t data,
                           const SwapOwner* owner) {
  const std::string path = dir + "/strata_swap_" + std::to_string(name_pid) + "_0_0.bin";
  std::ofstream out(path, std::ios::binary);
  out << std::string(data, 'x');
  if (owner != nullptr) out << owner->encode();
  return path;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

TEST(SwapOwner, RecordRoundTrips) {
  const SwapOwner me = SwapOwner::self();
  EXPECT_EQ(me.pid, getpid());
  EXPECT_GT(me.start_ticks, 0u);
  const std::string record = me.encode();
  ASSERT_EQ(record.size(), kSwapOwnerRecordBytes);
  const auto back = SwapOwner::decode(record);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->host, me.host);
  EXPECT_EQ(back->boot_id, me.boot_id);
  EXPECT_EQ(back->pid, me.pid);
  EXPECT_EQ(back->start_ticks, me.start_ticks);
  EXPECT_TRUE(back->alive());
  EXPECT_FALSE(SwapOwner::decode(std::string(kSwapOwnerRecordBytes, 'x')).has_value());
}

TEST(SwapOwner, FilesOfRunsThatAreGoneAreRemovedOthersKept) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  LiveChild live;
  ASSERT_GT(live.pid, 0);
  SwapOwner gone = SwapOwner::self();
  gone.pid = gone_pid();
  gone.start_ticks = 12345;
  SwapOwner alive = SwapOwner::self();
  alive.pid = live.pid;
  alive.start_ticks = process_start_ticks(live.pid);
  ASSERT_GT(alive.start_ticks, 0u);
  SwapOwner reused = alive;  // the live child's pid, but another process's start time
  reused.start_ticks += 1;
  SwapOwner elsewhere = alive;
  elsewhere.host = "another-host-" + alive.host;
  const std::string p_gone = make_swap_file(dir.path(), gone.pid, 8192, &gone);
  // (The names of files with a record do not matter: these keep clear of the legacy ones.)
  const std::string p_alive = make_swap_file(dir.path(), alive.pid + 3000000, 4096, &alive);
  const std::string p_reused = make_swap_file(dir.path(), reused.pid + 1000000, 4096, &reused);
  const std::string p_elsewhere =
      make_swap_file(dir.path(), elsewhere.pid + 2000000, 4096, &elsewhere);
  // An earlier version's file: no record, its owner the pid in its name.
  const std::string p_legacy = make_swap_file(dir.path(), gone_pid(), 4096, nullptr);
  const std::string p_legacy_alive = make_swap_file(dir.path(), live.pid, 0, nullptr);
  const std::string other = dir.path() + "/not_a_swap_file.bin";
  std::ofstream(other) << "keep";

  auto scan = clean_stale_swap_files(dir.path());
  ASSERT_TRUE(scan.ok()) << scan.status().to_string();
  EXPECT_FALSE(exists(p_gone));
  EXPECT_FALSE(exists(p_reused));
  EXPECT_FALSE(exists(p_legacy));
  EXPECT_TRUE(exists(p_alive));
  EXPECT_TRUE(exists(p_elsewhere));
  EXPECT_TRUE(exists(other));
  EXPECT_EQ(scan->removed_files, 3u);
  EXPECT_GE(scan->removed_bytes, 8192u + kSwapOwnerRecordBytes);
  EXPECT_EQ(scan->kept.size(), 3u);  // alive, elsewhere, and the live legacy one
  EXPECT_TRUE(exists(p_legacy_alive));
}

// A store opened on a directory removes what a killed run left there.
TEST(SwapOwner, OpeningAStoreRemovesStaleFiles) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  SwapOwner gone = SwapOwner::self();
  gone.pid = gone_pid();
  const std::string stale = make_swap_file(dir.path(), gone.pid, 1 << 20, &gone);
  SwapStoreOptions o;
  o.dirs = {dir.path()};
  o.capacity_bytes = 4 << 20;
  STRATA_OPEN_STORE_OR_SKIP(store, o);
  EXPECT_FALSE(exists(stale));
  ASSERT_EQ(store->paths().size(), 1u);
  // The store's own file carries this process's record, at its end.
  std::ifstream in(store->paths()[0], std::ios::binary);
  in.seekg(-static_cast<std::streamoff>(kSwapOwnerRecordBytes), std::ios::end);
  std::string record(kSwapOwnerRecordBytes, '\0');
  in.read(record.data(), static_cast<std::streamsize>(record.size()));
  const auto owner = SwapOwner::decode(record);
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(owner->pid, getpid());
  // A second store in the same directory (a second rank, say) leaves the first's file alone.
  STRATA_OPEN_STORE_OR_SKIP(second, o);
  EXPECT_TRUE(exists(store->paths()[0]));
}

}  // namespace
}  // namespace strata::nvme::test

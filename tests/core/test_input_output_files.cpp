// Round 2 of "nothing a user owns is lost" (issue 47) on real files, for the core pieces:
//   - core/temp_file.h: a planted symbolic link at the temporary name is never followed (its
//     target keeps its bytes), the temporary file of a process that is gone is removed by the next
//     save while one of a live process is kept, and a name that only looks temporary is kept;
//   - core/input_file.h: a FIFO without a writer, /dev/zero and a directory are refused at once
//     naming what they are, a file over the bound is refused, a pipe is read where allowed;
//   - core/file_identity.h probe_output_directory: a file where the directory goes, an entry of
//     the save's names that is a directory, a parent that is a file, and too few free bytes.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "core/file_identity.h"
#include "core/input_file.h"
#include "core/temp_file.h"

namespace strata {
namespace {
namespace fs = std::filesystem;

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_files_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static void write(const std::string& p, const std::string& text) { std::ofstream(p) << text; }
  static std::string read(const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path dir_;
};

// A pid of a process that has exited (reaped): no process has it until the kernel reuses it.
pid_t gone_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

TEST_F(FilesTest, TemporaryFileNeverFollowsAPlantedLink) {
  const std::string out = path("model.bin"), victim = path("victim.txt");
  write(victim, "precious");
  fs::create_symlink(victim, temp_path_for(out));
  auto fd = create_temp_file(out, "model file");
  ASSERT_TRUE(fd.ok()) << fd.status().to_string();
  ASSERT_EQ(::write(*fd, "new", 3), 3);
  ::close(*fd);
  EXPECT_EQ(read(victim), "precious");
  EXPECT_FALSE(fs::is_symlink(temp_path_for(out)));
  EXPECT_EQ(read(temp_path_for(out)), "new");
}

TEST_F(FilesTest, StaleTemporaryFilesOfGoneProcessesAreRemoved) {
  const std::string out = path("model.bin");
  const std::string stale = out + ".tmp" + std::to_string(gone_pid());
  const std::string live = out + ".tmp" + std::to_string(::getppid());  // our parent runs
  const std::string other = out + ".tmpx1";                             // not a temporary name
  const std::string unrelated = path("other.bin.tmp1");
  for (const std::string& p : {stale, live, other, unrelated}) write(p, "x");
  auto fd = create_temp_file(out, "model file");
  ASSERT_TRUE(fd.ok()) << fd.status().to_string();
  ::close(*fd);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_TRUE(fs::exists(unrelated));
  EXPECT_TRUE(is_temp_name_of("a.bin.tmp12", "a.bin"));
  EXPECT_FALSE(is_temp_name_of("a.bin.tmp", "a.bin"));
  EXPECT_FALSE(is_temp_name_of("a.bin.tmp1x", "a.bin"));
}

TEST_F(FilesTest, InputsThatAreNotRegularFilesAreRefusedAtOnce) {
  const std::string fifo = path("config.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto r = read_input_file(fifo, "config " + fifo);  // no writer: would block without the check
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is a pipe; a regular file is read"), std::string::npos)
      << r.status().to_string();
  EXPECT_FALSE(check_regular_input(fifo, "x").ok());
  auto zero = read_input_file("/dev/zero", "config /dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("character device"), std::string::npos);
  auto dir = read_input_file(dir_.string(), "config dir");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos);
  // A pipe where allowed: read to its end; past the bound, refused.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], "{\"a\": 1}", 8), 8);
  ::close(fds[1]);
  auto piped = read_input_file("/dev/fd/" + std::to_string(fds[0]), "--config",
                               {.max_bytes = 100, .allow_pipe = true});
  ::close(fds[0]);
  ASSERT_TRUE(piped.ok()) << piped.status().to_string();
  EXPECT_EQ(*piped, "{\"a\": 1}");
  write(path("big.json"), std::string(1000, ' '));
  auto big = read_input_file(path("big.json"), "config big", {.max_bytes = 999});
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("1000 bytes, over the 999 accepted"), std::string::npos)
      << big.status().to_string();
  auto fits = read_input_file(path("big.json"), "config big", {.max_bytes = 1000});
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(fits->size(), 1000u);
}

TEST_F(FilesTest, OutputDirectoryProbe) {
  const std::vector<std::string> names = {"config.json", "model.safetensors"};
  // New, under an existing directory; existing and empty: both fine.
  EXPECT_TRUE(probe_output_directory("--save-model", path("new/sub"), names, 0).ok());
  EXPECT_FALSE(fs::exists(path("new")));  // nothing made
  EXPECT_TRUE(probe_output_directory("--save-model", dir_.string(), names, 0).ok());
  // A file where the directory goes.
  write(path("file"), "x");
  Status f = probe_output_directory("--save-model", path("file"), names, 0);
  EXPECT_NE(f.message().find("is a file"), std::string::npos) << f.to_string();
  // A parent that is a file.
  Status under = probe_output_directory("--save-model", path("file/sub"), names, 0);
  EXPECT_NE(under.message().find("is not a directory"), std::string::npos) << under.to_string();
  // One of the save's names is a directory.
  fs::create_directories(path("out/model.safetensors"));
  Status held = probe_output_directory("--save-model", path("out"), names, 0);
  EXPECT_NE(held.message().find("holds model.safetensors, which is not a file"), std::string::npos)
      << held.to_string();
  // Free bytes: more than the file system has.
  Status full = probe_output_directory("--save-model", dir_.string(), names, ~uint64_t{0} >> 1);
  EXPECT_NE(full.message().find("bytes"), std::string::npos) << full.to_string();
  EXPECT_EQ(full.code(), ErrorCode::kIo);
  // probe_writable names a parent that is a file as such.
  Status w = probe_writable("--save-model", path("file/x.bin"), OutputWrite::kReplace);
  EXPECT_NE(w.message().find("is not a directory"), std::string::npos) << w.to_string();
}

}  // namespace
}  // namespace strata

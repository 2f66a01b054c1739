// core/file_identity.h on real files: links are the same file, copies are not; trees through
// ".." and symbolic links; a probe leaves nothing behind and refuses what cannot be written.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/file_identity.h"

namespace strata {
namespace {
namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/strata_fileid_XXXXXX";
    path = mkdtemp(templ.data()) != nullptr ? templ : "";
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

TEST(FileIdentity, LinksAreTheSameFileCopiesAreNot) {
  TempDir t;
  ASSERT_FALSE(t.path.empty());
  const std::string a = t.path + "/a.bin", copy = t.path + "/copy.bin";
  std::ofstream(a) << "data";
  std::ofstream(copy) << "data";
  fs::create_hard_link(a, t.path + "/hard.bin");
  fs::create_symlink(a, t.path + "/soft.bin");
  fs::create_directory(t.path + "/sub");
  EXPECT_TRUE(same_file(a, a));
  EXPECT_TRUE(same_file(a, t.path + "/hard.bin"));
  EXPECT_TRUE(same_file(t.path + "/soft.bin", a));
  EXPECT_TRUE(same_file(t.path + "/sub/../a.bin", a));
  EXPECT_FALSE(same_file(a, copy));
  EXPECT_FALSE(same_file(a, t.path + "/missing.bin"));
}

TEST(FileIdentity, TreesResolveDotDotAndLinks) {
  TempDir t;
  ASSERT_FALSE(t.path.empty());
  fs::create_directories(t.path + "/ck/step_4");
  fs::create_directory(t.path + "/other");
  fs::create_directory_symlink(t.path + "/ck", t.path + "/ck_link");
  EXPECT_TRUE(within_tree(t.path + "/ck/step_4/params.bin", t.path + "/ck"));
  EXPECT_TRUE(within_tree(t.path + "/ck", t.path + "/ck/"));
  EXPECT_TRUE(within_tree(t.path + "/ck_link/step_4/params.bin", t.path + "/ck"));
  EXPECT_TRUE(within_tree(t.path + "/other/../ck/x", t.path + "/ck_link"));
  EXPECT_FALSE(within_tree(t.path + "/other/x", t.path + "/ck"));
  EXPECT_FALSE(within_tree(t.path + "/ck2/x", t.path + "/ck"));  // a prefix is not a parent
  EXPECT_FALSE(within_tree(t.path, t.path + "/ck"));
}

TEST(FileIdentity, ProbeLeavesNothingAndRefusesWhatCannotBeWritten) {
  TempDir t;
  ASSERT_FALSE(t.path.empty());
  const std::string out = t.path + "/model.bin";
  std::ofstream(out) << "old weights";
  ASSERT_TRUE(probe_writable("--save-model", out, OutputWrite::kReplace).ok());
  EXPECT_EQ(std::distance(fs::directory_iterator(t.path), fs::directory_iterator{}), 1);
  std::ifstream in(out);
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "old weights");  // untouched
  const Status dir = probe_writable("--metrics", t.path, OutputWrite::kInPlace);
  EXPECT_NE(dir.message().find("--metrics " + t.path + " is a directory"), std::string::npos)
      << dir.to_string();
  const Status missing = probe_writable("--trace", t.path + "/no/t.json", OutputWrite::kInPlace);
  EXPECT_NE(missing.message().find("does not exist"), std::string::npos) << missing.to_string();
  const Status space = probe_writable("--save-model", out, OutputWrite::kReplace, ~uint64_t{0} / 2);
  EXPECT_NE(space.message().find("--save-model " + out + ": needs"), std::string::npos)
      << space.to_string();
  // In place: an existing file (or /dev/null) opens for writing, untouched; a new one needs
  // its directory to take it.
  EXPECT_TRUE(probe_writable("--metrics", out, OutputWrite::kInPlace).ok());
  EXPECT_TRUE(probe_writable("--metrics", "/dev/null", OutputWrite::kInPlace).ok());
  std::ifstream again(out);
  std::getline(again, kept);
  EXPECT_EQ(kept, "old weights");
  EXPECT_FALSE(probe_writable("--metrics", "/proc/strata_m.jsonl", OutputWrite::kInPlace).ok());
  // A file system that takes no new file, whoever asks (root included).
  const Status ro = probe_writable("--save-model", "/proc/strata_model.bin", OutputWrite::kReplace);
  EXPECT_NE(ro.message().find("--save-model /proc/strata_model.bin: cannot write in /proc"),
            std::string::npos)
      << ro.to_string();
}

// Two holders of one directory: the second is refused naming it; once the first is gone the
// directory can be locked again; nothing is left in it.
TEST(FileIdentity, ADirectoryIsLockedByOneHolderAtATime) {
  TempDir t;
  ASSERT_FALSE(t.path.empty());
  {
    DirectoryLock first;
    ASSERT_TRUE(first.lock(t.path, "--checkpoint-dir").ok());
    DirectoryLock second;  // another open file description: as another process would be
    const Status st = second.lock(t.path, "--checkpoint-dir");
    EXPECT_EQ(st.code(), ErrorCode::kConfig);
    EXPECT_NE(st.message().find("--checkpoint-dir " + t.path + " is being written by another run"),
              std::string::npos)
        << st.to_string();
  }
  DirectoryLock again;
  EXPECT_TRUE(again.lock(t.path, "--checkpoint-dir").ok());
  EXPECT_EQ(std::distance(fs::directory_iterator(t.path), fs::directory_iterator{}), 0);
  EXPECT_EQ(again.lock(t.path + "/missing", "--checkpoint-dir").code(), ErrorCode::kIo);
}

}  // namespace
}  // namespace strata

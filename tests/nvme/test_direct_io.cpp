// DirectWriter and DirectReader (nvme/direct_writer.h, nvme/direct_reader.h): any sequence of
// append sizes gives a file of exactly those bytes (checked with an ordinary read), any sequence
// of read sizes gives them back, including the last partial block and the end of the file;
// failures name the file and the cause. Small chunks (8 KiB x 3) so that appends and reads
// straddle chunks, wrap the ring and wait for it.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "nvme/direct_reader.h"
#include "nvme/direct_writer.h"
#include "scratch_dir.h"

namespace strata::nvme {
namespace {

constexpr DirectWriterOptions kSmallWrites{8192, 3};
constexpr DirectReaderOptions kSmallReads{8192, 3};

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<char> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(rng());
  return v;
}

class DirectIoModes : public ::testing::TestWithParam<bool> {};  // O_DIRECT, or the page cache

TEST_P(DirectIoModes, AnyAppendAndReadSizesRoundTrip) {
  test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.path() + "/f.bin";
  DirectWriterOptions wo = kSmallWrites;
  DirectReaderOptions ro = kSmallReads;
  wo.direct = ro.direct = GetParam();
  std::mt19937 rng(7);
  for (size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{8192},
                      size_t{3 * 8192}, size_t{3 * 8192 + 5}, size_t{100'003}, size_t{262'144}}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const std::vector<char> want = random_bytes(size, static_cast<uint32_t>(size));
    {
      auto w = DirectWriter::create(path, wo);
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      if (GetParam() && !w->direct()) {
        GTEST_SKIP() << "the filesystem of " << dir.path() << " refuses O_DIRECT: not tested here";
      }
      for (size_t at = 0; at < size;) {
        const size_t n = std::min<size_t>(size - at, 1 + rng() % 20000);
        ASSERT_TRUE(w->append(want.data() + at, n).ok());
        at += n;
      }
      EXPECT_EQ(w->bytes(), size);
      ASSERT_TRUE(w->finish().ok());
    }
    EXPECT_EQ(file_bytes(path), want);  // exactly the bytes: no padding left

    auto r = DirectReader::open(path, ro);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->size(), size);
    EXPECT_EQ(r->direct(), GetParam());
    std::vector<char> got(size + 100);
    size_t at = 0;
    for (;;) {
      const size_t ask = std::min<size_t>(1 + rng() % 20000, got.size() - at);
      auto k = r->read(got.data() + at, ask);
      ASSERT_TRUE(k.ok()) << k.status().to_string();
      at += *k;
      if (*k < ask) break;  // the end of the file
    }
    ASSERT_EQ(at, size);
    got.resize(size);
    EXPECT_EQ(got, want);
    auto after = r->read(got.data(), 1);
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(*after, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(DirectIo, DirectIoModes, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Direct" : "PageCache"; });

TEST(DirectIo, WriterReplacesALongerFile) {
  test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.path() + "/f.bin";
  std::ofstream(path, std::ios::binary) << std::string(50'000, 'x');
  const std::vector<char> want = random_bytes(5000, 3);
  auto w = DirectWriter::create(path, kSmallWrites);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->append(want.data(), want.size()).ok());
  ASSERT_TRUE(w->finish().ok());
  EXPECT_EQ(file_bytes(path), want);
}

TEST(DirectIo, AFullDeviceFailsNamingTheFileAndTheCause) {
  // /dev/full refuses every write with ENOSPC (and O_DIRECT: the writer steps down to buffered).
  auto w = DirectWriter::create("/dev/full", kSmallWrites);
  if (!w.ok()) GTEST_SKIP() << "cannot open /dev/full: " << w.status().to_string();
  const std::vector<char> data = random_bytes(5 * 8192, 1);
  Status st = w->append(data.data(), data.size());
  if (st.ok()) st = w->finish();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), ErrorCode::kIo);
  EXPECT_NE(st.message().find("/dev/full"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("No space left"), std::string::npos) << st.message();
}

// Faults in the middle of a transfer (IoQueue's hook, on the ring's queue): a short completion
// is resubmitted and the bytes still come out exact; an EIO fails the call that meets it, naming
// the file and the offset, every later call returns the same failure, and destruction waits for
// what is still in flight (no hang, no write into freed chunks: run under ASan).
TEST(DirectIo, FaultsInTheMiddleOfATransfer) {
  test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.path() + "/f.bin";
  const std::vector<char> want = random_bytes(10 * 8192 + 123, 5);
  {  // a short write of the 2nd chunk: resubmitted
    auto w = DirectWriter::create(path, kSmallWrites);
    ASSERT_TRUE(w.ok());
    w->set_fault_injection({2, FaultKind::kShort});
    ASSERT_TRUE(w->append(want.data(), want.size()).ok());
    ASSERT_TRUE(w->finish().ok());
    EXPECT_EQ(file_bytes(path), want);
  }
  {  // a short read of the 3rd chunk: resubmitted
    auto r = DirectReader::open(path, kSmallReads);
    ASSERT_TRUE(r.ok());
    r->set_fault_injection({3, FaultKind::kShort});
    std::vector<char> got(want.size());
    auto k = r->read(got.data(), got.size());
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    EXPECT_EQ(*k, want.size());
    EXPECT_EQ(got, want);
  }
  {  // EIO on the 4th write
    auto w = DirectWriter::create(path, kSmallWrites);
    ASSERT_TRUE(w.ok());
    w->set_fault_injection({4, FaultKind::kEio});
    Status st = w->append(want.data(), want.size());
    if (st.ok()) st = w->finish();
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), ErrorCode::kIo);
    EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("offset"), std::string::npos) << st.message();
    EXPECT_EQ(w->append(want.data(), 1).message(), st.message());  // the failure is kept
  }
  ASSERT_TRUE(
      std::ofstream(path, std::ios::binary).write(want.data(), std::streamsize(want.size())));
  {  // EIO on the 2nd read, with reads still in flight when the reader goes
    auto r = DirectReader::open(path, kSmallReads);
    ASSERT_TRUE(r.ok());
    r->set_fault_injection({2, FaultKind::kEio});
    std::vector<char> got(want.size());
    auto k = r->read(got.data(), got.size());
    ASSERT_FALSE(k.ok());
    EXPECT_EQ(k.status().code(), ErrorCode::kIo);
    EXPECT_NE(k.status().message().find(path), std::string::npos) << k.status().message();
    EXPECT_EQ(r->read(got.data(), 1).status().message(), k.status().message());
  }
}

TEST(DirectIo, MissingPathsAndBadOptionsAreRefused) {
  test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string missing = dir.path() + "/no/such/f.bin";
  auto w = DirectWriter::create(missing);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find(missing), std::string::npos);
  auto r = DirectReader::open(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(missing), std::string::npos);
  EXPECT_EQ(DirectWriter::create(dir.path() + "/a", {1000, 2}).status().code(), ErrorCode::kConfig);
  EXPECT_EQ(DirectReader::open(dir.path() + "/a", {8192, 0}).status().code(), ErrorCode::kConfig);
  EXPECT_EQ(DirectWriter::create(dir.path() + "/a", {size_t{2} << 30, 2}).status().code(),
            ErrorCode::kConfig);
}

TEST(DirectIo, AFailedReadNamesTheFile) {
  test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  auto r = DirectReader::open(dir.path(), kSmallReads);  // a directory: its reads fail (EISDIR)
  if (!r.ok()) GTEST_SKIP() << "a directory cannot be opened here: " << r.status().to_string();
  if (r->size() == 0) GTEST_SKIP() << "this filesystem gives directories no size";
  char buf[16];
  auto k = r->read(buf, sizeof(buf));
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), ErrorCode::kIo);
  EXPECT_NE(k.status().message().find(dir.path()), std::string::npos) << k.status().message();
}

}  // namespace
}  // namespace strata::nvme

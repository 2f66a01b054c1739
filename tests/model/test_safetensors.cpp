// safetensors files and Hugging Face checkpoint directories (model/safetensors.h,
// model/safetensors_write.h):
//   - a file written here from the format's description (an independent writer) reads back with
//     every value, in F32, BF16 and F16, whole and in parts; an I64 tensor is listed, its read
//     refused;
//   - what strata writes parses with an independent reader (the header by JSON, the values by
//     hand), one file or shards with Hugging Face's names and an index whose weight_map and
//     total_size are right, and reads back bit for bit; shards open only when read;
//   - bad files are one-line errors naming the file and the tensor: truncated, a wrong shape, a
//     missing tensor, an index naming a missing file or a shard without the tensor, a bad header.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/safetensors.h"
#include "model/safetensors_write.h"

namespace strata::model {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_safetensors_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// The format by hand: u64 little-endian header length, JSON header, data.
void write_raw(const std::string& path, const std::vector<RawTensor>& ts, size_t cut = 0) {
  std::string h = "{";
  size_t at = 0;
  for (const auto& t : ts) {
    h += "\"" + t.name + "\": {\"dtype\": \"" + t.dtype + "\", \"shape\": [";
    for (size_t i = 0; i < t.shape.size(); ++i) h += (i ? ", " : "") + std::to_string(t.shape[i]);
    h += "], \"data_offsets\": [" + std::to_string(at) + ", " +
         std::to_string(at + t.bytes.size()) + "]},";
    at += t.bytes.size();
  }
  h += "\"__metadata__\": {\"format\": \"pt\"}}";
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((h.size() >> (8 * i)) & 0xff));
  out += h;
  for (const auto& t : ts) out.append(t.bytes.begin(), t.bytes.end());
  out.resize(out.size() - cut);
  std::ofstream(path, std::ios::binary).write(out.data(), static_cast<std::streamsize>(out.size()));
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (static_cast<float>(i) - 3.25f);
  return v;
}

TEST_F(SafetensorsTest, ReadsEveryAcceptedDtypeFromAnIndependentWriter) {
  const std::vector<float> f32 = ramp(12, 0.37f);
  std::vector<uint16_t> bf16, f16;
  std::vector<float> bf16_values, f16_values;
  for (float x : ramp(6, 1.5f)) {
    bf16.push_back(f32_to_bf16(x));
    bf16_values.push_back(bf16_to_f32(bf16.back()));
    f16.push_back(f32_to_f16(x * 0.01f));
    f16_values.push_back(f16_to_f32(f16.back()));
  }
  write_raw(path("a.safetensors"), {{"w", "F32", {3, 4}, bytes_of(f32)},
                                    {"b", "BF16", {6}, bytes_of(bf16)},
                                    {"h", "F16", {2, 3}, bytes_of(f16)},
                                    {"ids", "I64", {2}, std::vector<uint8_t>(16, 1)}});
  auto f = SafetensorsFile::open(path("a.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const SafetensorsFile& file = *f.value();
  ASSERT_EQ(file.tensors().size(), 4u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  std::vector<float> out(12);
  ASSERT_TRUE(file.read("w", {3, 4}, out.data()).ok());
  EXPECT_EQ(out, f32);
  out.assign(6, 0);
  ASSERT_TRUE(file.read("b", {6}, out.data()).ok());
  EXPECT_EQ(out, bf16_values);
  ASSERT_TRUE(file.read("h", {2, 3}, out.data()).ok());
  EXPECT_EQ(out, f16_values);
  // A part: elements 5..8 of w.
  out.assign(4, 0);
  ASSERT_TRUE(file.read("w", {3, 4}, out.data(), 5, 4).ok());
  EXPECT_EQ(out, std::vector<float>(f32.begin() + 5, f32.begin() + 9));
  const Status past = file.read("w", {3, 4}, out.data(), 10, 4);
  EXPECT_FALSE(past.ok());
  const Status i64 = file.read("ids", {2}, out.data());
  EXPECT_EQ(i64.code(), ErrorCode::kUnsupported);
  EXPECT_NE(i64.message().find("ids"), std::string::npos) << i64.message();
  EXPECT_NE(i64.message().find("I64"), std::string::npos) << i64.message();
  const Status shape = file.read("w", {4, 3}, out.data());
  EXPECT_NE(shape.message().find("tensor w has shape [3, 4], the model needs [4, 3]"),
            std::string::npos)
      << shape.message();
}

TEST_F(SafetensorsTest, BadFilesAreErrorsNamingFileAndTensor) {
  const std::vector<float> v = ramp(8, 1.0f);
  // Truncated: the second tensor's data is cut.
  write_raw(path("cut.safetensors"),
            {{"first", "F32", {4}, bytes_of(std::vector<float>(v.begin(), v.begin() + 4))},
             {"second", "F32", {4}, bytes_of(std::vector<float>(v.begin() + 4, v.end()))}},
            3);
  auto cut = SafetensorsFile::open(path("cut.safetensors"));
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(cut.status().message().find("cut.safetensors"), std::string::npos);
  EXPECT_NE(cut.status().message().find("tensor second"), std::string::npos)
      << cut.status().message();
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos);
  // Offsets that do not match the shape.
  write_raw(path("size.safetensors"), {{"w", "F32", {3}, bytes_of(v)}});
  auto size = SafetensorsFile::open(path("size.safetensors"));
  ASSERT_FALSE(size.ok());
  EXPECT_NE(size.status().message().find("tensor w"), std::string::npos);
  // An unknown dtype.
  write_raw(path("dtype.safetensors"), {{"w", "Q4", {8}, bytes_of(v)}});
  auto dtype = SafetensorsFile::open(path("dtype.safetensors"));
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find("Q4"), std::string::npos);
  // A header length past the file, a header that is not JSON, a file of 3 bytes.
  {
    std::ofstream f(path("long.safetensors"), std::ios::binary);
    const uint64_t n = 1000;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << "{}";
  }
  EXPECT_EQ(SafetensorsFile::open(path("long.safetensors")).status().code(), ErrorCode::kCorrupt);
  {
    std::ofstream f(path("json.safetensors"), std::ios::binary);
    const uint64_t n = 8;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << "{\"a\": [1";
  }
  auto json = SafetensorsFile::open(path("json.safetensors"));
  EXPECT_NE(json.status().message().find("not JSON"), std::string::npos);
  std::ofstream(path("tiny.safetensors")) << "abc";
  EXPECT_EQ(SafetensorsFile::open(path("tiny.safetensors")).status().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(SafetensorsFile::open(path("none.safetensors")).status().code(), ErrorCode::kIo);
}

// Eleven tensors of different sizes, values a function of name and index.
std::vector<TensorOut> sample_tensors() {
  std::vector<TensorOut> ts;
  for (int i = 0; i < 11; ++i) {
    std::vector<int64_t> shape =
        i % 3 == 0 ? std::vector<int64_t>{7 + i} : std::vector<int64_t>{3 + i, 5};
    ts.push_back({"model.layers." + std::to_string(i) + ".weight", shape, [i, shape](float* out) {
                    for (int64_t k = 0; k < numel_of(shape); ++k) {
                      out[k] =
                          0.125f * static_cast<float>(i) + 1e-3f * static_cast<float>(k) - 0.3f;
                    }
                    return ok_status();
                  }});
  }
  return ts;
}

std::vector<float> values_of(const TensorOut& t) {
  std::vector<float> v(static_cast<size_t>(numel_of(t.shape)));
  EXPECT_TRUE(t.fill(v.data()).ok());
  return v;
}

// An independent reader: the header as JSON, the values by hand (F32 or BF16).
std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> read_by_hand(
    const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  std::memcpy(&n, all.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "header padded to 8 bytes";
  const auto header = nlohmann::json::parse(all.substr(8, n));
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto b = it.value()["data_offsets"][0].get<size_t>();
    const auto e = it.value()["data_offsets"][1].get<size_t>();
    const std::string dt = it.value()["dtype"];
    std::vector<float> vals;
    for (size_t at = 8 + n + b; at < 8 + n + e; at += dt == "F32" ? 4 : 2) {
      uint32_t bits = 0;
      if (dt == "F32") {
        std::memcpy(&bits, all.data() + at, 4);
      } else {
        uint16_t h = 0;
        std::memcpy(&h, all.data() + at, 2);
        bits = static_cast<uint32_t>(h) << 16;
      }
      float x;
      std::memcpy(&x, &bits, 4);
      vals.push_back(x);
    }
    out[it.key()] = {it.value()["shape"].get<std::vector<int64_t>>(), vals};
  }
  return out;
}

TEST_F(SafetensorsTest, ShardedDirectoryHasHuggingFacesLayoutAndReadsBackBitForBit) {
  const auto ts = sample_tensors();
  for (DType stored : {DType::kF32, DType::kBF16}) {
    const std::string d = path(std::string("ckpt_") + std::string(dtype_name(stored)));
    // 336 values: about 5 shards.
    auto written = write_safetensors_dir(d, ts, stored, 80 * int64_t(dtype_size(stored)));
    ASSERT_TRUE(written.ok()) << written.status().to_string();
    const auto& files = written.value();
    ASSERT_GT(files.size(), 3u);
    const auto n = static_cast<int64_t>(files.size() - 1);
    EXPECT_EQ(files.back(), "model.safetensors.index.json");
    for (int64_t k = 0; k < n; ++k) {
      char want[64];
      std::snprintf(want, sizeof want, "model-%05d-of-%05d.safetensors", int(k + 1), int(n));
      EXPECT_EQ(files[static_cast<size_t>(k)], want);
    }
    EXPECT_FALSE(fs::exists(d + "/model.safetensors"));
    // The index: every tensor named once, in the file that holds it; total_size the values'.
    std::ifstream in(d + "/model.safetensors.index.json");
    const auto index = nlohmann::json::parse(in);
    int64_t total = 0;
    std::set<std::string> seen;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      const auto by_hand = read_by_hand(d + "/" + it.value().get<std::string>());
      ASSERT_EQ(by_hand.count(it.key()), 1u) << it.key();
      seen.insert(it.key());
    }
    for (const auto& t : ts) {
      EXPECT_EQ(seen.count(t.name), 1u) << t.name;
      total += numel_of(t.shape) * static_cast<int64_t>(dtype_size(stored));
      const auto by_hand = read_by_hand(d + "/" + index["weight_map"][t.name].get<std::string>());
      const auto& [shape, vals] = by_hand.at(t.name);
      EXPECT_EQ(shape, t.shape);
      std::vector<float> want = values_of(t);
      for (float& x : want) x = stored == DType::kF32 ? x : bf16_to_f32(f32_to_bf16(x));
      EXPECT_EQ(vals, want) << t.name;
    }
    EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
    // strata's reader: bit for bit, and only the shard asked for is opened.
    auto ck = SafetensorsCheckpoint::open(d);
    ASSERT_TRUE(ck.ok()) << ck.status().to_string();
    EXPECT_TRUE(ck.value()->sharded());
    EXPECT_TRUE(ck.value()->opened().empty());
    const TensorOut& last = ts.back();
    std::vector<float> got(static_cast<size_t>(numel_of(last.shape)));
    ASSERT_TRUE(ck.value()->read(last.name, last.shape, got.data()).ok());
    EXPECT_EQ(ck.value()->opened(), std::vector<std::string>{files[files.size() - 2]});
    for (const auto& t : ts) {
      got.assign(static_cast<size_t>(numel_of(t.shape)), 0);
      ASSERT_TRUE(ck.value()->read(t.name, t.shape, got.data()).ok());
      std::vector<float> want = values_of(t);
      for (float& x : want) x = stored == DType::kF32 ? x : bf16_to_f32(f32_to_bf16(x));
      EXPECT_EQ(got, want) << t.name;
    }
    // Written again unsharded: the index and shards go, model.safetensors comes.
    ASSERT_TRUE(write_safetensors_dir(d, ts, stored, int64_t{1} << 30).ok());
    EXPECT_TRUE(fs::exists(d + "/model.safetensors"));
    EXPECT_FALSE(fs::exists(d + "/model.safetensors.index.json"));
    auto single = SafetensorsCheckpoint::open(d);
    ASSERT_TRUE(single.ok());
    EXPECT_FALSE(single.value()->sharded());
    EXPECT_EQ(single.value()->names().size(), ts.size());
  }
}

TEST_F(SafetensorsTest, ShardedWritesDropShardsOfAnEarlierSave) {
  const auto ts = sample_tensors();
  const std::string d = path("ckpt");
  auto many = write_safetensors_dir(d, ts, DType::kF32, 1);  // one tensor a shard
  ASSERT_TRUE(many.ok());
  ASSERT_EQ(many.value().size(), ts.size() + 1);
  auto count = [&] {
    size_t on_disk = 0;
    for (const auto& e : fs::directory_iterator(d)) {
      on_disk += e.path().extension() == ".safetensors";
    }
    return on_disk;
  };
  auto fewer = write_safetensors_dir(d, ts, DType::kF32, 150 * 4);  // 336 values: 3 shards
  ASSERT_TRUE(fewer.ok());
  EXPECT_EQ(fewer.value().size(), 4u);
  EXPECT_EQ(count(), 3u);
  ASSERT_TRUE(write_safetensors_dir(d, ts, DType::kF32, 4000).ok());
  EXPECT_EQ(count(), 1u);
  EXPECT_TRUE(fs::exists(d + "/model.safetensors"));
}

TEST_F(SafetensorsTest, CheckpointErrorsNameTheFileAndTensor) {
  const auto ts = sample_tensors();
  const std::string d = path("ckpt");
  auto written = write_safetensors_dir(d, ts, DType::kF32, 1);
  ASSERT_TRUE(written.ok());
  auto ck = SafetensorsCheckpoint::open(d);
  ASSERT_TRUE(ck.ok());
  std::vector<float> out(1000);
  const Status missing = ck.value()->read("lm_head.weight", {10, 5}, out.data());
  EXPECT_NE(missing.message().find("no tensor lm_head.weight"), std::string::npos)
      << missing.message();
  const Status shape = ck.value()->read(ts[1].name, {5, 4}, out.data());
  EXPECT_NE(shape.message().find(ts[1].name), std::string::npos) << shape.message();
  EXPECT_NE(shape.message().find(written.value()[1]), std::string::npos) << shape.message();
  // A shard the index names, gone.
  fs::remove(d + "/" + written.value()[3]);
  auto gone = SafetensorsCheckpoint::open(d);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find(written.value()[3]), std::string::npos);
  EXPECT_NE(gone.status().message().find(ts[3].name), std::string::npos) << gone.status().message();
  // An index that puts a tensor in a shard that does not hold it.
  {
    std::ifstream in(d + "/model.safetensors.index.json");
    auto j = nlohmann::json::parse(in);
    j["weight_map"][ts[3].name] = written.value()[0];
    std::ofstream(d + "/model.safetensors.index.json") << j.dump();
  }
  auto wrong = SafetensorsCheckpoint::open(d);
  ASSERT_TRUE(wrong.ok()) << wrong.status().to_string();
  const Status w = wrong.value()->read(ts[3].name, ts[3].shape, out.data());
  EXPECT_NE(w.message().find(ts[3].name), std::string::npos) << w.message();
  EXPECT_NE(w.message().find("does not hold it"), std::string::npos) << w.message();
  // A directory with neither layout.
  fs::create_directories(path("empty"));
  auto empty = SafetensorsCheckpoint::open(path("empty"));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("model.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace strata::model

namespace strata::model {
namespace {

// Issue 47: a name given twice, a weight that is not finite, a file cut while it is read (an
// error, not a SIGBUS: values are read with pread), a header of many entries parsed one entry at
// a time, and a checkpoint holding a tensor its config does not name.
TEST_F(SafetensorsTest, HostileFilesAreRefusedNamingWhatIsWrong) {
  const std::vector<float> v = ramp(8, 0.5f);
  write_raw(path("dup.safetensors"),
            {{"w", "F32", {8}, bytes_of(v)}, {"w", "F32", {8}, bytes_of(v)}});
  auto dup = SafetensorsFile::open(path("dup.safetensors"));
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("tensor w is named twice"), std::string::npos)
      << dup.status().to_string();

  std::vector<float> bad = v;
  bad[5] = std::numeric_limits<float>::quiet_NaN();
  write_raw(path("nan.safetensors"), {{"w", "F32", {8}, bytes_of(bad)}});
  auto nan = SafetensorsFile::open(path("nan.safetensors"));
  ASSERT_TRUE(nan.ok()) << nan.status().to_string();
  std::vector<float> out(8);
  Status st = nan.value()->read("w", {8}, out.data());
  EXPECT_NE(st.message().find("tensor w holds nan at element 5"), std::string::npos)
      << st.to_string();
  EXPECT_TRUE(nan.value()->read("w", {8}, out.data(), 0, 5).ok());  // the part before it

  // Cut after open: the read that reaches past the end says so.
  const std::vector<float> big = ramp(1 << 16, 0.001f);
  write_raw(path("cut.safetensors"), {{"w", "F32", {1 << 16}, bytes_of(big)}});
  auto cut = SafetensorsFile::open(path("cut.safetensors"));
  ASSERT_TRUE(cut.ok());
  fs::resize_file(path("cut.safetensors"), 4096);
  std::vector<float> all(1 << 16);
  Status c = cut.value()->read("w", {1 << 16}, all.data());
  EXPECT_EQ(c.code(), ErrorCode::kCorrupt);
  EXPECT_NE(c.message().find("truncated (or rewritten) while being read"), std::string::npos)
      << c.to_string();

  // 200000 entries: parsed entry by entry (the whole document is never built).
  std::vector<RawTensor> many;
  for (int i = 0; i < 200000; ++i) many.push_back({"t" + std::to_string(i), "F32", {0}, {}});
  write_raw(path("many.safetensors"), many);
  auto m = SafetensorsFile::open(path("many.safetensors"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m.value()->tensors().size(), 200000u);
  EXPECT_EQ(m.value()->metadata().at("format"), "pt");
}

}  // namespace
}  // namespace strata::model

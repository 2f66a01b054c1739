// llm.c's GPT-2 model files (model/model_file.h):
//   - a file written here in llm.c's order (an independent writer: header, then each tensor of
//     every layer in turn) loads with every tensor where strata's blocks keep it;
//   - write then read gives the same values: exactly in fp32, and bf16's rounding in bf16;
//   - a wrong magic, a wrong version, a truncated or oversized file and a shape other than the
//     one asked for are one-line errors naming the file, and a failed write leaves an existing
//     file as it was.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/gpt.h"
#include "model/model_file.h"
#include "model/param_layout.h"

namespace strata::model {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("strata_model_file_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

GptConfig small() {
  GptConfig c;
  c.vocab = 50;
  c.padded_vocab = 64;
  c.max_seq = 8;
  c.layers = 3;
  c.heads = 2;
  c.channels = 16;
  return c;
}

// A value that names its tensor, layer and element, exact in bf16 (8 significant bits: small
// integers times a power of two).
float tag(int tensor, int64_t layer, int64_t i) {
  return static_cast<float>((tensor * 7 + layer * 3 + i % 11) % 64 - 32) / 16.0f;
}

// The llm.c writer: tensors named as in REFERENCE.md, each of every layer in turn.
void write_llmc(const std::string& path, const GptConfig& c, int version) {
  const int64_t C = c.channels, L = c.layers;
  std::vector<float> all;
  auto add = [&](int tensor, int64_t layer, int64_t n) {
    for (int64_t i = 0; i < n; ++i) all.push_back(tag(tensor, layer, i));
  };
  add(100, 0, c.vp() * C);     // wte
  add(101, 0, c.max_seq * C);  // wpe
  const int64_t per_layer[12] = {C, C, 3 * C * C, 3 * C, C * C,     C,
                                 C, C, 4 * C * C, 4 * C, 4 * C * C, C};  // ln1w .. fcprojb
  for (int t = 0; t < 12; ++t) {
    for (int64_t l = 0; l < L; ++l) add(t, l, per_layer[t]);
  }
  add(102, 0, C);  // lnfw
  add(103, 0, C);  // lnfb
  std::vector<int32_t> h(256, 0);
  h[0] = 20240326;
  h[1] = version;
  h[2] = static_cast<int32_t>(c.max_seq);
  h[3] = static_cast<int32_t>(c.vocab);
  h[4] = static_cast<int32_t>(L);
  h[5] = static_cast<int32_t>(c.heads);
  h[6] = static_cast<int32_t>(C);
  h[7] = static_cast<int32_t>(c.vp());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(h.data()), 1024);
  if (version == 3) {
    f.write(reinterpret_cast<const char*>(all.data()),
            static_cast<std::streamsize>(all.size() * 4));
  } else {
    for (float v : all) {  // exact in bf16: the top half of the fp32 bits
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const auto top = static_cast<uint16_t>(bits >> 16);
      f.write(reinterpret_cast<const char*>(&top), 2);
    }
  }
}

std::vector<std::vector<float>> read_all(const std::string& path, const GptConfig& c) {
  std::vector<std::vector<float>> blocks;
  const Status st = read_model_file(path, c, [&](int64_t b, const float* v) {
    EXPECT_EQ(b, static_cast<int64_t>(blocks.size()));
    blocks.emplace_back(v, v + GptModel::block_numel(c, b));
    return ok_status();
  });
  EXPECT_TRUE(st.ok()) << st.to_string();
  return blocks;
}

TEST(ModelFile, LlmcOrderLoadsIntoBlocks) {
  for (int version : {3, 5}) {
    const GptConfig c = small();
    const std::string path = temp_path("llmc.bin");
    write_llmc(path, c, version);
    auto cfg = read_model_file_config(path);
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    EXPECT_EQ(cfg->dtype, version == 3 ? DType::kF32 : DType::kBF16);
    EXPECT_EQ(cfg->layers, 3);
    EXPECT_EQ(cfg->vp(), 64);
    const auto blocks = read_all(path, c);
    ASSERT_EQ(blocks.size(), 4u);
    TensorSpan lt[12], st[4];
    layer_tensors(c, lt);
    shared_tensors(c, st);
    for (int64_t l = 0; l < 3; ++l) {
      for (int t = 0; t < 12; ++t) {
        for (int64_t i = 0; i < lt[t].numel; ++i) {
          ASSERT_EQ(blocks[size_t(l)][size_t(lt[t].offset + i)], tag(t, l, i))
              << lt[t].name << " of layer " << l << " element " << i << " version " << version;
        }
      }
    }
    for (int t = 0; t < 4; ++t) {
      for (int64_t i = 0; i < st[t].numel; ++i) {
        ASSERT_EQ(blocks[3][size_t(st[t].offset + i)], tag(100 + t, 0, i)) << st[t].name;
      }
    }
    std::filesystem::remove(path);
  }
}

TEST(ModelFile, WriteThenReadGivesTheValues) {
  const GptConfig c = small();
  std::vector<std::vector<float>> values;
  for (int64_t b = 0; b <= c.layers; ++b) {
    std::vector<float> v(static_cast<size_t>(GptModel::block_numel(c, b)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * float(i) + float(b));
    values.push_back(std::move(v));
  }
  for (DType stored : {DType::kF32, DType::kBF16}) {
    const std::string path = temp_path("roundtrip.bin");
    const Status w = write_model_file(path, c, stored, [&](int64_t b, float* host) {
      std::copy(values[size_t(b)].begin(), values[size_t(b)].end(), host);
      return ok_status();
    });
    ASSERT_TRUE(w.ok()) << w.to_string();
    EXPECT_EQ(std::filesystem::file_size(path),
              1024 + static_cast<uint64_t>(c.num_params()) * dtype_size(stored));
    const auto back = read_all(path, c);
    ASSERT_EQ(back.size(), values.size());
    for (size_t b = 0; b < back.size(); ++b) {
      for (size_t i = 0; i < back[b].size(); ++i) {
        float want = values[b][i];
        if (stored == DType::kBF16) {  // round to nearest even, as convert() does
          uint16_t h;
          convert(&want, DType::kF32, &h, DType::kBF16, 1);
          convert(&h, DType::kBF16, &want, DType::kF32, 1);
        }
        ASSERT_EQ(std::memcmp(&back[b][i], &want, 4), 0) << "block " << b << " element " << i;
      }
    }
    // Written again as it was read: the same bytes (a file round-trips bit for bit).
    const std::string again = temp_path("again.bin");
    ASSERT_TRUE(write_model_file(again, c, stored, [&](int64_t b, float* host) {
                  std::copy(back[size_t(b)].begin(), back[size_t(b)].end(), host);
                  return ok_status();
                }).ok());
    std::ifstream a(path, std::ios::binary), b2(again, std::ios::binary);
    const std::string sa((std::istreambuf_iterator<char>(a)), {}),
        sb((std::istreambuf_iterator<char>(b2)), {});
    EXPECT_TRUE(sa == sb) << "rewriting a read file changed its bytes";
    std::filesystem::remove(path);
    std::filesystem::remove(again);
  }
}

TEST(ModelFile, BadFilesAreOneLineErrorsNamingTheFile) {
  const GptConfig c = small();
  const std::string path = temp_path("bad.bin");
  auto expect_error = [&](const std::string& what) {
    auto r = read_model_file_config(path);
    ASSERT_FALSE(r.ok()) << what;
    const std::string m = r.status().to_string();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find(what), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  };
  write_llmc(path, c, 3);
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    const int32_t magic = 20240520;  // a token file's
    f.write(reinterpret_cast<const char*>(&magic), 4);
  }
  expect_error("magic 20240520");
  write_llmc(path, c, 4);
  expect_error("version 4");
  write_llmc(path, c, 3);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 2);
  expect_error("truncated");
  write_llmc(path, c, 3);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) + 4);
  expect_error("trailing bytes");
  std::filesystem::resize_file(path, 100);
  expect_error("shorter than its 1024-byte header");
  std::filesystem::remove(path);
  expect_error("cannot open");
  // Another shape than the one asked for.
  write_llmc(path, c, 3);
  GptConfig other = c;
  other.layers = 4;
  const Status st = read_model_file(path, other, [](int64_t, const float*) { return ok_status(); });
  EXPECT_EQ(st.code(), ErrorCode::kConfig);
  EXPECT_NE(st.to_string().find("L=3"), std::string::npos) << st.to_string();
  EXPECT_NE(st.to_string().find("L=4"), std::string::npos) << st.to_string();
  // A write that fails (the source errs) leaves the existing file as it was, and no temporary.
  const auto before = std::filesystem::file_size(path);
  const Status w = write_model_file(path, c, DType::kF32, [](int64_t b, float*) {
    return b == 2 ? make_error(ErrorCode::kIo, "source failed") : ok_status();
  });
  EXPECT_FALSE(w.ok());
  EXPECT_EQ(std::filesystem::file_size(path), before);
  EXPECT_TRUE(read_model_file_config(path).ok());
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::temp_directory_path())) {
    EXPECT_EQ(e.path().string().find(path + ".tmp"), std::string::npos) << e.path();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace strata::model

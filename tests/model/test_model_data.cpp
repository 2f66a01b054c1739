// llm.c token files, the DataLoader and the addition task.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "model/dataloader.h"
#include "model/synthetic_task.h"
#include "model/token_file.h"

namespace strata::model {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("strata_model_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

void write_raw(const std::string& path, const std::vector<int32_t>& header,
               const std::vector<uint16_t>& tokens) {
  std::ofstream f(path, std::ios::binary);
  std::vector<int32_t> h(256, 0);
  for (size_t i = 0; i < header.size(); ++i) h[i] = header[i];
  f.write(reinterpret_cast<const char*>(h.data()), 1024);
  f.write(reinterpret_cast<const char*>(tokens.data()),
          static_cast<std::streamsize>(tokens.size() * 2));
}

TEST(TokenFile, RoundTrip) {
  const std::string path = temp_path("ok.bin");
  std::vector<uint16_t> tokens{0, 5, 50256, 7, 7};
  ASSERT_TRUE(write_token_file(path, tokens).ok());
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 2 * tokens.size());
  auto r = read_token_file(path, 50257);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value(), std::vector<uint32_t>(tokens.begin(), tokens.end()));
  std::filesystem::remove(path);
}

// llm.c's llama-3 token files (magic 20240801, version 7, uint32 tokens): a vocabulary past
// 65536 round-trips, the loader reads them (chosen by the header, beside a GPT-2 shard), and
// a token past the vocabulary, a wrong version or a size for uint16 tokens are refused.
TEST(TokenFile, Llama3FilesHoldUint32Tokens) {
  const std::string path = temp_path("llama3.bin");
  const std::vector<uint32_t> tokens{0, 70000, 128255, 5, 65536, 1, 99999, 2, 3};
  ASSERT_TRUE(write_token_file32(path, tokens).ok());
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 4 * tokens.size());
  auto r = read_token_file(path, 128256);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value(), tokens);
  r = read_token_file(path, 128000);
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("token 128255 at index 2"), std::string::npos);

  auto dl = DataLoader::open({path}, 2, 4, DataOrder::kSequential, 0, 128256);
  ASSERT_TRUE(dl.ok()) << dl.status().to_string();
  std::vector<int32_t> in(8), tg(8);
  ASSERT_TRUE(dl->next(in.data(), tg.data()).ok());
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(in[i], int32_t(tokens[i]));
    EXPECT_EQ(tg[i], int32_t(tokens[i + 1]));
  }
  auto small = DataLoader::open({path}, 2, 4, DataOrder::kSequential, 0, 100000);
  ASSERT_TRUE(small.ok());
  const Status st = small->next(in.data(), tg.data());
  EXPECT_EQ(st.code(), ErrorCode::kCorrupt);
  EXPECT_NE(st.message().find(path), std::string::npos);
  EXPECT_NE(st.message().find("token 128255"), std::string::npos);

  // A GPT-2 shard and a llama-3 shard in one glob: two tokenizers, refused naming both files.
  const std::string gpt2 = temp_path("gpt2.bin");
  ASSERT_TRUE(write_token_file(gpt2, {7, 8, 9, 10, 11, 12, 13, 14, 15}).ok());
  auto both = DataLoader::open({gpt2, path}, 2, 4, DataOrder::kSequential, 0, 128256);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find(path + " holds uint32 tokens (llama-3's) and " + gpt2 +
                                         " uint16 tokens (GPT-2's)"),
            std::string::npos)
      << both.status().to_string();

  write_raw(path, {20240801, 1, 2}, {1, 2, 3, 4});  // llama-3's magic with GPT-2's version
  r = read_token_file(path, 100);
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("unsupported version 1"), std::string::npos);
  write_raw(path, {20240801, 7, 4}, {1, 2, 3, 4});  // 4 tokens of 2 bytes: half the size
  r = read_token_file(path, 100);
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos);
  std::filesystem::remove(path);
  std::filesystem::remove(gpt2);
}

TEST(TokenFile, Errors) {
  const std::string path = temp_path("bad.bin");
  write_raw(path, {12345, 1, 2}, {1, 2});
  auto r = read_token_file(path, 100);
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("magic"), std::string::npos);

  write_raw(path, {20240520, 7, 2}, {1, 2});
  r = read_token_file(path, 100);
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("version"), std::string::npos);

  write_raw(path, {20240520, 1, 5}, {1, 2});  // header says 5, file holds 2
  r = read_token_file(path, 100);
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos);

  write_raw(path, {20240520, 1, 3}, {1, 100, 2});  // 100 is not below vocab 100
  r = read_token_file(path, 100);
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("token 100"), std::string::npos);

  write_raw(path, {20240520}, {});  // header only: size 1024, version 0
  std::filesystem::resize_file(path, 100);
  r = read_token_file(path, 100);
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  std::filesystem::remove(path);

  EXPECT_EQ(read_token_file(temp_path("missing.bin"), 100).status().code(), ErrorCode::kIo);
}

std::vector<uint16_t> ramp(int n) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
  return t;
}

TEST(DataLoader, ShiftedTargetsAndFullEpochCoverage) {
  const int64_t B = 2, T = 4;
  auto r = DataLoader::create(ramp(41), B, T, 1);  // (41-1)/4 = 10 windows, 5 batches
  ASSERT_TRUE(r.ok());
  DataLoader& dl = r.value();
  EXPECT_EQ(dl.batches_per_epoch(), 5);
  std::vector<int32_t> in(B * T), tgt(B * T);
  std::set<int32_t> starts;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(dl.next(in.data(), tgt.data()).ok());
    for (int64_t b = 0; b < B; ++b) {
      EXPECT_EQ(in[b * T] % T, 0);  // windows start at multiples of T
      starts.insert(in[b * T]);
      for (int64_t t = 0; t < T; ++t) {
        EXPECT_EQ(tgt[b * T + t], in[b * T + t] + 1);
        if (t > 0) {
          EXPECT_EQ(in[b * T + t], in[b * T + t - 1] + 1);
        }
      }
    }
  }
  EXPECT_EQ(starts.size(), 10u);  // every window exactly once per epoch
  EXPECT_EQ(dl.position().epoch, 1);
  EXPECT_EQ(dl.position().batch, 0);
}

TEST(DataLoader, DeterministicAndResumable) {
  auto a = DataLoader::create(ramp(1001), 3, 8, 42);
  auto b = DataLoader::create(ramp(1001), 3, 8, 42);
  auto c = DataLoader::create(ramp(1001), 3, 8, 43);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::vector<int32_t> ia(24), ta(24), ib(24), tb(24), ic(24), tc(24);
  std::vector<std::vector<int32_t>> first_run;
  bool differs = false;
  LoaderPosition mid;
  for (int i = 0; i < 100; ++i) {  // crosses epochs (41 batches per epoch)
    if (i == 57) mid = a.value().position();
    ASSERT_TRUE(a.value().next(ia.data(), ta.data()).ok());
    ASSERT_TRUE(b.value().next(ib.data(), tb.data()).ok());
    ASSERT_TRUE(c.value().next(ic.data(), tc.data()).ok());
    EXPECT_EQ(ia, ib);
    differs = differs || ia != ic;
    first_run.push_back(ia);
  }
  EXPECT_TRUE(differs);  // another seed, another order
  auto resumed = DataLoader::create(ramp(1001), 3, 8, 42);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE(resumed.value().seek(mid).ok());
  for (int i = 57; i < 100; ++i) {
    ASSERT_TRUE(resumed.value().next(ib.data(), tb.data()).ok());
    EXPECT_EQ(ib, first_run[static_cast<size_t>(i)]) << "batch " << i;
  }
  EXPECT_EQ(resumed.value().seek({0, 41}).code(), ErrorCode::kConfig);
  EXPECT_EQ(DataLoader::create(ramp(10), 3, 8, 1).status().code(), ErrorCode::kConfig);
}

// llm.c's reader, written from its description (one process of N): shard after shard, sample
// i of a shard starts at token i*N*B*T + rank*B*T and spans B*T+1 tokens; a shard has
// (tokens-1)/(N*B*T) samples; after the last shard the first comes again. Reads with fread.
std::vector<std::vector<uint16_t>> llmc_batches(const std::vector<std::string>& files, int N,
                                                int rank, int64_t B, int64_t T, int batches) {
  std::vector<std::vector<uint16_t>> out;
  size_t shard = 0;
  int64_t sample = 0;
  while (static_cast<int>(out.size()) < batches) {
    std::FILE* f = std::fopen(files[shard].c_str(), "rb");
    int32_t header[256];
    EXPECT_EQ(std::fread(header, 4, 256, f), 256u);
    const int64_t ntok = header[2];
    if (sample >= (ntok - 1) / (N * B * T)) {
      std::fclose(f);
      shard = (shard + 1) % files.size();
      sample = 0;
      continue;
    }
    std::vector<uint16_t> buf(static_cast<size_t>(B * T + 1));
    std::fseek(f, 1024 + 2 * (sample * N * B * T + rank * B * T), SEEK_SET);
    EXPECT_EQ(std::fread(buf.data(), 2, buf.size(), f), buf.size());
    std::fclose(f);
    out.push_back(buf);
    ++sample;
  }
  return out;
}

std::vector<uint16_t> random_tokens(size_t n, uint32_t seed) {
  std::vector<uint16_t> t(n);
  for (auto& x : t) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<uint16_t>((seed >> 8) % 50257);
  }
  return t;
}

TEST(DataLoader, SequentialOrderIsLlmcsOverShardsAndRanks) {
  const std::vector<std::string> files = {temp_path("seq_a.bin"), temp_path("seq_b.bin")};
  ASSERT_TRUE(write_token_file(files[0], random_tokens(1000, 1)).ok());
  ASSERT_TRUE(write_token_file(files[1], random_tokens(700, 2)).ok());
  const int64_t B = 2, T = 8;
  for (int N : {1, 2, 3}) {
    auto dl = DataLoader::open(files, N * B, T, DataOrder::kSequential, 0, 50257);
    ASSERT_TRUE(dl.ok()) << dl.status().to_string();
    // (999 / (16N)) + (699 / (16N)) batches per epoch; 3 epochs' worth and a bit.
    const int total = static_cast<int>(3 * dl->batches_per_epoch() + 2);
    std::vector<std::vector<std::vector<uint16_t>>> ref;
    for (int r = 0; r < N; ++r) ref.push_back(llmc_batches(files, N, r, B, T, total));
    std::vector<int32_t> in(static_cast<size_t>(N * B * T)), tgt(in.size());
    for (int i = 0; i < total; ++i) {
      ASSERT_TRUE(dl->next(in.data(), tgt.data()).ok());
      for (int r = 0; r < N; ++r) {
        const auto& w = ref[size_t(r)][size_t(i)];
        for (int64_t k = 0; k < B * T; ++k) {
          const size_t at = static_cast<size_t>(r * B * T + k);
          ASSERT_EQ(in[at], w[size_t(k)]) << "N " << N << " rank " << r << " batch " << i;
          ASSERT_EQ(tgt[at], w[size_t(k) + 1]) << "N " << N << " rank " << r << " batch " << i;
        }
      }
    }
    EXPECT_EQ(dl->position().epoch, 3);
  }
  for (const auto& f : files) std::remove(f.c_str());
}

TEST(DataLoader, ShuffledVisitsEveryWindowOfEveryShardOncePerEpoch) {
  // Shard 0 holds 0..160, shard 1 10000..10080: a window is T+1 consecutive values of one shard.
  std::vector<uint16_t> a(161), b(81);
  std::iota(a.begin(), a.end(), uint16_t{0});
  std::iota(b.begin(), b.end(), uint16_t{10000});
  const std::vector<std::string> files = {temp_path("shuf_a.bin"), temp_path("shuf_b.bin")};
  ASSERT_TRUE(write_token_file(files[0], a).ok());
  ASSERT_TRUE(write_token_file(files[1], b).ok());
  const int64_t B = 3, T = 8;  // 20 + 10 windows, 10 batches
  auto dl = DataLoader::open(files, B, T, DataOrder::kShuffled, 5, 20000);
  ASSERT_TRUE(dl.ok()) << dl.status().to_string();
  ASSERT_EQ(dl->batches_per_epoch(), 10);
  std::set<int32_t> starts;
  std::vector<int32_t> in(B * T), tgt(B * T);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(dl->next(in.data(), tgt.data()).ok());
    for (int64_t r = 0; r < B; ++r) {
      const int32_t s = in[size_t(r * T)];
      EXPECT_EQ((s >= 10000 ? s - 10000 : s) % T, 0);
      for (int64_t t = 0; t < T; ++t) EXPECT_EQ(tgt[size_t(r * T + t)], s + t + 1);
      starts.insert(s);
    }
  }
  EXPECT_EQ(starts.size(), 30u);
  EXPECT_EQ(dl->position().epoch, 1);
  for (const auto& f : files) std::remove(f.c_str());
}

TEST(DataLoader, BadFilesAndTokensAreRefusedNamingTheFile) {
  const std::string good = temp_path("good.bin"), bad = temp_path("bad.bin");
  std::vector<uint16_t> t(100, 7);
  t[42] = 300;
  ASSERT_TRUE(write_token_file(good, t).ok());
  auto dl = DataLoader::open({good}, 2, 8, DataOrder::kSequential, 0, 256);
  ASSERT_TRUE(dl.ok());
  std::vector<int32_t> in(16), tgt(16);
  ASSERT_TRUE(dl->next(in.data(), tgt.data()).ok());  // tokens 0..16
  ASSERT_TRUE(dl->next(in.data(), tgt.data()).ok());  // 16..32
  const Status st = dl->next(in.data(), tgt.data());  // 32..48 holds index 42
  EXPECT_EQ(st.code(), ErrorCode::kCorrupt);
  EXPECT_NE(st.to_string().find(good), std::string::npos) << st.to_string();
  EXPECT_NE(st.to_string().find("index 42"), std::string::npos) << st.to_string();
  EXPECT_EQ(dl->position().batch, 2);
  write_raw(bad, {kTokenFileMagic, kTokenFileVersion, 100}, std::vector<uint16_t>(50, 1));
  const auto truncated = DataLoader::open({good, bad}, 2, 8, DataOrder::kShuffled, 0, 256);
  EXPECT_EQ(truncated.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(truncated.status().to_string().find(bad), std::string::npos);
  EXPECT_EQ(DataLoader::open({temp_path("missing.bin")}, 2, 8, DataOrder::kShuffled, 0, 256)
                .status()
                .code(),
            ErrorCode::kIo);
  // Sequential needs B*T+1 tokens in every shard.
  EXPECT_EQ(DataLoader::open({good}, 20, 8, DataOrder::kSequential, 0, 256).status().code(),
            ErrorCode::kConfig);
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

// A token file truncated under a running loader: the next batch that reaches past its new end is
// an error naming the file (a mapped file would have been a SIGBUS).
TEST(DataLoader, AFileTruncatedUnderTheLoaderIsAnErrorNamingIt) {
  const std::string path = temp_path("shrinks.bin");
  ASSERT_TRUE(write_token_file(path, random_tokens(1000, 4)).ok());
  auto dl = DataLoader::open({path}, 2, 8, DataOrder::kSequential, 0, 0);
  ASSERT_TRUE(dl.ok()) << dl.status().to_string();
  std::vector<int32_t> in(16), tgt(16);
  ASSERT_TRUE(dl->next(in.data(), tgt.data()).ok());
  ASSERT_EQ(truncate(path.c_str(), 1024 + 2 * 20), 0);  // 20 tokens left
  const Status st = dl->next(in.data(), tgt.data());    // tokens 16..32
  EXPECT_EQ(st.code(), ErrorCode::kCorrupt);
  EXPECT_NE(st.message().find("token file " + path + ": changed under the run"), std::string::npos)
      << st.to_string();
  std::remove(path.c_str());
}

TEST(DataLoader, GlobsExpandSortedAndNoMatchIsAnError) {
  const std::string dir = temp_path("glob");
  std::filesystem::create_directories(dir);
  for (const char* n : {"train_002.bin", "train_000.bin", "train_001.bin", "val_000.bin"}) {
    ASSERT_TRUE(write_token_file(dir + "/" + n, random_tokens(40, 3)).ok());
  }
  auto files = expand_data_files(dir + "/train_*.bin");
  ASSERT_TRUE(files.ok());
  ASSERT_EQ(files->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*files)[i], dir + "/train_00" + std::to_string(i) + ".bin");
  }
  const auto none = expand_data_files(dir + "/test_*.bin");
  EXPECT_EQ(none.status().code(), ErrorCode::kConfig);
  EXPECT_NE(none.status().to_string().find("test_*.bin"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(AdditionTask, ExamplesAreCorrectSums) {
  auto r = AdditionTask::create(3, 16);
  ASSERT_TRUE(r.ok());
  const AdditionTask& task = r.value();
  const int64_t B = 50, T = 16;
  std::vector<int32_t> tok(B * T), tgt(B * T);
  task.make_batch(B, 9, 0, 4, tok.data(), tgt.data());
  for (int64_t b = 0; b < B; ++b) {
    const std::string s = AdditionTask::to_text(tok.data() + b * T, T);
    // "abc+def=srev." then padding.
    const int a = std::stoi(s.substr(0, 3)), c = std::stoi(s.substr(4, 3));
    std::string rev = s.substr(8, 4);
    const std::string sum(rev.rbegin(), rev.rend());
    EXPECT_EQ(s[3], '+');
    EXPECT_EQ(s[7], '=');
    EXPECT_EQ(std::stoi(sum), a + c) << s;
    EXPECT_EQ(s[12], '.');
    int valid = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (tgt[b * T + t] >= 0) {
        ++valid;
        EXPECT_EQ(tgt[b * T + t], tok[b * T + t + 1]);
        EXPECT_GE(t, 7);  // only from '=' onwards
      }
    }
    EXPECT_EQ(valid, task.answer_tokens());
  }
  EXPECT_EQ(AdditionTask::create(0, 16).status().code(), ErrorCode::kConfig);
  EXPECT_EQ(AdditionTask::create(3, 12).status().code(), ErrorCode::kConfig);
}

TEST(AdditionTask, AccuracyOfPerfectAndWrongLogits) {
  auto task = AdditionTask::create(2, 10).value();
  const int64_t B = 4, T = 10, V = AdditionTask::kVocab;
  std::vector<int32_t> tok(B * T), tgt(B * T);
  task.make_batch(B, 1, 0, 0, tok.data(), tgt.data());
  std::vector<float> logits(static_cast<size_t>(B * T * V), 0.0f);
  for (int64_t r = 0; r < B * T; ++r) {
    if (tgt[r] >= 0) logits[static_cast<size_t>(r * V + tgt[r])] = 1.0f;
  }
  auto acc = AdditionTask::accuracy(logits, V, tgt.data(), B, T);
  EXPECT_DOUBLE_EQ(acc.token, 1.0);
  EXPECT_DOUBLE_EQ(acc.exact_match, 1.0);
  // Break one answer token of sequence 0: 1 of B*4 tokens wrong, sequence 0 not exact.
  for (int64_t t = 0; t < T; ++t) {
    if (tgt[t] >= 0) {
      logits[static_cast<size_t>(t * V + (tgt[t] + 1) % V)] = 2.0f;
      break;
    }
  }
  acc = AdditionTask::accuracy(logits, V, tgt.data(), B, T);
  EXPECT_DOUBLE_EQ(acc.token, 1.0 - 1.0 / static_cast<double>(B * task.answer_tokens()));
  EXPECT_DOUBLE_EQ(acc.exact_match, 0.75);
}

}  // namespace
}  // namespace strata::model

// bench_cpu_adam: the fused CPU Adam step (update + 16-bit copy-out in one pass) against
// (b) a two-pass step (the same update without copy-out, then a separate parallel 16-bit
// conversion pass, as DeepSpeed's pipeline does) and (c) the memory floor: a pass that reads and
// writes exactly the arrays of (a) with trivial arithmetic. Runs on 1 thread and on all threads,
// each variant interleaved with the others, median of --repeats runs after a warm-up. Prints a
// table, then one JSON line (keys for the all-threads run, plus a "single_thread" object).
// Last, the fused step on this rank's share of the threads, unbound against bound as train_gpt
// binds a rank (bench_placement.h; under mpirun each process is a rank): keys "bind_*".
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_placement.h"
#include "bench_util.h"
#include "core/dtype.h"
#include "cpu/cpu_adam.h"
#include "memory_floor.h"

namespace strata::bench {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Bytes = std::unique_ptr<unsigned char, FreeDeleter>;

Bytes alloc_bytes(size_t n) {
  const size_t rounded = (n + 4095) / 4096 * 4096;
  return Bytes(
      static_cast<unsigned char*>(std::aligned_alloc(4096, std::max<size_t>(rounded, 4096))));
}

struct Arrays {
  Bytes p, m, v, g, out;
  int64_t numel;
  DType grad_dtype, out_dtype;
  float* params() { return reinterpret_cast<float*>(p.get()); }
  float* exp_avg() { return reinterpret_cast<float*>(m.get()); }
  float* exp_avg_sq() { return reinterpret_cast<float*>(v.get()); }
  uint16_t* out16() { return reinterpret_cast<uint16_t*>(out.get()); }
};

// First touch in parallel (pages land near the threads that use them), with finite values.
void fill(Arrays& a) {
  tbb::parallel_for(int64_t{0}, a.numel, int64_t{1} << 16, [&](int64_t begin) {
    const int64_t end = std::min(a.numel, begin + (int64_t{1} << 16));
    for (int64_t i = begin; i < end; ++i) {
      const float x = static_cast<float>((i * 7919) % 2001 - 1000) * 1e-3f;
      a.params()[i] = x;
      a.exp_avg()[i] = 0.1f * x;
      a.exp_avg_sq()[i] = 1e-4f * x * x;
      store_from_f32(a.g.get(), a.grad_dtype, i, 0.01f * x);
      a.out16()[i] = 0;
    }
  });
}

struct Timing {
  int threads;
  double fused_s, two_pass_s, floor_s;
};

Timing run(Arrays& a, int threads, const cpu::CpuAdamOptions& opt, int repeats) {
  cpu::AdamHyper hyper;
  hyper.weight_decay = 0.01f;
  const cpu::CpuAdam adam(hyper, opt);
  cpu::AdamBuffers fused{a.params(),   a.exp_avg(), a.exp_avg_sq(), a.g.get(),
                         a.grad_dtype, a.out16(),   a.out_dtype,    a.numel};
  cpu::AdamBuffers no_out = fused;
  no_out.out16 = nullptr;
  const FloorBuffers floor{a.params(),
                           a.exp_avg(),
                           a.exp_avg_sq(),
                           a.g.get(),
                           static_cast<int>(dtype_size(a.grad_dtype)),
                           a.out16(),
                           a.numel};
  std::vector<double> tf, tt, tc;
  int64_t step = 1;
  tbb::task_arena arena(threads);
  arena.execute([&] {
    for (int r = -1; r < repeats; ++r) {  // r = -1: warm-up
      auto t0 = std::chrono::steady_clock::now();
      Status s = adam.step(fused, {step++, 1.0f});
      const double f = seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      if (s.ok()) s = adam.step(no_out, {step++, 1.0f});
      if (s.ok()) s = cpu::cast_params_16(a.params(), a.out16(), a.out_dtype, a.numel, opt);
      const double t = seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      memory_floor(floor, opt.isa, opt.chunk_numel, opt.stream_out16);
      const double c = seconds_since(t0);
      if (!s.ok()) {
        std::fprintf(stderr, "bench_cpu_adam: %s\n", s.to_string().c_str());
        std::abort();  // the arguments were validated; a failure here is a bug
      }
      if (r >= 0) {
        tf.push_back(f);
        tt.push_back(t);
        tc.push_back(c);
      }
    }
  });
  return {threads, median(tf), median(tt), median(tc)};
}

// One fused step on `threads` threads, seconds.
Result<double> time_fused(Arrays& a, int threads, const cpu::CpuAdamOptions& opt, int64_t step) {
  cpu::AdamHyper hyper;
  hyper.weight_decay = 0.01f;
  const cpu::CpuAdam adam(hyper, opt);
  const cpu::AdamBuffers fused{a.params(),   a.exp_avg(), a.exp_avg_sq(), a.g.get(),
                               a.grad_dtype, a.out16(),   a.out_dtype,    a.numel};
  tbb::task_arena arena(threads);
  Status s;
  const auto t0 = std::chrono::steady_clock::now();
  arena.execute([&] { s = adam.step(fused, {step, 1.0f}); });
  const double t = seconds_since(t0);
  if (!s.ok()) return s;
  return t;
}

void print_row(const char* name, int64_t n, double s, double bytes_per_param, double floor_s) {
  std::printf("  %-34s %9.3f ms %8.3f G params/s %7.1f GB/s  %5.2fx floor time\n", name, s * 1e3,
              n / s * 1e-9, n * bytes_per_param / s * 1e-9, s / floor_s);
}

int bench_main(int argc, char** argv) {
  CLI::App app{"CPU Adam: fused step vs two-pass step vs the memory floor"};
  int64_t params = 0;
  bool quick = false;
  int threads = 0;
  int repeats = 5;
  int64_t chunk = cpu::CpuAdamOptions{}.chunk_numel;
  std::string isa_s = "auto", grad_s = "bf16", out_s = "bf16", stream_s = "on";
  app.add_option("--params", params, "parameters (default 200000000; 20000000 with --quick)");
  app.add_flag("--quick", quick, "a run of under 30 s (fewer parameters by default)");
  app.add_option("--threads", threads, "threads for the parallel run (default: all)");
  app.add_option("--repeats", repeats, "timed repeats per variant (>= 5)");
  app.add_option("--chunk", chunk, "elements per work unit (a positive multiple of 64)");
  app.add_option("--isa", isa_s, "auto|scalar|avx2|avx512");
  app.add_option("--grad-dtype", grad_s, "gradient dtype: fp32|fp16|bf16");
  app.add_option("--out-dtype", out_s, "16-bit output dtype: fp16|bf16");
  app.add_option("--stream", stream_s, "non-temporal stores for the 16-bit output: on|off");
  CLI11_PARSE(app, argc, argv);

  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "bench_cpu_adam: %s\n", msg.c_str());
    return 2;
  };
  if (params == 0) params = quick ? 20'000'000 : 200'000'000;
  if (params < 0)
    return fail("--params " + std::to_string(params) + " is not accepted (use N > 0)");
  if (repeats < 5)
    return fail("--repeats " + std::to_string(repeats) + " is not accepted (use >= 5)");
  if (chunk <= 0 || chunk % 64 != 0) {
    return fail("--chunk " + std::to_string(chunk) +
                " is not accepted (use a positive multiple of 64)");
  }
  const int all_threads = tbb::info::default_concurrency();
  if (threads == 0) threads = all_threads;
  if (threads < 0)
    return fail("--threads " + std::to_string(threads) + " is not accepted (use >= 1)");
  if (stream_s != "on" && stream_s != "off") {
    return fail("--stream " + stream_s + " is not accepted (use on or off)");
  }
  const Result<cpu::Isa> isa_r = cpu::parse_isa(isa_s);
  if (!isa_r.ok()) return fail("--isa: " + isa_r.status().message());
  const Result<DType> gd_r = parse_dtype(grad_s);
  if (!gd_r.ok()) return fail("--grad-dtype: " + gd_r.status().message());
  const Result<DType> od_r = parse_dtype(out_s);
  if (!od_r.ok()) return fail("--out-dtype: " + od_r.status().message());
  const cpu::Isa isa = isa_r.value();
  const DType gd = gd_r.value();
  const DType od = od_r.value();
  if (od == DType::kF32)
    return fail("--out-dtype " + out_s + " is not accepted (use fp16 or bf16)");

  const size_t gsize = dtype_size(gd);
  const double need = static_cast<double>(params) * (12 + gsize + 2);
  const double avail = static_cast<double>(sysconf(_SC_AVPHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  if (need > 0.9 * avail) {
    char msg[200];
    std::snprintf(msg, sizeof msg,
                  "--params %lld needs %.1f GB but %.1f GB are free (use fewer --params)",
                  static_cast<long long>(params), need * 1e-9, avail * 1e-9);
    return fail(msg);
  }

  Arrays a{alloc_bytes(params * 4),
           alloc_bytes(params * 4),
           alloc_bytes(params * 4),
           alloc_bytes(params * gsize),
           alloc_bytes(params * 2),
           params,
           gd,
           od};
  if (!a.p || !a.m || !a.v || !a.g || !a.out) return fail("allocation failed (use fewer --params)");
  {
    tbb::task_arena arena(threads);
    arena.execute([&] { fill(a); });
  }
  cpu::CpuAdamOptions opt;
  opt.isa = isa;
  opt.chunk_numel = chunk;
  opt.stream_out16 = stream_s == "on";

  const double fused_bpp = 24.0 + gsize + 2;     // read p,g,m,v; write p,m,v,out16
  const double two_pass_bpp = 24.0 + gsize + 6;  // + read p, write out16 in the second pass
  std::printf(
      "bench_cpu_adam: %lld params, grads %s, out %s, isa %s, chunk %lld, stream %s, "
      "%d repeats (median)\n",
      static_cast<long long>(params), std::string(dtype_name(gd)).c_str(),
      std::string(dtype_name(od)).c_str(), std::string(cpu::isa_name(isa)).c_str(),
      static_cast<long long>(chunk), stream_s.c_str(), repeats);
  std::printf("  bytes/param: fused and floor %.0f, two-pass %.0f (write-allocate not counted)\n",
              fused_bpp, two_pass_bpp);
  std::vector<Timing> results;
  for (int t : {1, threads}) {
    if (t == 1 && threads == 1 && !results.empty()) break;
    const Timing r = run(a, t, opt, repeats);
    results.push_back(r);
    std::printf("threads %d:\n", t);
    print_row("(a) fused step + 16-bit copy-out", params, r.fused_s, fused_bpp, r.floor_s);
    print_row("(b) two-pass: step, then copy-out", params, r.two_pass_s, two_pass_bpp, r.floor_s);
    print_row("(c) memory floor (same bytes as a)", params, r.floor_s, fused_bpp, r.floor_s);
    std::printf("  (a)/(c) speed %.3f   (a)/(b) speed %.3f\n", r.floor_s / r.fused_s,
                r.two_pass_s / r.fused_s);
    if (threads == 1) break;
  }
  int64_t bind_step = 1000;
  auto bind = compare_bound(repeats, [&](int t) { return time_fused(a, t, opt, bind_step++); });
  if (!bind.ok()) return fail("bound against unbound: " + bind.status().to_string());
  std::printf("bound against unbound (%s):\n", bind->placement.c_str());
  print_row("(a) fused step, unbound", params, bind->unbound_s, fused_bpp, bind->unbound_s);
  print_row("(a) fused step, bound", params, bind->bound_s, fused_bpp, bind->unbound_s);
  std::printf("  bound/unbound speed %.3f\n", bind->bound_over_unbound());
  auto to_json = [&](const Timing& r) {
    return nlohmann::json{{"threads", r.threads},
                          {"fused_params_per_s", params / r.fused_s},
                          {"two_pass_params_per_s", params / r.two_pass_s},
                          {"floor_params_per_s", params / r.floor_s},
                          {"fused_gb_per_s", params * fused_bpp / r.fused_s * 1e-9},
                          {"floor_gb_per_s", params * fused_bpp / r.floor_s * 1e-9},
                          {"fused_over_floor", r.floor_s / r.fused_s},
                          {"fused_over_two_pass", r.two_pass_s / r.fused_s}};
  };
  nlohmann::json j = to_json(results.back());
  j["bench"] = "cpu_adam";
  j["params"] = params;
  j["isa"] = cpu::isa_name(isa);
  j["grad_dtype"] = dtype_name(gd);
  j["out_dtype"] = dtype_name(od);
  j["stream_out16"] = opt.stream_out16;
  j["repeats"] = repeats;
  j["quick"] = quick;
  j["single_thread"] = to_json(results.front());
  j["bind_threads"] = bind->threads;
  j["bind_unbound_params_per_s"] = params / bind->unbound_s;
  j["bind_bound_params_per_s"] = params / bind->bound_s;
  j["bind_bound_over_unbound"] = bind->bound_over_unbound();
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) { return strata::bench::bench_main(argc, argv); }

// The emulated CUDA runtime's own rules (cuda_emu.h), each as CUDA documents it: strict mode
// refuses pageable memory in enqueued copies (naming the buffer) and the engine's CudaStream
// path with pinned memory passes it; host functions may not call CUDA; a not-ready event query
// leaves its error in the thread's last-error slot; kernel faults are sticky; a launch on
// another device's stream is refused; a stream waits for the record current when it was told to
// wait; cuBLASLt refuses a preference that allows 16-bit split-K reductions; CudaKernels runs a
// matmul with its bias or GELU epilogue as one cuBLASLt call.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "cpu/pinned_memory.h"
#include "cuda_emu.h"
#include "gpu/device.h"
#include "gpu/kernels.h"

namespace {

using strata::gpu::CopyKind;

std::string hex(const void* p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

class CudaEmu : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dev_, kBytes), cudaSuccess);
    cuda_emu::set_strict(true);
  }
  void TearDown() override {
    cuda_emu::set_strict(true);
    EXPECT_EQ(cudaStreamDestroy(stream_), cudaSuccess);
    EXPECT_EQ(cudaFree(dev_), cudaSuccess);
    (void)cudaGetLastError();
  }
  static constexpr size_t kBytes = 4096;
  cudaStream_t stream_ = nullptr;
  void* dev_ = nullptr;
};

TEST_F(CudaEmu, StrictModeRefusesPageableMemoryInAsyncCopiesNamingIt) {
  std::vector<char> pageable(kBytes, 1);
  EXPECT_EQ(cudaMemcpyAsync(dev_, pageable.data(), kBytes, cudaMemcpyHostToDevice, stream_),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  const std::string message = cudaGetErrorString(cudaErrorInvalidValue);
  EXPECT_NE(message.find(hex(pageable.data())), std::string::npos) << message;
  EXPECT_NE(message.find("pageable"), std::string::npos) << message;
  EXPECT_EQ(cudaMemcpyAsync(pageable.data(), dev_, kBytes, cudaMemcpyDeviceToHost, stream_),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();
  // The synchronous copy may stage pageable memory.
  EXPECT_EQ(cudaMemcpy(dev_, pageable.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
  // Registered memory is accepted, and the bytes arrive.
  ASSERT_EQ(cudaHostRegister(pageable.data(), kBytes, cudaHostRegisterPortable), cudaSuccess);
  std::vector<char> back(kBytes, 0);
  ASSERT_EQ(cudaHostRegister(back.data(), kBytes, cudaHostRegisterPortable), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(back.data(), dev_, kBytes, cudaMemcpyDeviceToHost, stream_),
            cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(back, pageable);
  EXPECT_EQ(cudaHostUnregister(pageable.data()), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(back.data()), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(back.data()), cudaErrorHostMemoryNotRegistered);
  (void)cudaGetLastError();
  // Outside strict mode the pageable copy runs, synchronously.
  cuda_emu::set_strict(false);
  const uint64_t before = cuda_emu::counters().pageable_copies;
  EXPECT_EQ(cudaMemcpyAsync(dev_, pageable.data(), kBytes, cudaMemcpyHostToDevice, stream_),
            cudaSuccess);
  EXPECT_EQ(cuda_emu::counters().pageable_copies, before + 1);
}

// Through the real CudaStream: an enqueued copy of pageable memory fails naming the buffer; the
// same copy from the pinned pool, and copy_now from pageable memory, work.
// A CudaDevice on the emulated runtime with a 64 MiB pool.
strata::Result<std::unique_ptr<strata::gpu::Device>> cuda_device() {
  strata::gpu::DeviceOptions o;
  o.memory_limit_bytes = 64 << 20;
  return strata::gpu::create_device(strata::gpu::DeviceKind::kCuda, o);
}

TEST(CudaEmuDevice, CudaStreamCopiesFollowStrictMode) {
  cuda_emu::set_strict(true);
  auto device = cuda_device();
  ASSERT_TRUE(device.ok()) << device.status().to_string();
  auto stream = (*device)->create_stream();
  ASSERT_TRUE(stream.ok());
  auto buf = (*device)->allocate(1024);
  ASSERT_TRUE(buf.ok());
  std::vector<float> pageable(256, 2.0f);
  const strata::Status st =
      (*stream)->copy(buf->data(), pageable.data(), 1024, CopyKind::kHostToDevice);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find(hex(pageable.data())), std::string::npos) << st.to_string();
  auto pinned = strata::cpu::default_pinned_pool().allocate(1024);
  ASSERT_TRUE(pinned.ok());
  EXPECT_TRUE((*stream)->copy(buf->data(), pinned->data(), 1024, CopyKind::kHostToDevice).ok());
  EXPECT_TRUE(
      (*stream)->copy_now(buf->data(), pageable.data(), 1024, CopyKind::kHostToDevice).ok());
  std::vector<float> back(256, 0.0f);
  EXPECT_TRUE((*stream)->copy_now(back.data(), buf->data(), 1024, CopyKind::kDeviceToHost).ok());
  EXPECT_EQ(back, pageable);
}

// Holds `stream` in a host function until `release` is set.
cudaError_t hold(cudaStream_t stream, std::atomic<bool>& release) {
  return cudaLaunchHostFunc(
      stream,
      [](void* p) {
        while (!static_cast<std::atomic<bool>*>(p)->load()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      },
      &release);
}

struct HostFnResult {
  std::atomic<int> err{-1};
};

TEST_F(CudaEmu, HostFunctionsMayNotCallCuda) {
  HostFnResult r;
  ASSERT_EQ(cudaLaunchHostFunc(
                stream_,
                [](void* p) {
                  int n = 0;
                  static_cast<HostFnResult*>(p)->err = cudaGetDeviceCount(&n);
                },
                &r),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(r.err.load(), cudaErrorNotPermitted);
}

// A not-ready query is an error in the slot: the next cudaGetLastError (a launch's check) sees
// it unless the caller clears it (what CudaEvent::query and NcclOp::poll do).
TEST_F(CudaEmu, NotReadyQueryLeavesItsErrorInTheLastErrorSlot) {
  std::atomic<bool> release{false};
  ASSERT_EQ(hold(stream_, release), cudaSuccess);
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, stream_), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(event), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  release = true;
  EXPECT_EQ(cudaEventSynchronize(event), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(event), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
}

// cudaStreamWaitEvent waits for the record current at the call, not a later one.
TEST_F(CudaEmu, StreamWaitsForTheRecordCurrentAtTheCall) {
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  std::atomic<bool> release{false};
  ASSERT_EQ(cudaEventRecord(event, stream_), cudaSuccess);  // completes at once
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(other, event, 0), cudaSuccess);
  ASSERT_EQ(hold(stream_, release), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, stream_), cudaSuccess);  // a later record, still pending
  EXPECT_EQ(cudaStreamSynchronize(other), cudaSuccess);     // did not wait for it
  release = true;
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(other), cudaSuccess);
}

void diverging_barrier(int* out) {
  if (threadIdx.x < 16) __syncthreads();  // half the block never reaches it
  out[threadIdx.x] = 1;
}
void write_index(int* out) { out[threadIdx.x] = static_cast<int>(threadIdx.x); }

// A kernel launched onto a stream of another device is refused at the launch.
TEST_F(CudaEmu, LaunchOnAnotherDevicesStreamIsRefused) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  if (count < 2) GTEST_SKIP() << "one emulated device";
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  write_index | simt::config(1, 32, 0, stream_) % simt::args(static_cast<int*>(dev_));
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  write_index | simt::config(1, 32, 0, stream_) % simt::args(static_cast<int*>(dev_));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
}

// Runs last in its process: the fault makes device 1's context unusable, as on a GPU.
TEST(CudaEmuSticky, KernelFaultsAreStickyOnTheirDevice) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  if (count < 2) GTEST_SKIP() << "one emulated device";
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  cudaStream_t s = nullptr;
  int* out = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out, 32 * sizeof(int)), cudaSuccess);
  // (The launch itself is valid; whether its fault is seen already by a cudaGetLastError right
  // after it depends on timing, as on a GPU.)
  diverging_barrier | simt::config(1, 32, 0, s) % simt::args(out);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);  // sticky: never cleared
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // device 0 is unaffected
}

TEST_F(CudaEmu, CublasLtRefusesSplitKReductionsOutsideFp32) {
  cublasLtHandle_t handle = nullptr;
  ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t op = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, 4, 8, 4), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, 8, 2, 8), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, 4, 2, 4), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  // cuBLASLt's default preference allows every reduction scheme.
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, op, a, b, c, c, pref, 1, &result, &returned),
            CUBLAS_STATUS_INVALID_VALUE);
  const uint32_t fp32_only = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                 &fp32_only, sizeof(fp32_only)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, op, a, b, c, c, pref, 1, &result, &returned),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(returned, 1);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(c);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(handle);
}

}  // namespace

namespace {

// CudaKernels::matmul on the emulated runtime: the bias and GELU epilogues are cuBLASLt's (one
// cublasLtMatmul, no kernel of its own) where aux's leading dimension allows it, their own kernel
// otherwise; a shape's descriptors and algorithm are made once (one heuristic call).
TEST(CudaEmuDevice, MatmulEpiloguesAreOneCublasLtCall) {
  using strata::gpu::Epilogue;
  auto device = cuda_device();
  ASSERT_TRUE(device.ok()) << device.status().to_string();
  auto stream = (*device)->create_stream();
  ASSERT_TRUE(stream.ok());
  auto buf = (*device)->allocate(4 << 20);
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE((*stream)->memset(buf->data(), 0, 4 << 20).ok());
  char* base = static_cast<char*>(buf->data());
  // Counts what one matmul on a [16 x n] result of K 16 ran: {cuBLASLt calls, kernels, heuristic
  // calls}.
  auto run = [&](int64_t n, Epilogue e, bool bias) {
    strata::gpu::MatmulArgs mm;
    mm.a = base;
    mm.b = base + (1 << 20);
    mm.c = base + (2 << 20);
    mm.aux = e == Epilogue::kNone ? nullptr : base + (3 << 20);
    mm.bias = bias ? base + (3 << 20) + (512 << 10) : nullptr;
    mm.dtype_ab = mm.dtype_c = strata::DType::kBF16;
    mm.m = 16;
    mm.n = n;
    mm.k = 16;
    mm.trans_b = true;
    mm.epilogue = e;
    const cuda_emu::Counters before = cuda_emu::counters();
    EXPECT_TRUE((*device)->kernels().matmul(**stream, mm).ok());
    EXPECT_TRUE((*stream)->synchronize().ok());
    const cuda_emu::Counters after = cuda_emu::counters();
    return std::vector<uint64_t>{after.matmuls - before.matmuls, after.launches - before.launches,
                                 after.heuristics - before.heuristics};
  };
  using V = std::vector<uint64_t>;
  EXPECT_EQ(run(16, Epilogue::kNone, true), (V{1, 0, 1})) << "bias epilogue";
  EXPECT_EQ(run(16, Epilogue::kNone, true), (V{1, 0, 0})) << "the same shape again: cached";
  EXPECT_EQ(run(16, Epilogue::kGelu, true), (V{1, 0, 1})) << "GELU_AUX_BIAS";
  EXPECT_EQ(run(16, Epilogue::kGelu, false), (V{1, 0, 1})) << "GELU_AUX";
  EXPECT_EQ(run(16, Epilogue::kGeluBackward, false), (V{1, 0, 1})) << "DGELU";
  EXPECT_EQ(run(13, Epilogue::kGelu, true), (V{1, 1, 1})) << "aux ld 13: the GELU kernel";
  EXPECT_EQ(run(13, Epilogue::kGeluBackward, false), (V{1, 1, 1})) << "the GELU backward kernel";
}

}  // namespace

// Kernel conformance: matmul's GELU epilogues (kernels.h: kGelu, kGeluBackward) against the
// float64 reference, with shapes cuBLASLt fuses (N a multiple of 8) and shapes it cannot (the
// epilogue then runs as its own kernels), and their argument checks.
#include "kernel_test_util.h"

namespace strata::gpu::test {
namespace {

class EpilogueTest : public KernelTest {
 protected:
  struct Shape {
    int64_t m, n, k;
  };
  // Shapes: N = 16 and 24 fuse on CUDA; 13 does not (aux's leading dimension).
  static constexpr Shape kShapes[] = {{7, 16, 5}, {9, 13, 33}, {33, 24, 129}};

  struct Operands {
    Vec a, b;
    DeviceBuffer da, db;
  };
  // A [m,k] and B [n,k] (the linear layer's x and w, w transposed) rounded to the dtype.
  Operands operands(const Shape& s) {
    Operands o{random_vec(s.m * s.k, 21), random_vec(s.n * s.k, 22), {}, {}};
    o.da = d_.upload(o.a, dt());
    o.db = d_.upload(o.b, dt());
    return o;
  }
  MatmulArgs args(const Shape& s, const Operands& o, DeviceBuffer& c, DeviceBuffer& aux,
                  Epilogue e) {
    MatmulArgs a;
    a.a = o.da.data();
    a.b = o.db.data();
    a.c = c.data();
    a.aux = aux.data();
    a.dtype_ab = a.dtype_c = dt();
    a.m = s.m;
    a.n = s.n;
    a.k = s.k;
    a.trans_b = true;
    a.epilogue = e;
    return a;
  }
  std::string what(const char* name, const Shape& s) const {
    return std::string(name) + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
           std::to_string(s.k);
  }
};

TEST_P(EpilogueTest, GeluForwardKeepsThePreActivation) {
  for (const Shape& s : kShapes) {
    for (bool with_bias : {false, true}) {
      Operands o = operands(s);
      Vec bias = random_vec(s.n, 23);
      auto dbias = d_.upload(bias, dt());
      auto dc = d_.zeros(s.m * s.n * dtype_size(dt()));
      auto daux = d_.zeros(s.m * s.n * dtype_size(dt()));
      MatmulArgs mm = args(s, o, dc, daux, Epilogue::kGelu);
      mm.bias = with_bias ? dbias.data() : nullptr;
      mm.alpha = 0.75f;
      ASSERT_TRUE(d_.k().matmul(d_.stream(), mm).ok());
      Vec pre(s.m * s.n, 0.0);
      ref::matmul(o.a, o.b, pre, with_bias ? bias : Vec{}, s.m, s.n, s.k, false, true, 0.75, 0.0);
      Vec out(pre.size());
      for (size_t i = 0; i < pre.size(); ++i) out[i] = ref::gelu(pre[i]);
      const std::string w = what(with_bias ? "gelu epilogue, bias" : "gelu epilogue", s);
      expect_close(d_.download(daux, pre.size(), dt()), pre, tol(), w + ": aux");
      expect_close(d_.download(dc, out.size(), dt()), out, tol(), w + ": out");
    }
  }
}

TEST_P(EpilogueTest, GeluBackwardScalesByTheDerivativeAtAux) {
  for (const Shape& s : kShapes) {
    Operands o = operands(s);
    // dX[m,n] = gelu'(aux) * (dY[m,k] . W[k,n]): here B is stored [n,k] and transposed.
    Vec aux = random_vec(s.m * s.n, 24, -4.0, 4.0);
    auto daux = d_.upload(aux, dt());
    auto dc = d_.zeros(s.m * s.n * dtype_size(dt()));
    MatmulArgs mm = args(s, o, dc, daux, Epilogue::kGeluBackward);
    ASSERT_TRUE(d_.k().matmul(d_.stream(), mm).ok());
    Vec q(s.m * s.n, 0.0);
    ref::matmul(o.a, o.b, q, Vec{}, s.m, s.n, s.k, false, true, 1.0, 0.0);
    for (size_t i = 0; i < q.size(); ++i) q[i] *= ref::gelu_grad(aux[i]);
    expect_close(d_.download(dc, q.size(), dt()), q, tol(), what("gelu backward epilogue", s));
  }
}

TEST_P(EpilogueTest, BadEpilogueArgumentsAreRefusedAtEnqueue) {
  const Shape s{8, 16, 8};
  Operands o = operands(s);
  auto dc = d_.zeros(s.m * s.n * dtype_size(dt()));
  auto daux = d_.zeros(s.m * s.n * dtype_size(dt()));
  auto check = [&](MatmulArgs mm, const char* why) {
    const Status st = d_.k().matmul(d_.stream(), mm);
    EXPECT_EQ(st.code(), ErrorCode::kConfig) << why << ": " << st.to_string();
  };
  MatmulArgs mm = args(s, o, dc, daux, Epilogue::kGelu);
  mm.aux = nullptr;
  check(mm, "no aux");
  mm = args(s, o, dc, daux, Epilogue::kGelu);
  mm.beta = 1.0f;
  check(mm, "beta 1");
  mm = args(s, o, dc, daux, Epilogue::kGeluBackward);
  mm.bias = daux.data();
  check(mm, "bias with the backward");
  mm = args(s, o, dc, dc, Epilogue::kGelu);
  check(mm, "aux is C");
  mm = args(s, o, dc, daux, static_cast<Epilogue>(7));
  check(mm, "unknown epilogue");
  d_.sync();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EpilogueTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         dtype_param_name);

}  // namespace
}  // namespace strata::gpu::test

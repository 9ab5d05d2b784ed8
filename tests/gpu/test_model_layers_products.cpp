// The CUDA layers' products of models/cuda/layers.h on a GPU: Matmul (cuBLASLt), the flash-style
// attention and the fused cross-entropy, against the CPU layers (models/layers/layers.h) run in
// double on the same bf16 inputs, at odd sizes. Every backward starts from nonzero gradients (it
// adds) and runs twice from the same start to repeat bit for bit.
//
// Tolerances. The double reference is exact but for double roundings, so a GPU value differs from
// it by (a) the fp32 error made before the final rounding, bounded per layer below, and (b) the
// rounding to bf16, at most 2^-8 of the value (8 significant bits, to nearest even). So
//   |gpu - ref| <= 2^-8 |ref| + 2 a,
// the factor 2 covering the (1 + 2^-8) by which (b) can grow (a) and the higher-order terms the
// bounds drop. fp32 outputs (lse, losses) have no (b). A wrong index or a missed term moves a
// value by the size of a term, far beyond these bounds.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "base/half.h"
#include "models/cuda/layers.h"
#include "models/gpt/kernels.h"
#include "models/layers/layers.h"
#include "tests/gpu/layer_test_helpers.h"

namespace zero::cuda_layers {
namespace {

using namespace zero::test;  // layer_test_helpers.h

// fp32 rounding, relative, doubled: cuBLASLt's tensor cores may align the addends of their fp32
// accumulation by truncation, whose error is up to 2^-23 rather than 2^-24.
constexpr double kAccumulateUnit = 0x1p-23;

// ---- Matmul ----
//
// Each output is a dot product of k terms plus (forward) a bias or (backward) the gradient it
// adds to. Summed in fp32 in any order, (a) <= k 2^-23 S with S the sum of the terms' magnitudes
// (the same product on |inputs|, plus |bias| or |initial gradient|); 2^-23 rather than 2^-24
// for the tensor cores' truncating alignment. With a bias the epilogue may round the product to
// bf16 before adding the bias (one more 2^-8 of the product, ref - bias), so that is allowed too.
// k is C (forward), OC (dinp) and N (dweight; the bias gradient's column sums too).

// With `into` write the backward's dinp and dweight start as garbage (large values and NaNs)
// and must come out as the products alone: as the add onto zeros; so must the bias gradient with
// `dbias_into` write (beside a written dweight, in its product's epilogue).
void check_matmul(int N, int C, int OC, bool with_bias, std::uint64_t seed, Into into = Into::add,
                  Into dbias_into = Into::add) {
  INFO("N " << N << ", C " << C << ", OC " << OC << (with_bias ? ", with bias" : ", no bias")
            << (into == Into::write ? ", dinp and dweight written" : "")
            << (dbias_into == Into::write ? ", dbias written" : ""));
  const std::size_t nx = static_cast<std::size_t>(N) * C;
  const std::size_t nw = static_cast<std::size_t>(OC) * C;
  const std::size_t ny = static_cast<std::size_t>(N) * OC;
  const Bits inp = random_bf16(nx, seed + 1, -1, 1);
  const Bits weight = random_bf16(nw, seed + 2, -1, 1);
  const Bits bias = random_bf16(OC, seed + 3, -1, 1);
  const Bits dout = random_bf16(ny, seed + 4, -1, 1);
  const bool write = into == Into::write;
  Bits dinp0 = random_bf16(nx, seed + 5, write ? -1000 : -1, write ? 1000 : 1);
  if (write) {
    for (std::size_t i = 0; i < nx; i += 7) dinp0[i] = 0x7fc0;  // NaN
  }
  const Bits dinp_from = write ? Bits(nx, 0) : dinp0;  // what the product adds to
  Bits dweight0 = random_bf16(nw, seed + 6, write ? -1000 : -1, write ? 1000 : 1);
  if (write) {
    for (std::size_t i = 0; i < nw; i += 5) dweight0[i] = 0x7fc0;  // NaN
  }
  const Bits dweight_from = write ? Bits(nw, 0) : dweight0;
  const bool write_dbias = dbias_into == Into::write;
  Bits dbias0 = random_bf16(OC, seed + 7, write_dbias ? -1000 : -1, write_dbias ? 1000 : 1);
  if (write_dbias) {
    for (std::size_t i = 0; i < static_cast<std::size_t>(OC); i += 3) dbias0[i] = 0x7fc0;  // NaN
  }
  const Bits dbias_from = write_dbias && with_bias ? Bits(OC, 0) : dbias0;

  TestStream stream;
  Matmul matmul;
  DeviceArray<Bf16> d_inp(nx), d_weight(nw), d_bias(OC), d_out(ny), d_dout(ny), d_dinp(nx),
      d_dweight(nw), d_dbias(OC);
  DeviceArray<float> scratch(reduction_scratch_floats(N, OC));
  d_inp.upload(inp);
  d_weight.upload(weight);
  d_bias.upload(bias);
  d_dout.upload(dout);

  const Vec x = to_double(inp), w = to_double(weight), b = to_double(bias), g = to_double(dout);
  const Vec ax = magnitudes(x), aw = magnitudes(w), ab = magnitudes(b), ag = magnitudes(g);

  // Forward.
  REQUIRE_LAUNCH(matmul.forward(d_out.get(), d_inp.get(), d_weight.get(),
                                with_bias ? d_bias.get() : nullptr, N, C, OC, stream.get()));
  stream.synchronize();
  const Vec out = to_double(d_out.download());
  Vec want(ny), scale(ny);
  layers::matmul_forward<double>(want.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N,
                                 C, OC);
  layers::matmul_forward<double>(scale.data(), ax.data(), aw.data(),
                                 with_bias ? ab.data() : nullptr, N, C, OC);
  Vec tol(ny);
  for (std::size_t i = 0; i < ny; ++i) {
    tol[i] = kBf16Unit * std::fabs(want[i]) + 2 * C * kAccumulateUnit * scale[i];
    if (with_bias) tol[i] += kBf16Unit * std::fabs(want[i] - b[i % OC]);
  }
  CHECK(mismatches(out, want, tol) == "");

  // Backward, twice from the same start.
  const auto backward = [&] {
    d_dinp.upload(dinp0);
    d_dweight.upload(dweight0);
    d_dbias.upload(dbias0);
    REQUIRE_LAUNCH(matmul.backward(d_dinp.get(), d_dweight.get(),
                                   with_bias ? d_dbias.get() : nullptr, d_dout.get(), d_inp.get(),
                                   d_weight.get(), N, C, OC, scratch.get(), stream.get(), into,
                                   into, dbias_into));
    stream.synchronize();
    return std::vector<Bits>{d_dinp.download(), d_dweight.download(), d_dbias.download()};
  };
  const std::vector<Bits> first = backward();
  const std::vector<Bits> second = backward();
  CHECK(first == second);

  Vec want_dinp = to_double(dinp_from), want_dweight = to_double(dweight_from);
  Vec want_dbias = to_double(dbias_from);
  layers::matmul_backward<double>(want_dinp.data(), want_dweight.data(),
                                  with_bias ? want_dbias.data() : nullptr, g.data(), x.data(),
                                  w.data(), N, C, OC);
  Vec scale_dinp = magnitudes(to_double(dinp_from));
  Vec scale_dweight = magnitudes(to_double(dweight_from));
  Vec scale_dbias = magnitudes(to_double(dbias_from));
  layers::matmul_backward<double>(scale_dinp.data(), scale_dweight.data(),
                                  with_bias ? scale_dbias.data() : nullptr, ag.data(), ax.data(),
                                  aw.data(), N, C, OC);
  const auto tolerance = [](const Vec& ref, const Vec& terms, int k) {
    Vec t(ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) {
      t[i] = kBf16Unit * std::fabs(ref[i]) + 2 * k * kAccumulateUnit * terms[i];
    }
    return t;
  };
  {
    INFO("dinp");
    CHECK(mismatches(to_double(first[0]), want_dinp, tolerance(want_dinp, scale_dinp, OC)) == "");
  }
  {
    INFO("dweight");
    CHECK(mismatches(to_double(first[1]), want_dweight,
                     tolerance(want_dweight, scale_dweight, N)) == "");
  }
  {
    INFO("dbias");  // without a bias it stays as it was
    CHECK(mismatches(to_double(first[2]), want_dbias, tolerance(want_dbias, scale_dbias, N)) == "");
    if (!with_bias) CHECK(first[2] == dbias0);
  }
}

TEST_CASE("cuda layers: matmul matches the CPU layer at 37 x 77 -> 53 with and without bias",
          "[gpu]") {
  check_matmul(37, 77, 53, true, 100);
  check_matmul(37, 77, 53, false, 200);
}

TEST_CASE("cuda layers: matmul matches the CPU layer at 256 x 768 -> 3072 with bias", "[gpu]") {
  check_matmul(256, 768, 3072, true, 300);
}

TEST_CASE("cuda layers: matmul's backward sums a gradient larger than its staging in blocks",
          "[gpu]") {
  // dweight^T is 2304 x 7500 bf16, 34.6 MB: a block of 7281 columns through the 32 MiB staging
  // buffer, then one of 219.
  check_matmul(16, 2304, 7500, false, 600);
}

TEST_CASE(
    "cuda layers: matmul's backward writes dinp and dweight (Into::write) as the products alone, "
    "whatever they held, and adds to the bias gradient as ever",
    "[gpu]") {
  check_matmul(37, 77, 53, true, 700, Into::write);
  check_matmul(16, 2304, 7500, false, 800, Into::write);  // a dweight through staging blocks
}

TEST_CASE(
    "cuda layers: matmul's backward writes the bias gradient (Into::write) as its column sums "
    "alone, in the written weight gradient's product or on its own",
    "[gpu]") {
  check_matmul(37, 77, 53, true, 710, Into::write, Into::write);    // the epilogue (BGRADB)
  check_matmul(37, 77, 53, true, 720, Into::add, Into::write);      // zeroed, then summed
  check_matmul(1000, 24, 40, true, 730, Into::write, Into::write);  // k = 1000 rows
}

// ---- Matmul through GELU ----
//
// forward_gelu: pre as forward's out; out = gelu(pre), GELU taken of the fp32 sum (cuBLASLt's
// epilogue) or of the rounded pre (the fallback, OC not a multiple of 8). Either is within pre's
// tolerance times GELU's slope (at most 1.13, so 1.2) plus out's own bf16 rounding. The
// backward's dinp through GELU: the product (dout W) times gelu'(pre) at the given bf16 pre, the
// product's fp32 error and (the fallback, C not a multiple of 8) its bf16 rounding before the
// multiply, times the slope, plus dinp's rounding. dinp starts as garbage: it is written.
void check_matmul_gelu(int N, int C, int OC, bool with_bias, std::uint64_t seed) {
  INFO("N " << N << ", C " << C << ", OC " << OC << (with_bias ? ", with bias" : ", no bias"));
  const std::size_t nx = static_cast<std::size_t>(N) * C;
  const std::size_t nw = static_cast<std::size_t>(OC) * C;
  const std::size_t ny = static_cast<std::size_t>(N) * OC;
  const Bits inp = random_bf16(nx, seed + 1, -1, 1);
  const Bits weight = random_bf16(nw, seed + 2, -1, 1);
  const Bits bias = random_bf16(OC, seed + 3, -1, 1);
  TestStream stream;
  Matmul matmul;
  DeviceArray<Bf16> d_inp(nx), d_weight(nw), d_bias(OC), d_out(ny), d_pre(ny);
  d_inp.upload(inp);
  d_weight.upload(weight);
  d_bias.upload(bias);
  const Vec x = to_double(inp), w = to_double(weight), b = to_double(bias);
  const Vec ax = magnitudes(x), aw = magnitudes(w), ab = magnitudes(b);

  REQUIRE_LAUNCH(matmul.forward_gelu(d_out.get(), d_pre.get(), d_inp.get(), d_weight.get(),
                                     with_bias ? d_bias.get() : nullptr, N, C, OC, stream.get()));
  stream.synchronize();
  Vec want_pre(ny), scale(ny), tol_pre(ny), want_out(ny), tol_out(ny);
  layers::matmul_forward<double>(want_pre.data(), x.data(), w.data(),
                                 with_bias ? b.data() : nullptr, N, C, OC);
  layers::matmul_forward<double>(scale.data(), ax.data(), aw.data(),
                                 with_bias ? ab.data() : nullptr, N, C, OC);
  gpt::gelu_forward<double>(want_out.data(), want_pre.data(), ny);
  for (std::size_t i = 0; i < ny; ++i) {
    tol_pre[i] = kBf16Unit * std::fabs(want_pre[i]) + 2 * C * kAccumulateUnit * scale[i];
    if (with_bias) tol_pre[i] += kBf16Unit * std::fabs(want_pre[i] - b[i % OC]);
    tol_out[i] = kBf16Unit * std::fabs(want_out[i]) + 1.2 * tol_pre[i];
  }
  {
    INFO("pre");
    CHECK(mismatches(to_double(d_pre.download()), want_pre, tol_pre) == "");
  }
  {
    INFO("out = gelu(pre)");
    CHECK(mismatches(to_double(d_out.download()), want_out, tol_out) == "");
  }

  // Backward of a product whose input was gelu(pre2): pre2 [N, C], dout [N, OC].
  const Bits pre2 = random_bf16(nx, seed + 4, -3, 3);
  const Bits dout = random_bf16(ny, seed + 5, -1, 1);
  Vec h(nx);
  gpt::gelu_forward<double>(h.data(), to_double(pre2).data(), nx);
  Bits h_bits(nx);
  for (std::size_t i = 0; i < nx; ++i) h_bits[i] = float_to_bf16(static_cast<float>(h[i]));
  Bits dinp0 = random_bf16(nx, seed + 6, -1000, 1000);
  for (std::size_t i = 0; i < nx; i += 7) dinp0[i] = 0x7fc0;  // NaN: it is written
  DeviceArray<Bf16> d_h(nx), d_pre2(nx), d_dout(ny), d_dinp(nx);
  DeviceArray<float> scratch(reduction_scratch_floats(N, OC));
  d_h.upload(h_bits);
  d_pre2.upload(pre2);
  d_dout.upload(dout);
  const auto backward = [&] {
    d_dinp.upload(dinp0);
    REQUIRE_LAUNCH(matmul.backward(d_dinp.get(), nullptr, nullptr, d_dout.get(), d_h.get(),
                                   d_weight.get(), N, C, OC, scratch.get(), stream.get(),
                                   Into::write, Into::add, Into::add, d_pre2.get()));
    stream.synchronize();
    return d_dinp.download();
  };
  const Bits first = backward();
  CHECK(backward() == first);
  // dinp = gelu'(pre2) (dout W): gelu_backward onto zeros with the product as its dout.
  const Vec g = to_double(dout), ag = magnitudes(g);
  Vec product(nx, 0.0), terms(nx, 0.0), want(nx, 0.0), slope(nx, 0.0), unused(nw, 0.0);
  const Vec hx = to_double(h_bits);
  layers::matmul_backward<double>(product.data(), unused.data(), nullptr, g.data(), hx.data(),
                                  w.data(), N, C, OC);
  layers::matmul_backward<double>(terms.data(), unused.data(), nullptr, ag.data(),
                                  magnitudes(hx).data(), aw.data(), N, C, OC);
  const Vec ones(nx, 1.0);
  gpt::gelu_backward<double>(want.data(), to_double(pre2).data(), product.data(), nx);
  gpt::gelu_backward<double>(slope.data(), to_double(pre2).data(), ones.data(), nx);
  Vec tol(nx);
  for (std::size_t i = 0; i < nx; ++i) {
    const double product_error =
        kBf16Unit * std::fabs(product[i]) + 2 * OC * kAccumulateUnit * terms[i];
    tol[i] = kBf16Unit * std::fabs(want[i]) + 1.2 * std::fabs(slope[i]) * product_error;
  }
  INFO("dinp through GELU");
  CHECK(mismatches(to_double(first), want, tol) == "");
}

TEST_CASE(
    "cuda layers: matmul through GELU matches the CPU layers, in cuBLASLt's epilogues and "
    "without them",
    "[gpu]") {
  check_matmul_gelu(37, 64, 96, true, 3000);   // both epilogues (OC and C multiples of 8)
  check_matmul_gelu(37, 77, 53, true, 3100);   // neither: the product, then the kernels
  check_matmul_gelu(29, 40, 53, false, 3200);  // the backward's epilogue only, no bias
  check_matmul_gelu(29, 77, 48, false, 3300);  // the forward's epilogue only, no bias
}

TEST_CASE("cuda layers: matmul through GELU refuses to add the input gradient", "[gpu]") {
  Matmul matmul;  // refused before anything is launched or read: no memory needed
  const Bf16* pre = reinterpret_cast<const Bf16*>(std::uintptr_t{256});
  CHECK(matmul.backward(reinterpret_cast<Bf16*>(std::uintptr_t{512}), nullptr, nullptr, nullptr,
                        nullptr, nullptr, 2, 8, 16, nullptr, nullptr, Into::add, Into::add,
                        Into::add, pre) == cudaErrorInvalidValue);
}

TEST_CASE("cuda layers: matmul's bias gradient sums 1000 rows in fixed chunks", "[gpu]") {
  // Four chunks of 250 rows through scratch, then their sums in order.
  check_matmul(1000, 24, 40, true, 500);
}

TEST_CASE("cuda layers: matmul keeps each shape's cached plan apart", "[gpu]") {
  // A product of another shape between two calls of the first gives the first the same bits.
  TestStream stream;
  Matmul matmul;
  const int N = 5, C = 8, OC = 16;
  const Bits inp = random_bf16(static_cast<std::size_t>(N) * C, 400, -1, 1);
  const Bits weight = random_bf16(static_cast<std::size_t>(OC) * C, 401, -1, 1);
  DeviceArray<Bf16> d_inp(inp.size()), d_weight(weight.size()), d_out(N * OC), d_wide(N * C);
  d_inp.upload(inp);
  d_weight.upload(weight);
  REQUIRE_LAUNCH(
      matmul.forward(d_out.get(), d_inp.get(), d_weight.get(), nullptr, N, C, OC, stream.get()));
  stream.synchronize();
  const Bits once = d_out.download();
  // wide[N, C] = out[N, OC] W'[C, OC]^T, the same weights read as C x OC.
  REQUIRE_LAUNCH(
      matmul.forward(d_wide.get(), d_out.get(), d_weight.get(), nullptr, N, OC, C, stream.get()));
  REQUIRE_LAUNCH(
      matmul.forward(d_out.get(), d_inp.get(), d_weight.get(), nullptr, N, C, OC, stream.get()));
  stream.synchronize();
  CHECK(d_out.download() == once);
}

// ---- Attention ----
//
// Inputs: q uniform in [-2, 2] (so that the softmax is far from flat), k, v, dout in [-1, 1].
// Products run on tensor cores: bf16 operands, fp32 accumulation that may truncate rather than
// round, so each fp32 sum of n products is taken as off by n 2^-23 times the sum of their sizes.
// Scores: s = scale q.k, off by at most hd 2^-23 sum|q k| scale <= 2 hd^1.5 2^-23: 1.7e-4 at
// hd = 80, 3.5e-4 at 128; lse by as much again plus the fp32 sum's relative error (T 2^-24)
// and exp2's few ulps; so each P = exp(s - lse) is off by a relative 7e-4 at most: eta = 2^-10
// (9.8e-4) bounds it. Where P and dS are a product's operands they are rounded to bf16 first,
// a relative 2^-9 more: etaP = eta + 2^-9. With P the exact probabilities:
//   out[t, i] = sum_u P v[u, i]:  a = etaP sum_u P |v[u, i]|;   lse: a = eta (absolute).
// Backward: delta_t = dout_t . out_t from the bf16 out the forward wrote, in fp32 FMA, so its
// error is E_t = |dout_t . (out_gpu - out_exact)| (computed here exactly) + hd 2^-24 sum_i |dout|
// |out|; dP[t, u] = dout_t . v_u is off by hd 2^-23 A, A = sum_i |dout| |v| >= |dP|; dS = P (dP -
// delta) is then off by W[t, u] = P ((eta + hd 2^-23) A + eta |delta_t| + E_t) + 2^-9 |dS|. So
//   dq[t, i]: a = scale sum_u W |k[u, i]|,  dk[u, i]: a = scale sum_(h, t) W |q[t, i]|,
//   dv[u, i]: a = etaP sum_(h, t) P |dout[t, i]|
// (the fp32 sums of at most group * T terms add 2^-23 times that many, far under eta).

constexpr double kEta = 0x1p-10;
constexpr double kOperandRound = 0x1p-9;  // a float rounded to bf16 to be a product's operand
constexpr double kEtaP = kEta + kOperandRound;
constexpr double kTensorUnit = 0x1p-23;  // a tensor-core fp32 sum, truncated

struct AttentionCase {
  int B, T, NH, NKV, hd, window;
  bool packed = false;  // rows exactly as wide as their heads: the 16-byte tile loads
};

void check_attention(const AttentionCase& c, std::uint64_t seed) {
  const int B = c.B, T = c.T, NH = c.NH, NKV = c.NKV, hd = c.hd, window = c.window;
  INFO("B " << B << ", T " << T << ", NH " << NH << ", NKV " << NKV << ", hd " << hd << ", window "
            << window << (c.packed ? ", packed rows" : ""));
  const int group = NH / NKV;
  // Rows wider than the heads, by odd counts, unless packed: k and v share rows, v after the NKV
  // k heads.
  const int pad = c.packed ? 0 : 1;
  const int ldq = NH * hd + 3 * pad, ldkv = 2 * NKV * hd + 5 * pad, ld_out = NH * hd + 7 * pad;
  const int v_at = NKV * hd;
  const std::size_t rows = static_cast<std::size_t>(B) * T;
  const std::size_t nq = rows * ldq, nkv = rows * ldkv, nout = rows * ld_out;
  const std::size_t nrow_heads = static_cast<std::size_t>(B) * NH * T;
  const Bits q = random_bf16(nq, seed + 1, -2, 2);
  const Bits kv = random_bf16(nkv, seed + 2, -1, 1);
  const Bits out0 = random_bf16(nout, seed + 3, -1, 1);  // the padding must stay as it is
  const Bits dout = random_bf16(nout, seed + 4, -1, 1);
  const Bits dq0 = random_bf16(nq, seed + 5, -1, 1);
  const Bits dkv0 = random_bf16(nkv, seed + 6, -1, 1);

  TestStream stream;
  DeviceArray<Bf16> d_q(nq), d_kv(nkv), d_out(nout), d_dout(nout), d_dq(nq), d_dkv(nkv);
  DeviceArray<float> d_lse(nrow_heads), d_delta(nrow_heads);
  d_q.upload(q);
  d_kv.upload(kv);
  d_dout.upload(dout);

  // Forward, twice: the same bits.
  const auto forward = [&] {
    d_out.upload(out0);
    REQUIRE_LAUNCH(attention_forward(d_out.get(), ld_out, d_lse.get(), d_q.get(), ldq, d_kv.get(),
                                     d_kv.get() + v_at, ldkv, B, T, NH, NKV, hd, window,
                                     stream.get()));
    stream.synchronize();
    return std::make_pair(d_out.download(), d_lse.download());
  };
  const auto [out_bits, lse_gpu] = forward();
  {
    const auto again = forward();
    CHECK(again.first == out_bits);
    CHECK(again.second == lse_gpu);
  }

  // The reference forward, in double, on rows of the same strides.
  const Vec qd = to_double(q), kvd = to_double(kv), dod = to_double(dout);
  Vec out_ref = to_double(out0);
  Vec att(static_cast<std::size_t>(B) * NH * T * T);
  layers::attention_forward_rows<double>(out_ref.data(), ld_out, att.data(), qd.data(), ldq,
                                         kvd.data(), kvd.data() + v_at, ldkv, B, T, NH, NKV, hd,
                                         window);
  const auto qi = [&](int b, int t, int h, int i) {
    return (static_cast<std::size_t>(b) * T + t) * ldq + static_cast<std::size_t>(h) * hd + i;
  };
  const auto ki = [&](int b, int u, int g, int i) {  // k; v is at + v_at
    return (static_cast<std::size_t>(b) * T + u) * ldkv + static_cast<std::size_t>(g) * hd + i;
  };
  const auto oi = [&](int b, int t, int h, int i) {
    return (static_cast<std::size_t>(b) * T + t) * ld_out + static_cast<std::size_t>(h) * hd + i;
  };
  const auto pi = [&](int b, int h, int t, int u) {
    return ((static_cast<std::size_t>(b) * NH + h) * T + t) * T + u;
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));

  // lse: log sum exp of the scaled scores of the keys each row sees.
  Vec lse_ref(nrow_heads);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        const int first = window > 0 ? std::max(0, t - window + 1) : 0;
        Vec s;
        for (int u = first; u <= t; ++u) {
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += qd[qi(b, t, h, i)] * kvd[ki(b, u, h / group, i)];
          s.push_back(dot * scale);
        }
        const double max = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double x : s) sum += std::exp(x - max);
        lse_ref[(static_cast<std::size_t>(b) * NH + h) * T + t] = max + std::log(sum);
      }
    }
  }
  CHECK(mismatches(to_double(lse_gpu), lse_ref, Vec(nrow_heads, 2 * kEta)) == "");

  // out: the heads' columns within tolerance, the padding untouched (tolerance 0).
  const Vec out_gpu = to_double(out_bits);
  Vec out_tol(nout, 0.0);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        for (int i = 0; i < hd; ++i) {
          double terms = 0;
          for (int u = 0; u <= t; ++u) {
            terms += att[pi(b, h, t, u)] * std::fabs(kvd[ki(b, u, h / group, i) + v_at]);
          }
          const std::size_t at = oi(b, t, h, i);
          out_tol[at] = kBf16Unit * std::fabs(out_ref[at]) + 2 * kEtaP * terms;
        }
      }
    }
  }
  {
    INFO("out");
    CHECK(mismatches(out_gpu, out_ref, out_tol) == "");
  }

  // Backward, twice from the same start, on the GPU's own out and lse.
  const auto backward = [&] {
    d_dq.upload(dq0);
    d_dkv.upload(dkv0);
    REQUIRE_LAUNCH(attention_backward(d_dq.get(), d_dkv.get(), d_dkv.get() + v_at, d_dout.get(),
                                      ld_out, d_out.get(), d_lse.get(), d_q.get(), ldq, d_kv.get(),
                                      d_kv.get() + v_at, ldkv, B, T, NH, NKV, hd, window,
                                      d_delta.get(), stream.get()));
    stream.synchronize();
    return std::make_pair(d_dq.download(), d_dkv.download());
  };
  const auto [dq_bits, dkv_bits] = backward();
  {
    const auto again = backward();
    CHECK(again.first == dq_bits);
    CHECK(again.second == dkv_bits);
  }

  Vec dq_ref = to_double(dq0), dkv_ref = to_double(dkv0);
  Vec datt(att.size());
  layers::attention_backward_rows<double>(
      dq_ref.data(), dkv_ref.data(), dkv_ref.data() + v_at, datt.data(), dod.data(), ld_out,
      qd.data(), ldq, kvd.data(), kvd.data() + v_at, ldkv, att.data(), B, T, NH, NKV, hd);

  // The fp32 error bounds (a) of every gradient entry, then the tolerances.
  Vec dq_a(nq, 0.0), dkv_a(nkv, 0.0);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const int g = h / group;
      for (int t = 0; t < T; ++t) {
        double moved = 0, terms = 0, delta = 0;
        for (int i = 0; i < hd; ++i) {
          const std::size_t at = oi(b, t, h, i);
          moved += dod[at] * (out_gpu[at] - out_ref[at]);
          terms += std::fabs(dod[at]) * std::fabs(out_gpu[at]);
          delta += dod[at] * out_ref[at];
        }
        const double e = std::fabs(moved) + hd * kF32Unit * terms;
        for (int u = 0; u <= t; ++u) {
          const double p = att[pi(b, h, t, u)];
          if (p == 0) continue;  // masked: exactly 0 on both sides
          double a = 0, dp = 0;
          for (int i = 0; i < hd; ++i) {
            a += std::fabs(dod[oi(b, t, h, i)]) * std::fabs(kvd[ki(b, u, g, i) + v_at]);
            dp += dod[oi(b, t, h, i)] * kvd[ki(b, u, g, i) + v_at];
          }
          const double wt = p * ((kEta + hd * kTensorUnit) * a + kEta * std::fabs(delta) + e) +
                            kOperandRound * p * std::fabs(dp - delta);
          for (int i = 0; i < hd; ++i) {
            dq_a[qi(b, t, h, i)] += scale * wt * std::fabs(kvd[ki(b, u, g, i)]);
            dkv_a[ki(b, u, g, i)] += scale * wt * std::fabs(qd[qi(b, t, h, i)]);
            dkv_a[ki(b, u, g, i) + v_at] += kEtaP * p * std::fabs(dod[oi(b, t, h, i)]);
          }
        }
      }
    }
  }
  // The heads' columns get 2^-8 |ref| + 2 a; the padding must not move (tolerance 0).
  Vec dq_tol(nq, 0.0), dkv_tol(nkv, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    for (int col = 0; col < NH * hd; ++col) {
      const std::size_t at = r * ldq + col;
      dq_tol[at] = kBf16Unit * std::fabs(dq_ref[at]) + 2 * dq_a[at];
    }
    for (int col = 0; col < 2 * NKV * hd; ++col) {
      const std::size_t at = r * ldkv + col;
      dkv_tol[at] = kBf16Unit * std::fabs(dkv_ref[at]) + 2 * dkv_a[at];
    }
  }
  {
    INFO("dq");
    CHECK(mismatches(to_double(dq_bits), dq_ref, dq_tol) == "");
  }
  {
    INFO("dk and dv");
    CHECK(mismatches(to_double(dkv_bits), dkv_ref, dkv_tol) == "");
  }
}

TEST_CASE(
    "cuda layers: attention forward and backward match the CPU layer on strided rows with grouped "
    "heads and windows",
    "[gpu]") {
  // T = 67: a full tile of 64 and a partial one; hd 80 runs in the 96-wide kernels with zero
  // padding, 128 in the widest (the most shared memory).
  std::uint64_t seed = 1000;
  for (int nkv : {6, 2}) {
    for (int hd : {64, 80, 32, 128}) {
      for (int window : {0, 17}) {
        check_attention({2, 67, 6, nkv, hd, window}, seed);
        seed += 10;
      }
    }
  }
}

TEST_CASE("cuda layers: attention's tile ranges follow the window edges across four tiles",
          "[gpu]") {
  // Windows whose edges fall on a tile boundary: with window 2, query 64 sees key 63 only; with
  // window 66 and T = 200 (tiles 64, 64, 64, 8), queries 128.. start in key tile 0 and keys
  // ..63 reach query tile 2. A first key tile or a last query tile one position off misses them.
  check_attention({2, 67, 6, 2, 80, 2}, 2000);
  check_attention({2, 200, 6, 2, 64, 66}, 2010);
  check_attention({1, 200, 4, 1, 96, 0}, 2020);
}

TEST_CASE(
    "cuda layers: attention on packed rows moves tiles 16 bytes at a time, to the same results",
    "[gpu]") {
  // Rows exactly as wide as their heads and hd a multiple of 8: the tile loads take 8 channels
  // at a time (hd 80 in the 96-wide kernels leaves two chunks of zeros); hd 36 is not a multiple
  // of 8 and keeps the one-channel loads on the same packed rows.
  check_attention({2, 130, 4, 2, 64, 0, true}, 3000);
  check_attention({1, 67, 2, 1, 128, 40, true}, 3010);
  check_attention({2, 67, 4, 4, 80, 0, true}, 3020);
  check_attention({1, 67, 4, 2, 36, 0, true}, 3030);
}

TEST_CASE("cuda layers: attention refuses a head dimension over 128 and uneven head groups",
          "[gpu]") {
  // Refused before anything is launched or read: no memory needed.
  CHECK(attention_forward(nullptr, 2048, nullptr, nullptr, 2048, nullptr, nullptr, 2048, 1, 4, 1, 1,
                          136, 0, nullptr) == cudaErrorInvalidValue);
  CHECK(attention_backward(nullptr, nullptr, nullptr, nullptr, 2048, nullptr, nullptr, nullptr,
                           2048, nullptr, nullptr, 2048, 1, 4, 1, 1, 136, 0, nullptr,
                           nullptr) == cudaErrorInvalidValue);
  CHECK(attention_forward(nullptr, 256, nullptr, nullptr, 256, nullptr, nullptr, 256, 1, 4, 6, 4,
                          32, 0, nullptr) == cudaErrorInvalidValue);
  // Empty sizes launch nothing.
  CHECK(attention_forward(nullptr, 256, nullptr, nullptr, 256, nullptr, nullptr, 256, 0, 4, 6, 2,
                          32, 0, nullptr) == 0);
}

// ---- Cross-entropy ----
//
// Per row, fp32: the max is exact; the sum of V exponentials has a relative error of about
// (V / 256 + 5 + 8) 2^-24 from its tree plus 2^-23 per expf, under 2e-6; the loss
// max + log(sum) - z[target] of magnitudes under 12 adds two roundings (1.4e-6). So
// |loss - ref| <= 2^-12 (2.4e-4), over 50 times the bound, still far below a wrong term.
// dlogits = (p - onehot) dloss with p = exp(z - max) / sum off by a relative 2^-17 at most (the
// sum, expf, z - max, the division: about 3e-6 < 7.6e-6), the subtraction and the product
// 2^-24 each: a = (2^-17 p + 2^-23) |dloss|. Rows without a target: loss and dlogits exactly 0.

TEST_CASE("cuda layers: fused cross-entropy matches the CPU layer and rows without a target give 0",
          "[gpu]") {
  const int N = 37, V = 1001;
  const float dloss = 1.0f / 37.0f;
  const std::size_t n = static_cast<std::size_t>(N) * V;
  const Bits logits = random_bf16(n, 2000, -4, 4);
  std::vector<std::int32_t> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = i % 5 == 3 ? -1 : (i * 7919 + 11) % V;

  TestStream stream;
  DeviceArray<Bf16> d_logits(n);
  DeviceArray<float> d_losses(N);
  DeviceArray<std::int32_t> d_targets(N);
  d_logits.upload(logits);
  d_targets.upload(targets);
  REQUIRE_LAUNCH(crossentropy_fused(d_logits.get(), V, d_losses.get(), d_targets.get(), dloss, N, V,
                                    stream.get()));
  stream.synchronize();
  const Vec losses = to_double(d_losses.download());
  const Vec dlogits = to_double(d_logits.download());

  const Vec z = to_double(logits);
  Vec want_losses(N), probs(n), want_dlogits(n, 0.0);
  layers::crossentropy_forward<double>(want_losses.data(), probs.data(), z.data(), targets.data(),
                                       N, V);
  const Vec dlosses(N, static_cast<double>(dloss));
  layers::crossentropy_backward<double>(want_dlogits.data(), probs.data(), targets.data(),
                                        dlosses.data(), N, V);

  Vec loss_tol(N), dlogits_tol(n, 0.0);
  for (int i = 0; i < N; ++i) {
    loss_tol[i] = targets[i] < 0 ? 0.0 : 0x1p-12;
    if (targets[i] < 0) continue;
    for (int v = 0; v < V; ++v) {
      const std::size_t at = static_cast<std::size_t>(i) * V + v;
      const double a = (0x1p-17 * probs[at] + 0x1p-23) * std::fabs(static_cast<double>(dloss));
      dlogits_tol[at] = kBf16Unit * std::fabs(want_dlogits[at]) + 2 * a;
    }
  }
  {
    INFO("losses");
    CHECK(mismatches(losses, want_losses, loss_tol) == "");
  }
  {
    INFO("dlogits");
    CHECK(mismatches(dlogits, want_dlogits, dlogits_tol) == "");
  }
}

// Rows `ld` elements apart (ld >= V: the CUDA models' padded vocabulary), the padding filled
// with NaN and 1e4 (either, read, would move a loss: NaN through the sum, 1e4 through the max,
// under which every exponential of the row vanishes; a moderate value would only shift it).
// First the forward-only kernel: the losses against the reference, every logit (padding too)
// left as it was; then the fused one on the same logits: the same losses bit for bit, dlogits
// against the reference on the V columns of each row, the padding as it was. Tolerances as above.
void check_crossentropy_rows(int N, int V, int ld, std::uint64_t seed) {
  INFO("N " << N << ", V " << V << ", rows " << ld << " apart");
  const float dloss = 1.0f / static_cast<float>(N);
  const std::size_t n = static_cast<std::size_t>(N) * ld;
  Bits logits = random_bf16(n, seed, -4, 4);
  std::vector<bool> padding(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    if (static_cast<int>(i % ld) < V) continue;
    padding[i] = true;
    logits[i] = i % 2 == 0 ? Bf16{0x7fc0} : float_to_bf16(1e4f);  // NaN, 1e4
  }
  std::vector<std::int32_t> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = i % 5 == 3 ? -1 : (i * 7919 + 11) % V;
  targets[0] = V - 1;  // the last column before the padding

  // The reference on the packed V columns.
  const std::size_t packed = static_cast<std::size_t>(N) * V;
  Vec z(packed);
  for (int i = 0; i < N; ++i) {
    for (int v = 0; v < V; ++v) {
      z[static_cast<std::size_t>(i) * V + v] =
          bf16_to_float(logits[static_cast<std::size_t>(i) * ld + v]);
    }
  }
  Vec want_losses(N), probs(packed), want_packed(packed, 0.0);
  layers::crossentropy_forward<double>(want_losses.data(), probs.data(), z.data(), targets.data(),
                                       N, V);
  const Vec dlosses(N, static_cast<double>(dloss));
  layers::crossentropy_backward<double>(want_packed.data(), probs.data(), targets.data(),
                                        dlosses.data(), N, V);
  // On the strided rows: the padding must keep its bits (compared apart, below).
  Vec want_dlogits(n, 0.0), dlogits_tol(n, 0.0), loss_tol(N);
  for (int i = 0; i < N; ++i) {
    loss_tol[i] = targets[i] < 0 ? 0.0 : 0x1p-12;
    for (int v = 0; v < V; ++v) {
      const std::size_t at = static_cast<std::size_t>(i) * ld + v;
      const std::size_t p = static_cast<std::size_t>(i) * V + v;
      want_dlogits[at] = want_packed[p];
      if (targets[i] < 0) continue;
      const double a = (0x1p-17 * probs[p] + 0x1p-23) * std::fabs(static_cast<double>(dloss));
      dlogits_tol[at] = kBf16Unit * std::fabs(want_packed[p]) + 2 * a;
    }
  }

  TestStream stream;
  DeviceArray<Bf16> d_logits(n);
  DeviceArray<float> d_losses(N);
  DeviceArray<std::int32_t> d_targets(N);
  d_targets.upload(targets);

  // Forward alone first: the logits stay as they are.
  d_logits.upload(logits);
  REQUIRE_LAUNCH(crossentropy_forward(d_logits.get(), ld, d_losses.get(), d_targets.get(), N, V,
                                      stream.get()));
  stream.synchronize();
  const std::vector<float> forward_losses = d_losses.download();
  CHECK(d_logits.download() == logits);
  {
    INFO("forward-only losses");
    CHECK(mismatches(to_double(forward_losses), want_losses, loss_tol) == "");
  }

  // Fused.
  REQUIRE_LAUNCH(crossentropy_fused(d_logits.get(), ld, d_losses.get(), d_targets.get(), dloss, N,
                                    V, stream.get()));
  stream.synchronize();
  const std::vector<float> fused_losses = d_losses.download();
  const Bits fused = d_logits.download();
  {
    INFO("fused losses");
    CHECK(mismatches(to_double(fused_losses), want_losses, loss_tol) == "");
  }
  // The same kernel code computes both: the same bits (NaN-free, so == compares bits).
  CHECK(forward_losses == fused_losses);
  Vec dlogits = to_double(fused);
  std::size_t padding_moved = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!padding[i]) continue;
    if (fused[i] != logits[i]) ++padding_moved;
    dlogits[i] = 0.0;  // compared bit for bit just above
  }
  CHECK(padding_moved == 0);
  {
    INFO("dlogits");
    CHECK(mismatches(dlogits, want_dlogits, dlogits_tol) == "");
  }
}

TEST_CASE(
    "cuda layers: cross-entropy on rows of a padded vocabulary reads and writes only the V "
    "columns",
    "[gpu]") {
  check_crossentropy_rows(37, 157, 256, 2100);   // an odd vocabulary, rows padded to 128s
  check_crossentropy_rows(9, 1001, 1007, 2200);  // the rows' stride odd as well
  check_crossentropy_rows(4, 300, 300, 2300);    // packed rows: the forward-only kernel too
}

TEST_CASE("cuda layers: cross-entropy refuses rows narrower than the vocabulary", "[gpu]") {
  // Refused before anything is launched or read: no memory needed.
  CHECK(crossentropy_fused(nullptr, 156, nullptr, nullptr, 1.0f, 2, 157, nullptr) ==
        cudaErrorInvalidValue);
  CHECK(crossentropy_forward(nullptr, 156, nullptr, nullptr, 2, 157, nullptr) ==
        cudaErrorInvalidValue);
  // Empty sizes launch nothing.
  CHECK(crossentropy_forward(nullptr, 0, nullptr, nullptr, 0, 157, nullptr) == 0);
}

// ---- Matmul on strided output rows ----
//
// out (forward) and dout (backward) with rows `ld` > OC elements apart, as the CUDA models' padded
// logits: the padding of out is garbage (NaN and 1e4) that the forward must leave bit for bit,
// and the padding of dout is the same garbage, which the backward must never read (a NaN read
// spreads to the gradients, 1e4 moves them far beyond the tolerances). The tolerances are
// check_matmul's, on the reference of the packed OC columns.

// The value of padding element i: NaN or 1e4.
Bf16 garbage(std::size_t i) {
  return i % 2 == 0 ? Bf16{0x7fc0} : float_to_bf16(1e4f);
}

// `rows` rows of `cols` packed, spread `ld` apart, the columns cols..ld garbage.
Bits spread(const Bits& packed, int rows, int cols, int ld) {
  Bits wide(static_cast<std::size_t>(rows) * ld);
  for (std::size_t i = 0; i < wide.size(); ++i) wide[i] = garbage(i);
  for (int r = 0; r < rows; ++r) {
    std::copy_n(packed.begin() + static_cast<std::ptrdiff_t>(r) * cols, cols,
                wide.begin() + static_cast<std::ptrdiff_t>(r) * ld);
  }
  return wide;
}

void check_matmul_rows(int N, int C, int OC, int ld, bool with_bias, std::uint64_t seed) {
  INFO("N " << N << ", C " << C << ", OC " << OC << " in rows " << ld << " apart"
            << (with_bias ? ", with bias" : ", no bias"));
  const std::size_t nx = static_cast<std::size_t>(N) * C;
  const std::size_t nw = static_cast<std::size_t>(OC) * C;
  const std::size_t ny = static_cast<std::size_t>(N) * OC;
  const std::size_t wide = static_cast<std::size_t>(N) * ld;
  const Bits inp = random_bf16(nx, seed + 1, -1, 1);
  const Bits weight = random_bf16(nw, seed + 2, -1, 1);
  const Bits bias = random_bf16(OC, seed + 3, -1, 1);
  const Bits dout = random_bf16(ny, seed + 4, -1, 1);
  const Bits dinp0 = random_bf16(nx, seed + 5, -1, 1);
  const Bits dweight0 = random_bf16(nw, seed + 6, -1, 1);
  const Bits dbias0 = random_bf16(OC, seed + 7, -1, 1);
  const Bits out0 = spread(Bits(ny, 0), N, OC, ld);  // the forward overwrites the OC columns

  TestStream stream;
  Matmul matmul;
  DeviceArray<Bf16> d_inp(nx), d_weight(nw), d_bias(OC), d_out(wide), d_dout(wide), d_dinp(nx),
      d_dweight(nw), d_dbias(OC);
  DeviceArray<float> scratch(reduction_scratch_floats(N, OC));
  d_inp.upload(inp);
  d_weight.upload(weight);
  d_bias.upload(bias);
  d_out.upload(out0);
  d_dout.upload(spread(dout, N, OC, ld));
  d_dinp.upload(dinp0);
  d_dweight.upload(dweight0);
  d_dbias.upload(dbias0);

  const Vec x = to_double(inp), w = to_double(weight), b = to_double(bias), g = to_double(dout);
  const Vec ax = magnitudes(x), aw = magnitudes(w), ab = magnitudes(b), ag = magnitudes(g);

  // Forward: the OC columns against the reference, the padding as it was.
  REQUIRE_LAUNCH(matmul.forward(d_out.get(), ld, d_inp.get(), d_weight.get(),
                                with_bias ? d_bias.get() : nullptr, N, C, OC, stream.get()));
  stream.synchronize();
  const Bits out_bits = d_out.download();
  Vec out(ny);
  std::size_t padding_moved = 0;
  for (std::size_t i = 0; i < wide; ++i) {
    const std::size_t r = i / ld, c = i % ld;
    if (c < static_cast<std::size_t>(OC)) {
      out[r * OC + c] = bf16_to_float(out_bits[i]);
    } else if (out_bits[i] != out0[i]) {
      ++padding_moved;
    }
  }
  CHECK(padding_moved == 0);
  Vec want(ny), scale(ny), tol(ny);
  layers::matmul_forward<double>(want.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N,
                                 C, OC);
  layers::matmul_forward<double>(scale.data(), ax.data(), aw.data(),
                                 with_bias ? ab.data() : nullptr, N, C, OC);
  for (std::size_t i = 0; i < ny; ++i) {
    tol[i] = kBf16Unit * std::fabs(want[i]) + 2 * C * kAccumulateUnit * scale[i];
    if (with_bias) tol[i] += kBf16Unit * std::fabs(want[i] - b[i % OC]);
  }
  {
    INFO("out");
    CHECK(mismatches(out, want, tol) == "");
  }

  // Backward from the strided dout, its padding never read.
  REQUIRE_LAUNCH(matmul.backward(d_dinp.get(), d_dweight.get(), with_bias ? d_dbias.get() : nullptr,
                                 d_dout.get(), ld, d_inp.get(), d_weight.get(), N, C, OC,
                                 scratch.get(), stream.get()));
  stream.synchronize();
  Vec want_dinp = to_double(dinp0), want_dweight = to_double(dweight0);
  Vec want_dbias = to_double(dbias0);
  layers::matmul_backward<double>(want_dinp.data(), want_dweight.data(),
                                  with_bias ? want_dbias.data() : nullptr, g.data(), x.data(),
                                  w.data(), N, C, OC);
  Vec scale_dinp = magnitudes(to_double(dinp0)), scale_dweight = magnitudes(to_double(dweight0));
  Vec scale_dbias = magnitudes(to_double(dbias0));
  layers::matmul_backward<double>(scale_dinp.data(), scale_dweight.data(),
                                  with_bias ? scale_dbias.data() : nullptr, ag.data(), ax.data(),
                                  aw.data(), N, C, OC);
  const auto tolerance = [](const Vec& ref, const Vec& terms, int k) {
    Vec t(ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) {
      t[i] = kBf16Unit * std::fabs(ref[i]) + 2 * k * kAccumulateUnit * terms[i];
    }
    return t;
  };
  {
    INFO("dinp");
    CHECK(mismatches(to_double(d_dinp.download()), want_dinp,
                     tolerance(want_dinp, scale_dinp, OC)) == "");
  }
  {
    INFO("dweight");
    CHECK(mismatches(to_double(d_dweight.download()), want_dweight,
                     tolerance(want_dweight, scale_dweight, N)) == "");
  }
  {
    INFO("dbias");
    CHECK(mismatches(to_double(d_dbias.download()), want_dbias,
                     tolerance(want_dbias, scale_dbias, N)) == "");
  }
}

TEST_CASE(
    "cuda layers: matmul writes and reads only the OC columns of output rows of a padded "
    "vocabulary",
    "[gpu]") {
  check_matmul_rows(37, 24, 157, 256, false, 2500);  // the logits' shape: an odd vocabulary
  check_matmul_rows(300, 16, 45, 51, true, 2600);    // the bias gradient's chunks, odd rows
}

TEST_CASE("cuda layers: matmul refuses output rows narrower than OC", "[gpu]") {
  // Refused before anything is launched or read: no memory needed.
  Matmul matmul;
  CHECK(matmul.forward(nullptr, 156, nullptr, nullptr, nullptr, 2, 8, 157, nullptr) ==
        cudaErrorInvalidValue);
  CHECK(matmul.backward(nullptr, nullptr, nullptr, nullptr, 156, nullptr, nullptr, 2, 8, 157,
                        nullptr, nullptr) == cudaErrorInvalidValue);
}

TEST_CASE("cuda layers: the models' logits rows are their vocabulary padded to 128s", "[gpu]") {
  CHECK(padded_vocab(50257) == 50304);    // GPT-2
  CHECK(padded_vocab(157) == 256);        // the strided cases above
  CHECK(padded_vocab(151936) == 151936);  // Qwen2: already a multiple
  CHECK(padded_vocab(128) == 128);
  CHECK(padded_vocab(1) == 128);
}

}  // namespace
}  // namespace zero::cuda_layers

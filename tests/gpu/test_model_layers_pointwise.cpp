// The CUDA layers of models/cuda/layers.h other than the matrix products, attention and the
// cross-entropy: embeddings, LayerNorm, RMSNorm, GELU, SwiGLU, residual adds and rotary
// embeddings, forward and backward on a GPU, against the CPU layers (models/gpt/kernels.h,
// models/llama/kernels.h, models/layers/layers.h) run in double on the same bf16 inputs, at odd
// sizes. Every backward starts from nonzero gradients (it adds), and runs twice from the same
// start to repeat bit for bit.
//
// Tolerances. The double reference is exact but for double roundings, so a GPU value differs from
// it by (a) the fp32 error made before the final rounding, bounded per layer below by k 2^-24 S:
// k counts fp32 roundings and S is a scale of the terms (a sum of n terms, in any order, is off
// by at most (n - 1) 2^-24 times the sum of their magnitudes), and (b) the rounding to bf16, at
// most 2^-8 of the value (8 significant bits, to nearest even). So
//   |gpu - ref| <= 2^-8 |ref| + 2 k 2^-24 S,
// the factor 2 covering the (1 + 2^-8) by which (b) can grow (a) and the higher-order terms the
// bounds drop. fp32 outputs (norm statistics) have no (b). A wrong index or a missed term moves a
// value by the size of a term, far beyond these bounds (C 2^-24 is 6e-5 at C = 1000).
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
#include "models/llama/kernels.h"
#include "tests/gpu/layer_test_helpers.h"

namespace zero::cuda_layers {
namespace {

using namespace zero::test;  // layer_test_helpers.h

// ---- Comparison ----

// How many elements differ in their bits.
template <class T>
std::size_t differences(const std::vector<T>& a, const std::vector<T>& b) {
  REQUIRE(a.size() == b.size());
  std::size_t count = 0;
  for (std::size_t i = 0; i < a.size(); ++i) count += a[i] != b[i] ? 1 : 0;
  return count;
}

// The tolerance of a bf16 value computed in fp32 with error at most fp32_error (see the top).
double bf16_tolerance(double want, double fp32_error) {
  return kBf16Unit * std::abs(want) + 2.0 * fp32_error;
}

// ---- Embeddings ----

// GPT (positions: wte + wpe) or Llama (wte alone). Tokens are drawn below V - 3, so they repeat
// (B T > V) and the last three rows of wte belong to no position.
void check_embedding(int B, int T, int C, int V, bool positions, std::uint64_t seed) {
  INFO("B " << B << ", T " << T << ", C " << C << ", V " << V
            << (positions ? ", with positions" : ", without positions"));
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const std::size_t VC = static_cast<std::size_t>(V) * C;
  const std::size_t TC = static_cast<std::size_t>(T) * C;
  const std::vector<std::int32_t> tokens = random_ints(N, seed + 1, 0, V - 4);
  const Bits wte = random_bf16(VC, seed + 2, -1.0, 1.0);
  const Bits wpe = random_bf16(TC, seed + 3, -1.0, 1.0);
  const Bits dout = random_bf16(NC, seed + 4, -1.0, 1.0);
  const Bits dwte0 = random_bf16(VC, seed + 5, -0.5, 0.5);
  const Bits dwpe0 = random_bf16(TC, seed + 6, -0.5, 0.5);

  TestStream stream;
  DeviceArray<std::int32_t> d_tokens(tokens);
  DeviceArray<Bf16> d_wte(wte), d_wpe(wpe), d_out(NC);
  REQUIRE_LAUNCH(embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(),
                                   positions ? d_wpe.get() : nullptr, B, T, C, stream.get()));
  stream.synchronize();
  const Bits out = d_out.download();
  if (positions) {
    Vec want(NC);
    gpt::encoder_forward<double>(want.data(), tokens.data(), to_double(wte).data(),
                                 to_double(wpe).data(), B, T, C);
    // One fp32 addition of two bf16 values: k = 1, S = |wte| + |wpe|.
    Vec tolerance(NC);
    for (int i = 0; i < N; ++i) {
      for (int c = 0; c < C; ++c) {
        const std::size_t at = static_cast<std::size_t>(i) * C + c;
        const double a = bf16_to_float(wte[static_cast<std::size_t>(tokens[i]) * C + c]);
        const double p = bf16_to_float(wpe[static_cast<std::size_t>(i % T) * C + c]);
        tolerance[at] = bf16_tolerance(want[at], kF32Unit * (std::abs(a) + std::abs(p)));
      }
    }
    require_close("embedding forward", out, want, tolerance);
  } else {
    // Each row a copy of its token's, bit for bit.
    Bits want(NC);
    for (int i = 0; i < N; ++i) {
      std::copy_n(wte.begin() + static_cast<std::ptrdiff_t>(tokens[i]) * C, C,
                  want.begin() + static_cast<std::ptrdiff_t>(i) * C);
    }
    REQUIRE(differences(out, want) == 0);
  }

  const TokenGroups groups = group_positions(tokens.data(), N);
  DeviceArray<std::int32_t> d_positions(groups.positions), d_starts(groups.starts),
      d_group_tokens(groups.tokens);
  DeviceArray<Bf16> d_dout(dout), d_dwte(VC), d_dwpe(TC);
  DeviceArray<float> d_scratch(reduction_scratch_floats(N, C));
  const auto backward = [&] {
    d_dwte.upload(dwte0);
    d_dwpe.upload(dwpe0);
    REQUIRE_LAUNCH(embedding_backward(d_dwte.get(), positions ? d_dwpe.get() : nullptr,
                                      d_dout.get(), d_positions.get(), d_starts.get(),
                                      d_group_tokens.get(), static_cast<int>(groups.tokens.size()),
                                      B, T, C, d_scratch.get(), stream.get()));
    stream.synchronize();
    return std::make_pair(d_dwte.download(), d_dwpe.download());
  };
  const auto [dwte, dwpe] = backward();
  const auto [dwte_again, dwpe_again] = backward();
  CHECK(differences(dwte_again, dwte) == 0);
  CHECK(differences(dwpe_again, dwpe) == 0);

  // The reference adds into the starting gradients; run on magnitudes it gives each element's S.
  const Vec dout_d = to_double(dout);
  const Vec dout_abs = magnitudes(dout_d);
  Vec want_dwte = to_double(dwte0), want_dwpe = to_double(dwpe0);
  Vec scale_dwte = magnitudes(want_dwte), scale_dwpe = magnitudes(want_dwpe);
  if (positions) {
    gpt::encoder_backward<double>(want_dwte.data(), want_dwpe.data(), dout_d.data(), tokens.data(),
                                  B, T, C);
    gpt::encoder_backward<double>(scale_dwte.data(), scale_dwpe.data(), dout_abs.data(),
                                  tokens.data(), B, T, C);
  } else {
    llama::embedding_backward<double>(want_dwte.data(), dout_d.data(), tokens.data(), N, C);
    llama::embedding_backward<double>(scale_dwte.data(), dout_abs.data(), tokens.data(), N, C);
  }
  // dwte: a token's k <= N terms summed (k - 1 roundings), then added to the start (1): k = N.
  // dwpe: B terms, then the add: k = B.
  Vec tolerance_dwte(VC), tolerance_dwpe(TC);
  for (std::size_t e = 0; e < VC; ++e) {
    tolerance_dwte[e] = bf16_tolerance(want_dwte[e], N * kF32Unit * scale_dwte[e]);
  }
  for (std::size_t e = 0; e < TC; ++e) {
    tolerance_dwpe[e] = bf16_tolerance(want_dwpe[e], B * kF32Unit * scale_dwpe[e]);
  }
  require_close("embedding backward dwte", dwte, want_dwte, tolerance_dwte);
  // The rows no position reads keep their bits.
  const auto unread = static_cast<std::ptrdiff_t>(V - 3) * C;
  CHECK(std::equal(dwte.begin() + unread, dwte.end(), dwte0.begin() + unread));
  if (positions) {
    require_close("embedding backward dwpe", dwpe, want_dwpe, tolerance_dwpe);
  } else {
    CHECK(differences(dwpe, dwpe0) == 0);  // not passed: untouched
  }
}

// ---- LayerNorm ----

// integral_dout: dout and the starting dbias are multiples of 1/8, so every partial sum of the
// bias gradient is exact in fp32 and the GPU's dbias must be the reference's rounded to bf16 bit
// for bit: each row counted exactly once, whatever the row blocks.
void check_layernorm(int N, int C, bool integral_dout, std::uint64_t seed) {
  INFO("N " << N << ", C " << C);
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const Bits inp = random_bf16(NC, seed + 1, -1.0, 1.5);  // rows of nonzero mean
  const Bits weight = random_bf16(C, seed + 2, -1.5, 1.5);
  const Bits bias = random_bf16(C, seed + 3, -0.5, 0.5);
  const Bits dout =
      integral_dout ? random_eighths(NC, seed + 4) : random_bf16(NC, seed + 4, -1.0, 1.0);
  const Bits dinp0 = random_bf16(NC, seed + 5, -0.5, 0.5);
  const Bits dweight0 = random_bf16(C, seed + 6, -0.5, 0.5);
  const Bits dbias0 =
      integral_dout ? random_eighths(C, seed + 7) : random_bf16(C, seed + 7, -0.5, 0.5);
  const Vec x = to_double(inp), w = to_double(weight), b = to_double(bias), g = to_double(dout);

  TestStream stream;
  DeviceArray<Bf16> d_inp(inp), d_weight(weight), d_bias(bias), d_out(NC);
  DeviceArray<float> d_mean(N), d_rstd(N);
  REQUIRE_LAUNCH(layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(),
                                   d_weight.get(), d_bias.get(), N, C, stream.get()));
  stream.synchronize();
  const Bits out = d_out.download();
  const std::vector<float> mean = d_mean.download(), rstd = d_rstd.download();

  Vec want(NC), want_mean(N), want_rstd(N);
  gpt::layernorm_forward<double>(want.data(), want_mean.data(), want_rstd.data(), x.data(),
                                 w.data(), b.data(), N, C);
  // Per row, A = mean |x|. mean: C terms summed and a division, off by <= C 2^-24 A: k = C + 2,
  // S = A. rstd: the variance's sum of C squares is off by (C + 3) 2^-24 of it (the mean's error
  // enters only squared), the square root halves that, and the division by C, the add of eps,
  // the root and the reciprocal add 4: relative (C + 8) 2^-24 at most, S = rstd.
  // out = (x - m) s w + b: the mean's error times s, s's relative error times |x - m| s, and the
  // five roundings: k = C + 8, S = |w| s (A + |x - m|) + |b|.
  Vec tolerance(NC), tolerance_mean(N), tolerance_rstd(N);
  for (int i = 0; i < N; ++i) {
    const std::size_t row = static_cast<std::size_t>(i) * C;
    double A = 0;
    for (int c = 0; c < C; ++c) A += std::abs(x[row + c]);
    A /= C;
    const double m = want_mean[i], s = want_rstd[i];
    tolerance_mean[i] = 2.0 * (C + 2) * kF32Unit * A;
    tolerance_rstd[i] = 2.0 * (C + 8) * kF32Unit * s;
    for (int c = 0; c < C; ++c) {
      const double S = std::abs(w[c]) * s * (A + std::abs(x[row + c] - m)) + std::abs(b[c]);
      tolerance[row + c] = bf16_tolerance(want[row + c], (C + 8) * kF32Unit * S);
    }
  }
  require_close("layernorm forward mean", mean, want_mean, tolerance_mean);
  require_close("layernorm forward rstd", rstd, want_rstd, tolerance_rstd);
  require_close("layernorm forward out", out, want, tolerance);

  // The backward on the statistics both sides share: the reference's, in fp32 (what the GPU's
  // forward keeps).
  std::vector<float> mean_f(N), rstd_f(N);
  for (int i = 0; i < N; ++i) {
    mean_f[i] = static_cast<float>(want_mean[i]);
    rstd_f[i] = static_cast<float>(want_rstd[i]);
  }
  const Vec mean_d = to_double(mean_f), rstd_d = to_double(rstd_f);
  DeviceArray<Bf16> d_dout(dout), d_dinp(NC), d_dweight(C), d_dbias(C);
  DeviceArray<float> d_mean_f(mean_f), d_rstd_f(rstd_f);
  DeviceArray<float> d_scratch(reduction_scratch_floats(N, C));
  struct Grads {
    Bits dinp, dweight, dbias;
  };
  const auto backward = [&] {
    d_dinp.upload(dinp0);
    d_dweight.upload(dweight0);
    d_dbias.upload(dbias0);
    REQUIRE_LAUNCH(layernorm_backward(d_dinp.get(), d_dweight.get(), d_dbias.get(), d_dout.get(),
                                      d_inp.get(), d_weight.get(), d_mean_f.get(), d_rstd_f.get(),
                                      N, C, d_scratch.get(), stream.get()));
    stream.synchronize();
    return Grads{d_dinp.download(), d_dweight.download(), d_dbias.download()};
  };
  const Grads got = backward();
  const Grads again = backward();
  CHECK(differences(again.dinp, got.dinp) == 0);
  CHECK(differences(again.dweight, got.dweight) == 0);
  CHECK(differences(again.dbias, got.dbias) == 0);

  Vec want_dinp = to_double(dinp0), want_dweight = to_double(dweight0),
      want_dbias = to_double(dbias0);
  gpt::layernorm_backward<double>(want_dinp.data(), want_dweight.data(), want_dbias.data(),
                                  g.data(), x.data(), w.data(), mean_d.data(), rstd_d.data(), N, C);
  // With dn = w g and xhat = (x - m) s: dinp += (dn - mean(dn) - xhat mean(dn xhat)) s. Per row,
  // D = mean |dn| and E = mean |dn xhat|: mean(dn) is off by <= (C + 1) 2^-24 D, mean(dn xhat)
  // by (C + 4) 2^-24 E, and the rest rounds a few times: k = C + 8,
  // S = s (|dn| + D + |xhat| E) + |dinp0|.
  // dweight: N terms xhat g (3 roundings each) summed, then added: k = N + 8,
  // S = sum |xhat g| + |dweight0|. dbias: k = N + 2, S = sum |g| + |dbias0|.
  Vec tolerance_dinp(NC), scale_dweight = magnitudes(to_double(dweight0)),
                          scale_dbias = magnitudes(to_double(dbias0));
  for (int i = 0; i < N; ++i) {
    const std::size_t row = static_cast<std::size_t>(i) * C;
    const double m = mean_d[i], s = rstd_d[i];
    double D = 0, E = 0;
    for (int c = 0; c < C; ++c) {
      const double dn = w[c] * g[row + c], xhat = (x[row + c] - m) * s;
      D += std::abs(dn);
      E += std::abs(dn * xhat);
      scale_dweight[c] += std::abs(xhat * g[row + c]);
      scale_dbias[c] += std::abs(g[row + c]);
    }
    D /= C;
    E /= C;
    for (int c = 0; c < C; ++c) {
      const double dn = w[c] * g[row + c], xhat = (x[row + c] - m) * s;
      const double S = s * (std::abs(dn) + D + std::abs(xhat) * E) +
                       std::abs(static_cast<double>(bf16_to_float(dinp0[row + c])));
      tolerance_dinp[row + c] = bf16_tolerance(want_dinp[row + c], (C + 8) * kF32Unit * S);
    }
  }
  Vec tolerance_dweight(C), tolerance_dbias(C);
  for (int c = 0; c < C; ++c) {
    tolerance_dweight[c] = bf16_tolerance(want_dweight[c], (N + 8) * kF32Unit * scale_dweight[c]);
    tolerance_dbias[c] = bf16_tolerance(want_dbias[c], (N + 2) * kF32Unit * scale_dbias[c]);
  }
  require_close("layernorm backward dinp", got.dinp, want_dinp, tolerance_dinp);
  require_close("layernorm backward dweight", got.dweight, want_dweight, tolerance_dweight);
  require_close("layernorm backward dbias", got.dbias, want_dbias, tolerance_dbias);
  if (integral_dout) {
    Bits exact(C);
    for (int c = 0; c < C; ++c) exact[c] = float_to_bf16(static_cast<float>(want_dbias[c]));
    CHECK(differences(got.dbias, exact) == 0);
  }
}

// ---- RMSNorm ----

void check_rmsnorm(int N, int C, std::uint64_t seed) {
  INFO("N " << N << ", C " << C);
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const float eps = 1e-5f;
  const Bits inp = random_bf16(NC, seed + 1, -1.0, 1.5);
  const Bits weight = random_bf16(C, seed + 2, -1.5, 1.5);
  const Bits dout = random_bf16(NC, seed + 3, -1.0, 1.0);
  const Bits dinp0 = random_bf16(NC, seed + 4, -0.5, 0.5);
  const Bits dweight0 = random_bf16(C, seed + 5, -0.5, 0.5);
  const Vec x = to_double(inp), w = to_double(weight), g = to_double(dout);

  TestStream stream;
  DeviceArray<Bf16> d_inp(inp), d_weight(weight), d_out(NC);
  DeviceArray<float> d_rstd(N);
  REQUIRE_LAUNCH(rmsnorm_forward(d_out.get(), d_rstd.get(), d_inp.get(), d_weight.get(), N, C, eps,
                                 stream.get()));
  stream.synchronize();
  const Bits out = d_out.download();
  const std::vector<float> rstd = d_rstd.download();

  Vec want(NC), want_rstd(N);
  llama::rmsnorm_forward<double>(want.data(), want_rstd.data(), x.data(), w.data(), N, C,
                                 static_cast<double>(eps));
  // rstd: the sum of C squares is off by (C + 1) 2^-24 of it, the root halves that, the division,
  // eps, root and reciprocal add 4: relative (C + 8) 2^-24 at most, S = rstd. out = x s w: s's
  // error and two roundings: k = C + 8, S = |out|.
  Vec tolerance(NC), tolerance_rstd(N);
  for (int i = 0; i < N; ++i) tolerance_rstd[i] = 2.0 * (C + 8) * kF32Unit * want_rstd[i];
  for (std::size_t e = 0; e < NC; ++e) {
    tolerance[e] = bf16_tolerance(want[e], (C + 8) * kF32Unit * std::abs(want[e]));
  }
  require_close("rmsnorm forward rstd", rstd, want_rstd, tolerance_rstd);
  require_close("rmsnorm forward out", out, want, tolerance);

  std::vector<float> rstd_f(N);
  for (int i = 0; i < N; ++i) rstd_f[i] = static_cast<float>(want_rstd[i]);
  const Vec rstd_d = to_double(rstd_f);
  DeviceArray<Bf16> d_dout(dout), d_dinp(NC), d_dweight(C);
  DeviceArray<float> d_rstd_f(rstd_f);
  DeviceArray<float> d_scratch(reduction_scratch_floats(N, C));
  const auto backward = [&] {
    d_dinp.upload(dinp0);
    d_dweight.upload(dweight0);
    REQUIRE_LAUNCH(rmsnorm_backward(d_dinp.get(), d_dweight.get(), d_dout.get(), d_inp.get(),
                                    d_weight.get(), d_rstd_f.get(), N, C, d_scratch.get(),
                                    stream.get()));
    stream.synchronize();
    return std::make_pair(d_dinp.download(), d_dweight.download());
  };
  const auto [dinp, dweight] = backward();
  const auto [dinp_again, dweight_again] = backward();
  CHECK(differences(dinp_again, dinp) == 0);
  CHECK(differences(dweight_again, dweight) == 0);

  Vec want_dinp = to_double(dinp0), want_dweight = to_double(dweight0);
  llama::rmsnorm_backward<double>(want_dinp.data(), want_dweight.data(), g.data(), x.data(),
                                  w.data(), rstd_d.data(), N, C);
  // dinp += s dn - x s^3 mean(dn x), dn = w g. Per row F = mean |dn x|: mean(dn x) is off by
  // (C + 2) 2^-24 F, and the rest rounds a few times: k = C + 8,
  // S = s |dn| + |x| s^3 F + |dinp0|. dweight: N terms x s g (3 roundings each) summed, then
  // added: k = N + 8, S = sum |x s g| + |dweight0|.
  Vec tolerance_dinp(NC), scale_dweight = magnitudes(to_double(dweight0));
  for (int i = 0; i < N; ++i) {
    const std::size_t row = static_cast<std::size_t>(i) * C;
    const double s = rstd_d[i];
    double F = 0;
    for (int c = 0; c < C; ++c) {
      F += std::abs(w[c] * g[row + c] * x[row + c]);
      scale_dweight[c] += std::abs(x[row + c] * s * g[row + c]);
    }
    F /= C;
    for (int c = 0; c < C; ++c) {
      const double S = s * std::abs(w[c] * g[row + c]) + std::abs(x[row + c]) * s * s * s * F +
                       std::abs(static_cast<double>(bf16_to_float(dinp0[row + c])));
      tolerance_dinp[row + c] = bf16_tolerance(want_dinp[row + c], (C + 8) * kF32Unit * S);
    }
  }
  Vec tolerance_dweight(C);
  for (int c = 0; c < C; ++c) {
    tolerance_dweight[c] = bf16_tolerance(want_dweight[c], (N + 8) * kF32Unit * scale_dweight[c]);
  }
  require_close("rmsnorm backward dinp", dinp, want_dinp, tolerance_dinp);
  require_close("rmsnorm backward dweight", dweight, want_dweight, tolerance_dweight);
}

// ---- Pointwise ----

void check_gelu(std::size_t n, std::uint64_t seed) {
  INFO("n " << n);
  const Bits inp = random_bf16(n, seed + 1, -4.0, 4.0);  // into both tails
  const Bits dout = random_bf16(n, seed + 2, -1.0, 1.0);
  const Bits dinp0 = random_bf16(n, seed + 3, -0.5, 0.5);
  const Vec x = to_double(inp), g = to_double(dout), d0 = to_double(dinp0);

  TestStream stream;
  DeviceArray<Bf16> d_inp(inp), d_out(n), d_dout(dout), d_dinp(n);
  REQUIRE_LAUNCH(gelu_forward(d_out.get(), d_inp.get(), n, stream.get()));
  stream.synchronize();
  const Bits out = d_out.download();
  Vec want(n);
  gpt::gelu_forward<double>(want.data(), x.data(), n);
  // th = tanhf(z) is within 2 ulp (<= 4 2^-24 near 1), and z's own error (6 roundings, the float
  // constants included) moves it by at most max(z sech^2 z) 6 2^-24 < 3 2^-24: |dth| <= 7 2^-24.
  // out = x (1 + th) / 2: <= (3.5 |x| + 3 |out|) 2^-24 <= 8 2^-24 |x|, doubled for margin:
  // k = 16, S = |x|.
  Vec tolerance(n);
  for (std::size_t i = 0; i < n; ++i) {
    tolerance[i] = bf16_tolerance(want[i], 16 * kF32Unit * std::abs(x[i]));
  }
  require_close("gelu forward", out, want, tolerance);

  const auto backward = [&] {
    d_dinp.upload(dinp0);
    REQUIRE_LAUNCH(gelu_backward(d_dinp.get(), d_inp.get(), d_dout.get(), n, stream.get()));
    stream.synchronize();
    return d_dinp.download();
  };
  const Bits dinp = backward();
  CHECK(differences(backward(), dinp) == 0);
  Vec want_dinp = d0;
  gpt::gelu_backward<double>(want_dinp.data(), x.data(), g.data(), n);
  // grad = ((1 + th) / 2 + x sech2 du / 2) g with sech2 = 1 - th^2 (off by <= 16 2^-24) and
  // du = sqrt(2/pi) (1 + 3 0.044715 x^2) <= 0.8 (1 + x^2): <= (5 + 10 |x| (1 + x^2)) 2^-24 |g|
  // before the last product and the add; doubled for margin: k = 32,
  // S = (1 + |x| (1 + x^2)) |g| + |dinp0|.
  Vec tolerance_dinp(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double S = (1 + std::abs(x[i]) * (1 + x[i] * x[i])) * std::abs(g[i]) + std::abs(d0[i]);
    tolerance_dinp[i] = bf16_tolerance(want_dinp[i], 32 * kF32Unit * S);
  }
  require_close("gelu backward", dinp, want_dinp, tolerance_dinp);
}

void check_swiglu(std::size_t n, std::uint64_t seed) {
  INFO("n " << n);
  const Bits gate = random_bf16(n, seed + 1, -6.0, 6.0);
  const Bits up = random_bf16(n, seed + 2, -1.5, 1.5);
  const Bits dh = random_bf16(n, seed + 3, -1.0, 1.0);
  const Bits dgate0 = random_bf16(n, seed + 4, -0.5, 0.5);
  const Bits dup0 = random_bf16(n, seed + 5, -0.5, 0.5);
  const Vec x = to_double(gate), u = to_double(up), g = to_double(dh);

  TestStream stream;
  DeviceArray<Bf16> d_gate(gate), d_up(up), d_h(n), d_dh(dh), d_dgate(n), d_dup(n);
  REQUIRE_LAUNCH(swiglu_forward(d_h.get(), d_gate.get(), d_up.get(), n, stream.get()));
  stream.synchronize();
  const Bits h = d_h.download();
  Vec want(n);
  llama::swiglu_forward<double>(want.data(), x.data(), u.data(), n);
  // s = 1 / (1 + expf(-x)): expf within 2 ulp (4 2^-24 relative), the add and the division: s is
  // off by <= 6 2^-24 of itself; h = x s up two roundings more: 8, doubled for margin: k = 16,
  // S = |h|.
  Vec tolerance(n);
  for (std::size_t i = 0; i < n; ++i) {
    tolerance[i] = bf16_tolerance(want[i], 16 * kF32Unit * std::abs(want[i]));
  }
  require_close("swiglu forward", h, want, tolerance);

  const auto backward = [&] {
    d_dgate.upload(dgate0);
    d_dup.upload(dup0);
    REQUIRE_LAUNCH(swiglu_backward(d_dgate.get(), d_dup.get(), d_dh.get(), d_gate.get(), d_up.get(),
                                   n, stream.get()));
    stream.synchronize();
    return std::make_pair(d_dgate.download(), d_dup.download());
  };
  const auto [dgate, dup] = backward();
  const auto [dgate_again, dup_again] = backward();
  CHECK(differences(dgate_again, dgate) == 0);
  CHECK(differences(dup_again, dup) == 0);
  Vec want_dgate = to_double(dgate0), want_dup = to_double(dup0);
  llama::swiglu_backward<double>(want_dgate.data(), want_dup.data(), g.data(), x.data(), u.data(),
                                 n);
  // dgate += g up s (1 + x (1 - s)): 1 - s is off by <= 7 2^-24 (absolute), so
  // s (1 + x (1 - s)) by <= (8 |x| + 3) 2^-24 with its roundings; the products and the add:
  // <= 16 2^-24 (1 + |x|) |g up| + 2^-24 |dgate0|, doubled: k = 32,
  // S = (1 + |x|) |g up| + |dgate0|. dup += g x s: 8 roundings' worth, doubled: k = 16,
  // S = |g x s| + |dup0|.
  Vec tolerance_dgate(n), tolerance_dup(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-x[i]));
    const double S_gate = (1 + std::abs(x[i])) * std::abs(g[i] * u[i]) +
                          std::abs(static_cast<double>(bf16_to_float(dgate0[i])));
    const double S_up =
        std::abs(g[i] * x[i] * s) + std::abs(static_cast<double>(bf16_to_float(dup0[i])));
    tolerance_dgate[i] = bf16_tolerance(want_dgate[i], 32 * kF32Unit * S_gate);
    tolerance_dup[i] = bf16_tolerance(want_dup[i], 16 * kF32Unit * S_up);
  }
  require_close("swiglu backward dgate", dgate, want_dgate, tolerance_dgate);
  require_close("swiglu backward dup", dup, want_dup, tolerance_dup);
}

void check_residual(std::size_t n, std::uint64_t seed) {
  INFO("n " << n);
  const Bits a = random_bf16(n, seed + 1, -2.0, 2.0);
  const Bits b = random_bf16(n, seed + 2, -2.0, 2.0);
  const Vec a_d = to_double(a), b_d = to_double(b);
  Vec want(n);
  layers::residual_forward<double>(want.data(), a_d.data(), b_d.data(), n);
  // One fp32 addition of two bf16 values: k = 1, S = |a| + |b|.
  Vec tolerance(n);
  for (std::size_t i = 0; i < n; ++i) {
    tolerance[i] = bf16_tolerance(want[i], kF32Unit * (std::abs(a_d[i]) + std::abs(b_d[i])));
  }

  TestStream stream;
  DeviceArray<Bf16> d_a(a), d_b(b), d_out(n);
  REQUIRE_LAUNCH(residual_forward(d_out.get(), d_a.get(), d_b.get(), n, stream.get()));
  stream.synchronize();
  const Bits out = d_out.download();
  require_close("residual forward", out, want, tolerance);
  // In place, into either operand: the same bits.
  REQUIRE_LAUNCH(residual_forward(d_a.get(), d_a.get(), d_b.get(), n, stream.get()));
  stream.synchronize();
  CHECK(differences(d_a.download(), out) == 0);
  d_a.upload(a);
  REQUIRE_LAUNCH(residual_forward(d_b.get(), d_a.get(), d_b.get(), n, stream.get()));
  stream.synchronize();
  CHECK(differences(d_b.download(), out) == 0);
}

// ---- Rotary embeddings ----

// Rows of ld = heads hd + 5 elements whose heads start `offset` = 3 elements in (a 6-byte
// misalignment), as q or k inside a fused row: the elements around the heads keep their bits.
void check_rope(int B, int T, int heads, int hd, std::uint64_t seed) {
  INFO("B " << B << ", T " << T << ", heads " << heads << ", hd " << hd);
  const int N = B * T, half = hd / 2, width = heads * hd, ld = width + 5, offset = 3;
  const std::size_t size = static_cast<std::size_t>(N) * ld;
  const Bits x = random_bf16(size, seed + 1, -2.0, 2.0);
  const Bits dx = random_bf16(size, seed + 2, -2.0, 2.0);
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(10000.0, -2.0 * i / hd);
  std::vector<float> cos_f(static_cast<std::size_t>(T) * half), sin_f(cos_f.size());
  llama::rope_tables<float>(cos_f.data(), sin_f.data(), inv_freq.data(), T, hd);
  const Vec cos_d = to_double(cos_f), sin_d = to_double(sin_f);

  TestStream stream;
  DeviceArray<float> d_cos(cos_f), d_sin(sin_f);
  for (const bool backward : {false, true}) {
    INFO((backward ? "backward" : "forward"));
    const Bits& start = backward ? dx : x;
    DeviceArray<Bf16> d_x(start);
    if (backward) {
      REQUIRE_LAUNCH(rope_backward(d_x.get() + offset, ld, d_cos.get(), d_sin.get(), B, T, heads,
                                   hd, stream.get()));
    } else {
      REQUIRE_LAUNCH(rope_forward(d_x.get() + offset, ld, d_cos.get(), d_sin.get(), B, T, heads, hd,
                                  stream.get()));
    }
    stream.synchronize();
    const Bits got_rows = d_x.download();

    // The heads of each row, packed [N, heads, hd] as the CPU layer takes them.
    Vec want(static_cast<std::size_t>(N) * width);
    Bits got(want.size());
    for (int r = 0; r < N; ++r) {
      for (int j = 0; j < width; ++j) {
        const std::size_t at = static_cast<std::size_t>(r) * ld + offset + j;
        want[static_cast<std::size_t>(r) * width + j] = bf16_to_float(start[at]);
        got[static_cast<std::size_t>(r) * width + j] = got_rows[at];
      }
    }
    const Vec before = want;
    if (backward) {
      llama::rope_backward<double>(want.data(), cos_d.data(), sin_d.data(), B, T, heads, hd);
    } else {
      llama::rope_forward<double>(want.data(), cos_d.data(), sin_d.data(), B, T, heads, hd);
    }
    // lo c -+ hi s with |c|, |s| <= 1: two products and a sum (or a fused multiply-add),
    // <= 3 2^-24 (|lo| + |hi|): k = 4, S = |lo| + |hi| of the element's pair.
    Vec tolerance(want.size());
    for (std::size_t e = 0; e < want.size(); ++e) {
      const int j = static_cast<int>(e % hd);
      const std::size_t partner = j < half ? e + half : e - half;
      tolerance[e] =
          bf16_tolerance(want[e], 4 * kF32Unit * (std::abs(before[e]) + std::abs(before[partner])));
    }
    require_close(backward ? "rope backward" : "rope forward", got, want, tolerance);
    std::size_t moved = 0;  // elements outside the heads that changed
    for (int r = 0; r < N; ++r) {
      for (int j = 0; j < ld; ++j) {
        if (j >= offset && j < offset + width) continue;
        const std::size_t at = static_cast<std::size_t>(r) * ld + j;
        if (got_rows[at] != start[at]) ++moved;
      }
    }
    CHECK(moved == 0);
  }
}

}  // namespace

TEST_CASE("cuda layers: group_positions lists each token's positions in order, tokens ascending",
          "[gpu]") {
  const std::vector<std::int32_t> tokens = {5, 2, 5, 7, 2, 5, 0};
  const TokenGroups groups = group_positions(tokens.data(), static_cast<int>(tokens.size()));
  CHECK(groups.tokens == std::vector<std::int32_t>{0, 2, 5, 7});
  CHECK(groups.starts == std::vector<std::int32_t>{0, 1, 3, 6, 7});
  CHECK(groups.positions == std::vector<std::int32_t>{6, 1, 4, 0, 2, 5, 3});
  const TokenGroups none = group_positions(nullptr, 0);
  CHECK(none.positions.empty());
  CHECK(none.tokens.empty());
  CHECK(none.starts == std::vector<std::int32_t>{0});
}

TEST_CASE("cuda layers: embedding, norm and pointwise layers launch nothing for empty sizes",
          "[gpu]") {
  CHECK(reduction_scratch_floats(0, 77) == 0);
  CHECK(reduction_scratch_floats(37, 0) == 0);
  CHECK(embedding_forward(nullptr, nullptr, nullptr, nullptr, 0, 5, 77, nullptr) == 0);
  CHECK(embedding_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 5, 77,
                           nullptr, nullptr) == 0);
  CHECK(layernorm_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 77, nullptr) ==
        0);
  CHECK(layernorm_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                           0, 77, nullptr, nullptr) == 0);
  CHECK(rmsnorm_forward(nullptr, nullptr, nullptr, nullptr, 0, 77, 1e-5f, nullptr) == 0);
  CHECK(residual_layernorm_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                   nullptr, 0, 77, nullptr) == 0);
  CHECK(residual_rmsnorm_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 77, 1e-5f,
                                 nullptr) == 0);
  CHECK(rmsnorm_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 77, nullptr,
                         nullptr) == 0);
  CHECK(gelu_forward(nullptr, nullptr, 0, nullptr) == 0);
  CHECK(gelu_backward(nullptr, nullptr, nullptr, 0, nullptr) == 0);
  CHECK(swiglu_forward(nullptr, nullptr, nullptr, 0, nullptr) == 0);
  CHECK(swiglu_backward(nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr) == 0);
  CHECK(residual_forward(nullptr, nullptr, nullptr, 0, nullptr) == 0);
  CHECK(rope_forward(nullptr, 23, nullptr, nullptr, 0, 5, 3, 6, nullptr) == 0);
  CHECK(rope_backward(nullptr, 23, nullptr, nullptr, 2, 5, 0, 6, nullptr) == 0);
  REQUIRE_CUDA(cudaDeviceSynchronize());
}

TEST_CASE("cuda layers: GPT embedding (token + position) forward and backward match the CPU layer",
          "[gpu]") {
  check_embedding(3, 13, 77, 11, true, 10100);
  check_embedding(2, 5, 1000, 7, true, 10200);
}

TEST_CASE("cuda layers: Llama embedding copies token rows; its backward matches the CPU layer",
          "[gpu]") {
  check_embedding(3, 13, 77, 11, false, 20100);
  check_embedding(2, 5, 1000, 7, false, 20200);
}

TEST_CASE("cuda layers: layernorm forward and backward match the CPU layer", "[gpu]") {
  check_layernorm(37, 77, false, 30100);
  check_layernorm(3, 1000, false, 30200);
}

TEST_CASE("cuda layers: layernorm's parameter gradients over 9000 rows count every row once",
          "[gpu]") {
  // 9000 rows: the most row blocks (256) of 36 rows, the last ones empty.
  check_layernorm(9000, 19, true, 30300);
}

TEST_CASE("cuda layers: rmsnorm forward and backward match the CPU layer", "[gpu]") {
  check_rmsnorm(37, 77, 40100);
  check_rmsnorm(3, 1000, 40200);
  check_rmsnorm(9000, 19, 40300);
}

// The fused residual and norm against residual_forward then the norm: the same bits in res,
// out and the statistics, with res a new buffer, a (in place, as the models call it) or b.
void check_residual_norms(int N, int C, std::uint64_t seed) {
  INFO("N " << N << ", C " << C);
  const std::size_t n = static_cast<std::size_t>(N) * C;
  TestStream stream;
  const Bits a = random_bf16(n, seed + 1, -3, 3), b = random_bf16(n, seed + 2, -3, 3);
  const Bits w = random_bf16(static_cast<std::size_t>(C), seed + 3, 0.5, 1.5);
  const Bits bias = random_bf16(static_cast<std::size_t>(C), seed + 4, -1, 1);
  DeviceArray<Bf16> d_a(n), d_b(n), d_res(n), d_out(n), d_w(w), d_bias(bias);
  DeviceArray<float> d_mean(static_cast<std::size_t>(N)), d_rstd(static_cast<std::size_t>(N));
  // The two launches: res, out, mean, rstd (LayerNorm), then out and rstd (RMSNorm).
  d_a.upload(a), d_b.upload(b);
  REQUIRE_LAUNCH(residual_forward(d_res.get(), d_a.get(), d_b.get(), n, stream.get()));
  REQUIRE_LAUNCH(layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_res.get(), d_w.get(),
                                   d_bias.get(), N, C, stream.get()));
  stream.synchronize();
  const Bits res = d_res.download(), layer = d_out.download();
  const std::vector<float> mean = d_mean.download(), rstd = d_rstd.download();
  REQUIRE_LAUNCH(rmsnorm_forward(d_out.get(), d_rstd.get(), d_res.get(), d_w.get(), N, C, 1e-6f,
                                 stream.get()));
  stream.synchronize();
  const Bits rms = d_out.download();
  const std::vector<float> rms_rstd = d_rstd.download();
  for (const char* where : {"res apart", "res = a", "res = b"}) {
    INFO(where);
    const std::string place = where;
    Bf16* into = place == "res apart" ? d_res.get() : place == "res = a" ? d_a.get() : d_b.get();
    DeviceArray<Bf16>& result = place == "res apart" ? d_res : place == "res = a" ? d_a : d_b;
    d_a.upload(a), d_b.upload(b);
    REQUIRE_LAUNCH(residual_layernorm_forward(into, d_out.get(), d_mean.get(), d_rstd.get(),
                                              d_a.get(), d_b.get(), d_w.get(), d_bias.get(), N, C,
                                              stream.get()));
    stream.synchronize();
    CHECK(differences(result.download(), res) == 0);
    CHECK(differences(d_out.download(), layer) == 0);
    CHECK(d_mean.download() == mean);
    CHECK(d_rstd.download() == rstd);
    d_a.upload(a), d_b.upload(b);
    REQUIRE_LAUNCH(residual_rmsnorm_forward(into, d_out.get(), d_rstd.get(), d_a.get(), d_b.get(),
                                            d_w.get(), N, C, 1e-6f, stream.get()));
    stream.synchronize();
    CHECK(differences(result.download(), res) == 0);
    CHECK(differences(d_out.download(), rms) == 0);
    CHECK(d_rstd.download() == rms_rstd);
  }
}

TEST_CASE(
    "cuda layers: the residual fused into the norms' forwards gives the two launches' bits, in "
    "place too",
    "[gpu]") {
  check_residual_norms(37, 77, 95100);
  check_residual_norms(3, 1000, 95200);
}

TEST_CASE("cuda layers: gelu forward and backward match the CPU layer", "[gpu]") {
  check_gelu(37 * 77, 50100);
  check_gelu(3 * 1000 + 1, 50200);
}

TEST_CASE("cuda layers: swiglu forward and backward match the CPU layer", "[gpu]") {
  check_swiglu(37 * 77, 60100);
  check_swiglu(3 * 1000 + 1, 60200);
}

TEST_CASE("cuda layers: residual add matches the CPU layer, in place too", "[gpu]") {
  check_residual(37 * 77, 70100);
  check_residual(3 * 1000 + 1, 70200);
}

TEST_CASE(
    "cuda layers: gelu, swiglu, layernorm and rmsnorm backward write their input gradient "
    "(Into::write) as they add onto zeros, and onto a residual's gradient as onto its copy",
    "[gpu]") {
  const int N = 37, C = 77;
  const std::size_t n = static_cast<std::size_t>(N) * C;
  TestStream stream;
  const Bits x = random_bf16(n, 90100, -3, 3), g = random_bf16(n, 90200, -1, 1);
  const Bits u = random_bf16(n, 90300, -2, 2), residual = random_bf16(n, 90400, -1, 1);
  const Bits w = random_bf16(static_cast<std::size_t>(C), 90500, 0.5, 1.5);
  Bits garbage = random_bf16(n, 90600, -1000, 1000);
  for (std::size_t i = 0; i < n; i += 5) garbage[i] = 0x7fc0;  // NaN
  const Bits zeros(n, 0);
  DeviceArray<Bf16> d_x(x), d_g(g), d_u(u), d_w(w), d_a(n), d_b(n), d_residual(residual);
  DeviceArray<Bf16> d_normed(n), d_dweight(static_cast<std::size_t>(C)),
      d_dbias(static_cast<std::size_t>(C));
  DeviceArray<float> d_mean(static_cast<std::size_t>(N)), d_rstd(static_cast<std::size_t>(N));
  DeviceArray<float> d_scratch(reduction_scratch_floats(N, C));
  // Each backward once from `start` adding, once from garbage writing (with `dresidual` where
  // given, the adding run starting from it): the input gradients' bits must agree (d_a's, and
  // d_b's where `two` are written).
  const auto same = [&](const char* what, const Bits& start, const auto& run, bool two = false) {
    INFO(what);
    d_a.upload(start), d_b.upload(start);
    REQUIRE_LAUNCH(run(Into::add));
    stream.synchronize();
    const Bits added_a = d_a.download(), added_b = d_b.download();
    d_a.upload(garbage), d_b.upload(garbage);
    REQUIRE_LAUNCH(run(Into::write));
    stream.synchronize();
    CHECK(differences(d_a.download(), added_a) == 0);
    if (two) CHECK(differences(d_b.download(), added_b) == 0);
  };
  same("gelu", zeros, [&](Into into) {
    return gelu_backward(d_a.get(), d_x.get(), d_g.get(), n, stream.get(), into);
  });
  same(
      "swiglu", zeros,
      [&](Into into) {
        return swiglu_backward(d_a.get(), d_b.get(), d_g.get(), d_x.get(), d_u.get(), n,
                               stream.get(), into);
      },
      true);
  REQUIRE_LAUNCH(layernorm_forward(d_normed.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(),
                                   d_w.get(), N, C, stream.get()));
  for (const bool with_residual : {false, true}) {
    const Bits& start = with_residual ? residual : zeros;
    const Bf16* dres = with_residual ? d_residual.get() : nullptr;
    same(with_residual ? "layernorm onto the residual's gradient" : "layernorm", start,
         [&](Into into) {
           return layernorm_backward(d_a.get(), d_dweight.get(), d_dbias.get(), d_g.get(),
                                     d_x.get(), d_w.get(), d_mean.get(), d_rstd.get(), N, C,
                                     d_scratch.get(), stream.get(), into,
                                     into == Into::write ? dres : nullptr);
         });
    same(with_residual ? "rmsnorm onto the residual's gradient" : "rmsnorm", start, [&](Into into) {
      return rmsnorm_backward(d_a.get(), d_dweight.get(), d_g.get(), d_x.get(), d_w.get(),
                              d_rstd.get(), N, C, d_scratch.get(), stream.get(), into,
                              into == Into::write ? dres : nullptr);
    });
  }
  // In place: the residual's gradient may be dinp itself.
  d_a.upload(residual);
  REQUIRE_LAUNCH(layernorm_backward(d_a.get(), d_dweight.get(), d_dbias.get(), d_g.get(), d_x.get(),
                                    d_w.get(), d_mean.get(), d_rstd.get(), N, C, d_scratch.get(),
                                    stream.get(), Into::write, d_a.get()));
  stream.synchronize();
  const Bits in_place = d_a.download();
  d_a.upload(residual);
  REQUIRE_LAUNCH(layernorm_backward(d_a.get(), d_dweight.get(), d_dbias.get(), d_g.get(), d_x.get(),
                                    d_w.get(), d_mean.get(), d_rstd.get(), N, C, d_scratch.get(),
                                    stream.get()));
  stream.synchronize();
  CHECK(differences(in_place, d_a.download()) == 0);
  // Adding from a residual is refused: it would be a write.
  CHECK(layernorm_backward(d_a.get(), d_dweight.get(), d_dbias.get(), d_g.get(), d_x.get(),
                           d_w.get(), d_mean.get(), d_rstd.get(), N, C, d_scratch.get(),
                           stream.get(), Into::add, d_residual.get()) != 0);
}

TEST_CASE("cuda layers: rope forward and backward match the CPU layer on strided rows", "[gpu]") {
  check_rope(2, 5, 3, 6, 80100);
  check_rope(3, 7, 3, 10, 80200);
}

}  // namespace zero::cuda_layers

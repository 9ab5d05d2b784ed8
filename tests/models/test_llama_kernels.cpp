// The Llama-family decoder's own CPU layers: every backward against central finite differences
// of its forward in double (the loss is sum_j out_j * r_j for random r, so the backward's dout is
// r), every float layer against the double one on the same random inputs, with odd sizes; and
// the properties the model relies on: grouped attention is multi-head attention with each
// key/value head repeated, the window masks what it says, rotary embedding is a rotation.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "models/gpt/kernels.h"
#include "models/llama/kernels.h"
#include "tests/models/gradient_check.h"

namespace zero::llama {
namespace {

using namespace zero::test;  // gradient_check.h

// Largest |a - b| over two results of the same shape.
double max_diff(const Vec& a, const Vec& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

// Llama's inverse frequencies, 1 / theta^(2i / hd).
Vec inv_freqs(int hd, double theta = 10000.0) {
  Vec f(hd / 2);
  for (int i = 0; i < hd / 2; ++i) f[i] = 1.0 / std::pow(theta, 2.0 * i / hd);
  return f;
}

// Shapes of the attention tests: odd where they can be.
struct AttentionShape {
  int B, Tn, NH, NKV, hd;
  std::size_t q_size() const { return static_cast<std::size_t>(B) * Tn * NH * hd; }
  std::size_t kv_size() const { return static_cast<std::size_t>(B) * Tn * NKV * hd; }
  std::size_t att_size() const { return static_cast<std::size_t>(B) * NH * Tn * Tn; }
};

}  // namespace

TEST_CASE("llama kernels: rmsnorm backward matches finite differences, and float matches double",
          "[llama]") {
  std::mt19937 rng(11);
  const int N = 5, C = 7;
  const double eps = 1e-6;
  Vec x = random_vec(N * C, rng), w = random_vec(C, rng);
  const Vec r = random_vec(N * C, rng);
  Vec rstd(N);
  auto forward = [&] {
    Vec out(N * C);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    return out;
  };
  const Vec out = forward();
  // The forward against the formula, on the last row.
  double ms = 0;
  for (int c = 0; c < C; ++c) ms += x[4 * C + c] * x[4 * C + c] / C;
  CHECK(rstd[4] == Approx(1.0 / std::sqrt(ms + eps)).epsilon(1e-12));
  for (int c = 0; c < C; ++c) {
    CHECK(out[4 * C + c] == Approx(w[c] * x[4 * C + c] / std::sqrt(ms + eps)).epsilon(1e-12));
  }
  Vec dx(N * C, 0.5), dw(C, 0.25);  // non-zero: the backward adds
  rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), N, C);
  for (double& v : dx) v -= 0.5;
  for (double& v : dw) v -= 0.25;
  check_gradient("dx", x, dx, r, forward);
  check_gradient("dweight", w, dw, r, forward);

  auto xf = to_float(x), wf = to_float(w), rf = to_float(r);
  std::vector<float> of(N * C), sf(N), dxf(N * C, 0), dwf(C, 0);
  rmsnorm_forward(of.data(), sf.data(), xf.data(), wf.data(), N, C, eps);
  rmsnorm_backward(dxf.data(), dwf.data(), rf.data(), xf.data(), wf.data(), sf.data(), N, C);
  check_close("out", of, out, 1e-5);
  check_close("rstd", sf, rstd, 1e-5);
  check_close("dx", dxf, dx, 1e-4);
  check_close("dweight", dwf, dw, 1e-4);
}

TEST_CASE("llama kernels: swiglu backward matches finite differences, and float matches double",
          "[llama]") {
  std::mt19937 rng(12);
  const std::size_t n = 37;
  Vec gate = random_vec(n, rng, 3.0), up = random_vec(n, rng);
  const Vec r = random_vec(n, rng);
  auto forward = [&] {
    Vec h(n);
    swiglu_forward(h.data(), gate.data(), up.data(), n);
    return h;
  };
  const Vec h = forward();
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(h[i] == Approx(gate[i] / (1 + std::exp(-gate[i])) * up[i]).epsilon(1e-12));
  }
  Vec dgate(n, 0.5), dup(n, 0.5);
  swiglu_backward(dgate.data(), dup.data(), r.data(), gate.data(), up.data(), n);
  for (double& v : dgate) v -= 0.5;
  for (double& v : dup) v -= 0.5;
  check_gradient("dgate", gate, dgate, r, forward);
  check_gradient("dup", up, dup, r, forward);

  auto gf = to_float(gate), uf = to_float(up), rf = to_float(r);
  std::vector<float> hf(n), dgf(n, 0), duf(n, 0);
  swiglu_forward(hf.data(), gf.data(), uf.data(), n);
  swiglu_backward(dgf.data(), duf.data(), rf.data(), gf.data(), uf.data(), n);
  check_close("h", hf, h, 1e-5);
  check_close("dgate", dgf, dgate, 1e-5);
  check_close("dup", duf, dup, 1e-5);
}

// The angle is formed in float32, as transformers forms it.
static double angle(int t, double f) {
  return static_cast<float>(t) * static_cast<float>(f);
}

TEST_CASE("llama kernels: rope tables hold cos and sin of position times frequency", "[llama]") {
  const int Tn = 7, hd = 6, half = hd / 2;
  const Vec f = inv_freqs(hd);
  Vec cos(Tn * half), sin(Tn * half);
  rope_tables(cos.data(), sin.data(), f.data(), Tn, hd);
  for (int t = 0; t < Tn; ++t) {
    for (int i = 0; i < half; ++i) {
      CHECK(cos[t * half + i] == Approx(std::cos(angle(t, f[i]))).epsilon(1e-14));
      CHECK(sin[t * half + i] == Approx(std::sin(angle(t, f[i]))).epsilon(1e-14).margin(1e-15));
    }
  }
  std::vector<float> cf(Tn * half), sf(Tn * half);
  rope_tables(cf.data(), sf.data(), f.data(), Tn, hd);
  check_close("cos", cf, cos, 1e-7);
  check_close("sin", sf, sin, 1e-7);
}

TEST_CASE("llama kernels: rope turns the pairs (i, i + hd/2) by the row's position", "[llama]") {
  std::mt19937 rng(13);
  const int B = 2, Tn = 5, heads = 3, hd = 6, half = hd / 2;
  const std::size_t n = static_cast<std::size_t>(B) * Tn * heads * hd;
  const Vec f = inv_freqs(hd, 3.0);  // a small base: large angles even at Tn = 5
  Vec cos(Tn * half), sin(Tn * half);
  rope_tables(cos.data(), sin.data(), f.data(), Tn, hd);
  const Vec x = random_vec(n, rng);
  Vec y = x;
  rope_forward(y.data(), cos.data(), sin.data(), B, Tn, heads, hd);

  // Hugging Face's x * cos + rotate_half(x) * sin, on row 8 (the second sequence, t = 3).
  const int row = 8, t = row % Tn;
  for (int h = 0; h < heads; ++h) {
    const std::size_t at = (static_cast<std::size_t>(row) * heads + h) * hd;
    for (int i = 0; i < half; ++i) {
      const double a = t * f[i];
      CHECK(y[at + i] == Approx(x[at + i] * std::cos(a) - x[at + i + half] * std::sin(a)));
      CHECK(y[at + i + half] == Approx(x[at + i + half] * std::cos(a) + x[at + i] * std::sin(a)));
    }
  }
  // Position 0 of each sequence is left as it is.
  for (int b = 0; b < B; ++b) {
    const std::size_t at = static_cast<std::size_t>(b) * Tn * heads * hd;
    for (int j = 0; j < heads * hd; ++j) CHECK(y[at + j] == x[at + j]);
  }
  // A rotation keeps each head's norm; the backward (the transpose) turns it back.
  for (std::size_t at = 0; at < n; at += hd) {
    double nx = 0, ny = 0;
    for (int i = 0; i < hd; ++i) nx += x[at + i] * x[at + i], ny += y[at + i] * y[at + i];
    CHECK(ny == Approx(nx).epsilon(1e-12));
  }
  Vec back = y;
  rope_backward(back.data(), cos.data(), sin.data(), B, Tn, heads, hd);
  CHECK(max_diff(back, x) < 1e-12);
  CHECK(max_diff(y, x) > 0.1);  // and the forward did turn something
}

TEST_CASE("llama kernels: rope backward matches finite differences, and float matches double",
          "[llama]") {
  std::mt19937 rng(14);
  const int B = 2, Tn = 5, heads = 3, hd = 6, half = hd / 2;
  const std::size_t n = static_cast<std::size_t>(B) * Tn * heads * hd;
  const Vec f = inv_freqs(hd, 3.0);
  Vec cos(Tn * half), sin(Tn * half);
  rope_tables(cos.data(), sin.data(), f.data(), Tn, hd);
  Vec x = random_vec(n, rng);
  const Vec r = random_vec(n, rng);
  auto forward = [&] {
    Vec y = x;
    rope_forward(y.data(), cos.data(), sin.data(), B, Tn, heads, hd);
    return y;
  };
  const Vec y = forward();
  Vec dx = r;  // the backward turns the gradient in place
  rope_backward(dx.data(), cos.data(), sin.data(), B, Tn, heads, hd);
  check_gradient("dx", x, dx, r, forward);

  std::vector<float> cf(Tn * half), sf(Tn * half), yf = to_float(x), dxf = to_float(r);
  rope_tables(cf.data(), sf.data(), f.data(), Tn, hd);
  rope_forward(yf.data(), cf.data(), sf.data(), B, Tn, heads, hd);
  rope_backward(dxf.data(), cf.data(), sf.data(), B, Tn, heads, hd);
  check_close("out", yf, y, 1e-5);
  check_close("dx", dxf, dx, 1e-5);
}

TEST_CASE("llama kernels: grouped attention backward matches finite differences, windowed too",
          "[llama]") {
  std::mt19937 rng(15);
  for (const int NKV : {2, 3}) {
    for (const int window : {0, 2}) {
      const AttentionShape s{2, 5, 6, NKV, 6};
      INFO("NKV " << NKV << ", window " << window);
      Vec q = random_vec(s.q_size(), rng), k = random_vec(s.kv_size(), rng),
          v = random_vec(s.kv_size(), rng);
      const Vec r = random_vec(s.q_size(), rng);
      Vec att(s.att_size());
      auto forward = [&] {
        Vec out(s.q_size());
        gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), s.B, s.Tn, s.NH,
                              s.NKV, s.hd, window);
        return out;
      };
      const Vec out = forward();
      const Vec att_kept = att;
      // Causal: the first position's output is its own value vector (of the head's group).
      for (int h = 0; h < s.NH; ++h) {
        const int kvh = h / (s.NH / s.NKV);
        for (int i = 0; i < s.hd; ++i) {
          CHECK(out[h * s.hd + i] == Approx(v[kvh * s.hd + i]).epsilon(1e-12));
        }
      }
      Vec dq(s.q_size(), 0.5), dk(s.kv_size(), 0.5), dv(s.kv_size(), 0.5), datt(s.att_size());
      gqa_attention_backward(dq.data(), dk.data(), dv.data(), datt.data(), r.data(), q.data(),
                             k.data(), v.data(), att_kept.data(), s.B, s.Tn, s.NH, s.NKV, s.hd);
      for (Vec* g : {&dq, &dk, &dv}) {
        for (double& x : *g) x -= 0.5;
      }
      check_gradient("dq", q, dq, r, forward);
      check_gradient("dk", k, dk, r, forward);
      check_gradient("dv", v, dv, r, forward);

      auto qf = to_float(q), kf = to_float(k), vf = to_float(v), rf = to_float(r);
      std::vector<float> of(s.q_size()), af(s.att_size()), dqf(s.q_size(), 0), dkf(s.kv_size(), 0),
          dvf(s.kv_size(), 0), daf(s.att_size());
      gqa_attention_forward(of.data(), af.data(), qf.data(), kf.data(), vf.data(), s.B, s.Tn, s.NH,
                            s.NKV, s.hd, window);
      gqa_attention_backward(dqf.data(), dkf.data(), dvf.data(), daf.data(), rf.data(), qf.data(),
                             kf.data(), vf.data(), af.data(), s.B, s.Tn, s.NH, s.NKV, s.hd);
      check_close("out", of, out, 1e-5);
      check_close("att", af, att_kept, 1e-5);
      check_close("dq", dqf, dq, 1e-4);
      check_close("dk", dkf, dk, 1e-4);
      check_close("dv", dvf, dv, 1e-4);
    }
  }
}

TEST_CASE("llama kernels: attention with as many kv heads as query heads is the GPT's", "[llama]") {
  std::mt19937 rng(16);
  const AttentionShape s{2, 5, 3, 3, 4};
  const int C = s.NH * s.hd;
  const Vec q = random_vec(s.q_size(), rng), k = random_vec(s.kv_size(), rng),
            v = random_vec(s.kv_size(), rng), r = random_vec(s.q_size(), rng);
  // The GPT's packed rows: [q | k | v] of C each.
  const int N = s.B * s.Tn;
  Vec qkv(static_cast<std::size_t>(N) * 3 * C);
  for (int i = 0; i < N; ++i) {
    for (int c = 0; c < C; ++c) {
      qkv[static_cast<std::size_t>(i) * 3 * C + c] = q[i * C + c];
      qkv[static_cast<std::size_t>(i) * 3 * C + C + c] = k[i * C + c];
      qkv[static_cast<std::size_t>(i) * 3 * C + 2 * C + c] = v[i * C + c];
    }
  }
  Vec out_gpt(s.q_size()), att_gpt(s.att_size());
  gpt::attention_forward(out_gpt.data(), att_gpt.data(), qkv.data(), s.B, s.Tn, C, s.NH);
  Vec out(s.q_size()), att(s.att_size());
  gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), s.B, s.Tn, s.NH,
                        s.NKV, s.hd, 0);
  CHECK(max_diff(out, out_gpt) < 1e-13);
  CHECK(max_diff(att, att_gpt) < 1e-13);

  Vec dqkv(qkv.size(), 0.0), datt_gpt(s.att_size());
  gpt::attention_backward(dqkv.data(), datt_gpt.data(), r.data(), qkv.data(), att_gpt.data(), s.B,
                          s.Tn, C, s.NH);
  Vec dq(s.q_size(), 0.0), dk(s.kv_size(), 0.0), dv(s.kv_size(), 0.0), datt(s.att_size());
  gqa_attention_backward(dq.data(), dk.data(), dv.data(), datt.data(), r.data(), q.data(), k.data(),
                         v.data(), att.data(), s.B, s.Tn, s.NH, s.NKV, s.hd);
  double worst = 0;
  for (int i = 0; i < N; ++i) {
    for (int c = 0; c < C; ++c) {
      const std::size_t row = static_cast<std::size_t>(i) * 3 * C;
      worst = std::max(worst, std::fabs(dq[i * C + c] - dqkv[row + c]));
      worst = std::max(worst, std::fabs(dk[i * C + c] - dqkv[row + C + c]));
      worst = std::max(worst, std::fabs(dv[i * C + c] - dqkv[row + 2 * C + c]));
    }
  }
  INFO("largest difference of the gradients " << worst);
  CHECK(worst < 1e-13);
}

TEST_CASE("llama kernels: grouped attention is attention with each kv head repeated for its group",
          "[llama]") {
  std::mt19937 rng(17);
  const AttentionShape s{2, 5, 6, 2, 4};
  const int group = s.NH / s.NKV, N = s.B * s.Tn;
  const Vec q = random_vec(s.q_size(), rng), k = random_vec(s.kv_size(), rng),
            v = random_vec(s.kv_size(), rng);
  // Hugging Face's repeat_kv: query head h reads kv head h / group.
  Vec k_rep(s.q_size()), v_rep(s.q_size());
  for (int i = 0; i < N; ++i) {
    for (int h = 0; h < s.NH; ++h) {
      for (int d = 0; d < s.hd; ++d) {
        const std::size_t to = (static_cast<std::size_t>(i) * s.NH + h) * s.hd + d;
        const std::size_t from = (static_cast<std::size_t>(i) * s.NKV + h / group) * s.hd + d;
        k_rep[to] = k[from];
        v_rep[to] = v[from];
      }
    }
  }
  for (const int window : {0, 3}) {
    INFO("window " << window);
    Vec out(s.q_size()), att(s.att_size()), out_rep(s.q_size()), att_rep(s.att_size());
    gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), s.B, s.Tn, s.NH,
                          s.NKV, s.hd, window);
    gqa_attention_forward(out_rep.data(), att_rep.data(), q.data(), k_rep.data(), v_rep.data(), s.B,
                          s.Tn, s.NH, s.NH, s.hd, window);
    CHECK(max_diff(out, out_rep) < 1e-13);
    CHECK(max_diff(att, att_rep) < 1e-13);
  }
}

TEST_CASE("llama kernels: a sliding window keeps only the last window positions", "[llama]") {
  std::mt19937 rng(18);
  const AttentionShape s{2, 5, 6, 3, 6};
  const Vec q = random_vec(s.q_size(), rng), k = random_vec(s.kv_size(), rng),
            v = random_vec(s.kv_size(), rng);
  auto run = [&](int window, Vec& att) {
    Vec out(s.q_size());
    att.assign(s.att_size(), -1.0);  // the forward must write every entry
    gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), s.B, s.Tn, s.NH,
                          s.NKV, s.hd, window);
    return out;
  };
  Vec att;
  const Vec out2 = run(2, att);
  for (int bh = 0; bh < s.B * s.NH; ++bh) {
    for (int t = 0; t < s.Tn; ++t) {
      const double* a = att.data() + (static_cast<std::size_t>(bh) * s.Tn + t) * s.Tn;
      int nonzero = 0;
      double sum = 0;
      for (int u = 0; u < s.Tn; ++u) {
        const bool seen = u <= t && u >= t - 1;
        if (seen) CHECK(a[u] > 0);
        if (!seen) CHECK(a[u] == 0);
        nonzero += a[u] != 0;
        sum += a[u];
      }
      CHECK(nonzero == std::min(t + 1, 2));
      CHECK(sum == Approx(1.0).epsilon(1e-12));
    }
  }
  // The window changes the later positions' outputs...
  Vec att0;
  const Vec out0 = run(0, att0);
  CHECK(max_diff(out2, out0) > 1e-3);
  // ...and a window of Tn or more is no window.
  for (const int window : {s.Tn, s.Tn + 3}) {
    Vec att_w;
    const Vec out_w = run(window, att_w);
    CHECK(max_diff(out_w, out0) == 0.0);
    CHECK(max_diff(att_w, att0) == 0.0);
  }
}

TEST_CASE("llama kernels: embedding rows are the tokens' and their gradients sum over repeats",
          "[llama]") {
  std::mt19937 rng(19);
  const int N = 7, C = 5, V = 4;
  Vec wte = random_vec(V * C, rng);
  const std::vector<std::int32_t> tokens{1, 3, 1, 0, 1, 2, 3};  // token 1 three times
  const Vec r = random_vec(N * C, rng);
  auto forward = [&] {
    Vec out(N * C);
    embedding_forward(out.data(), tokens.data(), wte.data(), N, C);
    return out;
  };
  const Vec out = forward();
  for (int i = 0; i < N; ++i) {
    for (int c = 0; c < C; ++c) CHECK(out[i * C + c] == wte[tokens[i] * C + c]);
  }
  Vec dwte(V * C, 0.5);
  embedding_backward(dwte.data(), r.data(), tokens.data(), N, C);
  for (int c = 0; c < C; ++c) {
    CHECK(dwte[1 * C + c] == Approx(0.5 + r[0 * C + c] + r[2 * C + c] + r[4 * C + c]));
    CHECK(dwte[0 * C + c] == Approx(0.5 + r[3 * C + c]));
  }
  for (double& g : dwte) g -= 0.5;
  check_gradient("dwte", wte, dwte, r, forward);
}

}  // namespace zero::llama

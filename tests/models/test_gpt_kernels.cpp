// The reference GPT's CPU layers, its own and the shared ones it uses (models/layers/layers.h):
// every backward against central finite differences of its forward in double (the loss is
// sum_j out_j * r_j for random r, so the backward's dout is r), and every float layer against
// the double one on the same random inputs, with odd sizes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "models/gpt/kernels.h"
#include "models/layers/layers.h"
#include "tests/models/gradient_check.h"

namespace zero::gpt {

using namespace zero::test;    // gradient_check.h
using namespace zero::layers;  // the shared layers the GPT uses (layers.h)

TEST_CASE("gpt kernels: layernorm backward matches finite differences, and float matches double",
          "[gpt]") {
  std::mt19937 rng(1);
  const int N = 5, C = 13;
  Vec x = random_vec(N * C, rng), w = random_vec(C, rng), b = random_vec(C, rng);
  const Vec r = random_vec(N * C, rng);
  Vec mean(N), rstd(N);
  auto forward = [&] {
    Vec out(N * C);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return out;
  };
  const Vec out = forward();
  Vec dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  layernorm_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  check_gradient("dx", x, dx, r, forward);
  check_gradient("dweight", w, dw, r, forward);
  check_gradient("dbias", b, db, r, forward);

  auto xf = to_float(x), wf = to_float(w), bf = to_float(b), rf = to_float(r);
  std::vector<float> of(N * C), mf(N), sf(N), dxf(N * C, 0), dwf(C, 0), dbf(C, 0);
  layernorm_forward(of.data(), mf.data(), sf.data(), xf.data(), wf.data(), bf.data(), N, C);
  layernorm_backward(dxf.data(), dwf.data(), dbf.data(), rf.data(), xf.data(), wf.data(), mf.data(),
                     sf.data(), N, C);
  check_close("out", of, out);
  check_close("dx", dxf, dx);
  check_close("dweight", dwf, dw);
}

TEST_CASE("gpt kernels: matmul backward matches finite differences, with and without bias",
          "[gpt]") {
  std::mt19937 rng(2);
  const int N = 7, C = 11, OC = 9;
  for (const bool with_bias : {true, false}) {
    Vec x = random_vec(N * C, rng), w = random_vec(OC * C, rng), b = random_vec(OC, rng);
    const Vec r = random_vec(N * OC, rng);
    auto forward = [&] {
      Vec out(N * OC);
      matmul_forward(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, C, OC);
      return out;
    };
    const Vec out = forward();
    // The forward against a plain triple loop.
    for (int i = 0; i < N; ++i) {
      for (int o = 0; o < OC; ++o) {
        double want = with_bias ? b[o] : 0.0;
        for (int c = 0; c < C; ++c) want += x[i * C + c] * w[o * C + c];
        CHECK(out[i * OC + o] == Approx(want).epsilon(1e-12));
      }
    }
    Vec dx(N * C, 0.5), dw(OC * C, 0.0), db(OC, 0.0);  // dx starts non-zero: backward adds
    matmul_backward(dx.data(), dw.data(), with_bias ? db.data() : nullptr, r.data(), x.data(),
                    w.data(), N, C, OC);
    for (double& v : dx) v -= 0.5;
    check_gradient("dx", x, dx, r, forward);
    check_gradient("dweight", w, dw, r, forward);
    if (with_bias) check_gradient("dbias", b, db, r, forward);
  }
}

TEST_CASE("gpt kernels: gelu backward matches finite differences", "[gpt]") {
  std::mt19937 rng(3);
  const std::size_t n = 37;
  Vec x = random_vec(n, rng, 2.0);
  const Vec r = random_vec(n, rng);
  auto forward = [&] {
    Vec out(n);
    gelu_forward(out.data(), x.data(), n);
    return out;
  };
  Vec dx(n, 0.0);
  gelu_backward(dx.data(), x.data(), r.data(), n);
  check_gradient("dx", x, dx, r, forward);
  const Vec out = forward();
  CHECK(out[0] ==
        Approx(0.5 * x[0] *
               (1 + std::tanh(std::sqrt(2 / M_PI) * (x[0] + 0.044715 * std::pow(x[0], 3))))));
}

TEST_CASE("gpt kernels: causal attention backward matches finite differences, and float matches",
          "[gpt]") {
  std::mt19937 rng(4);
  const int B = 2, Tn = 5, C = 12, NH = 3;
  Vec qkv = random_vec(static_cast<std::size_t>(B) * Tn * 3 * C, rng);
  const Vec r = random_vec(static_cast<std::size_t>(B) * Tn * C, rng);
  Vec att(static_cast<std::size_t>(B) * NH * Tn * Tn);
  auto forward = [&] {
    Vec out(static_cast<std::size_t>(B) * Tn * C);
    attention_forward(out.data(), att.data(), qkv.data(), B, Tn, C, NH);
    return out;
  };
  const Vec out = forward();
  // Causal: the first position's output is its own value vector.
  for (int h = 0; h < NH; ++h) {
    for (int i = 0; i < C / NH; ++i)
      CHECK(out[h * (C / NH) + i] == Approx(qkv[2 * C + h * (C / NH) + i]));
  }
  Vec dqkv(qkv.size(), 0.0), datt(att.size());
  attention_backward(dqkv.data(), datt.data(), r.data(), qkv.data(), att.data(), B, Tn, C, NH);
  check_gradient("dqkv", qkv, dqkv, r, forward);

  auto qf = to_float(qkv), rf = to_float(r);
  std::vector<float> of(out.size()), af(att.size()), dqf(qkv.size(), 0), daf(att.size());
  attention_forward(of.data(), af.data(), qf.data(), B, Tn, C, NH);
  attention_backward(dqf.data(), daf.data(), rf.data(), qf.data(), af.data(), B, Tn, C, NH);
  check_close("out", of, out);
  check_close("dqkv", dqf, dqkv);
}

TEST_CASE(
    "gpt kernels: cross-entropy backward matches finite differences, rows without a target too",
    "[gpt]") {
  std::mt19937 rng(5);
  const int N = 6, V = 17;
  Vec logits = random_vec(N * V, rng, 3.0);
  const std::vector<std::int32_t> targets{3, 0, 16, -1, 7, 7};
  const Vec r = random_vec(N, rng);
  Vec probs(N * V);
  auto forward = [&] {
    Vec losses(N);
    crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
    return losses;
  };
  const Vec losses = forward();
  CHECK(losses[3] == 0.0);
  double sum = 0;
  for (int v = 0; v < V; ++v) sum += std::exp(logits[v]);
  CHECK(losses[0] == Approx(std::log(sum) - logits[3]).epsilon(1e-12));
  Vec dlogits(N * V, 0.0);
  crossentropy_backward(dlogits.data(), probs.data(), targets.data(), r.data(), N, V);
  check_gradient("dlogits", logits, dlogits, r, forward);
}

TEST_CASE("gpt kernels: embeddings add and their gradients sum over repeated tokens", "[gpt]") {
  std::mt19937 rng(6);
  const int B = 2, Tn = 3, C = 5, V = 4;
  Vec wte = random_vec(V * C, rng), wpe = random_vec(Tn * C, rng);
  const std::vector<std::int32_t> tokens{1, 3, 1, 0, 1, 2};  // token 1 three times
  const Vec r = random_vec(B * Tn * C, rng);
  auto forward = [&] {
    Vec out(B * Tn * C);
    encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C);
    return out;
  };
  const Vec out = forward();
  CHECK(out[4 * C + 2] == wte[1 * C + 2] + wpe[1 * C + 2]);
  Vec dwte(V * C, 0.0), dwpe(Tn * C, 0.0);
  encoder_backward(dwte.data(), dwpe.data(), r.data(), tokens.data(), B, Tn, C);
  check_gradient("dwte", wte, dwte, r, forward);
  check_gradient("dwpe", wpe, dwpe, r, forward);
}

}  // namespace zero::gpt

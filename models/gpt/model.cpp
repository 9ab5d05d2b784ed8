// The reference GPT through the C API (see model.h): registration, and the forward and backward
// of each module between its hooks, from the layers in kernels.h.
#include "models/gpt/model.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "models/gpt/kernels.h"

namespace zero::gpt {
namespace {

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double uniform(std::uint64_t key) {  // in (0, 1)
  return (static_cast<double>(mix(key) >> 11) + 0.5) / 9007199254740992.0;
}

}  // namespace

// Per-parameter initial values: normal(0, std) from a counter-based hash of (seed, parameter,
// element), so each element's value does not depend on which rank draws it; or a constant.
struct Gpt::Init {
  std::uint64_t seed = 0;
  std::vector<double> stddev;  // by parameter id; 0: the constant
  std::vector<float> constant;

  static void initialize(void* user, int param, unsigned long long offset,
                         unsigned long long count, float* out);
};

void Gpt::Init::initialize(void* user, int param, unsigned long long offset,
                           unsigned long long count, float* out) {
  const Init& init = *static_cast<const Init*>(user);
  const double stddev = init.stddev[static_cast<std::size_t>(param)];
  for (unsigned long long k = 0; k < count; ++k) {
    if (stddev == 0.0) {
      out[k] = init.constant[static_cast<std::size_t>(param)];
      continue;
    }
    const std::uint64_t base =
        mix(init.seed ^ mix(static_cast<std::uint64_t>(param) + 1)) + 2 * (offset + k);
    const double u1 = uniform(base), u2 = uniform(base + 1);
    out[k] = static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) *
                                std::cos(6.283185307179586 * u2));
  }
}


GptConfig GptConfig::by_name(const std::string& name) {
  if (name == "tiny") return {4, 4, 128, 64, 256};
  if (name == "gpt2-124m") return {12, 12, 768, 1024, 50257};
  if (name == "gpt2-350m") return {24, 16, 1024, 1024, 50257};
  if (name == "gpt2-774m") return {36, 20, 1280, 1024, 50257};
  if (name == "gpt2-1.5b") return {48, 25, 1600, 1024, 50257};
  throw std::invalid_argument("unknown model '" + name +
                              "': use tiny, gpt2-124m, gpt2-350m, gpt2-774m or gpt2-1.5b");
}

std::int64_t GptConfig::parameters() const {
  const std::int64_t C = channels;
  const std::int64_t block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C +
                             4 * C * C + C;
  return static_cast<std::int64_t>(vocab) * C + static_cast<std::int64_t>(max_seq) * C +
         layers * block + 2 * C;
}

void Gpt::check(zero_status status, const char* call) const {
  if (status != ZERO_OK) {
    throw std::runtime_error(std::string(call) + ": " + zero_status_string(status) + ": " +
                             zero_last_error());
  }
}

Gpt::Gpt(zero_engine* engine, const GptConfig& config, int batch, int seq, std::uint64_t seed)
    : engine_(engine), init_(std::make_unique<Init>()), config_(config), batch_(batch), seq_(seq) {
  if (seq < 1 || seq > config.max_seq) {
    throw std::invalid_argument("sequence length " + std::to_string(seq) + " is outside the model's 1.." +
                                std::to_string(config.max_seq));
  }
  if (config.channels % config.heads != 0) {
    throw std::invalid_argument("channels " + std::to_string(config.channels) +
                                " do not split over " + std::to_string(config.heads) + " heads");
  }
  zero_dtype dtype = ZERO_FP32;
  check(zero_compute_dtype(engine, &dtype), "zero_compute_dtype");
  if (dtype != ZERO_FP32) {
    throw std::invalid_argument(
        "the reference GPT computes in fp32 on the CPU: disable bf16 and fp16 in the config");
  }
  Init& init = *init_;
  init.seed = seed;
  int no_decay = 0;
  check(zero_add_group(engine, "no_decay", 0.0, 1.0, &no_decay), "zero_add_group");
  check(zero_add_module(engine, "embed", &embed_module_), "zero_add_module");
  for (int l = 0; l < config.layers; ++l) {
    Block b;
    check(zero_add_module(engine, ("h." + std::to_string(l)).c_str(), &b.module), "zero_add_module");
    blocks_.push_back(b);
  }
  check(zero_add_module(engine, "head", &head_module_), "zero_add_module");

  const double residual_std = 0.02 / std::sqrt(2.0 * config.layers);
  auto add = [&](const std::string& name, std::vector<long long> shape, int group,
                 std::vector<int> modules, double stddev, float constant) {
    zero_param_desc desc{};
    desc.name = name.c_str();
    desc.shape = shape.data();
    desc.ndim = static_cast<int>(shape.size());
    desc.trainable = 1;
    desc.group = group;
    desc.modules = modules.data();
    desc.module_count = static_cast<int>(modules.size());
    desc.initializer = &Init::initialize;
    desc.initializer_user = &init;
    int id = -1;
    check(zero_add_param(engine, &desc, &id), "zero_add_param");
    init.stddev.resize(static_cast<std::size_t>(id) + 1, 0.0);
    init.constant.resize(static_cast<std::size_t>(id) + 1, 0.0f);
    init.stddev[static_cast<std::size_t>(id)] = stddev;
    init.constant[static_cast<std::size_t>(id)] = constant;
    return id;
  };
  const long long C = config.channels;
  wte_ = add("wte.weight", {config.vocab, C}, 0, {embed_module_, head_module_}, 0.02, 0);
  wpe_ = add("wpe.weight", {config.max_seq, C}, 0, {embed_module_}, 0.01, 0);
  for (int l = 0; l < config.layers; ++l) {
    Block& b = blocks_[static_cast<std::size_t>(l)];
    const std::string h = "h." + std::to_string(l) + ".";
    const std::vector<int> m{b.module};
    b.ln1_w = add(h + "ln_1.weight", {C}, no_decay, m, 0, 1);
    b.ln1_b = add(h + "ln_1.bias", {C}, no_decay, m, 0, 0);
    b.qkv_w = add(h + "attn.c_attn.weight", {3 * C, C}, 0, m, 0.02, 0);
    b.qkv_b = add(h + "attn.c_attn.bias", {3 * C}, no_decay, m, 0, 0);
    b.proj_w = add(h + "attn.c_proj.weight", {C, C}, 0, m, residual_std, 0);
    b.proj_b = add(h + "attn.c_proj.bias", {C}, no_decay, m, 0, 0);
    b.ln2_w = add(h + "ln_2.weight", {C}, no_decay, m, 0, 1);
    b.ln2_b = add(h + "ln_2.bias", {C}, no_decay, m, 0, 0);
    b.fc_w = add(h + "mlp.c_fc.weight", {4 * C, C}, 0, m, 0.02, 0);
    b.fc_b = add(h + "mlp.c_fc.bias", {4 * C}, no_decay, m, 0, 0);
    b.fcproj_w = add(h + "mlp.c_proj.weight", {C, 4 * C}, 0, m, residual_std, 0);
    b.fcproj_b = add(h + "mlp.c_proj.bias", {C}, no_decay, m, 0, 0);
  }
  lnf_w_ = add("ln_f.weight", {C}, no_decay, {head_module_}, 0, 1);
  lnf_b_ = add("ln_f.bias", {C}, no_decay, {head_module_}, 0, 0);

  const std::size_t N = static_cast<std::size_t>(batch) * seq;
  const std::size_t c = static_cast<std::size_t>(C);
  encoded_.resize(N * c);
  acts_.resize(static_cast<std::size_t>(config.layers));
  for (Activations& a : acts_) {
    a.ln1.resize(N * c), a.ln1_mean.resize(N), a.ln1_rstd.resize(N), a.qkv.resize(3 * N * c);
    a.att.resize(static_cast<std::size_t>(batch) * config.heads * seq * seq);
    a.atty.resize(N * c), a.res2.resize(N * c), a.ln2.resize(N * c), a.ln2_mean.resize(N);
    a.ln2_rstd.resize(N), a.fch.resize(4 * N * c), a.fch_gelu.resize(4 * N * c), a.out.resize(N * c);
  }
  lnf_.resize(N * c), lnf_mean_.resize(N), lnf_rstd_.resize(N);
  logits_.resize(N * static_cast<std::size_t>(config.vocab));
  probs_.resize(logits_.size());
  losses_.resize(N);
}

Gpt::~Gpt() = default;

float* Gpt::param(int id) {
  void* data = nullptr;
  check(zero_param_data(engine_, id, &data), "zero_param_data");
  return static_cast<float*>(data);
}

float* Gpt::grad(int id) {
  void* data = nullptr;
  check(zero_grad_buffer(engine_, id, &data), "zero_grad_buffer");
  return static_cast<float*>(data);
}

float Gpt::forward(const std::int32_t* tokens, const std::int32_t* targets) {
  const int B = batch_, T = seq_, C = config_.channels, NH = config_.heads, V = config_.vocab;
  const int N = B * T;
  tokens_.assign(tokens, tokens + N);
  targets_.assign(targets, targets + N);
  for (int i = 0; i < N; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V || targets[i] >= V) {
      throw std::invalid_argument("token " + std::to_string(tokens[i]) + " or target " +
                                  std::to_string(targets[i]) + " at position " +
                                  std::to_string(i) + " is outside the vocabulary of " +
                                  std::to_string(V));
    }
  }
  check(zero_pre_forward(engine_, embed_module_, nullptr), "zero_pre_forward");
  encoder_forward(encoded_.data(), tokens, param(wte_), param(wpe_), B, T, C);
  check(zero_post_forward(engine_, embed_module_, nullptr), "zero_post_forward");

  const float* x = encoded_.data();
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    Activations& a = acts_[l];
    check(zero_pre_forward(engine_, b.module, nullptr), "zero_pre_forward");
    layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, param(b.ln1_w),
                      param(b.ln1_b), N, C);
    matmul_forward(a.qkv.data(), a.ln1.data(), param(b.qkv_w), param(b.qkv_b), N, C, 3 * C);
    attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, NH);
    matmul_forward(a.res2.data(), a.atty.data(), param(b.proj_w), param(b.proj_b), N, C, C);
    residual_forward(a.res2.data(), a.res2.data(), x, static_cast<std::size_t>(N) * C);
    layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(),
                      param(b.ln2_w), param(b.ln2_b), N, C);
    matmul_forward(a.fch.data(), a.ln2.data(), param(b.fc_w), param(b.fc_b), N, C, 4 * C);
    gelu_forward(a.fch_gelu.data(), a.fch.data(), static_cast<std::size_t>(N) * 4 * C);
    matmul_forward(a.out.data(), a.fch_gelu.data(), param(b.fcproj_w), param(b.fcproj_b), N,
                   4 * C, C);
    residual_forward(a.out.data(), a.out.data(), a.res2.data(), static_cast<std::size_t>(N) * C);
    check(zero_post_forward(engine_, b.module, nullptr), "zero_post_forward");
    x = a.out.data();
  }

  check(zero_pre_forward(engine_, head_module_, nullptr), "zero_pre_forward");
  layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), x, param(lnf_w_),
                    param(lnf_b_), N, C);
  matmul_forward(logits_.data(), lnf_.data(), param(wte_), static_cast<const float*>(nullptr), N,
                 C, V);
  crossentropy_forward(losses_.data(), probs_.data(), logits_.data(), targets, N, V);
  check(zero_post_forward(engine_, head_module_, nullptr), "zero_post_forward");

  double sum = 0;
  counted_ = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] < 0) continue;
    sum += losses_[static_cast<std::size_t>(i)];
    ++counted_;
  }
  return counted_ == 0 ? 0.0f : static_cast<float>(sum / counted_);
}

void Gpt::backward() {
  const int B = batch_, T = seq_, C = config_.channels, NH = config_.heads, V = config_.vocab;
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  double factor = 1.0;
  check(zero_loss_factor(engine_, &factor), "zero_loss_factor");
  // d(mean loss * factor) / d(loss_i)
  const float dloss = counted_ == 0 ? 0.0f : static_cast<float>(factor / counted_);
  std::vector<float> dlosses(static_cast<std::size_t>(N), dloss);
  std::vector<float> dlogits(logits_.size(), 0.0f), dx(NC, 0.0f), scratch(NC, 0.0f);

  check(zero_pre_backward(engine_, head_module_, nullptr), "zero_pre_backward");
  crossentropy_backward(dlogits.data(), probs_.data(), targets_.data(), dlosses.data(), N, V);
  matmul_backward(scratch.data(), grad(wte_), static_cast<float*>(nullptr), dlogits.data(),
                  lnf_.data(), param(wte_), N, C, V);
  const float* last = blocks_.empty() ? encoded_.data() : acts_.back().out.data();
  layernorm_backward(dx.data(), grad(lnf_w_), grad(lnf_b_), scratch.data(), last, param(lnf_w_),
                     lnf_mean_.data(), lnf_rstd_.data(), N, C);
  check(zero_post_backward(engine_, head_module_, nullptr), "zero_post_backward");

  // dx: the gradient of the residual stream at a block's output.
  std::vector<float> d4(4 * NC), d4b(4 * NC), dqkv(3 * NC), datt, dres2(NC), dsmall(NC);
  for (std::size_t l = blocks_.size(); l-- > 0;) {
    const Block& b = blocks_[l];
    Activations& a = acts_[l];
    const float* x = l == 0 ? encoded_.data() : acts_[l - 1].out.data();
    check(zero_pre_backward(engine_, b.module, nullptr), "zero_pre_backward");
    // MLP branch: out = res2 + fcproj(gelu(fc(ln2(res2)))).
    std::fill(d4.begin(), d4.end(), 0.0f);
    matmul_backward(d4.data(), grad(b.fcproj_w), grad(b.fcproj_b), dx.data(), a.fch_gelu.data(),
                    param(b.fcproj_w), N, 4 * C, C);
    std::fill(d4b.begin(), d4b.end(), 0.0f);
    gelu_backward(d4b.data(), a.fch.data(), d4.data(), 4 * NC);
    std::fill(dsmall.begin(), dsmall.end(), 0.0f);
    matmul_backward(dsmall.data(), grad(b.fc_w), grad(b.fc_b), d4b.data(), a.ln2.data(),
                    param(b.fc_w), N, C, 4 * C);
    dres2 = dx;  // the residual path
    layernorm_backward(dres2.data(), grad(b.ln2_w), grad(b.ln2_b), dsmall.data(), a.res2.data(),
                       param(b.ln2_w), a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
    // Attention branch: res2 = x + proj(attention(qkv(ln1(x)))).
    std::fill(dsmall.begin(), dsmall.end(), 0.0f);
    matmul_backward(dsmall.data(), grad(b.proj_w), grad(b.proj_b), dres2.data(), a.atty.data(),
                    param(b.proj_w), N, C, C);
    std::fill(dqkv.begin(), dqkv.end(), 0.0f);
    datt.resize(a.att.size());
    attention_backward(dqkv.data(), datt.data(), dsmall.data(), a.qkv.data(), a.att.data(), B, T,
                       C, NH);
    std::fill(dsmall.begin(), dsmall.end(), 0.0f);
    matmul_backward(dsmall.data(), grad(b.qkv_w), grad(b.qkv_b), dqkv.data(), a.ln1.data(),
                    param(b.qkv_w), N, C, 3 * C);
    dx = dres2;  // the residual path
    layernorm_backward(dx.data(), grad(b.ln1_w), grad(b.ln1_b), dsmall.data(), x,
                       param(b.ln1_w), a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
    check(zero_post_backward(engine_, b.module, nullptr), "zero_post_backward");
  }

  check(zero_pre_backward(engine_, embed_module_, nullptr), "zero_pre_backward");
  encoder_backward(grad(wte_), grad(wpe_), dx.data(), tokens_.data(), B, T, C);
  check(zero_post_backward(engine_, embed_module_, nullptr), "zero_post_backward");
}

float Gpt::evaluate(const std::int32_t* tokens, const std::int32_t* targets) {
  check(zero_set_train(engine_, 0), "zero_set_train");
  const float loss = forward(tokens, targets);
  check(zero_set_train(engine_, 1), "zero_set_train");
  return loss;
}

}  // namespace zero::gpt

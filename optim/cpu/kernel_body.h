// The optimizer kernels written once over a vector policy V, and the table that picks an
// instantiation. Included by each ISA's translation unit *inside its own namespace*, after the
// standard headers, kernels.h and the definition of that ISA's policy, so that no function
// built with one ISA's flags can be merged by the linker with another's. (Hence no includes
// and no include guard here.)
//
// A policy V provides, for W lanes: F (fp32 vector), U (uint32 vector), set, add, sub, mul,
// div, sqrt (IEEE), fma(a, b, c) = a*b + c, sign; load from float/bf16_t/f16_t; store to
// float, and to bf16_t/f16_t rounding to nearest even exactly as base/half.h does;
// store_stochastic(bf16_t*, F, U random16); lanes(first) = first + 0..W-1; hash(key, index)
// = optim/rounding.h's rounding_bits lane by lane; low16 and high16.
//
// Each kernel walks a Piece in full vectors; the last partial vector is copied into zeroed
// local arrays, run through the same vector code, and copied back, so tails compute exactly
// what a full vector would.

struct NoOut {};

template <class T>
inline T* typed(void* p) {
  return static_cast<T*>(p);
}
template <class T>
inline const T* typed(const void* p) {
  return static_cast<const T*>(p);
}

// Calls body(master, grad, state0, state1, out, i, index_low) for i = 0, W, 2W, ..., the last
// call on local copies when count is not a multiple of W. The body touches only the buffers
// its algorithm has. It is taken, and its constants captured, by value: vector types may alias
// any float, so constants reached through a reference would be reloaded after every store.
template <class V, class G, class S, class O, class Body>
inline void for_each_vector(const Piece& piece, Body body) {
  constexpr std::size_t W = V::W;
  float* master = piece.master;
  const G* grad = typed<G>(piece.grad);
  S* state0 = typed<S>(piece.state0);
  S* state1 = typed<S>(piece.state1);
  O* out = typed<O>(piece.param_out);
  const std::size_t full = piece.count / W * W;
  for (std::size_t i = 0; i < full; i += W) {
    body(master, grad, state0, state1, out, i,
         piece.first_index_low + static_cast<std::uint32_t>(i));
  }
  const std::size_t rest = piece.count - full;
  if (rest == 0) return;
  alignas(64) float local_master[W] = {};
  alignas(64) G local_grad[W] = {};
  alignas(64) S local_state0[W] = {};
  alignas(64) S local_state1[W] = {};
  alignas(64) O local_out[W] = {};
  std::memcpy(local_master, master + full, rest * sizeof(float));
  std::memcpy(local_grad, grad + full, rest * sizeof(G));
  if (state0 != nullptr) std::memcpy(local_state0, state0 + full, rest * sizeof(S));
  if (state1 != nullptr) std::memcpy(local_state1, state1 + full, rest * sizeof(S));
  body(local_master, local_grad, local_state0, local_state1, local_out, std::size_t{0},
       piece.first_index_low + static_cast<std::uint32_t>(full));
  std::memcpy(master + full, local_master, rest * sizeof(float));
  if (state0 != nullptr) std::memcpy(state0 + full, local_state0, rest * sizeof(S));
  if (state1 != nullptr) std::memcpy(state1 + full, local_state1, rest * sizeof(S));
  if constexpr (!std::is_same_v<O, NoOut>) std::memcpy(out + full, local_out, rest * sizeof(O));
}

template <class V, class O>
inline void store_out(O* out, typename V::F p) {
  if constexpr (!std::is_same_v<O, NoOut>) V::store(out, p);
}

// Stores state `s` (index 0 or 1 of the element's random bits when stochastic).
template <class V, class S>
inline void store_state(S* dst, typename V::F s, typename V::U random, int which) {
  if constexpr (std::is_same_v<S, bf16_t>) {
    V::store_stochastic(dst, s, which == 0 ? V::low16(random) : V::high16(random));
  } else {
    (void)random, (void)which;
    V::store(dst, s);
  }
}

template <class V, class S>
inline typename V::U random_bits(const Coefficients& c, std::uint32_t index_low) {
  if constexpr (std::is_same_v<S, bf16_t>) {
    return V::hash(V::setu(c.rounding_key), V::lanes(index_low));
  } else {
    (void)c, (void)index_low;
    return V::setu(0);
  }
}

template <class V, class G, class S, class O>
void adam_kernel(const Piece& piece, const Coefficients& c) {
  using F = typename V::F;
  const F grad_scale = V::set(c.grad_scale), l2 = V::set(c.l2), decay = V::set(c.decay);
  const F beta1 = V::set(c.beta1), one_minus_beta1 = V::set(c.one_minus_beta1);
  const F beta2 = V::set(c.beta2), one_minus_beta2 = V::set(c.one_minus_beta2);
  const F step_size = V::set(c.step_size), rbc2 = V::set(c.rbc2), eps = V::set(c.eps);
  for_each_vector<V, G, S, O>(piece, [=](float* master, const G* grad, S* m_buf, S* v_buf, O* out,
                                         std::size_t i, std::uint32_t index) {
    F p = V::load(master + i);
    const F g = V::fma(l2, p, V::mul(V::load(grad + i), grad_scale));
    const F m = V::fma(beta1, V::load(m_buf + i), V::mul(one_minus_beta1, g));
    const F v = V::fma(beta2, V::load(v_buf + i), V::mul(one_minus_beta2, V::mul(g, g)));
    const F denominator = V::fma(V::sqrt(v), rbc2, eps);
    p = V::sub(V::mul(p, decay), V::div(V::mul(step_size, m), denominator));
    V::store(master + i, p);
    const auto random = random_bits<V, S>(c, index);
    store_state<V>(m_buf + i, m, random, 0);
    store_state<V>(v_buf + i, v, random, 1);
    store_out<V>(out + i, p);
  });
}

template <class V, class G, class S, class O>
void adagrad_kernel(const Piece& piece, const Coefficients& c) {
  using F = typename V::F;
  const F grad_scale = V::set(c.grad_scale), l2 = V::set(c.l2), lr = V::set(c.lr);
  const F eps = V::set(c.eps);
  for_each_vector<V, G, S, O>(piece, [=](float* master, const G* grad, S* sum_buf, S*, O* out,
                                         std::size_t i, std::uint32_t index) {
    F p = V::load(master + i);
    const F g = V::fma(l2, p, V::mul(V::load(grad + i), grad_scale));
    const F sum = V::fma(g, g, V::load(sum_buf + i));
    p = V::sub(p, V::div(V::mul(lr, g), V::add(V::sqrt(sum), eps)));
    V::store(master + i, p);
    store_state<V>(sum_buf + i, sum, random_bits<V, S>(c, index), 0);
    store_out<V>(out + i, p);
  });
}

template <class V, class G, class S, class O>
void lion_kernel(const Piece& piece, const Coefficients& c) {
  using F = typename V::F;
  const F grad_scale = V::set(c.grad_scale), decay = V::set(c.decay), lr = V::set(c.lr);
  const F beta1 = V::set(c.beta1), one_minus_beta1 = V::set(c.one_minus_beta1);
  const F beta2 = V::set(c.beta2), one_minus_beta2 = V::set(c.one_minus_beta2);
  for_each_vector<V, G, S, O>(piece, [=](float* master, const G* grad, S* m_buf, S*, O* out,
                                         std::size_t i, std::uint32_t index) {
    F p = V::load(master + i);
    const F g = V::mul(V::load(grad + i), grad_scale);
    const F m_old = V::load(m_buf + i);
    const F update = V::fma(beta1, m_old, V::mul(one_minus_beta1, g));
    p = V::sub(V::mul(p, decay), V::mul(lr, V::sign(update)));
    const F m = V::fma(beta2, m_old, V::mul(one_minus_beta2, g));
    V::store(master + i, p);
    store_state<V>(m_buf + i, m, random_bits<V, S>(c, index), 0);
    store_out<V>(out + i, p);
  });
}

template <class V, class G, class S, class O>
void sgd_kernel(const Piece& piece, const Coefficients& c) {
  using F = typename V::F;
  const F grad_scale = V::set(c.grad_scale), l2 = V::set(c.l2), lr = V::set(c.lr);
  const F momentum = V::set(c.momentum), one_minus_dampening = V::set(c.one_minus_dampening);
  const bool has_momentum = c.momentum != 0.0f, first = c.first_step, nesterov = c.nesterov;
  for_each_vector<V, G, S, O>(piece, [=](float* master, const G* grad, S* buf_ptr, S*, O* out,
                                         std::size_t i, std::uint32_t index) {
    F p = V::load(master + i);
    F d = V::fma(l2, p, V::mul(V::load(grad + i), grad_scale));
    if (has_momentum) {
      const F buf =
          first ? d : V::fma(momentum, V::load(buf_ptr + i), V::mul(one_minus_dampening, d));
      store_state<V>(buf_ptr + i, buf, random_bits<V, S>(c, index), 0);
      d = nesterov ? V::fma(momentum, buf, d) : buf;
    }
    p = V::sub(p, V::mul(lr, d));
    V::store(master + i, p);
    store_out<V>(out + i, p);
  });
}

// The bandwidth floor: AdamW's loads and stores (master, grad, two states, optional copy-out)
// with one addition per value, and the same conversions (bf16 state truncated, not rounded).
template <class V, class G, class S, class O>
void floor_kernel(const Piece& piece, const Coefficients&) {
  using F = typename V::F;
  for_each_vector<V, G, S, O>(piece, [=](float* master, const G* grad, S* m_buf, S* v_buf, O* out,
                                         std::size_t i, std::uint32_t) {
    const F g = V::load(grad + i);
    const F p = V::add(V::load(master + i), g);
    V::store(master + i, p);
    V::store_truncated(m_buf + i, V::add(V::load(m_buf + i), g));
    V::store_truncated(v_buf + i, V::add(V::load(v_buf + i), g));
    store_out<V>(out + i, p);
  });
}

// param_out = round(master): the copy-out alone (piece.grad points at the master).
template <class V, class O>
void copy_out_kernel(const Piece& piece, const Coefficients&) {
  for_each_vector<V, float, float, O>(
      piece, [=](float* master, const float*, float*, float*, O* out, std::size_t i,
                 std::uint32_t) { store_out<V>(out + i, V::load(master + i)); });
}

template <class V, class G, class S, class O>
Kernel pick_algorithm(Mode mode, OptimizerType type) {
  if (mode == Mode::floor) return &floor_kernel<V, G, S, O>;
  if (mode == Mode::copy_out) return &copy_out_kernel<V, O>;
  switch (type) {
    case OptimizerType::adam:
    case OptimizerType::adamw:
      return &adam_kernel<V, G, S, O>;
    case OptimizerType::adagrad:
      return &adagrad_kernel<V, G, S, O>;
    case OptimizerType::lion:
      return &lion_kernel<V, G, S, O>;
    case OptimizerType::sgd:
      return &sgd_kernel<V, G, S, O>;
  }
  return nullptr;
}

template <class V, class G, class S>
Kernel pick_out(Mode mode, OptimizerType type, int out) {
  switch (out) {
    case 1:
      return pick_algorithm<V, G, S, bf16_t>(mode, type);
    case 2:
      return pick_algorithm<V, G, S, f16_t>(mode, type);
    default:
      return pick_algorithm<V, G, S, NoOut>(mode, type);
  }
}

template <class V, class G>
Kernel pick_state(Mode mode, OptimizerType type, DType state, int out) {
  return state == DType::bf16 ? pick_out<V, G, bf16_t>(mode, type, out)
                              : pick_out<V, G, float>(mode, type, out);
}

template <class V>
Kernel pick_kernel(Mode mode, OptimizerType type, DType grad, DType state, int out) {
  switch (grad) {
    case DType::bf16:
      return pick_state<V, bf16_t>(mode, type, state, out);
    case DType::f16:
      return pick_state<V, f16_t>(mode, type, state, out);
    default:
      return pick_state<V, float>(mode, type, state, out);
  }
}

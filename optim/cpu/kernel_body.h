// The optimizer kernels written once over a vector policy V, and the table that picks an
// instantiation. Included by each ISA's translation unit *inside its own namespace*, after the
// standard headers, kernels.h and the definition of that ISA's policy, so that no function
// built with one ISA's flags can be merged by the linker with another's. (Hence no includes
// and no include guard here.)
//
// A policy V provides, for W lanes: F (fp32 vector), U (uint32 vector), set, add, sub, mul,
// div, sqrt (IEEE), fma(a, b, c) = a*b + c, sign; load from float/bf16_t/f16_t; store to
// float, and to bf16_t/f16_t rounding to nearest even exactly as base/half.h does;
// store_stochastic(bf16_t*, F, U random16); their non-temporal forms stream(float*, F) and
// stream_stochastic(bf16_t*, F, U) to aligned addresses, and fence() after them; lanes(first)
// = first + 0..W-1; hash(key, index) = optim/rounding.h's rounding_bits lane by lane; low16
// and high16.
//
// Each kernel walks a Piece in full vectors (for_each_vector); the elements before the first
// vector it streams and after the last whole one are copied into zeroed local arrays, run
// through the same vector code, and copied back, so they compute exactly what a full vector
// would.

struct NoOut {};

template <class T>
inline T* typed(void* p) {
  return static_cast<T*>(p);
}
template <class T>
inline const T* typed(const void* p) {
  return static_cast<const T*>(p);
}

// One vector's buffers: the algorithm reads its master and states at the `*_in` pointers and
// writes them at the others (the same, for a step in place). Passed by value for the reason
// below.
template <class G, class S, class O>
struct Row {
  const float* master_in;
  float* master;
  const G* grad;
  const S* state0_in;
  S* state0;
  const S* state1_in;
  S* state1;
  O* out;
};

// Calls body(stream, row, i, index_low) for i over the piece's elements in steps of W: `stream`
// a std::bool_constant saying whether the master and state stores are non-temporal. Vectors
// are whole and, where the piece streams, aligned for the stream stores; the elements before
// the first aligned vector and after the last whole one go through the same vector code on
// local copies in zeroed arrays, so they compute exactly what a whole vector would. The body
// touches only the buffers its algorithm has. It is taken, and its constants captured, by
// value: vector types may alias any float, so constants reached through a reference would be
// reloaded after every store.
template <class V, class G, class S, class O, class Body>
inline void for_each_vector(const Piece& piece, Body body) {
  constexpr std::size_t W = V::W;
  const Row<G, S, O> row{piece.master_in,        piece.master,
                         typed<G>(piece.grad),   typed<S>(piece.state0_in),
                         typed<S>(piece.state0), typed<S>(piece.state1_in),
                         typed<S>(piece.state1), typed<O>(piece.param_out)};
  // The same vector code on local copies of [first, first + n), n < W.
  const auto on_copies = [&](std::size_t first, std::size_t n) {
    if (n == 0) return;
    alignas(64) float local_master[W] = {};
    alignas(64) G local_grad[W] = {};
    alignas(64) S local_state0[W] = {};
    alignas(64) S local_state1[W] = {};
    alignas(64) O local_out[W] = {};
    std::memcpy(local_master, row.master_in + first, n * sizeof(float));
    std::memcpy(local_grad, row.grad + first, n * sizeof(G));
    if (row.state0 != nullptr) std::memcpy(local_state0, row.state0_in + first, n * sizeof(S));
    if (row.state1 != nullptr) std::memcpy(local_state1, row.state1_in + first, n * sizeof(S));
    const Row<G, S, O> local{local_master, local_master, local_grad,   local_state0,
                             local_state0, local_state1, local_state1, local_out};
    body(std::false_type{}, local, std::size_t{0},
         piece.first_index_low + static_cast<std::uint32_t>(first));
    std::memcpy(row.master + first, local_master, n * sizeof(float));
    if (row.state0 != nullptr) std::memcpy(row.state0 + first, local_state0, n * sizeof(S));
    if (row.state1 != nullptr) std::memcpy(row.state1 + first, local_state1, n * sizeof(S));
    if constexpr (!std::is_same_v<O, NoOut>) {
      std::memcpy(row.out + first, local_out, n * sizeof(O));
    }
  };
  const auto whole = [&](auto stream, std::size_t first, std::size_t last) {
    for (std::size_t i = first; i < last; i += W) {
      body(stream, row, i, piece.first_index_low + static_cast<std::uint32_t>(i));
    }
  };
  // Streamed from the first element whose master and states all sit on a vector's boundary.
  std::size_t head = 0;
  bool stream = piece.stream && W > 1;
  if (stream) {
    const auto offset = [](const void* p, std::size_t bytes) {
      return reinterpret_cast<std::uintptr_t>(p) % bytes;
    };
    head = (W * sizeof(float) - offset(row.master, W * sizeof(float))) % (W * sizeof(float)) /
           sizeof(float);
    stream = offset(row.master, sizeof(float)) == 0 && head < piece.count &&
             (row.state0 == nullptr || offset(row.state0 + head, W * sizeof(S)) == 0) &&
             (row.state1 == nullptr || offset(row.state1 + head, W * sizeof(S)) == 0);
    if (!stream) head = 0;
  }
  on_copies(0, head);
  const std::size_t full = head + (piece.count - head) / W * W;
  if (stream) {
    whole(std::true_type{}, head, full);
    V::fence();  // the streamed stores ordered before whatever the caller does next
  } else {
    whole(std::false_type{}, head, full);
  }
  on_copies(full, piece.count - full);
}

// A master value stored, non-temporally where `stream` says.
template <class V, class Stream>
inline void store_master(Stream, float* dst, typename V::F p) {
  if constexpr (Stream::value) {
    V::stream(dst, p);
  } else {
    V::store(dst, p);
  }
}

template <class V, class O>
inline void store_out(O* out, typename V::F p) {
  if constexpr (!std::is_same_v<O, NoOut>) V::store(out, p);
}

// Stores state `s` (index 0 or 1 of the element's random bits when stochastic), non-temporally
// where `stream` says.
template <class V, class S, class Stream>
inline void store_state(Stream stream, S* dst, typename V::F s, typename V::U random, int which) {
  if constexpr (std::is_same_v<S, bf16_t>) {
    const typename V::U half = which == 0 ? V::low16(random) : V::high16(random);
    if constexpr (Stream::value) {
      V::stream_stochastic(dst, s, half);
    } else {
      V::store_stochastic(dst, s, half);
    }
  } else {
    (void)random, (void)which;
    store_master<V>(stream, dst, s);
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
  for_each_vector<V, G, S, O>(
      piece, [=](auto stream, Row<G, S, O> r, std::size_t i, std::uint32_t index) {
        F p = V::load(r.master_in + i);
        const F g = V::fma(l2, p, V::mul(V::load(r.grad + i), grad_scale));
        const F m = V::fma(beta1, V::load(r.state0_in + i), V::mul(one_minus_beta1, g));
        const F v = V::fma(beta2, V::load(r.state1_in + i), V::mul(one_minus_beta2, V::mul(g, g)));
        const F denominator = V::fma(V::sqrt(v), rbc2, eps);
        p = V::sub(V::mul(p, decay), V::div(V::mul(step_size, m), denominator));
        store_master<V>(stream, r.master + i, p);
        const auto random = random_bits<V, S>(c, index);
        store_state<V>(stream, r.state0 + i, m, random, 0);
        store_state<V>(stream, r.state1 + i, v, random, 1);
        store_out<V>(r.out + i, p);
      });
}

template <class V, class G, class S, class O>
void adagrad_kernel(const Piece& piece, const Coefficients& c) {
  using F = typename V::F;
  const F grad_scale = V::set(c.grad_scale), l2 = V::set(c.l2), lr = V::set(c.lr);
  const F eps = V::set(c.eps);
  for_each_vector<V, G, S, O>(
      piece, [=](auto stream, Row<G, S, O> r, std::size_t i, std::uint32_t index) {
        F p = V::load(r.master_in + i);
        const F g = V::fma(l2, p, V::mul(V::load(r.grad + i), grad_scale));
        const F sum = V::fma(g, g, V::load(r.state0_in + i));
        p = V::sub(p, V::div(V::mul(lr, g), V::add(V::sqrt(sum), eps)));
        store_master<V>(stream, r.master + i, p);
        store_state<V>(stream, r.state0 + i, sum, random_bits<V, S>(c, index), 0);
        store_out<V>(r.out + i, p);
      });
}

template <class V, class G, class S, class O>
void lion_kernel(const Piece& piece, const Coefficients& c) {
  using F = typename V::F;
  const F grad_scale = V::set(c.grad_scale), decay = V::set(c.decay), lr = V::set(c.lr);
  const F beta1 = V::set(c.beta1), one_minus_beta1 = V::set(c.one_minus_beta1);
  const F beta2 = V::set(c.beta2), one_minus_beta2 = V::set(c.one_minus_beta2);
  for_each_vector<V, G, S, O>(
      piece, [=](auto stream, Row<G, S, O> r, std::size_t i, std::uint32_t index) {
        F p = V::load(r.master_in + i);
        const F g = V::mul(V::load(r.grad + i), grad_scale);
        const F m_old = V::load(r.state0_in + i);
        const F update = V::fma(beta1, m_old, V::mul(one_minus_beta1, g));
        p = V::sub(V::mul(p, decay), V::mul(lr, V::sign(update)));
        const F m = V::fma(beta2, m_old, V::mul(one_minus_beta2, g));
        store_master<V>(stream, r.master + i, p);
        store_state<V>(stream, r.state0 + i, m, random_bits<V, S>(c, index), 0);
        store_out<V>(r.out + i, p);
      });
}

template <class V, class G, class S, class O>
void sgd_kernel(const Piece& piece, const Coefficients& c) {
  using F = typename V::F;
  const F grad_scale = V::set(c.grad_scale), l2 = V::set(c.l2), lr = V::set(c.lr);
  const F momentum = V::set(c.momentum), one_minus_dampening = V::set(c.one_minus_dampening);
  const bool has_momentum = c.momentum != 0.0f, first = c.first_step, nesterov = c.nesterov;
  for_each_vector<V, G, S, O>(piece, [=](auto stream, Row<G, S, O> r, std::size_t i,
                                         std::uint32_t index) {
    F p = V::load(r.master_in + i);
    F d = V::fma(l2, p, V::mul(V::load(r.grad + i), grad_scale));
    if (has_momentum) {
      const F buf =
          first ? d : V::fma(momentum, V::load(r.state0_in + i), V::mul(one_minus_dampening, d));
      store_state<V>(stream, r.state0 + i, buf, random_bits<V, S>(c, index), 0);
      d = nesterov ? V::fma(momentum, buf, d) : buf;
    }
    p = V::sub(p, V::mul(lr, d));
    store_master<V>(stream, r.master + i, p);
    store_out<V>(r.out + i, p);
  });
}

// The bandwidth floor: AdamW's loads and stores (master, grad, two states, optional copy-out)
// with one addition per value, and the same conversions (bf16 state truncated, not rounded),
// with ordinary stores.
template <class V, class G, class S, class O>
void floor_kernel(const Piece& piece, const Coefficients&) {
  using F = typename V::F;
  for_each_vector<V, G, S, O>(piece, [=](auto, Row<G, S, O> r, std::size_t i, std::uint32_t) {
    const F g = V::load(r.grad + i);
    const F p = V::add(V::load(r.master_in + i), g);
    V::store(r.master + i, p);
    V::store_truncated(r.state0 + i, V::add(V::load(r.state0_in + i), g));
    V::store_truncated(r.state1 + i, V::add(V::load(r.state1_in + i), g));
    store_out<V>(r.out + i, p);
  });
}

// param_out = round(master): the copy-out alone (piece.grad points at the master, and the
// master is only read).
template <class V, class O>
void copy_out_kernel(const Piece& piece, const Coefficients&) {
  for_each_vector<V, float, float, O>(
      piece, [=](auto, Row<float, float, O> r, std::size_t i, std::uint32_t) {
        store_out<V>(r.out + i, V::load(r.master_in + i));
      });
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

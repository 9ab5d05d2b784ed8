// The matrix products of the CUDA layers on cuBLASLt (layers.h's Matmul): bf16 A, B, C and D,
// fp32 compute and scale. Host C++ only; the bias gradient's column sums run in a kernel of
// crossentropy.cu (internal.h).
//
// Row-major on column-major: a row-major X[r, c] is, as stored, the column-major X^T. So
// out[N, OC] = inp[N, C] W[OC, C]^T is computed as out^T (OC x N) = W (OC x C) inp^T (C x N):
// in cuBLASLt's terms D (m = OC, n = N) = op(A) B with A the stored W (column-major C x OC,
// transposed by op) and B the stored inp (column-major C x N). Every operand is packed (its
// leading dimension is its stored row count) but out and dout, whose rows may be `ld` elements
// apart (ld >= OC: the logits' padded vocabulary): their layouts' leading dimension is ld, so
// cuBLASLt never touches the columns OC..ld. The backward's dinp += dout W and dW += dout^T inp
// (a null dinp or dweight is skipped) are never run in place: with D the same buffer as C and
// beta = 1, cuBLASLt 13.0's Hopper kernels (algorithm 66, every tile the heuristic offers) came
// out up to a bf16 unit off, as if the product were rounded before C was added, while the same
// algorithms with D apart were exact (bench/probes/cublaslt_accumulate.cu, an H200,
// 2026-11-28). So each gradient is summed a block of columns at a time into a staging buffer,
// D = A op B + C with C the gradient, and copied back: one rounding of the fp32 sum, as the CPU
// layer. dbias += the column sums of
// dout runs in internal::column_sums_add, on as much of `scratch` as reduction_scratch_floats
// (N, OC) gives. A forward with C = 0 (no product to take) is refused, and so is ld < OC.
//
// Epilogues: the forward's bias (BIAS); forward_gelu's GELU with its input kept (GELU_AUX_BIAS,
// GELU_AUX without a bias); a backward's input gradient through GELU (DGELU, written with beta
// 0); a written bias gradient taken in the written weight gradient's product (BGRADB: the
// column sums of dout, the product's B, over its k = N). The GELU epilogues need the kept
// matrix's rows (OC forward, C backward) a multiple of 8; where they are not, or where
// cuBLASLt's heuristic finds no algorithm for an epilogue (remembered per shape), the same
// result comes from the plain product and a kernel: gelu_forward or gelu_backward (in place),
// a memset and column_sums_add.
//
// Resources: the cuBLASLt handle, one 32 MiB device workspace and one 32 MiB staging buffer
// (the backward's D), made in the constructor and freed in the destructor; per product shape
// (kind, m, n, k, the leading dimensions, the operands' alignments) one matmul descriptor, its
// four layouts (C's and D's differ in the backward: the gradient's and the staging's) and the
// algorithm
// cuBLASLt's heuristic picked the first time, cached in State until the destructor. The
// heuristic may only pick split-K algorithms that reduce in fp32 in the workspace (never in bf16
// and never "in place" in the output type), so every product sums in fp32 and a cached
// algorithm repeats bit for bit.
//
// One workspace serves every call: calls must not overlap in time, so use one Matmul per stream
// (or order the streams), and one thread at a time per Matmul (the cache is not locked). Destroy
// a Matmul only once the work of its calls has finished: the destructor frees the workspace.
//
// Errors: a failing CUDA call returns its cudaError_t; a failing cuBLAS call returns the
// cudaError_t naming the same failure, so that callers print one kind of code:
// NOT_INITIALIZED -> cudaErrorInitializationError, ALLOC_FAILED -> cudaErrorMemoryAllocation,
// INVALID_VALUE -> cudaErrorInvalidValue, ARCH_MISMATCH -> cudaErrorNoKernelImageForDevice,
// NOT_SUPPORTED (also: the heuristic found no algorithm) -> cudaErrorNotSupported,
// EXECUTION_FAILED -> cudaErrorLaunchFailure, anything else -> cudaErrorUnknown. A constructor
// that failed (no handle, no workspace) leaves its error to be returned by every call.
#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "models/cuda/internal.h"
#include "models/cuda/layers.h"

namespace zero::cuda_layers {
namespace {

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;
constexpr std::size_t kStagingBytes = std::size_t{32} << 20;  // the backward's D, in blocks

int cuda_status(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return cudaSuccess;
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return cudaErrorInitializationError;
    case CUBLAS_STATUS_ALLOC_FAILED:
      return cudaErrorMemoryAllocation;
    case CUBLAS_STATUS_INVALID_VALUE:
      return cudaErrorInvalidValue;
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return cudaErrorNoKernelImageForDevice;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return cudaErrorNotSupported;
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return cudaErrorLaunchFailure;
    default:
      return cudaErrorUnknown;
  }
}

// The products Matmul runs, each with its transposes (see the top of the file); out and dout
// have leading dimension ld, every other operand its row count.
enum class Kind : int {
  forward,            // out^T (OC x N) = op(W stored C x OC, transposed) inp^T (C x N)
  forward_bias,       // the same plus bias[OC] added to each column of D (CUBLASLT_EPILOGUE_BIAS)
  forward_gelu,       // GELU of forward's, its input kept in aux (CUBLASLT_EPILOGUE_GELU_AUX)
  forward_gelu_bias,  // GELU of forward_bias's, its input kept (CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
  backward_input,     // dinp^T (C x N) += W^T (W as stored, C x OC) dout^T (dout as stored)
  backward_input_dgelu,   // dinp^T = that product times GELU's derivative at aux (DGELU)
  backward_weight,        // dW^T (C x OC) += inp^T (C x N) op(dout^T stored OC x N, transposed)
  backward_weight_bgrad,  // the same, dout's column sums written to the bias pointer (BGRADB)
};

bool transposes_a(Kind kind) {
  return kind == Kind::forward || kind == Kind::forward_bias || kind == Kind::forward_gelu ||
         kind == Kind::forward_gelu_bias;
}
bool transposes_b(Kind kind) {
  return kind == Kind::backward_weight || kind == Kind::backward_weight_bgrad;
}

// The epilogue of a kind's product, and what it reads or writes besides the operands.
std::uint32_t epilogue_of(Kind kind) {
  switch (kind) {
    case Kind::forward_bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Kind::forward_gelu:
      return CUBLASLT_EPILOGUE_GELU_AUX;
    case Kind::forward_gelu_bias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Kind::backward_input_dgelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case Kind::backward_weight_bgrad:
      return CUBLASLT_EPILOGUE_BGRADB;
    default:
      return CUBLASLT_EPILOGUE_DEFAULT;
  }
}
bool uses_bias(Kind kind) {
  return kind == Kind::forward_bias || kind == Kind::forward_gelu_bias ||
         kind == Kind::backward_weight_bgrad;
}
bool uses_aux(Kind kind) {
  return kind == Kind::forward_gelu || kind == Kind::forward_gelu_bias ||
         kind == Kind::backward_input_dgelu;
}

// The largest power of two up to 256 dividing the address: what cuBLASLt's heuristic may assume.
std::uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t bytes = 256;
  while (bytes > 2 && address % bytes != 0) bytes /= 2;
  return bytes;
}

// What a cached plan is for: D is m x n, the inner dimension k; the stored A's, B's, C's and
// D's leading dimensions; alignments in bytes.
struct Key {
  Kind kind;
  int m, n, k;
  int ld_a, ld_b, ld_c, ld_d;
  std::uint32_t align_a, align_b, align_c, align_d, align_bias, align_aux;
  auto operator<=>(const Key&) const = default;
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

void destroy(Plan& plan) {
  if (plan.d != nullptr) cublasLtMatrixLayoutDestroy(plan.d);
  if (plan.c != nullptr) cublasLtMatrixLayoutDestroy(plan.c);
  if (plan.b != nullptr) cublasLtMatrixLayoutDestroy(plan.b);
  if (plan.a != nullptr) cublasLtMatrixLayoutDestroy(plan.a);
  if (plan.desc != nullptr) cublasLtMatmulDescDestroy(plan.desc);
  plan = Plan{};
}

template <class V>
cublasStatus_t set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const V& value) {
  return cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value));
}

template <class V>
cublasStatus_t set(cublasLtMatmulPreference_t preference,
                   cublasLtMatmulPreferenceAttributes_t attribute, const V& value) {
  return cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value));
}

// The descriptor and layouts of `key`'s product (bias and aux pointers set to `bias` and `aux`
// for the heuristic, which reads their alignments from them; the aux matrix packed, its leading
// dimension D's rows), and the heuristic's first algorithm. On failure nothing is left
// allocated.
int make_plan(cublasLtHandle_t handle, const Key& key, const void* bias, const void* aux,
              Plan& plan) {
  const bool ta = transposes_a(key.kind), tb = transposes_b(key.kind);
  const std::uint64_t a_rows = ta ? key.k : key.m, a_cols = ta ? key.m : key.k;
  const std::uint64_t b_rows = tb ? key.n : key.k, b_cols = tb ? key.k : key.n;
  cublasStatus_t st = cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const std::int32_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (st == CUBLAS_STATUS_SUCCESS) st = set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  if (st == CUBLAS_STATUS_SUCCESS) st = set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  const std::uint32_t epilogue = epilogue_of(key.kind);
  if (st == CUBLAS_STATUS_SUCCESS && epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    st = set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  }
  if (uses_bias(key.kind)) {
    const std::int32_t bias_type = CUDA_R_16BF;
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type);
    }
    if (st == CUBLAS_STATUS_SUCCESS) st = set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  }
  if (uses_aux(key.kind)) {
    const std::int64_t aux_ld = key.m;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, a_rows, a_cols, key.ld_a);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, b_rows, b_cols, key.ld_b);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_16BF, static_cast<std::uint64_t>(key.m),
                                    static_cast<std::uint64_t>(key.n), key.ld_c);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatrixLayoutCreate(&plan.d, CUDA_R_16BF, static_cast<std::uint64_t>(key.m),
                                    static_cast<std::uint64_t>(key.n), key.ld_d);
  }
  cublasLtMatmulPreference_t preference = nullptr;
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&preference);
  const std::uint64_t workspace = kWorkspaceBytes;
  const std::uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;  // and NONE
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = set(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.a, plan.b, plan.c, plan.d,
                                        preference, 1, &result, &found);
  }
  if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
  if (st == CUBLAS_STATUS_SUCCESS && (found < 1 || result.state != CUBLAS_STATUS_SUCCESS)) {
    st = CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    destroy(plan);
    return cuda_status(st);
  }
  plan.algo = result.algo;
  return 0;
}

}  // namespace

struct Matmul::State {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // kWorkspaceBytes of device memory
  Bf16* staging = nullptr;    // kStagingBytes of device memory: the backward's D
  int failed = 0;             // the constructor's error, returned by every call
  std::map<Key, Plan> plans;
  std::set<Key> refused;  // shapes the heuristic found no algorithm for (not asked again)

  State() {
    failed = cuda_status(cublasLtCreate(&handle));
    if (failed == 0) failed = static_cast<int>(cudaMalloc(&workspace, kWorkspaceBytes));
    if (failed == 0) failed = static_cast<int>(cudaMalloc(&staging, kStagingBytes));
  }
  ~State() {
    for (auto& [key, plan] : plans) destroy(plan);
    if (staging != nullptr) cudaFree(staging);
    if (workspace != nullptr) cudaFree(workspace);
    if (handle != nullptr) cublasLtDestroy(handle);
  }

  // D = A op B + beta C through the cached plan of the shape, with the kind's epilogue on `bias`
  // and `aux` (packed, m rows); lda, ldb, ldc, ldd are the stored operands' leading dimensions.
  // The forward passes beta 0 and C = D. cudaErrorNotSupported, with nothing launched, where
  // the heuristic has no algorithm for an epilogue's shape.
  int run(Kind kind, int m, int n, int k, const Bf16* a, int lda, const Bf16* b, int ldb,
          const Bf16* c, int ldc, Bf16* d, int ldd, float beta, const Bf16* bias,
          cudaStream_t stream, const Bf16* aux = nullptr) {
    if (failed != 0) return failed;
    const Key key{kind,
                  m,
                  n,
                  k,
                  lda,
                  ldb,
                  ldc,
                  ldd,
                  alignment(a),
                  alignment(b),
                  alignment(c),
                  alignment(d),
                  bias != nullptr ? alignment(bias) : 0u,
                  aux != nullptr ? alignment(aux) : 0u};
    auto at = plans.find(key);
    if (at == plans.end()) {
      if (refused.count(key) != 0) return cudaErrorNotSupported;
      Plan plan;
      const int made = make_plan(handle, key, bias, aux, plan);
      if (made == cudaErrorNotSupported) refused.insert(key);
      if (made != 0) return made;
      at = plans.emplace(key, plan).first;
    }
    Plan& plan = at->second;
    if (uses_bias(kind)) {
      const cublasStatus_t st = set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
      if (st != CUBLAS_STATUS_SUCCESS) return cuda_status(st);
    }
    if (uses_aux(kind)) {
      const cublasStatus_t st = set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
      if (st != CUBLAS_STATUS_SUCCESS) return cuda_status(st);
    }
    const float alpha = 1.0f;
    return cuda_status(cublasLtMatmul(handle, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, c,
                                      plan.c, d, plan.d, &plan.algo, workspace, kWorkspaceBytes,
                                      stream));
  }

  // D (m x n, leading dimension ldd) += A op B, never in place (see the top of the file): a
  // block of D's columns at a time, staging = A op B's block + D's block, then staging copied
  // back over D's block. B's block starts j0 columns in (j0 rows in, where op transposes it).
  int accumulate(Kind kind, int m, int n, int k, const Bf16* a, int lda, const Bf16* b, int ldb,
                 Bf16* d, int ldd, cudaStream_t stream) {
    if (failed != 0) return failed;
    const std::size_t row_bytes = static_cast<std::size_t>(m) * sizeof(Bf16);
    const int block = static_cast<int>(
        std::min<std::size_t>(static_cast<std::size_t>(n), kStagingBytes / row_bytes));
    if (block == 0) return cudaErrorInvalidValue;  // a column over 32 MiB: m > 16M
    for (int j0 = 0; j0 < n; j0 += block) {
      const int cols = std::min(block, n - j0);
      const Bf16* b_block = b + (transposes_b(kind) ? static_cast<std::size_t>(j0)
                                                    : static_cast<std::size_t>(j0) * ldb);
      Bf16* d_block = d + static_cast<std::size_t>(j0) * ldd;
      int st = run(kind, m, cols, k, a, lda, b_block, ldb, d_block, ldd, staging, m, 1.0f, nullptr,
                   stream);
      if (st == 0) {
        st = static_cast<int>(cudaMemcpy2DAsync(
            d_block, static_cast<std::size_t>(ldd) * sizeof(Bf16), staging, row_bytes, row_bytes,
            static_cast<std::size_t>(cols), cudaMemcpyDeviceToDevice, stream));
      }
      if (st != 0) return st;
    }
    return 0;
  }

  // D (m x n, leading dimension ldd) = A op B: beta 0 in place, where D holds nothing yet (C is
  // not read), one rounding of the fp32 sum as accumulate() onto zeros.
  // The epilogue's bias (BGRADB: its gradient, written) and aux (DGELU: GELU's kept input).
  int write(Kind kind, int m, int n, int k, const Bf16* a, int lda, const Bf16* b, int ldb, Bf16* d,
            int ldd, cudaStream_t stream, const Bf16* bias = nullptr, const Bf16* aux = nullptr) {
    return run(kind, m, n, k, a, lda, b, ldb, d, ldd, d, ldd, 0.0f, bias, stream, aux);
  }
};

Matmul::Matmul() : state_(new State) {}

Matmul::~Matmul() {
  delete state_;
}

int Matmul::forward(Bf16* out, int ld_out, const Bf16* inp, const Bf16* weight, const Bf16* bias,
                    int N, int C, int OC, Stream stream) {
  if (N < 0 || C < 0 || OC < 0 || ld_out < OC) return cudaErrorInvalidValue;
  if (N == 0 || OC == 0) return 0;
  if (C == 0) return cudaErrorInvalidValue;  // an empty inner dimension: cuBLASLt has no product
  const Kind kind = bias != nullptr ? Kind::forward_bias : Kind::forward;
  return state_->run(kind, OC, N, C, weight, C, inp, C, out, ld_out, out, ld_out, 0.0f, bias,
                     static_cast<cudaStream_t>(stream));
}

int Matmul::forward_gelu(Bf16* out, Bf16* pre, const Bf16* inp, const Bf16* weight,
                         const Bf16* bias, int N, int C, int OC, Stream stream) {
  if (N < 0 || C < 0 || OC < 0) return cudaErrorInvalidValue;
  if (N == 0 || OC == 0) return 0;
  if (C == 0) return cudaErrorInvalidValue;
  const auto s = static_cast<cudaStream_t>(stream);
  if (OC % 8 == 0) {  // the kept matrix's leading dimension, OC, as cuBLASLt requires
    const Kind kind = bias != nullptr ? Kind::forward_gelu_bias : Kind::forward_gelu;
    const int st =
        state_->run(kind, OC, N, C, weight, C, inp, C, out, OC, out, OC, 0.0f, bias, s, pre);
    if (st != cudaErrorNotSupported) return st;
  }
  const int st = forward(pre, OC, inp, weight, bias, N, C, OC, stream);
  if (st != 0) return st;
  return gelu_forward(out, pre, static_cast<std::size_t>(N) * OC, stream);
}

int Matmul::backward(Bf16* dinp, Bf16* dweight, Bf16* dbias, const Bf16* dout, int ld_dout,
                     const Bf16* inp, const Bf16* weight, int N, int C, int OC, float* scratch,
                     Stream stream, Into dinp_into, Into dweight_into, Into dbias_into,
                     const Bf16* gelu_pre) {
  if (N < 0 || C < 0 || OC < 0 || ld_dout < OC) return cudaErrorInvalidValue;
  // Through GELU the input gradient is written: the derivative multiplies the product alone.
  if (gelu_pre != nullptr && dinp != nullptr && dinp_into != Into::write) {
    return cudaErrorInvalidValue;
  }
  const auto s = static_cast<cudaStream_t>(stream);
  // A written gradient of `count` elements as zeros.
  const auto zeros = [s](Bf16* grad, Into into, std::size_t count) {
    if (grad == nullptr || into != Into::write || count == 0) return 0;
    return static_cast<int>(cudaMemsetAsync(grad, 0, count * sizeof(Bf16), s));
  };
  const std::size_t rows = static_cast<std::size_t>(N), cols = static_cast<std::size_t>(C);
  if (N == 0 || OC == 0) {  // every gradient gets += 0; a written one, zeros
    int st = zeros(dinp, dinp_into, rows * cols);
    if (st == 0) st = zeros(dweight, dweight_into, static_cast<std::size_t>(OC) * cols);
    if (st == 0) st = zeros(dbias, dbias_into, static_cast<std::size_t>(OC));
    return st;
  }
  // The bias gradient in the weight gradient's product, where both are written.
  bool dbias_done = false;
  if (C > 0) {
    if (dinp != nullptr) {  // dinp^T (C x N) += W^T (C x OC) dout^T (OC x N), both as stored
      int st = cudaErrorNotSupported;
      if (gelu_pre != nullptr && C % 8 == 0) {  // the kept matrix's leading dimension, C
        st = state_->write(Kind::backward_input_dgelu, C, N, OC, weight, C, dout, ld_dout, dinp, C,
                           s, nullptr, gelu_pre);
      }
      if (st == cudaErrorNotSupported) {
        st = dinp_into == Into::write ? state_->write(Kind::backward_input, C, N, OC, weight, C,
                                                      dout, ld_dout, dinp, C, s)
                                      : state_->accumulate(Kind::backward_input, C, N, OC, weight,
                                                           C, dout, ld_dout, dinp, C, s);
        if (st == 0 && gelu_pre != nullptr) {
          st = gelu_backward(dinp, gelu_pre, dinp, rows * cols, stream, Into::write);
        }
      }
      if (st != 0) return st;
    }
    if (dweight != nullptr) {  // dW^T (C x OC) += inp^T (C x N) dout (N x OC)
      int st = cudaErrorNotSupported;
      if (dweight_into == Into::write && dbias != nullptr && dbias_into == Into::write) {
        st = state_->write(Kind::backward_weight_bgrad, C, OC, N, inp, C, dout, ld_dout, dweight, C,
                           s, dbias);
        dbias_done = st == 0;
      }
      if (st == cudaErrorNotSupported) {
        st = dweight_into == Into::write ? state_->write(Kind::backward_weight, C, OC, N, inp, C,
                                                         dout, ld_dout, dweight, C, s)
                                         : state_->accumulate(Kind::backward_weight, C, OC, N, inp,
                                                              C, dout, ld_dout, dweight, C, s);
      }
      if (st != 0) return st;
    }
  }
  if (dbias == nullptr || dbias_done) return 0;
  const int st = zeros(dbias, dbias_into, static_cast<std::size_t>(OC));
  if (st != 0) return st;
  const std::size_t room = scratch != nullptr ? reduction_scratch_floats(N, OC) : 0;
  return internal::column_sums_add(dbias, dout, N, OC, ld_dout, scratch, room, stream);
}

}  // namespace zero::cuda_layers

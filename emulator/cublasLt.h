// CPU emulation of CUDA (emulator/, docs/emulator.md): the part of cuBLASLt that
// models/cuda/matmul.cpp uses, with the enum values and the structs of CUDA's cublasLt.h
// (cublaslt.cpp implements it).
//
// What it does: the descriptor API (matmul descriptors, layouts, preferences) with every
// attribute's documented type and size checked; a heuristic whose "algorithm" remembers what
// the preferences promised (the operands' alignments, the bias pointer's alignment, the
// workspace and the split-K reduction schemes allowed); and cublasLtMatmul for bf16 A, B, C, D
// with fp32 compute and scale, beta (C not read when beta is 0, as cuBLAS does), column-major
// layouts with transposes, and the epilogues the layers use: DEFAULT; BIAS; GELU_AUX and
// GELU_AUX_BIAS (bias added, the sum kept in the aux matrix in bf16, D = GELU of the fp32 sum,
// GELU's tanh form, as GPT-2's); DGELU (D = the product times GELU's derivative at the aux
// matrix; beta must be 0, the one way the layers call it); BGRADB (the bias pointer receives
// the column sums of op(B) over k, rounded once to bf16). The aux matrix's leading dimension must
// be a multiple of 8 and at least D's rows, as cuBLASLt's documentation says. Each operand's
// extent, the bias, the aux matrix and the workspace must lie in device memory, the pointers be
// as aligned as the algorithm was promised, C and D share a layout when they are one buffer.
//
// Where cuBLASLt may choose, it chooses the worst the preferences allow: a product with k >= 32
// is split in two along k, its halves reduced in bf16 (the output type) when the reduction mask
// admits that, else in fp32 in the workspace when the workspace admits it. So a caller that
// leaves the mask at its default gets bf16 partial sums, as it could on a GPU. And D += A op B
// in place (C is D, beta != 0) rounds A op B to bf16 before adding C, as cuBLASLt 13.0's Hopper
// kernels were seen to (an H200, 2026-11-28), so only a product summed out of place is exact.
//
// Not here: other types, compute types, epilogues (the ReLU family, GELU without the aux matrix,
// DGELU_BGRAD, BGRADA) and attributes (refused as NOT_SUPPORTED or
// INVALID_VALUE), batched products, and cuBLASLt's own choice of algorithms and their order of
// summation: results agree with a GPU's to fp32 rounding, not bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 };

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16,
};

enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };

enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,                 // int32_t
  CUBLASLT_MATMUL_DESC_TRANSB = 4,                 // int32_t
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,               // uint32_t
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,           // const void* (BGRADB: void*, written)
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,  // void* (GELU_AUX*: written; DGELU: read)
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,       // int64_t, default 0
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,        // int32_t (cudaDataType), -1: D's type
};

enum cublasLtMatmulPreferenceAttributes_t {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,    // uint64_t, default 0
  CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,  // uint32_t, default all schemes
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,  // uint32_t, default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};

enum cublasLtEpilogue_t {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
  CUBLASLT_EPILOGUE_DGELU = 64 | 128,
  CUBLASLT_EPILOGUE_BGRADB = 512,
};

enum cublasLtReductionScheme_t {
  CUBLASLT_REDUCTION_SCHEME_NONE = 0,
  CUBLASLT_REDUCTION_SCHEME_INPLACE = 1,
  CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2,
  CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4,
  CUBLASLT_REDUCTION_SCHEME_MASK = 7,
};

struct cublasLtContext;
struct cublasLtMatmulDescOpaque_t;
struct cublasLtMatrixLayoutOpaque_t;
struct cublasLtMatmulPreferenceOpaque_t;
using cublasLtHandle_t = cublasLtContext*;
using cublasLtMatmulDesc_t = cublasLtMatmulDescOpaque_t*;
using cublasLtMatrixLayout_t = cublasLtMatrixLayoutOpaque_t*;
using cublasLtMatmulPreference_t = cublasLtMatmulPreferenceOpaque_t*;

struct cublasLtMatmulAlgo_t {
  std::uint64_t data[8];
};

struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  std::size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* value, std::size_t bytes);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          std::uint64_t rows, std::uint64_t cols, std::int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void* value, std::size_t bytes);

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t preference, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* returned);

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t a_layout, const void* b,
                              cublasLtMatrixLayout_t b_layout, const void* beta, const void* c,
                              cublasLtMatrixLayout_t c_layout, void* d,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

# The README's two commands, and their set-up:
#   make test   install what is missing, configure, build everything, run every test (ctest)
#   make demo   install what is missing, build zero-train alone (no CUDA, no tests) in build-demo,
#               and train the reference GPT on 2 ranks (scripts/demo.sh)
#   make test-asan / make test-tsan   the unit tests under ASan + UBSan; under TSan with the
#               asynchronous CPU device, with the 2-rank equivalence matrix (asan-build and
#               tsan-build: their builds alone)
#   make gpu-bundle / make gpu-check   the GPU verification: build the bundle here, run it there
# Knobs: BUILD (build folder), BUILD_TYPE, CUDA_ARCHS ("80;90"), JOBS, CMAKE_FLAGS, GENERATOR
# (Ninja when installed).
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
CUDA_ARCHS ?= 80;90
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=
GENERATOR ?= $(if $(shell command -v ninja),Ninja,Unix Makefiles)

.PHONY: all deps configure build test asan-build test-asan tsan-build test-tsan demo gpu-bundle \
  gpu-check format clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  "-DZERO_CUDA_ARCHS=$(CUDA_ARCHS)" $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) $(CTEST_FLAGS)

# The unit tests again under AddressSanitizer and UndefinedBehaviorSanitizer, without CUDA:
# only the programs they run are built (the target zero_unit_programs), and not the tests that
# run no program of ours (label `script`: the format, the layering, gpu-check's dry run). A
# Debug build (asserts on) at -O0 with line tables (-g1), in half the time of -O1 -g; the code
# whose tests sweep large arrays (the CPU optimizers' kernels, the emulated CUDA layers, the
# models' CPU layers) at -O1 (ZERO_HOT_OPTIMIZE), without which those tests run several times
# slower. A unity build (16 sources a file): each batch parses the headers and instantiates the
# templates they share once, about half the build's time (16 rather than 8: about 10% less
# again; 32 and 64 took 10% more). The unit tests one process per test source, not per case
# (ZERO_UNIT_TESTS_PER=file): a sanitized process costs about 0.2 s of CPU to start and end.
ASAN_BUILD ?= build-asan
# The sanitizers of that build: CI's run takes address alone (UBSan adds about 40% to each of
# its compiles; .ci/run says why), make test-asan both.
ASAN_SANITIZE ?= address,undefined
UNITY_FLAGS ?= -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16
asan-build: deps
	cmake -S . -B $(ASAN_BUILD) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=Debug \
	  "-DCMAKE_CXX_FLAGS_DEBUG=-O0" "-DCMAKE_C_FLAGS_DEBUG=-O0" -DZERO_DEBUG_INFO=lines \
	  -DZERO_HOT_OPTIMIZE=-O1 -DZERO_UNIT_TESTS_PER=file -DZERO_WITH_CUDA=OFF \
	  -DZERO_SANITIZE=$(ASAN_SANITIZE) \
	  $(UNITY_FLAGS) $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target zero_unit_programs
test-asan: asan-build
	ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -L unit -LE script $(CTEST_FLAGS)

# The unit tests and the 2-rank equivalence matrix under ThreadSanitizer on the asynchronous
# CPU device (ZERO_CPU_DEVICE=async), without CUDA: scripts/test-tsan.sh (a unity build too).
test-tsan: deps
	UNITY_FLAGS="$(UNITY_FLAGS)" bash scripts/test-tsan.sh build-tsan
tsan-build: deps
	UNITY_FLAGS="$(UNITY_FLAGS)" bash scripts/test-tsan.sh --build build-tsan

DEMO_BUILD ?= build-demo
demo: deps
	cmake -S . -B $(DEMO_BUILD) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=Release \
	  -DZERO_WITH_CUDA=OFF -DBUILD_TESTING=OFF $(CMAKE_FLAGS)
	cmake --build $(DEMO_BUILD) -j $(JOBS) --target zero-train zero-run zero-ckpt
	bash scripts/demo.sh $(DEMO_BUILD)

# The GPU verification in two halves: gpu-bundle builds here (where CUDA compiles) the lean
# bundle gpu-bundle/zero-gpu.tar.gz; gpu-check runs it on the GPU machine, with the bundle
# carried, and writes its results under $OUT (or gpu-results/); GPU_CHECK_DRY_RUN=1 rehearses
# it here, without a GPU or a bundle. See scripts/gpu-check.sh --help.
GPU_BUILD ?= build-gpu
gpu-bundle: deps
	bash scripts/gpu-bundle.sh $(GPU_BUILD)

gpu-check:
	bash scripts/gpu-check.sh

format:
	git ls-files '*.h' '*.c' '*.cpp' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf build build-asan build-tsan build-demo build-gpu build-python-env gpu-bundle gpu-results

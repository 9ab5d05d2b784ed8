#!/usr/bin/env bash
# scripts/gpu-bundle.sh: the lean bundle that `make gpu-check` runs on a GPU machine, built here.
#
#   scripts/gpu-bundle.sh [BUILD_DIR]        (default build-gpu; `make gpu-bundle` calls it)
#
# Configures BUILD_DIR as a Release CUDA build for sm_90 (Hopper: H100, H200; CUDA_ARCHS
# overrides), builds only what runs on the GPU machine (the [gpu] test programs, the MPI probe,
# zero-train, zero-run, zero-bench, zero-mem), strips it, and packs it with the shared
# libraries a bare machine with only the CUDA toolkit and PyTorch lacks (spdlog, fmt, OpenBLAS
# and its Fortran runtime, liburing, xxHash, the OpenMP runtime) and DeepSpeed's wheels (below)
# into gpu-bundle/zero-gpu.tar.gz. NCCL (218 MB) does not travel: the check uses the GPU
# machine's own libnccl.so.2 (PyTorch's). The C library, libstdc++ and the CUDA driver are the
# machine's own; libstdc++ travels as a fallback in lib/fallback/ in case the machine's is older
# than the one we built against.
#
# Open MPI's libraries (libmpi, libopen-pal, libopen-rte and theirs: hwloc, libevent, udev) go
# to lib/mpi/, which gpu-check puts on the library path only where the machine has no Open MPI
# of its own. Where it has one, ours must not be loaded: our libmpi.so.40 finds its plugins by
# the path built into it, which holds the machine's plugins, of another version, and MPI_Init
# fails (the GPU machine runs Ubuntu 24.04, whose Open MPI is 4.1.6; Debian 12 builds with
# 4.1.4).
# Without one, lib/mpi lets the programs load and run on one rank; it cannot start ranks
# (no plugins, no mpirun), which gpu-check's MPI probe reports.
#
# Prints the size (what travels is at most 64 MiB with the repository) and the one command to
# run on the GPU machine, with gpu-bundle carried:
#   make gpu-check            (scripts/gpu-check.sh, whose bundle is gpu-bundle/zero-gpu.tar.gz)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${1:-build-gpu}
archs=${CUDA_ARCHS:-90}
jobs=${JOBS:-$(nproc)}
generator=Ninja
command -v ninja >/dev/null || generator="Unix Makefiles"
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || {
  echo "gpu-bundle: no nvcc (looked on PATH and in /usr/local/cuda/bin): the bundle is a CUDA" \
       "build; install the CUDA toolkit" >&2
  exit 1
}
export PATH=$PATH:/usr/local/cuda/bin

targets=(zero_gpu_tests zero_gpu_model_tests zero_c_train_gpu_test zero_engine_equivalence_gpu
         zero_engine_overlap_gpu zero_mpi_probe zero-train zero-run zero-bench zero-mem)
cmake -S . -B "$build" -G "$generator" -DCMAKE_BUILD_TYPE=Release -DZERO_WITH_CUDA=ON \
  -DZERO_WITH_NCCL=ON "-DZERO_CUDA_ARCHS=$archs" >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/zero-gpu/bin" "$stage/zero-gpu/lib/fallback" "$stage/zero-gpu/lib/mpi"
programs=("$build/tests/zero_gpu_tests" "$build/tests/zero_gpu_model_tests"
          "$build/tests/zero_c_train_gpu_test"
          "$build/tests/zero_engine_equivalence_gpu" "$build/tests/zero_engine_overlap_gpu"
          "$build/tests/zero_mpi_probe"
          "$build/tools/zero-train/zero-train"
          "$build/tools/zero-run/zero-run" "$build/tools/zero-bench/zero-bench"
          "$build/tools/zero-mem/zero-mem")
for p in "${programs[@]}"; do
  cp "$p" "$stage/zero-gpu/bin/"
done
# zero-run --as-deepspeed finds its deepspeed package beside itself (tools/zero-run/machine.cpp).
cp -r "$build/tools/zero-run/as-deepspeed" "$stage/zero-gpu/bin/"
cp -L "$build/engine/libzero.so.0" "$stage/zero-gpu/lib/"
# OpenBLAS is loaded at run time by the CPU layers (models/blas), so ldd does not list it: the
# file the build found travels as lib/libopenblas.so.0 (found there by its soname, on
# LD_LIBRARY_PATH), and its own libraries (libgfortran, libquadmath) with the others below.
openblas=$(sed -n 's/^ZERO_OPENBLAS_LIBRARY:[A-Z]*=//p' "$build/CMakeCache.txt")
[[ -z $openblas || $openblas != /* ]] && openblas=$(ldconfig -p | awk '$1 == "libopenblas.so.0" {print $NF; exit}')
cp -L "$openblas" "$stage/zero-gpu/lib/libopenblas.so.0"

# Every library the programs load, but the machine's own: the C library and its parts, the
# CUDA driver, NCCL and cuBLAS/cuBLASLt (the machine's CUDA toolkit's or PyTorch's: 500 MB),
# libstdc++ and libgcc_s (kept as a fallback only), Open MPI's (used only where the machine has
# none).
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread\.|libdl\.|librt\.|libcuda\.|libnccl\.|libcublas|libzero\.)'
fallback='^(libstdc\+\+|libgcc_s)\.'
mpi='^(libmpi|libopen-pal|libopen-rte|libpmix|libhwloc|libevent|libudev)'
ldd "${programs[@]}" "$build/engine/libzero.so.0" "$openblas" 2>/dev/null |
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    if [[ $name =~ $skip ]]; then continue; fi
    if [[ $name =~ $fallback ]]; then
      cp -L "$path" "$stage/zero-gpu/lib/fallback/$name"
    elif [[ $name =~ $mpi ]]; then
      cp -L "$path" "$stage/zero-gpu/lib/mpi/$name"
    else
      cp -L "$path" "$stage/zero-gpu/lib/$name"
    fi
  done
strip --strip-unneeded "$stage"/zero-gpu/bin/* "$stage"/zero-gpu/lib/*.so* \
  "$stage"/zero-gpu/lib/mpi/*.so* 2>/dev/null || true
# DeepSpeed and its dependencies but torch (and numpy, which the machine's transformers brings),
# as wheels for the GPU machine's Python (DEVICE_PYTHON, default 3.12, the version of its last
# runs), about 6 MB: the machine has PyTorch but no package index, and gpu-check installs them
# into a venv over the system's site packages there. DeepSpeed itself is a source distribution
# on PyPI; its wheel is built here without its ops (DS_BUILD_OPS=0: DeepSpeedCPUAdam is built by
# its JIT there, with ninja, where the machine has a compiler). Needs the package index here and
# a Python with torch (PYTHON, default the tests' venv); without them the bundle carries none and
# gpu-check says so.
device_python=${DEVICE_PYTHON:-3.12}
python=${PYTHON:-$root/build-python-env/bin/python}
mkdir -p "$stage/zero-gpu/wheels"
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "gpu-bundle: $python has no torch: the bundle carries no DeepSpeed wheels" >&2
elif ! (
  set -e
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$python" -m pip download --quiet deepspeed==0.19.8 --no-deps --no-binary :all: -d "$tmp"
  tar -xzf "$tmp"/deepspeed-0.19.8.tar.gz -C "$tmp"
  DS_BUILD_OPS=0 "$python" -m pip wheel --quiet "$tmp/deepspeed-0.19.8" --no-deps \
    --no-build-isolation -w "$stage/zero-gpu/wheels"
  "$python" -m pip download --quiet --only-binary=:all: --python-version "$device_python" \
    --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 -d "$stage/zero-gpu/wheels" \
    einops hjson msgpack ninja "packaging>=20.0" psutil py-cpuinfo "pydantic>=2.0.0" tqdm
) >"$stage/wheels.log" 2>&1; then
  echo "gpu-bundle: the DeepSpeed wheels could not be made (the bundle carries none):" >&2
  tail -5 "$stage/wheels.log" >&2
  rm -rf "$stage/zero-gpu/wheels"
fi
rm -f "$stage/wheels.log"

git rev-parse HEAD >"$stage/zero-gpu/COMMIT" 2>/dev/null || echo unknown >"$stage/zero-gpu/COMMIT"
git status --porcelain --untracked-files=no | grep -q . && echo "+ uncommitted changes" \
  >>"$stage/zero-gpu/COMMIT" || true
echo "$archs" >"$stage/zero-gpu/CUDA_ARCHS"

mkdir -p gpu-bundle
tar -C "$stage" -czf gpu-bundle/zero-gpu.tar.gz zero-gpu
bundle=$(stat -c %s gpu-bundle/zero-gpu.tar.gz)
tree=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
total=$((bundle + tree))
limit=$((64 * 1024 * 1024))
awk -v b="$bundle" -v t="$total" 'BEGIN {printf "gpu-bundle: gpu-bundle/zero-gpu.tar.gz %.1f MiB, " \
  "with the tracked tree %.1f MiB of the 64 MiB that travel\n", b / 1048576, t / 1048576}'
if ((total > limit)); then
  echo "gpu-bundle: over the 64 MiB limit" >&2
  exit 1
fi
echo "gpu-bundle: on the GPU machine, with gpu-bundle carried, run:  make gpu-check"

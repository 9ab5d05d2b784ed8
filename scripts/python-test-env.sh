#!/usr/bin/env bash
# scripts/python-test-env.sh ENV_DIR: creates (once) the Python environment the tests use to
# check our files against real readers and to run the Python front end: a venv at ENV_DIR
# (CMake's ZERO_PYTHON_ENV, by default build-python-env/ beside the build folders, so that
# every build shares one) with the pinned
# packages of scripts/python-test-requirements.txt. Running it again when they are installed at
# those versions does nothing; builds that run it at once take turns (a lock in the venv).
# Installs with uv, or with pip where uv cannot be had or fails (below). Exits non-zero, saying
# what is missing, when python3, venv or pip is absent or both fail (they need the package
# index, or a mirror: PIP_INDEX_URL for both, pip's config files for pip alone).
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 ENV_DIR" >&2
  exit 2
fi
env_dir=$1
scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
requirements=$scripts/python-test-requirements.txt
deepspeed=$scripts/python-test-deepspeed.txt

if ! command -v python3 >/dev/null; then
  echo "python-test-env: python3 not found; install it (scripts/install-deps.sh does)" >&2
  exit 1
fi
mkdir -p "$env_dir"
# Not the venv's .lock: uv takes that one while it installs, and would wait out its 300 s
# timeout for this script's hold.
exec 9>"$env_dir/.zero-setup.lock"
flock 9

python="$env_dir/bin/python"
# What is installed matches the pins exactly: nothing to do.
installed() {
  "$python" -m pip freeze --all --disable-pip-version-check 2>/dev/null >"$env_dir/.freeze" ||
    return 1
  local line
  while read -r line; do
    [[ $line =~ ^[A-Za-z] ]] || continue
    grep -qixF -- "$line" "$env_dir/.freeze" || return 1
  done < <(cat "$requirements" "$deepspeed")
}

if [ ! -x "$python" ]; then
  echo "python-test-env: creating $env_dir"
  if ! python3 -m venv "$env_dir"; then
    rm -rf "$env_dir"
    echo "python-test-env: 'python3 -m venv' failed; install python3-venv (scripts/install-deps.sh)" >&2
    exit 1
  fi
fi
if installed; then
  exit 0
fi
if ! "$python" -m pip --version >/dev/null 2>&1; then
  echo "python-test-env: the venv at $env_dir has no pip; install python3-pip and python3-venv," \
       "remove $env_dir and run again" >&2
  exit 1
fi
echo "python-test-env: installing $(cat "$requirements" "$deepspeed" | grep -v '^#' | tr '\n' ' ')into $env_dir"
# With uv (pinned below, installed by pip into the venv): it unpacks the wheels (about 5 GB,
# most of it torch's CUDA libraries) in parallel into its cache in the venv and hard-links them
# into place, in about 30 s of CPU where pip took 83; pip is the fallback when uv cannot be had
# or fails (uv reads pip's index, extra-index and find-links settings from PIP_INDEX_URL,
# PIP_EXTRA_INDEX_URL and PIP_FIND_LINKS, not from pip's config files). Neither compiles the
# packages' modules to bytecode (pip: --no-compile; it would compile all of some 10,000 files,
# about 45 s of CPU): the tests import under a third of them and write the bytecode of what they
# import to the venv's own cache, the PYTHONPYCACHEPREFIX below, which tests/CMakeLists.txt
# gives every test, and this script's own import fills it with what every test imports (7 s).
uv_pin="uv==0.13.9"
uv="$env_dir/bin/uv"
with_uv() {
  if [ ! -x "$uv" ]; then
    "$python" -m pip install --quiet --disable-pip-version-check "$uv_pin" >/dev/null 2>&1 ||
      return 1
  fi
  local settings=(UV_CACHE_DIR="$env_dir/.uv-cache" UV_NO_PROGRESS=1)
  [ -n "${PIP_INDEX_URL:-}" ] && settings+=(UV_DEFAULT_INDEX="${UV_DEFAULT_INDEX:-$PIP_INDEX_URL}")
  [ -n "${PIP_EXTRA_INDEX_URL:-}" ] && settings+=(UV_INDEX="${UV_INDEX:-$PIP_EXTRA_INDEX_URL}")
  [ -n "${PIP_FIND_LINKS:-}" ] && settings+=(UV_FIND_LINKS="${UV_FIND_LINKS:-$PIP_FIND_LINKS}")
  env "${settings[@]}" "$uv" pip install --quiet --python "$python" -r "$requirements" &&
    env "${settings[@]}" DS_BUILD_OPS=0 "$uv" pip install --quiet --python "$python" \
      --no-build-isolation --no-deps -r "$deepspeed"
}
with_pip() {
  "$python" -m pip install --quiet --disable-pip-version-check --no-compile -r "$requirements" &&
    DS_BUILD_OPS=0 "$python" -m pip install --quiet --disable-pip-version-check --no-compile \
      --no-build-isolation --no-deps -r "$deepspeed"
}
if ! with_uv; then
  echo "python-test-env: uv ($uv_pin) could not install; pip installs instead" >&2
  if ! with_pip; then
    echo "python-test-env: pip install -r $requirements (then $deepspeed) failed (is the" \
      "package index reachable?)" >&2
    exit 1
  fi
fi
PYTHONPYCACHEPREFIX="$env_dir/pycache" PYTHONDONTWRITEBYTECODE= "$python" -c "import safetensors, numpy, tokenizers, torch, transformers; print('python-test-env: safetensors', safetensors.__version__, 'numpy', numpy.__version__, 'tokenizers', tokenizers.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"

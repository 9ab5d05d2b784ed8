#!/usr/bin/env bash
# Creates (once) the Python environment the tests use to check our files against real readers:
# a venv at BUILD_DIR/python-env with safetensors, numpy and tokenizers. Running it again when
# they all import does nothing. Exits non-zero, saying what is missing, when python3, venv or pip
# is absent or pip fails (it needs the package index, or a mirror set in pip's config).
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
env_dir="$1/python-env"
packages=(safetensors numpy tokenizers)

if ! command -v python3 >/dev/null; then
  echo "python-test-env: python3 not found; install it (scripts/install-deps.sh does)" >&2
  exit 1
fi

python="$env_dir/bin/python"
if [ ! -x "$python" ]; then
  echo "python-test-env: creating $env_dir"
  if ! python3 -m venv "$env_dir"; then
    rm -rf "$env_dir"
    echo "python-test-env: 'python3 -m venv' failed; install python3-venv (scripts/install-deps.sh)" >&2
    exit 1
  fi
fi

if "$python" -c "import safetensors, numpy, tokenizers" 2>/dev/null; then
  exit 0
fi

if ! "$python" -m pip --version >/dev/null 2>&1; then
  echo "python-test-env: the venv at $env_dir has no pip; install python3-pip and python3-venv," \
       "remove $env_dir and run again" >&2
  exit 1
fi
echo "python-test-env: installing ${packages[*]} into $env_dir"
if ! "$python" -m pip install --quiet --disable-pip-version-check "${packages[@]}"; then
  echo "python-test-env: pip install ${packages[*]} failed (is the package index reachable?)" >&2
  exit 1
fi
"$python" -c "import safetensors, numpy, tokenizers; print('python-test-env: safetensors', safetensors.__version__, 'numpy', numpy.__version__, 'tokenizers', tokenizers.__version__)"

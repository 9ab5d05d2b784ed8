#!/usr/bin/env bash
# Installs the Debian packages zero needs to build and test, and only those that are missing,
# so running it again is quick and changes nothing. Needs root (or sudo) when something is
# missing. CUDA is optional and never installed here: it is used when nvcc is present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev catch2
  liburing-dev libxxhash-dev libopenblas-dev libopenblas-openmp-dev
  libopenmpi-dev openmpi-bin
  fio clang-format
  iproute2
  python3 python3-venv python3-pip
  gnuplot-nox
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then
    sudo="sudo"
  else
    echo "install-deps: not root and no sudo; install these packages: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"

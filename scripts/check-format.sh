#!/usr/bin/env bash
# scripts/check-format.sh [CLANG_FORMAT]: every C, C++ and CUDA file of the checkout is as
# clang-format writes it (.clang-format; `make format` rewrites them). The layout is clang-format
# 14's, Debian 12's: another version formats some constructs differently, so it is skipped
# (exit 77, ctest: skipped) rather than failed, saying why. Exits 1 naming every file and line
# that differs.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
clang_format=${1:-clang-format}
if ! command -v "$clang_format" >/dev/null; then
  echo "SKIP: $clang_format not found (scripts/install-deps.sh installs clang-format)"
  exit 77
fi
version=$("$clang_format" --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
if [ "$version" != 14 ]; then
  echo "SKIP: $clang_format is version $version; the tree is formatted by clang-format 14"
  exit 77
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=$(git ls-files '*.h' '*.c' '*.cpp' '*.cu' '*.cuh')
else
  files=$(find . -path ./build\* -prune -o \( -name '*.h' -o -name '*.c' -o -name '*.cpp' \
            -o -name '*.cu' -o -name '*.cuh' \) -print)
fi
# shellcheck disable=SC2086
if ! "$clang_format" --dry-run -Werror $files; then
  echo "FAIL: the files above are not as clang-format writes them; run make format" >&2
  exit 1
fi
echo "format: $(echo "$files" | wc -l) files as clang-format $version writes them"

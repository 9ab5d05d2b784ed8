#!/usr/bin/env bash
# The layering rule, checked on every quoted #include of the sources (docs/design.md, "Layout"):
#   tools/zero-train, models  -> include/zero (zero/zero.h) and models, nothing internal
#   other tools                -> anything (they are zero's own utilities), not tools/zero-train
#   engine                     -> engine, config, checkpoint, comm, offload, optim, device, base,
#                                 zero/zero.h
#   config                     -> config, optim, base (the optimizer and schedule types)
#   checkpoint                 -> checkpoint, base
#   emulator                   -> emulator, base, models/blas (the fake cuBLASLt's sums)
#   comm, offload, optim       -> themselves, device, base; never each other
#   device                     -> device, base
#   base                       -> base
#   include/zero/zero.h        -> nothing of ours
# check_layering.sh SOURCE_DIR: prints every edge that breaks it (file:line: include) and exits 1,
# else prints how many edges it checked.
set -euo pipefail
cd "$1"

allowed() {  # layer of the including file -> the first path components it may include
  case $1 in
    base) echo "base" ;;
    device) echo "device base" ;;
    comm) echo "comm device base" ;;
    offload) echo "offload device base" ;;
    optim) echo "optim device base" ;;
    config) echo "config optim base" ;;
    checkpoint) echo "checkpoint base" ;;
    emulator) echo "emulator base models/blas" ;;
    engine) echo "engine config checkpoint comm offload optim device base zero" ;;
    models) echo "models zero" ;;
    zero-train) echo "zero tools/zero-train tools/cli_checks.h models" ;;
    tools) echo "tools base device comm offload optim config checkpoint engine models zero" ;;
    include) echo "" ;;
  esac
}

bad=0
edges=0
while IFS= read -r file; do
  case $file in
    tools/zero-train/*) layer=zero-train ;;
    *) layer=${file%%/*} ;;
  esac
  case $layer in
    base | device | comm | offload | optim | config | checkpoint | emulator | engine | models | zero-train | tools | include) ;;
    *) continue ;;
  esac
  read -r -a ok <<<"$(allowed "$layer")"
  while IFS=: read -r line text; do
    target=$(sed -E 's/^#include "([^"]+)".*/\1/' <<<"$text")
    edges=$((edges + 1))
    first=${target%%/*}
    fine=0
    for a in "${ok[@]}"; do
      if [ "$first" = "$a" ] || [[ $target == "$a"* && $a == */* ]]; then fine=1; fi
    done
    # Within tools, only zero-train is off limits to the others.
    if [ "$layer" = tools ] && [[ $target == tools/zero-train/* ]]; then fine=0; fi
    if [ "$fine" -eq 0 ]; then
      echo "$file:$line: $text  (the $layer layer may include: ${ok[*]:-nothing of ours})"
      bad=1
    fi
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" || true)
done < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' '*.c' 2>/dev/null || find . -name '*.[ch]*' -printf '%P\n')
if [ "$bad" -ne 0 ]; then
  echo "layering: the includes above break docs/design.md's arrows" >&2
  exit 1
fi
echo "layering: $edges include edges follow the arrows"

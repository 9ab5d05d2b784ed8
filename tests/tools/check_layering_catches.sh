#!/usr/bin/env bash
# check_layering.sh must refuse what breaks the arrows: a fixture tree (outside any git
# checkout) with one allowed and one forbidden include in each of a few layers.
set -euo pipefail
checker=$1
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree"/{comm,models/gpt,engine,tools/zero-train,config,checkpoint}
printf '#include "device/device.h"\n#include "optim/spec.h"\n' >"$tree/comm/a.cpp"
printf '#include "zero/zero.h"\n#include "engine/engine.h"\n' >"$tree/models/gpt/b.cpp"
printf '#include "comm/work.h"\n#include "tools/zero-train/options.h"\n' >"$tree/engine/c.cpp"
printf '#include "models/gpt/model.h"\n#include "base/log.h"\n' >"$tree/tools/zero-train/d.cpp"
printf '#include "optim/spec.h"\n#include "engine/engine.h"\n' >"$tree/config/e.cpp"
printf '#include "base/error.h"\n#include "config/config.h"\n' >"$tree/checkpoint/f.cpp"
rc=0
out=$(bash "$checker" "$tree") || rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: exit $rc for a tree with forbidden includes: $out"; exit 1; }
for edge in "comm/a.cpp:2" "models/gpt/b.cpp:2" "engine/c.cpp:2" "tools/zero-train/d.cpp:2" \
  "config/e.cpp:2" "checkpoint/f.cpp:2"; do
  [[ $out == *"$edge:"* ]] || { echo "FAIL: $edge not reported: $out"; exit 1; }
done
for edge in "comm/a.cpp:1" "models/gpt/b.cpp:1" "engine/c.cpp:1" "tools/zero-train/d.cpp:1" \
  "config/e.cpp:1" "checkpoint/f.cpp:1"; do
  [[ $out != *"$edge:"* ]] || { echo "FAIL: the allowed $edge was reported: $out"; exit 1; }
done
echo "ok: the six forbidden edges were reported, the six allowed ones not"

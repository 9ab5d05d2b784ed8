#!/usr/bin/env bash
# tests/python/check_install.sh PYTHON LIBZERO SOURCE_DIR WORK: `pip install ./python` packs the
# library it is given into the package, and the installed package (torch its only dependency;
# transformers and accelerate those of its `hf` extra, zero.hf) loads that copy with no ZERO_LIBRARY and no checkout beside it.
set -euo pipefail
python=$1 library=$2 source=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
ZERO_LIBRARY=$library "$python" -m pip install --quiet --disable-pip-version-check --no-deps \
  --no-build-isolation --target "$work/site" "$source/python"
cmp "$work/site/zero/lib/libzero.so" "$library"
cd "$work"
env -u ZERO_LIBRARY PYTHONPATH="$work/site" "$python" - <<'PY'
import importlib.metadata as metadata
import zero
from zero import _library
_library.lib()
assert str(_library.library_path).endswith("site/zero/lib/libzero.so"), _library.library_path
requires = metadata.distribution("zero").requires or []
plain = [r for r in requires if "extra ==" not in r]
extra = sorted(r.split(";")[0].strip() for r in requires if 'extra == "hf"' in r)
assert plain == ["torch"], requires
assert extra == ["accelerate>=1.1", "transformers>=5.24"], requires
print("installed zero", zero.version(), "loads", _library.library_path)
PY

"""zero.initialize(pretrained=DIR): a Hugging Face directory's safetensors shards read into
zero's partitions by the engine (zero_load_pretrained: each rank reads only the bytes of what it
keeps), with the module's names mapped onto the files', and the persistent buffers the files
hold read into the module.

The names: a parameter takes the file's tensor of its own name, else of another name it has in
the module (a tied weight: lm_head.weight for transformer.wte.weight), else of its name with the
model's base_model_prefix taken off or put on (a base model's files into a model with a head,
and back). A file tensor that is a buffer of the module, another name of a parameter taken
already, or one the model's _keys_to_ignore_on_load_unexpected matches is not a parameter's; any
other is refused by the engine, named, before anything changes. A parameter the files lack is
returned to the caller to initialise (as from_pretrained initialises a new head), and named in
a warning.

Owns nothing past the call.
"""

from __future__ import annotations

import ctypes
import json
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ._library import PretrainedOptions, ZeroError, call
from ._safetensors import DTYPES, FileTensor, read_header

if TYPE_CHECKING:
    from ._hooks import Param

_INDEX = "model.safetensors.index.json"
_SINGLE = "model.safetensors"
def directory_tensors(path: str | Path) -> dict[str, FileTensor]:
    """Every tensor of a pretrained `path`: a directory holding model.safetensors.index.json or
    model.safetensors, an index file, or one .safetensors file."""
    path = Path(path)
    if path.is_dir():
        if (path / _INDEX).is_file():
            path = path / _INDEX
        elif (path / _SINGLE).is_file():
            path = path / _SINGLE
        else:
            raise ZeroError(f"zero.initialize(pretrained={str(path)!r}): the directory holds "
                            f"neither {_INDEX} nor {_SINGLE}; zero reads Hugging Face "
                            "safetensors directories (save_pretrained writes them; convert a "
                            "pytorch_model.bin with transformers first)")
    if not path.exists():
        raise ZeroError(f"zero.initialize(pretrained={str(path)!r}): no such file or directory")
    if path.suffix == ".json":
        try:
            weight_map = json.loads(path.read_text())["weight_map"]
        except (OSError, ValueError, KeyError) as error:
            raise ZeroError(f"zero.initialize(pretrained=...): {path} is not a safetensors "
                            f"index (no readable \"weight_map\": {error})") from None
        tensors: dict[str, FileTensor] = {}
        for file in sorted(set(weight_map.values())):
            tensors.update(read_header(path.parent / file))
        return tensors
    return read_header(path)


def dtype_of_files(tensors: dict[str, FileTensor]) -> torch.dtype:
    """The floating-point dtype the files hold most of (from_pretrained's dtype="auto"), fp32
    where they hold none."""
    counts: dict[str, int] = {}
    for tensor in tensors.values():
        if tensor.dtype in ("F64", "F32", "F16", "BF16"):
            counts[tensor.dtype] = counts.get(tensor.dtype, 0) + 1
    return DTYPES[max(counts, key=counts.__getitem__)] if counts else torch.float32


def _aliases(model: torch.nn.Module) -> dict[int, list[str]]:
    """Every name each parameter has in the module, by id, its registered name first."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    return names


def _prefixed(name: str, prefix: str) -> list[str]:
    """`name` with the base model's prefix taken off or put on."""
    if not prefix:
        return []
    if name.startswith(prefix + "."):
        return [name[len(prefix) + 1:]]
    return [f"{prefix}.{name}"]


def _ignored_pattern(model: torch.nn.Module) -> re.Pattern[str] | None:
    patterns = list(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or [])
    return re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None


def load(handle: ctypes.c_void_p, model: torch.nn.Module, params: list[Param],
         path: str | Path) -> tuple[list[Param], set[str]]:
    """Collective, after zero_init: the parameters' values from `path` through the engine and
    the module's persistent buffers from it. Returns the parameters the files lack and the
    names of the buffers they set."""
    tensors = directory_tensors(path)
    prefix = str(getattr(model, "base_model_prefix", "") or "")
    aliases = _aliases(model)
    pairs: list[tuple[str, str]] = []
    used: set[str] = set()
    missing: list[Param] = []
    for p in params:
        names = aliases.get(id(p.param), [p.name])
        candidates = names + [n for name in names for n in _prefixed(name, prefix)]
        found = next((n for n in candidates if n in tensors), None)
        if found is None:
            missing.append(p)
            continue
        used.add(found)
        if found != p.name:
            pairs.append((p.name, found))
    buffers = dict(model.named_buffers())
    persistent = set(model.state_dict(keep_vars=True).keys()) & set(buffers)
    other_names = {n for names in aliases.values() for n in names}
    unexpected = _ignored_pattern(model)
    ignore = []
    for name in tensors:
        if name in used:
            continue
        variants = [name] + _prefixed(name, prefix)
        if any(v in buffers or v in other_names for v in variants) or (
                unexpected is not None and unexpected.search(name)):
            ignore.append(name)

    options = PretrainedOptions()
    keep = []  # the C strings, alive for the call

    def strings(items: list[str]) -> ctypes.Array[ctypes.c_char_p]:
        array = (ctypes.c_char_p * max(len(items), 1))(*[s.encode() for s in items])
        keep.append(array)
        return array

    flat = [n for pair in pairs for n in pair]
    options.names, options.name_pairs = strings(flat), len(pairs)
    options.ignore, options.ignore_count = strings(ignore), len(ignore)
    skipped = [p.name for p in missing]
    options.skip, options.skip_count = strings(skipped), len(skipped)
    try:
        call("zero_load_pretrained", handle, str(path).encode(), ctypes.byref(options))
    except ZeroError as error:
        hint = ""
        if "not taken by any parameter" in str(error):
            hint = (f" (the {type(model).__name__} given has no parameter of that name: build "
                    "it from the directory's config, as from_pretrained does)")
        raise ZeroError(f"zero.initialize(pretrained={str(path)!r}): {error}{hint}",
                        error.status) from None

    loaded = set()
    with torch.no_grad():
        for name in sorted(persistent):
            stored = next((tensors[v] for v in [name] + _prefixed(name, prefix)
                           if v in tensors), None)
            if stored is None:
                continue
            buffer = buffers[name]
            value = stored.read()
            if tuple(value.shape) != tuple(buffer.shape):
                raise ZeroError(f"zero.initialize(pretrained={str(path)!r}): buffer {name} is "
                                f"{list(buffer.shape)} in the model and "
                                f"{list(value.shape)} in {stored.file.name}")
            buffer.copy_(value.to(buffer.dtype))
            loaded.add(name)
    if missing:
        warnings.warn(f"zero: {len(missing)} parameters are not in {path} and are initialised "
                      f"as the model initialises them: {', '.join(skipped[:8])}"
                      f"{', ...' if len(skipped) > 8 else ''}", stacklevel=4)
    return missing, loaded

"""libzero through ctypes: finding the library, the C API's signatures, and its errors.

The front end knows zero only through include/zero/zero.h. Every call goes through `call`,
which turns a failing zero_status into a ZeroError carrying zero_last_error()'s message.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

STATUS_NAMES = {
    0: "ok",
    1: "config error",
    2: "usage error",
    3: "communication error",
    4: "timeout",
    5: "I/O error",
    6: "device error",
    7: "out of memory",
    8: "internal error",
}

FP32, FP16, BF16 = 0, 1, 2
MEMORY_HOST, MEMORY_CUDA = 0, 1


class ZeroError(RuntimeError):
    """A zero_ call failed, or the front end refused a use it cannot run correctly."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status: int = status


# zero.h's zero_device_kind and zero_cpu_device_mode.
DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA = 0, 1, 2
CPU_DEVICE_FROM_ENV, CPU_DEVICE_SYNC, CPU_DEVICE_ASYNC, CPU_DEVICE_GUARDED, CPU_DEVICE_TIMED = (
    0, 1, 2, 3, 4)


class CreateOptions(ctypes.Structure):
    """zero_create_options; made with its size set, as ZERO_CREATE_OPTIONS_INIT does."""

    _fields_ = [
        ("size", ctypes.c_ulonglong),
        ("overrides", ctypes.POINTER(ctypes.c_char_p)),
        ("override_count", ctypes.c_int),
        ("mpi_comm", ctypes.c_void_p),
        ("device", ctypes.c_int),
        ("optimizer_threads", ctypes.c_int),
        ("seed", ctypes.c_ulonglong),
        ("nccl_comm", ctypes.c_void_p),
        ("cpu_device", ctypes.c_int),
    ]

    def __init__(self, **fields: Any) -> None:
        super().__init__(size=ctypes.sizeof(CreateOptions), **fields)


Initializer = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_ulonglong,
    ctypes.POINTER(ctypes.c_float))


class ParamDesc(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("shape", ctypes.POINTER(ctypes.c_longlong)),
        ("ndim", ctypes.c_int),
        ("trainable", ctypes.c_int),
        ("group", ctypes.c_int),
        ("modules", ctypes.POINTER(ctypes.c_int)),
        ("module_count", ctypes.c_int),
        ("initial", ctypes.POINTER(ctypes.c_float)),
        ("initializer", Initializer),
        ("initializer_user", ctypes.c_void_p),
    ]


class PretrainedOptions(ctypes.Structure):
    """zero_pretrained_options: every list an array of C strings with its count."""

    _fields_ = [
        ("names", ctypes.POINTER(ctypes.c_char_p)),
        ("name_pairs", ctypes.c_int),
        ("transposed", ctypes.POINTER(ctypes.c_char_p)),
        ("transposed_count", ctypes.c_int),
        ("ignore", ctypes.POINTER(ctypes.c_char_p)),
        ("ignore_count", ctypes.c_int),
        ("skip", ctypes.POINTER(ctypes.c_char_p)),
        ("skip_count", ctypes.c_int),
    ]


class StepStats(ctypes.Structure):
    _fields_ = [
        ("stepped", ctypes.c_int),
        ("skipped", ctypes.c_int),
        ("loss_scale", ctypes.c_double),
        ("grad_norm", ctypes.c_double),
        ("lr", ctypes.c_double),
        ("global_steps", ctypes.c_longlong),
        ("micro_steps", ctypes.c_longlong),
    ]


_P = ctypes.c_void_p
_I = ctypes.c_int
_PI = ctypes.POINTER(ctypes.c_int)
_S = ctypes.c_char_p
_U64 = ctypes.c_ulonglong
_PU64 = ctypes.POINTER(ctypes.c_ulonglong)

# name: argument types (every function returns a zero_status unless listed in _RESTYPES)
_SIGNATURES = {
    "zero_status_string": [_I],
    "zero_last_error": [],
    "zero_version": [],
    "zero_create": [_S, ctypes.POINTER(CreateOptions), ctypes.POINTER(_P)],
    "zero_destroy": [_P],
    "zero_data_location": [_P, _PI, _PI],
    "zero_rank": [_P, _PI],
    "zero_world_size": [_P, _PI],
    "zero_compute_dtype": [_P, _PI],
    "zero_config_value": [_P, _S, ctypes.c_char_p, _U64, _PU64],
    "zero_add_group": [_P, _S, ctypes.c_double, ctypes.c_double, _PI],
    "zero_add_module": [_P, _S, _PI],
    "zero_add_param": [_P, ctypes.POINTER(ParamDesc), _PI],
    "zero_init": [_P],
    "zero_pre_forward": [_P, _I, _P],
    "zero_post_forward": [_P, _I, _P],
    "zero_pre_backward": [_P, _I, _P],
    "zero_post_backward": [_P, _I, _P],
    "zero_param_data": [_P, _I, ctypes.POINTER(_P)],
    "zero_grad_buffer": [_P, _I, ctypes.POINTER(_P)],
    "zero_grad_is_zero": [_P, _I, ctypes.POINTER(_I)],
    "zero_loss_factor": [_P, ctypes.POINTER(ctypes.c_double)],
    "zero_loss_scale": [_P, ctypes.POINTER(ctypes.c_double)],
    "zero_set_train": [_P, _I],
    "zero_is_accumulation_boundary": [_P, _PI],
    "zero_step": [_P, ctypes.POINTER(StepStats)],
    "zero_read_param": [_P, _I, ctypes.POINTER(ctypes.c_float), _U64],
    "zero_write_param": [_P, _I, ctypes.POINTER(ctypes.c_float), _U64],
    "zero_mean_across_ranks": [_P, ctypes.POINTER(ctypes.c_double), _I],
    "zero_broadcast": [_P, _P, _U64, _I],
    "zero_abort": [_P, _I, _S],
    "zero_read_config_text": [_S, _S, ctypes.c_char_p, _U64, _PU64],
    "zero_save_checkpoint": [_P, _S, _S, _P, _U64],
    "zero_load_checkpoint": [_P, _S, _S, ctypes.c_uint],
    "zero_checkpoint_user_data": [_P, _P, _U64, _PU64],
    "zero_global_steps": [_P, ctypes.POINTER(ctypes.c_longlong)],
    "zero_learning_rate": [_P, ctypes.POINTER(ctypes.c_double)],
    "zero_set_learning_rate": [_P, ctypes.c_double],
    "zero_quantization_error": [_P, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)],
    "zero_load_pretrained": [_P, _S, ctypes.POINTER(PretrainedOptions)],
    "zero_memory_report": [_P, ctypes.c_char_p, _U64, _PU64],
    "zero_declare_memory": [_P, _I, _U64, _S],
}
_RESTYPES = {"zero_status_string": _S, "zero_last_error": _S, "zero_version": _S}


def checkout_libraries(root: str | os.PathLike[str]) -> list[Path]:
    """The libzero.so builds of a zero checkout at `root` a stock Python can load: build/
    first (the README's), then the other build folders, newest first; not the sanitizer builds
    (their runtime must come first in the process)."""
    found = []
    for library in Path(root).glob("build*/engine/libzero.so"):
        cache = library.parent.parent / "CMakeCache.txt"
        try:
            sanitized = any(line.startswith("ZERO_SANITIZE:") and line.split("=", 1)[1].strip()
                            for line in cache.read_text().splitlines())
        except OSError:
            sanitized = False
        if library.is_file() and not sanitized:
            found.append(library)
    found.sort(key=lambda p: (p.parent.parent.name != "build", -p.stat().st_mtime))
    return found


def _candidates() -> list[Path]:
    """Where the library may be, in the order searched."""
    named = os.environ.get("ZERO_LIBRARY")
    if named:
        return [Path(named)]
    here = Path(__file__).resolve().parent
    # The installed package's own copy, then a source checkout's builds (python/zero/ beside
    # the build folders).
    return [here / "lib" / "libzero.so"] + checkout_libraries(here.parent.parent)


def _load() -> tuple[ctypes.CDLL, Path]:
    candidates = _candidates()
    for path in candidates:
        if path.exists():
            try:
                # RTLD_GLOBAL: MPI's plugins resolve their symbols against libmpi, loaded with it.
                lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            except OSError as error:
                raise ZeroError(f"zero: cannot load {path}: {error}. Build it with `make`, or "
                                "name a working libzero.so in ZERO_LIBRARY.", 6) from None
            for name, argtypes in _SIGNATURES.items():
                function = getattr(lib, name)
                function.argtypes = argtypes
                function.restype = _RESTYPES.get(name, ctypes.c_int)
            return lib, path
    where = ", ".join(str(p) for p in candidates)
    raise ZeroError(f"zero: libzero.so not found (looked at {where}). Build it with `make` in the "
                    "zero checkout, reinstall the package (`pip install ./python`), or set "
                    "ZERO_LIBRARY to the library's path.", 6)


_lib: ctypes.CDLL | None = None
library_path: Path | None = None


def lib() -> ctypes.CDLL:
    """The loaded library (loaded on first use)."""
    global _lib, library_path
    if _lib is None:
        _lib, library_path = _load()
    return _lib


def call(name: str, *args: Any) -> None:
    """Calls zero_<name>; a failing status raises ZeroError with zero's message."""
    status = getattr(lib(), name)(*args)
    if status != 0:
        message = lib().zero_last_error().decode("utf-8", "replace")
        raise ZeroError(f"{name}: {STATUS_NAMES.get(status, status)}: {message}", status)


def version() -> str:
    return lib().zero_version().decode()


def json_out(function: str, engine: ctypes.c_void_p | None, key: str | None) -> str:
    """A zero_config_value-style call's text (JSON), sized by a first call."""
    return text_out(function, *((engine, key.encode()) if key is not None else (engine,)))


def text_out(function: str, *args: Any) -> str:
    """The text a call writes into (buffer, size, needed) after `args`, sized by a first call."""
    needed = ctypes.c_ulonglong(0)
    call(function, *args, None, 0, ctypes.byref(needed))
    buffer = ctypes.create_string_buffer(needed.value)
    call(function, *args, buffer, needed.value, None)
    return buffer.value.decode()

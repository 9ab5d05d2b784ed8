"""What a checkpoint keeps beside zero's own state: the caller's client_state and the module's
persistent buffers (BatchNorm's running statistics, num_batches_tracked, ...), packed into the
user data zero_save_checkpoint stores with rank 0's copy.

The format is torch.save's, holding only plain data: dicts, lists and tuples of str, int,
float, bool, None and tensors. It is loaded with torch.load(weights_only=True), which builds
nothing else, so a checkpoint cannot run code when it loads. A client_state holding anything
else is refused at save time, naming where; a checkpoint whose user data asks for more (an
object's class, a function: what a malicious pickle does) is refused at load time, and nothing
of it runs. Checkpoints saved by zero before this format (a plain pickle of client_state) load
through the same allowlist: plain data only.

Owns nothing: pure functions over bytes, tensors and modules.
"""

from __future__ import annotations

import io
import pickle
from typing import Any, NoReturn, TYPE_CHECKING

import torch

from ._library import ZeroError

if TYPE_CHECKING:
    import os

_FORMAT = "zero-client-state-1"
_ZIP_MAGIC = b"PK\x03\x04"
_PLAIN = (str, int, float, bool, type(None), bytes)


def _check_plain(value: Any, where: str) -> None:
    """Refuses anything but plain data and tensors, naming where it is."""
    if isinstance(value, torch.Tensor):
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            raise ZeroError(f"save_checkpoint: client_state{where} is a "
                            f"{type(value).__name__}, a tensor subclass; store a plain tensor")
        return
    if isinstance(value, _PLAIN):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, (str, int)):
                raise ZeroError(f"save_checkpoint: client_state{where} has a key of type "
                                f"{type(key).__name__}; use str or int keys")
            _check_plain(item, f"{where}[{key!r}]")
        return
    if isinstance(value, (list, tuple)):
        for number, item in enumerate(value):
            _check_plain(item, f"{where}[{number}]")
        return
    raise ZeroError(f"save_checkpoint: client_state{where} is a {type(value).__module__}."
                    f"{type(value).__qualname__}; a checkpoint keeps only plain data (dicts, "
                    "lists and tuples of str, int, float, bool, None and tensors), which loads "
                    "without running code: store its state (e.g. obj.state_dict()) instead")


def _plain(value: Any) -> Any:
    """`value` with its tensors detached, contiguous and on the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu").contiguous()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value)
    return value


def persistent_buffers(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The module's persistent buffers under their state_dict names, as they are (no copy)."""
    found = {}
    for prefix, owner in module.named_modules():
        skip = getattr(owner, "_non_persistent_buffers_set", set())
        for name, buffer in owner._buffers.items():
            if buffer is not None and name not in skip:
                found[f"{prefix}.{name}" if prefix else name] = buffer
    return found


def pack(client_state: Any, buffers: dict[str, torch.Tensor],
         lr_scheduler: dict[str, Any] | None = None) -> bytes:
    """The user data of a checkpoint: client_state (checked), the buffers' current values, and
    a torch LR scheduler's state_dict() when zero.initialize was given one (checked alike)."""
    state = {} if client_state is None else client_state
    _check_plain(state, "")
    payload = {"format": _FORMAT, "client_state": _plain(state),
               "buffers": {name: _plain(tensor) for name, tensor in buffers.items()}}
    if lr_scheduler is not None:
        try:
            _check_plain(lr_scheduler, "")
        except ZeroError as error:
            raise ZeroError(f"save_checkpoint: the LR scheduler's state_dict() holds more than "
                            f"plain data ({error}); zero saves only plain data") from None
        payload["lr_scheduler"] = _plain(lr_scheduler)
    out = io.BytesIO()
    torch.save(payload, out)
    return out.getvalue()


class _PlainUnpickler(pickle.Unpickler):
    """Plain Python data only: any class or function a pickle names is refused."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise ZeroError(f"it names {module}.{name}, and loading it would run code from the "
                        "checkpoint")


def unpack(data: bytes, where: str | os.PathLike[str]
           ) -> tuple[Any, dict[str, torch.Tensor], dict[str, Any] | None]:
    """(client_state, buffers, the LR scheduler's state or None) from a checkpoint's user data;
    ZeroError when it holds more than plain data and tensors. `where` names the checkpoint in
    messages."""
    if not data:
        return {}, {}, None
    if data[:4] != _ZIP_MAGIC:  # a checkpoint saved by an earlier zero: a pickle of client_state
        try:
            state = _PlainUnpickler(io.BytesIO(data)).load()
        except ZeroError as error:
            raise ZeroError(f"load_checkpoint: the client_state of {where} was refused: "
                            f"{error}. zero loads only plain data (dicts, lists, str, numbers) "
                            "and tensors; load it only if you trust its source, with "
                            "pickle.loads on the bytes engine.checkpoint_user_data() returns") \
                from None
        except Exception as error:  # noqa: BLE001: a damaged or foreign blob, whatever it says
            raise ZeroError(f"load_checkpoint: the client_state of {where} cannot be read: "
                            f"{type(error).__name__}: {error}") from None
        return state, {}, None
    try:
        payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001: weights_only's refusal, or a damaged blob
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ZeroError(f"load_checkpoint: the client_state of {where} holds more than plain "
                        f"data and tensors, and was not loaded (it could run code): {first}") \
            from None
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise ZeroError(f"load_checkpoint: the user data of {where} is not zero's client state "
                        f"(format {payload.get('format') if isinstance(payload, dict) else '?'})")
    return (payload.get("client_state", {}), payload.get("buffers", {}),
            payload.get("lr_scheduler"))

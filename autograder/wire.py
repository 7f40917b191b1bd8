"""Plain data between the trusted grader and the process that runs learner code.

A message is a JSON header plus raw array buffers, framed on a stream socket::

    4-byte big-endian header length | header (UTF-8 JSON) | buffer 0 | buffer 1 | ...

``header["_buffers"]`` lists the buffer lengths. Values are encoded as trees of JSON objects:
Python scalars and strings as themselves, tuples/lists/sets/dicts by kind, arrays as a dtype, a
shape and the index of a raw buffer. Decoding builds only built-in containers, scalars and fresh
base-class ``numpy.ndarray`` objects of numeric dtype: nothing made by learner code is ever
unpickled or called on the trusted side. Anything else arrives as an inert stand-in that only
remembers its type name (so a check can still say "got NoneType").
"""

from __future__ import annotations

import json
import math
import re
import select
import socket
import struct
import sys
import time

import numpy as np

MAX_HEADER = 32 * 2**20
MAX_MESSAGE = 256 * 2**20
MAX_DEPTH = 20
MAX_ITEMS = 100_000
MESSAGE_SECONDS = 60.0
_NUMERIC = "biufc"


class WireError(Exception):
    """The other side sent something that is not a valid message."""


class Closed(WireError):
    """The other side went away (EOF) before a whole message arrived."""


class Timeout(WireError):
    """No whole message arrived in time."""


# ---------------------------------------------------------------------------------------------
# values


def encode(value: object, buffers: list[bytes], depth: int = 0) -> object:
    """A JSON-able tree for ``value``; array data is appended to ``buffers``."""
    if depth > MAX_DEPTH:
        return {"t": "opaque", "type": "too deeply nested"}
    kind = type(value)
    if value is None or kind in (bool, str):
        return {"t": "py", "v": value}
    if kind is int:
        return {"t": "py", "v": value} if abs(value) < 2**63 else {"t": "bigint", "v": str(value)}
    if kind is float:
        return {"t": "float", "v": _float(value)}
    if kind in (tuple, list, set, frozenset):
        items = list(value)[:MAX_ITEMS]
        return {"t": kind.__name__, "items": [encode(v, buffers, depth + 1) for v in items]}
    if kind is dict:
        pairs = list(value.items())[:MAX_ITEMS]
        return {
            "t": "dict",
            "items": [
                [encode(k, buffers, depth + 1), encode(v, buffers, depth + 1)] for k, v in pairs
            ],
        }
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        try:
            value = value.detach().to("cpu")
            value = value.float() if value.dtype == torch.bfloat16 else value
            value = value.numpy()
        except Exception:  # noqa: BLE001 — an odd tensor is just opaque
            return _opaque(value)
    if isinstance(value, np.generic) and value.dtype.kind in _NUMERIC:
        return _array(np.asarray(value), buffers, scalar=True)
    if isinstance(value, tuple | list):  # a subclass: keep only the items, as the base type
        base = tuple if isinstance(value, tuple) else list
        return encode(base(value), buffers, depth)
    try:
        array = np.array(value, copy=True, subok=False)
    except Exception:  # noqa: BLE001
        return _opaque(value)
    if array.dtype.kind in _NUMERIC and array.dtype.fields is None:
        return _array(array, buffers)
    return _opaque(value)


def _float(x: float) -> object:
    return x if math.isfinite(x) else repr(x)


def _opaque(value: object) -> dict:
    return {"t": "opaque", "type": type(value).__name__}


def _array(array: np.ndarray, buffers: list[bytes], scalar: bool = False) -> dict:
    array = np.ascontiguousarray(array)
    dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    buffers.append(array.astype(dtype, copy=False).tobytes())
    return {
        "t": "nd",
        "dtype": dtype.str,
        "shape": list(array.shape),
        "b": len(buffers) - 1,
        "scalar": scalar,
    }


_STANDINS: dict[str, type] = {}


def standin(type_name: str) -> object:
    """An inert object whose class is called ``type_name``: what an unreadable value becomes."""
    name = re.sub(r"\W", "_", str(type_name))[:60] or "object"
    if name[0].isdigit():
        name = "_" + name
    cls = _STANDINS.get(name)
    if cls is None:
        cls = _STANDINS[name] = type(name, (), {"__repr__": lambda self: f"<{name}>"})
    return cls()


def decode(tree: object, buffers: list[bytes], depth: int = 0) -> object:
    """Rebuild a value from :func:`encode`'s tree: built-ins and plain numeric arrays only."""
    if depth > MAX_DEPTH + 1 or not isinstance(tree, dict):
        raise WireError("malformed value")
    t = tree.get("t")
    if t == "py":
        v = tree.get("v")
        if v is None or type(v) in (bool, int, str):
            return v
        raise WireError("malformed scalar")
    if t == "bigint":
        return int(str(tree.get("v")))
    if t == "float":
        v = tree.get("v")
        return float(v) if type(v) in (int, float, str) else math.nan
    if t in ("tuple", "list", "set", "frozenset"):
        items = [decode(v, buffers, depth + 1) for v in _items(tree)]
        if t in ("set", "frozenset"):
            items = [v for v in items if _hashable(v)]
        return {"tuple": tuple, "list": list, "set": set, "frozenset": frozenset}[t](items)
    if t == "dict":
        out = {}
        for pair in _items(tree):
            if not isinstance(pair, list) or len(pair) != 2:
                raise WireError("malformed dict")
            key = decode(pair[0], buffers, depth + 1)
            if _hashable(key):
                out[key] = decode(pair[1], buffers, depth + 1)
        return out
    if t == "nd":
        return _decode_array(tree, buffers)
    if t == "opaque":
        return standin(tree.get("type", "object"))
    raise WireError(f"unknown value kind {t!r}")


def _items(tree: dict) -> list:
    items = tree.get("items")
    if not isinstance(items, list) or len(items) > MAX_ITEMS:
        raise WireError("malformed container")
    return items


def _hashable(v: object) -> bool:
    return not isinstance(v, list | dict | set | np.ndarray)


def _decode_array(tree: dict, buffers: list[bytes]) -> object:
    try:
        dtype = np.dtype(str(tree["dtype"]))
        shape = tuple(int(n) for n in tree["shape"])
        data = buffers[int(tree["b"])]
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise WireError(f"malformed array: {error}") from None
    if dtype.kind not in _NUMERIC or dtype.fields is not None or dtype.subdtype is not None:
        raise WireError(f"arrays must be numeric, got dtype {dtype}")
    if any(n < 0 for n in shape) or math.prod(shape) * dtype.itemsize != len(data):
        raise WireError("array data does not match its shape")
    array = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    return array[()] if tree.get("scalar") and array.ndim == 0 else array


# ---------------------------------------------------------------------------------------------
# framing


def send(sock: socket.socket, header: dict, buffers: list[bytes] = ()) -> None:
    """Send one message (blocking)."""
    header = {**header, "_buffers": [len(b) for b in buffers]}
    raw = json.dumps(header, allow_nan=True).encode()
    sock.sendall(struct.pack(">I", len(raw)) + raw)
    for b in buffers:
        sock.sendall(b)


def recv(sock: socket.socket, timeout: float | None = None) -> tuple[dict, list[bytes]]:
    """Receive one message; :class:`Timeout` or :class:`Closed` when none arrives."""
    if timeout is not None and not select.select([sock], [], [], max(timeout, 0))[0]:
        raise Timeout("no reply in time")  # nothing read: the stream is still in step
    # A message that has begun must arrive whole, and soon; anything else is a broken peer.
    deadline = time.monotonic() + MESSAGE_SECONDS
    (size,) = struct.unpack(">I", _read(sock, 4, deadline))
    if size > MAX_HEADER:
        raise WireError(f"message header too large ({size} bytes)")
    try:
        header = json.loads(_read(sock, size, deadline))
    except ValueError as error:
        raise WireError(f"malformed message header: {error}") from None
    if not isinstance(header, dict):
        raise WireError("a message header must be a JSON object")
    sizes = header.pop("_buffers", [])
    if not isinstance(sizes, list) or not all(type(n) is int and n >= 0 for n in sizes):
        raise WireError("malformed buffer list")
    if sum(sizes) > MAX_MESSAGE:
        raise WireError(f"message too large ({sum(sizes)} bytes)")
    return header, [_read(sock, n, deadline) for n in sizes]


def _read(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                raise WireError("a message stopped half-way")
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise Closed("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)

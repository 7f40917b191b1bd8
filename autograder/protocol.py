"""The one message protocol between the trusted grader and the sandbox that runs learner code.

The trusted side drives; the sandbox only answers. Every exchange is one *request* from the trusted
side and exactly one *reply*, which echoes the request's ``seq``. Anything else the sandbox writes —
an unasked message, a reply out of turn, a malformed or oversized frame — is a protocol violation:
the trusted side stops reading, kills the sandbox and records the fault. No message can extend a
deadline: deadlines belong to the requests (see :mod:`autograder.runner`).

Frame (both directions)::

    4-byte big-endian header length | header: a UTF-8 JSON object | buffer 0 | buffer 1 | ...

``header["_buffers"]`` lists the byte lengths of the buffers that follow (raw array data).

Requests (trusted → sandbox); every reply carries ``seq`` and ``ok``:

==========  =======================================  ==============================================
op          request fields                           reply fields when ``ok``
==========  =======================================  ==============================================
setup       ``files``: {relative path: buffer}       —
run         ``cell``, ``source``, ``record``,        ``cell``, ``outputs`` (nbformat outputs),
            ``verdicts`` {name: {passed, feedback}}  ``execution_count``
describe    ``name``                                 ``defined``, ``callable``, ``type``
call        ``name``, ``args``, ``kwargs`` (values)  ``result``, ``args``, ``kwargs`` (values, after
                                                     the call: in-place changes show)
value       ``name``                                 ``defined``, ``value``
==========  =======================================  ==============================================

A failed request replies ``{"ok": false, "ename": ..., "evalue": ...}`` (the learner's exception).

**Callbacks.** A ``call`` may hand the learner's code functions that stay on the trusted side: a
:class:`Remote` among the arguments (decoded in the sandbox as a stand-in function), or
``stand_ins`` ``{name: key}``, names of the learner's namespace bound to stand-ins for the
duration of the call (the course's reference ``softmax`` in place of the learner's, say). When
learner code calls a stand-in, the sandbox sends ``{"op": "callback", "cb": n, "key": ...,
"args": ..., "kwargs": ...}`` (``n`` = 0, 1, 2, … within the call) and waits for
``{"cb": n, "ok": true, "result": ...}`` or ``{"cb": n, "ok": false, "ename": ..., "evalue": ...}``.
Only while such a call is outstanding, and only for its keys, may the sandbox send a callback
before its reply; every callback's arrays are bounded (:data:`CALLBACK_ELEMENTS`), as are those
of its result (:func:`largest_in`) and its number (:data:`CALLBACKS`), and they all count against
the call's deadline. (What the trusted function may take of the grader's memory to make its
result is bounded by the runner: ``runner.CALLBACK_MEMORY``.)
Before any of this, the sandbox's processes say :data:`HELLO` (raw bytes, not a frame), which the
kernel sends with ``SCM_CREDENTIALS``, so the trusted side learns their process ids
(:mod:`autograder.template`); :data:`FAILED` and a reason instead mean the set-up failed.
And before that, a grader asks the template for a sandbox with :func:`fork_request` on the
template's control socket: a few raw bytes (the user id the sandbox is to run as, if any) and
the sandbox's fresh socket, passed with ``SCM_RIGHTS``. One such message is one ``sendmsg``, so
graders that share a template may ask at the same time.

Values are trees of JSON objects: scalars and strings as themselves, tuples, lists, sets and dicts
by kind, arrays as a dtype, a shape and the index of a raw buffer. Decoding builds only built-in
containers, scalars and fresh base-class ``numpy.ndarray`` objects of numeric dtype: nothing made
by learner code is unpickled or called on the trusted side; anything else arrives as an inert
stand-in that remembers only its type name (so a check can still say "got NoneType").

Bounds, enforced by the reader on everything it receives (:data:`BOUNDS`): header and buffer sizes,
buffer count, nesting depth, items per container, entries per set or dict; strings are scrubbed of
lone surrogates (which cannot be written as UTF-8). Sets and dict keys hold only scalars — ints
below 2**61 - 1, floats, strings, booleans, None — whose hashes an attacker cannot make collide
in bulk, so every decode takes time linear in the message.
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
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Bounds:
    """What one message may hold."""

    header: int = 8 * 2**20  # bytes of JSON header
    buffers: int = 256  # raw buffers per message
    buffer_bytes: int = 64 * 2**20  # bytes of all buffers of a message
    depth: int = 20  # nesting of values
    items: int = 100_000  # items of one list or tuple
    entries: int = 1_000  # entries of one set or dict
    seconds: float = 30.0  # a message that has begun must arrive whole within this


BOUNDS = Bounds()
CALLBACKS = 20_000  # callbacks within one call
CALLBACK_ELEMENTS = 2**18  # numbers in any one array a callback sends or gets back
HELLO = b"hello"  # the sandbox's first bytes, sent with SCM_CREDENTIALS
FAILED = b"fail:"  # sent instead when setting the sandbox up failed; the reason follows
FORK = b"F"  # a fork request; a user id may follow (FORK_AS)
FORK_AS = struct.Struct("!I")
HASH_MODULUS = 2**61 - 1  # CPython's integer hashes repeat with this period
_NUMERIC = "biufc"


class ProtocolError(Exception):
    """The other side sent something that is not a valid message, or broke the turn order."""


class Closed(ProtocolError):
    """The other side went away (EOF) before a whole message arrived."""


class Timeout(ProtocolError):
    """No message arrived in time."""


# ---------------------------------------------------------------------------------------------
# framing


ONE_WRITE = 1 << 16  # bytes: a message this small is written at once


def fork_request(uid: int | None = None) -> bytes:
    """A request's bytes: fork a sandbox that runs as ``uid`` (None: as the template does)."""
    return FORK if uid is None else FORK + FORK_AS.pack(uid)


def fork_uid(request: bytes) -> int | None:
    """The user id a fork request asks for (None: none); a request of another form is refused."""
    if request == FORK:
        return None
    if len(request) == 1 + FORK_AS.size and request[:1] == FORK:
        return FORK_AS.unpack(request[1:])[0]
    raise ProtocolError(f"not a fork request: {request[:16]!r}")


def send(sock: socket.socket, header: dict, buffers: list[bytes] = ()) -> None:
    """Send one message (blocking)."""
    header = {**header, "_buffers": [len(b) for b in buffers]}
    raw = json.dumps(header, allow_nan=True, ensure_ascii=True).encode()
    parts = [struct.pack(">I", len(raw)), raw, *buffers]
    if sum(map(len, parts)) <= ONE_WRITE:  # the other side wakes once, to the whole message
        parts = [b"".join(parts)]
    for part in parts:
        sock.sendall(part)


def recv(
    sock: socket.socket, deadline: float | None = None, bounds: Bounds = BOUNDS
) -> tuple[dict, list[bytes]]:
    """Receive one message before ``deadline`` (``time.monotonic()``; None waits forever).

    Raises :class:`Timeout` when none has begun by then (nothing was read: the stream is still in
    step), :class:`Closed` at end of file, :class:`ProtocolError` for anything malformed or over
    ``bounds``.
    """
    if deadline is not None and not _wait(sock, deadline):
        raise Timeout("no message in time")
    finish = time.monotonic() + bounds.seconds
    if deadline is not None:
        finish = min(finish, max(deadline, time.monotonic()) + 1.0)
    (size,) = struct.unpack(">I", _read(sock, 4, finish))
    if size > bounds.header:
        raise ProtocolError(f"a message header of {size} bytes (at most {bounds.header})")
    raw = _read(sock, size, finish)
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError) as error:
        raise ProtocolError(f"a malformed message header: {str(error)[:200]}") from None
    if not isinstance(header, dict):
        raise ProtocolError("a message header must be a JSON object")
    sizes = header.pop("_buffers", [])
    if not isinstance(sizes, list) or not all(type(n) is int and n >= 0 for n in sizes):
        raise ProtocolError("a malformed buffer list")
    if len(sizes) > bounds.buffers:
        raise ProtocolError(f"{len(sizes)} buffers in one message (at most {bounds.buffers})")
    if sum(sizes) > bounds.buffer_bytes:
        raise ProtocolError(f"{sum(sizes)} bytes of buffers (at most {bounds.buffer_bytes})")
    if may_hold_surrogates(raw):
        header = scrub(header)
    return header, [_read(sock, n, finish) for n in sizes]


def _wait(sock: socket.socket, deadline: float) -> bool:
    left = deadline - time.monotonic()
    return bool(select.select([sock], [], [], max(left, 0))[0])


def _read(sock: socket.socket, n: int, finish: float) -> bytes:
    chunks, got = [], 0
    while got < n:
        if not _wait(sock, finish):
            raise ProtocolError("a message stopped half-way")
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise Closed("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def may_hold_surrogates(raw: bytes) -> bool:
    """Whether ``json.loads(raw)`` can hold a lone surrogate. ASCII without NUL bytes is read
    as UTF-8, so a surrogate can only come from a ``\\uD800``-``\\uDFFF`` escape; anything
    else (other bytes, which ``json.loads`` decodes with ``surrogatepass``, or UTF-16) may."""
    return not raw.isascii() or b"\0" in raw or _SURROGATE_ESCAPE.search(raw) is not None


def scrub(tree: object) -> object:
    """``tree`` with every string's lone surrogates replaced by U+FFFD (iterative, linear)."""
    fix = _scrub_text
    root = [tree]
    stack: list[tuple[object, object]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        value = parent[key]
        if isinstance(value, str):
            parent[key] = fix(value)
        elif isinstance(value, list):
            stack.extend((value, i) for i in range(len(value)))
        elif isinstance(value, dict):
            for k in list(value):
                v = value.pop(k)
                value[fix(k)] = v
            stack.extend((value, k) for k in value)
    return root[0]


def _scrub_text(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


# ---------------------------------------------------------------------------------------------
# replies


def expect_reply(header: dict, seq: int) -> dict:
    """The reply to request ``seq``, or :class:`ProtocolError` for anything else."""
    if header.get("seq") != seq or type(header.get("ok")) is not bool:
        raise ProtocolError(f"an unexpected message while waiting for reply {seq}")
    return header


def callback_of(header: dict) -> tuple[int, str] | None:
    """``(n, key)`` if ``header`` is a callback, else None (see the module doc)."""
    if header.get("op") != "callback":
        return None
    n, key = header.get("cb"), header.get("key")
    if type(n) is not int or not isinstance(key, str):
        raise ProtocolError("a malformed callback")
    return n, key


def text_field(header: dict, key: str, limit: int = 20_000) -> str:
    """A string field of a reply, cut to ``limit`` characters (anything else becomes text)."""
    value = header.get(key, "")
    return (value if isinstance(value, str) else repr(type(value).__name__))[:limit]


# ---------------------------------------------------------------------------------------------
# values


@dataclass(frozen=True)
class Remote:
    """A function that stays on the trusted side, passed to learner code by ``key``."""

    key: str


def encode(value: object, buffers: list[bytes], depth: int = 0, bounds: Bounds = BOUNDS) -> object:
    """A JSON-able tree for ``value``; array data is appended to ``buffers``."""
    if depth > bounds.depth:
        return {"t": "opaque", "type": "too deeply nested"}
    kind = type(value)
    if value is None or kind in (bool, str):
        return {"t": "py", "v": value}
    if kind is Remote:
        return {"t": "fn", "key": value.key}
    if kind is int:
        return {"t": "py", "v": value} if abs(value) < 2**63 else {"t": "bigint", "v": str(value)}
    if kind is float:
        return {"t": "float", "v": value if math.isfinite(value) else repr(value)}
    if kind in (tuple, list, set, frozenset):
        items = list(value)[: bounds.items]
        return {"t": kind.__name__, "items": [encode(v, buffers, depth + 1) for v in items]}
    if kind is dict:
        pairs = list(value.items())[: bounds.entries]
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


def decode(
    tree: object,
    buffers: list[bytes],
    depth: int = 0,
    bounds: Bounds = BOUNDS,
    functions: Callable[[str], object] | None = None,
) -> object:
    """Rebuild a value from :func:`encode`'s tree: built-ins and plain numeric arrays only.

    A :class:`Remote` becomes ``functions(key)``; without ``functions`` (the trusted side,
    always) it is a protocol violation: nothing decoded on the trusted side can be called. So
    is any value :func:`encode` never makes that Python or NumPy cannot build (a number no float
    holds, a shape no array takes): a :class:`ProtocolError`, never another exception.
    """
    try:
        if functions is not None:
            return _decode_with(tree, buffers, depth, bounds, functions)
        return _decode(tree, buffers, depth, bounds)
    except (ArithmeticError, ValueError, TypeError) as error:  # ProtocolError is none of these
        raise ProtocolError(f"a malformed value ({type(error).__name__}: {error})"[:300]) from None


def _decode(tree: object, buffers: list[bytes], depth: int, bounds: Bounds) -> object:
    """:func:`decode` on the trusted side."""
    if depth > bounds.depth + 1 or not isinstance(tree, dict):
        raise ProtocolError("a malformed value")
    t = tree.get("t")
    if t == "py":
        v = tree.get("v")
        if v is None or type(v) in (bool, int, str):
            return v
        raise ProtocolError("a malformed scalar")
    if t == "bigint":
        text = str(tree.get("v"))
        if len(text) > 400 or not re.fullmatch(r"-?\d+", text):
            raise ProtocolError("a malformed integer")
        return int(text)
    if t == "float":
        v = tree.get("v")
        if type(v) in (int, float):
            return float(v)
        return float(v) if v in ("inf", "-inf", "nan") else math.nan
    if t in ("tuple", "list"):
        items = [decode(v, buffers, depth + 1, bounds) for v in _items(tree, bounds.items)]
        return tuple(items) if t == "tuple" else items
    if t in ("set", "frozenset"):
        items = [decode(v, buffers, depth + 1, bounds) for v in _items(tree, bounds.entries)]
        return (set if t == "set" else frozenset)(_key(v) for v in items)
    if t == "dict":
        out = {}
        for pair in _items(tree, bounds.entries):
            if not isinstance(pair, list) or len(pair) != 2:
                raise ProtocolError("a malformed dict")
            out[_key(decode(pair[0], buffers, depth + 1, bounds))] = decode(
                pair[1], buffers, depth + 1, bounds
            )
        return out
    if t == "nd":
        return _decode_array(tree, buffers)
    if t == "opaque":
        return standin(str(tree.get("type", "object"))[:60])
    raise ProtocolError(f"an unknown value kind {str(t)[:40]!r}")


def _decode_with(tree, buffers, depth, bounds, functions) -> object:
    """:func:`decode` in the sandbox: remote functions become ``functions(key)``."""
    if isinstance(tree, dict) and tree.get("t") == "fn":
        return functions(str(tree.get("key", "")))
    if isinstance(tree, dict) and tree.get("t") in ("tuple", "list"):
        items = [
            _decode_with(v, buffers, depth + 1, bounds, functions)
            for v in _items(tree, bounds.items)
        ]
        return tuple(items) if tree["t"] == "tuple" else items
    if isinstance(tree, dict) and tree.get("t") == "dict":
        out = {}
        for pair in _items(tree, bounds.entries):
            if not isinstance(pair, list) or len(pair) != 2:
                raise ProtocolError("a malformed dict")
            key = _key(decode(pair[0], buffers, depth + 1, bounds))
            out[key] = _decode_with(pair[1], buffers, depth + 1, bounds, functions)
        return out
    return decode(tree, buffers, depth, bounds)


def largest_array(tree: object) -> int:
    """The most numbers any one array of an encoded value holds (0 for none)."""
    most, todo = 0, [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            if node.get("t") == "nd" and isinstance(node.get("shape"), list):
                shape = [n for n in node["shape"] if type(n) is int]
                most = max(most, math.prod(shape))
            todo.extend(node.get("items", []) if isinstance(node.get("items"), list) else [])
        elif isinstance(node, list):
            todo.extend(node)
    return most


def largest_in(value: object, depth: int = 0) -> int:
    """The most numbers any one array or tensor in ``value`` holds, before it is encoded (in
    tuples, lists and the values of dicts, as :func:`encode` nests them; 0 for none)."""
    if depth > BOUNDS.depth:
        return 0
    if isinstance(value, tuple | list):
        return max((largest_in(v, depth + 1) for v in value[: BOUNDS.items]), default=0)
    if isinstance(value, dict):
        items = list(value.values())[: BOUNDS.entries]
        return max((largest_in(v, depth + 1) for v in items), default=0)
    if isinstance(value, np.ndarray):
        return value.size
    torch = sys.modules.get("torch")
    return value.numel() if torch is not None and isinstance(value, torch.Tensor) else 0


def _items(tree: dict, limit: int) -> list:
    items = tree.get("items")
    if not isinstance(items, list):
        raise ProtocolError("a malformed container")
    if len(items) > limit:
        raise ProtocolError(f"a container of {len(items)} items (at most {limit})")
    return items


def _key(value: object) -> object:
    """A set member or dict key: scalars only, and none whose hash repeats in bulk."""
    if value is None or type(value) in (bool, float, str):
        return value
    if type(value) is int and -HASH_MODULUS < value < HASH_MODULUS:
        return value
    raise ProtocolError(
        "sets and dict keys may hold only strings, floats, booleans, None and integers "
        f"smaller than 2**61 - 1 (got {type(value).__name__})"
    )


def _decode_array(tree: dict, buffers: list[bytes]) -> object:
    try:
        dtype = np.dtype(str(tree["dtype"]))
        shape = tuple(int(n) for n in tree["shape"])
        data = buffers[int(tree["b"])]
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise ProtocolError(f"a malformed array: {error}") from None
    if dtype.kind not in _NUMERIC or dtype.fields is not None or dtype.subdtype is not None:
        raise ProtocolError(f"arrays must be numeric, got dtype {dtype}")
    if (
        len(shape) > 32
        or any(n < 0 for n in shape)
        or math.prod(shape) * dtype.itemsize != len(data)
    ):
        raise ProtocolError("array data does not match its shape")
    array = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    return array[()] if tree.get("scalar") and array.ndim == 0 else array

"""The grader's message protocol: framing, values, bounds, and what hostile peers send."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autograder import protocol
from autograder.protocol import Bounds, ProtocolError


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def raw(sock: socket.socket, header: bytes, buffers: bytes = b"") -> None:
    sock.sendall(struct.pack(">I", len(header)) + header + buffers)


def test_a_message_round_trips_with_buffers(pair):
    a, b = pair
    blobs: list[bytes] = []
    value = {"x": np.arange(6.0).reshape(2, 3), "t": (1, "two", None, True, 2.5)}
    protocol.send(a, {"op": "call", "seq": 3, "args": protocol.encode(value, blobs)}, blobs)
    header, got = protocol.recv(b, time.monotonic() + 5)
    assert header["op"] == "call" and header["seq"] == 3
    back = protocol.decode(header["args"], got)
    assert back["t"] == (1, "two", None, True, 2.5)
    assert type(back["x"]) is np.ndarray and np.array_equal(back["x"], value["x"])


def test_values_come_back_as_plain_builtins_and_base_arrays():
    class Liar(np.ndarray):
        def __eq__(self, other):
            return True

    class Listy(list):
        pass

    blobs: list[bytes] = []
    tree = protocol.encode(
        [np.zeros(3).view(Liar), Listy([1, 2]), {1, 2}, float("nan"), 2**80, object()], blobs
    )
    back = protocol.decode(tree, blobs)
    assert type(back[0]) is np.ndarray
    assert type(back[1]) is list and back[1] == [1, 2]
    assert back[2] == {1, 2} and np.isnan(back[3]) and back[4] == 2**80
    assert type(back[5]).__name__ == "object" and repr(back[5]) == "<object>"


def test_a_reply_out_of_turn_is_a_violation():
    assert protocol.expect_reply({"seq": 4, "ok": True}, 4)["ok"] is True
    for header in ({"seq": 3, "ok": True}, {"ev": "done", "seq": 4}, {"seq": 4, "ok": "yes"}):
        with pytest.raises(ProtocolError, match="unexpected message"):
            protocol.expect_reply(header, 4)


@pytest.mark.parametrize(
    ("header", "buffers", "match"),
    [
        (b"[1, 2]", b"", "must be a JSON object"),
        (b"{not json", b"", "malformed message header"),
        (b'{"_buffers": "many"}', b"", "malformed buffer list"),
        (b'{"_buffers": [-1]}', b"", "malformed buffer list"),
        (json.dumps({"_buffers": [1] * 300}).encode(), b"x" * 300, "300 buffers"),
        (b"[" * 100_000 + b"]" * 100_000, b"", "malformed message header"),
    ],
)
def test_malformed_frames_are_refused(pair, header, buffers, match):
    a, b = pair
    threading.Thread(target=raw, args=(a, header, buffers), daemon=True).start()
    with pytest.raises(ProtocolError, match=match):
        protocol.recv(b, time.monotonic() + 5)


def test_an_oversized_header_is_refused_before_it_is_read(pair):
    a, b = pair
    a.sendall(struct.pack(">I", 2**32 - 1))  # "4 GB follow": nothing is allocated for it
    with pytest.raises(ProtocolError, match="at most"):
        protocol.recv(b, time.monotonic() + 5)


def test_oversized_buffers_are_refused_before_they_are_read(pair):
    a, b = pair
    raw(a, json.dumps({"_buffers": [5 * 2**30]}).encode())  # "5 GB of arrays follow"
    with pytest.raises(ProtocolError, match="bytes of buffers"):
        protocol.recv(b, time.monotonic() + 5, Bounds(buffer_bytes=2**20))


def test_a_message_that_stops_half_way_times_out_and_nothing_waits_forever(pair):
    a, b = pair
    a.sendall(struct.pack(">I", 100) + b'{"op"')  # and then nothing
    started = time.monotonic()
    with pytest.raises(ProtocolError, match="half-way"):
        protocol.recv(b, time.monotonic() + 0.5)
    assert time.monotonic() - started < 5
    with pytest.raises(protocol.Timeout):
        protocol.recv(a, time.monotonic() + 0.2)  # nothing at all: a plain timeout


def test_end_of_file_is_closed(pair):
    a, b = pair
    a.close()
    with pytest.raises(protocol.Closed):
        protocol.recv(b, time.monotonic() + 5)


def test_lone_surrogates_are_replaced_everywhere_in_a_header(pair):
    a, b = pair
    raw(a, b'{"outputs": [{"text": "bad \\ud800 text", "\\udfff": ["\\ud83d"]}]}')
    header, _ = protocol.recv(b, time.monotonic() + 5)
    text = json.dumps(header, ensure_ascii=False)
    text.encode("utf-8")  # would raise on a lone surrogate
    assert header["outputs"][0]["text"] == "bad \ufffd text"
    assert header["outputs"][0]["\ufffd"] == ["\ufffd"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
WRITTEN = {  # how a peer may write its header: json.loads reads every one of these
    "escaped": lambda tree: json.dumps(tree, ensure_ascii=True).encode(),
    "utf-8, surrogates passed": lambda tree: json.dumps(tree, ensure_ascii=False).encode(
        "utf-8", "surrogatepass"
    ),
    "utf-16": lambda tree: json.dumps(tree, ensure_ascii=False).encode("utf-16", "surrogatepass"),
}


@settings(max_examples=60, deadline=None)
@given(tree=JSON, written=st.sampled_from(sorted(WRITTEN)))
def test_no_header_holds_a_lone_surrogate_however_it_was_written(tree, written):
    """A header is scrubbed only when it may hold a lone surrogate (the usual, escaped ASCII
    header cannot): what arrives is what scrubbing every header would give."""
    header = WRITTEN[written]({"x": tree})
    a, b = socket.socketpair()
    try:
        raw(a, header)
        got, _ = protocol.recv(b, time.monotonic() + 5)
    finally:
        a.close()
        b.close()
    assert got == protocol.scrub(json.loads(header))
    json.dumps(got, ensure_ascii=False).encode("utf-8")  # would raise on a lone surrogate


@pytest.mark.parametrize("header, may", [
    (b'{"text": "plain"}', False), (b'{"text": "\\u00e9 \\ud83d\\ude00"}', True),
    (b'{"text": "\\uDFFF"}', True), (b'{"text": "\\ue000"}', False),
    ('{"text": "é"}'.encode(), True), (b'\x00{\x00}', True),
])  # fmt: skip
def test_which_headers_may_hold_surrogates(header, may):
    assert protocol.may_hold_surrogates(header) is may


@pytest.mark.parametrize(
    "tree",
    [
        {"t": "nd", "dtype": "O", "shape": [1], "b": 0},
        {"t": "nd", "dtype": "<f8", "shape": [1000], "b": 0},
        {"t": "nd", "dtype": "<f8", "shape": [-1], "b": 0},
        {"t": "nd", "dtype": "<f8", "shape": [1], "b": 7},
        {"t": "nd", "dtype": [["a", "<f8"]], "shape": [1], "b": 0},
        {"t": "py", "v": [1, 2]},
        {"t": "bigint", "v": "1" * 5000},
        {"t": "list", "items": "abc"},
        {"t": "dict", "items": [[{"t": "py", "v": 1}]]},
        {"t": "pickle", "v": "gASVAAAA"},
        "not a tree",
    ],
)
def test_malformed_values_are_refused(tree):
    with pytest.raises(ProtocolError):
        protocol.decode(tree, [np.zeros(1).tobytes()])


def test_nesting_and_sizes_are_bounded():
    deep = {"t": "py", "v": 1}
    for _ in range(50):
        deep = {"t": "list", "items": [deep]}
    with pytest.raises(ProtocolError, match="malformed value"):
        protocol.decode(deep, [])
    big = {"t": "list", "items": [{"t": "py", "v": 1}] * 11}
    with pytest.raises(ProtocolError, match="11 items"):
        protocol.decode(big, [], bounds=Bounds(items=10))
    wide = {"t": "set", "items": [{"t": "py", "v": i} for i in range(11)]}
    with pytest.raises(ProtocolError, match="11 items"):
        protocol.decode(wide, [], bounds=Bounds(entries=10))


def test_keys_whose_hashes_collide_in_bulk_are_refused_so_decoding_stays_linear():
    """Integers k·(2**61 - 1) all hash alike: a dict of them costs quadratic time to build."""
    modulus = protocol.HASH_MODULUS
    for kind in ("set", "dict"):
        items = [{"t": "bigint", "v": str(k * modulus)} for k in range(1, 900)]
        if kind == "dict":
            items = [[key, {"t": "py", "v": 0}] for key in items]
        with pytest.raises(ProtocolError, match="smaller than 2\\*\\*61"):
            protocol.decode({"t": kind, "items": items}, [])
    tuple_key = {"t": "tuple", "items": [{"t": "py", "v": 1}]}
    with pytest.raises(ProtocolError, match="got tuple"):
        protocol.decode({"t": "set", "items": [tuple_key]}, [])
    # what a mastery answer holds still decodes
    fine = protocol.encode({0, 1, 2, "b", 2.5, -(2**60)}, [])
    assert protocol.decode(fine, []) == {0, 1, 2, "b", 2.5, -(2**60)}


def test_the_worst_allowed_message_decodes_quickly():
    """Many entries, nested as deep as allowed, floats that share hashes: still linear."""
    floats = [{"t": "float", "v": 2.0 ** (61 * k)} for k in range(-16, 16) if k]  # all hash to 1
    entries = [{"t": "float", "v": float(i)} for i in range(969)] + floats
    tree = {"t": "list", "items": [{"t": "set", "items": entries}] * 100}
    started = time.monotonic()
    back = protocol.decode(tree, [])
    assert len(back) == 100 and len(back[0]) == 1000
    assert time.monotonic() - started < 5  # milliseconds in fact; quadratic would be minutes


def test_nothing_decoded_on_the_trusted_side_can_be_called():
    blobs: list[bytes] = []
    tree = protocol.encode([protocol.Remote("k1"), {"f": protocol.Remote("k2")}], blobs)
    with pytest.raises(ProtocolError, match="unknown value kind 'fn'"):
        protocol.decode(tree, blobs)
    made = []
    back = protocol.decode(tree, blobs, functions=lambda key: made.append(key) or key.upper())
    assert back == ["K1", {"f": "K2"}] and made == ["k1", "k2"]  # in the sandbox only


def test_callbacks_are_recognised_and_their_arrays_measured():
    assert protocol.callback_of({"seq": 1, "ok": True}) is None
    assert protocol.callback_of({"op": "callback", "cb": 2, "key": "k"}) == (2, "k")
    with pytest.raises(ProtocolError, match="malformed callback"):
        protocol.callback_of({"op": "callback", "cb": "2", "key": "k"})
    blobs: list[bytes] = []
    tree = protocol.encode((np.zeros((3, 4)), [np.zeros(20)], {"m": np.zeros((2, 2, 2))}), blobs)
    assert protocol.largest_array(tree) == 20

"""kube/'s JSON codec (orjson) against the standard library's ``json``, which it replaced: the same Python objects
from the same bytes, bodies that decode to what was sent, and the same failures (the API server takes the bytes:
tests/integration/test_client_json.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from multikueue.kube.client import decode, encode

DOCUMENTS: list[Any] = [
    {"type": "MODIFIED", "object": {"metadata": {"name": "run-1", "resourceVersion": "42", "generation": 2}}},
    {"text": 'é ü 日本 🚀 \u2028 "quoted" back\\slash\ttab\n</script>', "ключ": "значение"},
    {"int64": [9223372036854775807, -9223372036854775808, 0, -1], "floats": [0.1, 1.5e-10, 2.5e300, -0.0, 1.0]},
    {"nested": {"empty": {}, "list": [], "null": None, "bools": [True, False], "deep": [[[{"a": [1]}]]]}},
    [],
    "a string",
    12,
    None,
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_decoding_gives_what_json_gives_from_the_same_bytes(document: Any) -> None:
    for text in (json.dumps(document), json.dumps(document, ensure_ascii=False), json.dumps(document, indent=2)):
        data = text.encode()
        assert decode(data) == json.loads(data)
        assert type(decode(data)) is type(json.loads(data))


def test_a_watch_line_decodes_with_its_newline() -> None:
    assert decode(b'{"type":"ADDED","object":{}}\n') == {"type": "ADDED", "object": {}}


@pytest.mark.parametrize("document", DOCUMENTS)
def test_an_encoded_body_decodes_to_what_was_sent(document: Any) -> None:
    data = encode(document)
    assert json.loads(data) == document
    assert data == json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def test_keys_that_are_not_strings_are_written_as_json_writes_them() -> None:
    body = {1: "a", 2.5: "b", False: "c", None: "d"}
    assert json.loads(encode(body)) == json.loads(json.dumps(body))


def test_a_tuple_is_an_array() -> None:
    assert encode({"a": (1, 2)}) == b'{"a":[1,2]}'


@pytest.mark.parametrize("data", [b"", b"   ", b"[1,]", b'{"a":', b"\xff", b'{"a":"\xff"}', b"not json"])
def test_what_is_not_json_fails_as_a_value_error_as_with_json(data: bytes) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 (the client maps exactly ValueError to StreamBroken)
        json.loads(data)
    with pytest.raises(ValueError):  # noqa: PT011
        decode(data)


def test_what_cannot_be_written_fails_as_a_type_error_as_with_json() -> None:
    for body in ({"a": {1, 2}}, {"a": object()}, {(1, 2): "tuple key"}):
        with pytest.raises(TypeError):
            json.dumps(body)
        with pytest.raises(TypeError):
            encode(body)


def test_whatever_is_read_can_be_written_back_however_deep() -> None:
    """orjson writes at most 255 levels; a schemaless field nested deeper (read by ``decode``, up to 1024) is
    written by ``json`` instead: a copy or a mirrored status is never refused by its own client."""
    deep = b'{"spec":' + b'{"a":' * 300 + b"{}" + b"}" * 300 + b"}"
    read = decode(deep)
    assert decode(encode(read)) == read

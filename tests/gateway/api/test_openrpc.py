"""The OpenRPC contract: generated from gateway.api.contract, served at /openrpc.json and by rpc.discover, and the same
vocabulary as docs/api.md (every method, error code and event type there)."""

from __future__ import annotations

import asyncio
import typing
from pathlib import Path

import orjson
from jsonschema import Draft202012Validator

from gateway.api.contract import METHODS, EventTypeName
from gateway.api.openrpc import document
from gateway.errors import ERROR_DATA, ERROR_MEANINGS
from tests.gateway_harness import ALICE, two_owner_gateway
from tests.support.paths import REPO

API_DOC = REPO / "docs" / "api.md"


def test_every_schema_is_valid_json_schema() -> None:
    doc = document()
    assert doc["openrpc"].startswith("1.")
    for schema in doc["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)  # raises, naming what is wrong
    for method in doc["methods"]:
        for param in method["params"]:
            Draft202012Validator.check_schema(param["schema"])
    assert {m["name"] for m in doc["methods"]} == {*METHODS, "rpc.discover"}
    assert set(ERROR_DATA) <= set(ERROR_MEANINGS)


def test_the_api_doc_names_every_method_error_and_event() -> None:
    text = API_DOC.read_text()
    missing = [f"method {m}" for m in METHODS if f"`{m}`" not in text]
    missing += [f"error {code}" for code in ERROR_MEANINGS if f"`{code}`" not in text]
    missing += [f"event {t}" for t in typing.get_args(EventTypeName) if f"`{t}`" not in text]
    assert not missing, missing


async def test_served_at_openrpc_json_and_by_rpc_discover(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path)
    await gw.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        writer.write(b"GET /openrpc.json HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        raw = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        assert b"200 OK" in head and b"application/json" in head
        client = await gw.client(ALICE)
        discovered = await client.call("rpc.discover")
        await client.close()
        assert orjson.loads(body) == discovered == orjson.loads(orjson.dumps(document()))
    finally:
        await gw.stop()

"""A stdio MCP server written by hand (no SDK), as simple ones are: it answers one request at a
time, in order. ``--bad-schema`` lists a tool whose input schema has no ``"type"`` (the SDK
refuses to read such a list). Tools: ``slow`` (sleeps ``seconds``), ``fast``."""

from __future__ import annotations

import json
import sys
import time

_OBJECT = {"type": "object", "properties": {"seconds": {"type": "number"}}}


def _tools() -> list[dict[str, object]]:
    tools: list[dict[str, object]] = [
        {"name": "slow", "description": "Answers after a while.", "inputSchema": _OBJECT},
        {"name": "fast", "description": "Answers at once.", "inputSchema": {"type": "object"}},
    ]
    if "--bad-schema" in sys.argv:
        schema = {"properties": {"a": {"type": "string"}}}  # no "type": "object"
        tools.append({"name": "untyped", "description": "Unreadable.", "inputSchema": schema})
    return tools


def _answer(request: dict[str, object]) -> object:
    method = request.get("method")
    if method == "initialize":
        return {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": _tools()}
    if method == "tools/call":
        params = request.get("params") or {}
        assert isinstance(params, dict)
        if params.get("name") == "slow":
            time.sleep(float((params.get("arguments") or {}).get("seconds", 1)))
        text = f"{params.get('name')} done"
        return {"content": [{"type": "text", "text": text}], "isError": False}
    return {}  # ping, and anything else


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification
        reply = {"jsonrpc": "2.0", "id": request["id"], "result": _answer(request)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

"""The Python SDK's conformance app: the harness in sdk/conformance starts it
with a JSON spec as its only argument and reads one JSON event per line from
its stdout. Every SDK has the same app (sdk/conformance/apps/<lang>);
sdk/conformance/README.md is the contract."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from typing import Any

import spool


def emit(ev: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(ev) + "\n")
    sys.stdout.flush()


def directives(payload: str) -> dict[str, str]:
    d: dict[str, str] = {}
    for w in payload.split():
        k, _, v = w.partition("=")
        d[k] = v
    return d


def error_event(kind: str, e: spool.SpoolError) -> dict[str, Any]:
    return {"ev": kind, "type": type(e).__name__, "code": e.code.name if e.code else "", "reason": e.reason, "message": str(e)}


async def consume(client: spool.Client, s: dict[str, Any]) -> int:
    seen: dict[str, int] = {}
    delay = s.get("delay_ms", 0) / 1000

    async def handle(m: spool.Message) -> None:
        seen[m.id] = seen.get(m.id, 0) + 1
        n = seen[m.id]
        emit({"ev": "start", "id": m.id, "key": m.key.decode(), "payload": m.payload.decode(), "attempt": m.attempt,
              "partition": m.partition, "offset": m.offset, "token": m.fencing_token, "last_error": m.last_error,
              "time_ms": int(time.time() * 1000)})

        def finish(outcome: str) -> None:
            emit({"ev": "finish", "id": m.id, "key": m.key.decode(), "attempt": m.attempt, "outcome": outcome, "time_ms": int(time.time() * 1000)})

        if delay > 0:
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                finish("cancelled")
                raise
        d = directives(m.payload.decode())
        if "release" in d and n <= int(d["release"]):
            finish("release")
            raise spool.Release()
        if "fail" in d and m.attempt <= int(d["fail"]):
            finish("retry")
            err = f"fail attempt {m.attempt}"
            if "retry_after" in d:
                raise spool.Retry(after=int(d["retry_after"]) / 1000, error=err)
            raise RuntimeError(err)
        if "dead" in d:
            finish("dead")
            raise spool.DeadLetter(d["dead"])
        finish("ack")

    stats = spool.Stats()
    try:
        await client.subscribe(
            s["group"], s["topics"], handle,
            concurrency=s["concurrency"], prefetch=s["prefetch"], stats=stats,
            drain_timeout=s.get("drain_timeout_ms", 30000) / 1000,
            app_version="conformance-python", handle_signals=True,
        )
    except spool.SpoolError as e:
        emit(error_event("subscribe_error", e))
        return 1
    emit({"ev": "exit", "released": stats.released, "settle_errors": stats.settle_errors})
    return 0


async def publish(client: spool.Client, s: dict[str, Any]) -> None:
    msgs = [
        spool.OutMessage(payload=("x" * m["payload_bytes"]) if m.get("payload_bytes") else m["payload"], key=m["key"], id=m["id"])
        for m in s["messages"]
    ]
    try:
        rs = await client.publish_batch(s["topic"], msgs)
    except spool.SpoolError as e:
        emit(error_event("publish_error", e))
        return
    emit({"ev": "published", "results": [{"id": r.id, "partition": r.partition, "offset": r.offset} for r in rs]})


async def main() -> int:
    s = json.loads(sys.argv[1])
    async with spool.connect(s["addr"]) as client:
        if s["mode"] == "consume":
            return await consume(client, s)
        await publish(client, s)
        return 0


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    sys.exit(asyncio.run(main()))

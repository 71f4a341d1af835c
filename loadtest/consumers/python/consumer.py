"""The Python SDK's consumer program for the loadtest (consumer_sdk: python),
on asyncio: loadtest/consumers/README.md is the contract. A JSON spec as the
only argument; "ready" once connected; subscribe at the first line on stdin;
the handled ids in batches on stdout ("i ID ID ..."); when stdin ends, drain,
write the ids left and an exit line, exit 0. The handler acks (returns)
after appending the id to a list.

consumer_options: ``loop: uvloop`` runs the event loop on uvloop (when it is
installed in the venv; docs/benchmarks/sdks.md says whether the SDK supports it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from typing import Any

import spool

# A batch this large is written at once, without waiting for the timer.
FLUSH_IDS = 8192


async def main(s: dict[str, Any]) -> int:
    loop = asyncio.get_running_loop()
    out = sys.stdout.fileno()
    ids: list[str] = []
    handled = 0

    def flush() -> None:
        nonlocal ids
        if ids:
            os.write(out, ("i " + " ".join(ids) + "\n").encode())
            ids = []

    async with await spool.connect(s["addr"]) as client:
        os.write(out, b"ready\n")
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        if not await reader.readline():
            print("consumer: stdin ended before the start line", file=sys.stderr)
            return 1
        stop = asyncio.Event()

        async def watch_stdin() -> None:
            while await reader.readline():
                pass
            stop.set()  # stdin ending is the stop

        async def report() -> None:
            while not stop.is_set():
                await asyncio.sleep(max(1, s["report_ms"]) / 1000)
                flush()

        async def handle(m: spool.Message) -> None:
            nonlocal handled
            ids.append(m.id)
            handled += 1
            if len(ids) >= FLUSH_IDS:
                flush()

        watcher = loop.create_task(watch_stdin())
        reporter = loop.create_task(report())
        stats = spool.Stats()
        code = 0
        try:
            await client.subscribe(
                s["group"], [s["topic"]], handle,
                concurrency=s["concurrency"], prefetch=None if s["prefetch"] < 0 else s["prefetch"],
                consumer_name=s["name"], drain_timeout=5.0, stop=stop, handle_signals=False, stats=stats,
            )
        except spool.SpoolError as e:
            print(f"consumer: {e}", file=sys.stderr)
            code = 1
        stop.set()
        watcher.cancel()
        await reporter
        flush()
        os.write(out, (json.dumps({"ev": "exit", "handled": handled, "settle_errors": stats.settle_errors, "reconnects": stats.reconnects}) + "\n").encode())
        return code


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    spec = json.loads(sys.argv[1])
    if (spec.get("options") or {}).get("loop") == "uvloop":
        import uvloop  # noqa: PLC0415 - only with loop: uvloop

        sys.exit(uvloop.run(main(spec)))
    sys.exit(asyncio.run(main(spec)))

"""A consumer process for the drain test: records when each handler starts
and finishes, one line each, and drains on SIGTERM."""

import asyncio
import sys

import spool

addr, record, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])


async def main() -> None:
    out = open(record, "a", buffering=1)

    async def handle(m: spool.Message) -> None:
        out.write(f"start {m.id} {m.attempt}\n")
        await asyncio.sleep(delay)  # the work
        out.write(f"done {m.id} {m.attempt}\n")

    await spool.subscribe("workers", ["orders"], handle, addr=addr, concurrency=4, prefetch=4, drain_timeout=10, handle_signals=True)
    out.write("exit\n")


asyncio.run(main())

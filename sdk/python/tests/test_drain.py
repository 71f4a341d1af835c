"""Drain on SIGTERM of the app process: nothing lost, nothing half-done."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import spool
from conftest import orders_config
from harness import wait_for

WORKER = Path(__file__).parent / "apps" / "worker.py"


def events(path: Path) -> list[tuple[str, str, int]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        f = line.split()
        if len(f) == 3:
            out.append((f[0], f[1], int(f[2])))
    return out


def start_worker(addr: str, record: Path) -> subprocess.Popen[bytes]:
    log = open(str(record) + ".log", "ab")
    return subprocess.Popen([sys.executable, str(WORKER), addr, str(record), "0.3"], stdout=log, stderr=log)


async def test_drain_on_sigterm_loses_nothing(start_spoold: Any, redis: Any, tmp_path: Path) -> None:
    s = start_spoold(orders_config(redis=redis.addr))
    async with await spool.connect(s.addr) as c:
        res = await c.publish_batch("orders", [spool.OutMessage(payload=str(i), key=f"k{i}", id=f"m{i}") for i in range(40)])
    ids = {r.id for r in res}

    first = tmp_path / "first.rec"
    app = start_worker(s.addr, first)
    try:
        wait_for(lambda: sum(1 for e in events(first) if e[0] == "start") >= 6, 20, "the first app at work")
        app.send_signal(signal.SIGTERM)
        assert app.wait(timeout=20) == 0, (str(first) + ".log", open(str(first) + ".log").read())
    finally:
        app.kill()
    ev = events(first)
    started = {i for k, i, _ in ev if k == "start"}
    finished = {i for k, i, _ in ev if k == "done"}
    assert started == finished, f"half-done at the drain: {started - finished}"
    assert "exit" in first.read_text()
    assert started < ids, "the first app handled everything: the drain was not tested"

    second = tmp_path / "second.rec"
    app2 = start_worker(s.addr, second)
    try:
        wait_for(lambda: {i for k, i, _ in events(second) if k == "done"} | finished >= ids, 30, "every message done")
        app2.send_signal(signal.SIGTERM)
        assert app2.wait(timeout=20) == 0
    finally:
        app2.kill()
    ev2 = events(second)
    # Messages the first app received but never started were released: their
    # next delivery is still attempt 1. Messages it finished are not redelivered.
    assert not ({i for k, i, _ in ev2 if k == "start"} & finished), "a message finished before the drain came again"
    assert all(a == 1 for k, _, a in ev2 if k == "start"), ev2

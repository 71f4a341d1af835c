"""spool.idempotent with sqlite3: the work commits once per (group, id)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import spool
from conftest import orders_config
from harness import eventually


def msg(id: str = "refund-7", token: int = 1, group: str = "billing") -> spool.Message:
    return spool.Message(id=id, topic="orders", partition=0, offset=0, key=b"c1", payload=b"100", fencing_token=token, group=group)


def wallet(db: Path) -> int:
    with sqlite3.connect(db) as c:
        row = c.execute("SELECT balance FROM wallets WHERE customer = 'c1'").fetchone()
        return int(row[0])


@pytest.fixture
def db(tmp_path: Path) -> Path:
    p = tmp_path / "app.db"
    with sqlite3.connect(p) as c:
        c.execute("CREATE TABLE wallets (customer TEXT PRIMARY KEY, balance INTEGER)")
        c.execute("INSERT INTO wallets VALUES ('c1', 0)")
    return p


def credit(conn: sqlite3.Connection, m: spool.Message) -> None:
    conn.execute("UPDATE wallets SET balance = balance + ? WHERE customer = ?", (int(m.payload), m.key.decode()))


async def test_redelivery_is_skipped(db: Path) -> None:
    stats = spool.IdempotentStats()
    h = spool.idempotent(lambda: sqlite3.connect(db, timeout=5), credit, stats=stats)
    await h(msg(token=1))
    await h(msg(token=2))  # the ack of the first attempt was lost: redelivered
    assert wallet(db) == 100
    assert (stats.processed, stats.duplicates, stats.failed) == (1, 1, 0)
    await h(msg(id="refund-7", group="audit"))  # another group processes it once too
    assert wallet(db) == 200
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT consumer_group, message_id, fencing_token FROM spool_processed ORDER BY consumer_group").fetchall()
    assert rows == [("audit", "refund-7", 1), ("billing", "refund-7", 1)]


async def test_failed_work_leaves_nothing(db: Path) -> None:
    stats = spool.IdempotentStats()
    calls = 0

    def flaky(conn: sqlite3.Connection, m: spool.Message) -> None:
        nonlocal calls
        calls += 1
        credit(conn, m)
        if calls == 1:
            raise spool.Retry(error="downstream busy")

    h = spool.idempotent(lambda: sqlite3.connect(db, timeout=5), flaky, stats=stats)
    with pytest.raises(spool.Retry):
        await h(msg())
    assert wallet(db) == 0  # rolled back with the id record
    await h(msg(token=2))
    assert wallet(db) == 100 and calls == 2
    assert (stats.processed, stats.failed) == (1, 1)


async def test_idempotent_handler_with_spoold(start_spoold: Any, db: Path) -> None:
    s = start_spoold(orders_config())
    async with await spool.connect(s.addr) as c:
        for _ in range(3):  # a producer that retried: the same id three times
            await c.publish("orders", b"100", key="c1", id="refund-7")
    stats = spool.IdempotentStats()
    h = spool.idempotent(lambda: sqlite3.connect(db, timeout=5), credit, stats=stats)
    stop = asyncio.Event()
    task = asyncio.create_task(spool.subscribe("workers", ["orders"], h, addr=s.addr, stop=stop, handle_signals=False))
    await eventually(lambda: stats.processed + stats.duplicates == 3, 20, "three deliveries handled")
    stop.set()
    await asyncio.wait_for(task, 20)
    assert wallet(db) == 100 and stats.duplicates == 2


# Two groups on one topic, both under every fault an unreliable network
# makes (docs/semantics.md, "Testing a handler"); spoold runs with --dev,
# which allows them.
FAULTS_CONFIG = """
topics:
  - name: orders
    partitions: 4
subscriptions:
""" + "".join(
    f"""  - topic: orders
    group: {group}
    max_attempts: 50
    visibility_timeout: 1s
    backoff: {{base: 10ms, max: 50ms, multiplier: 2}}
    faults: {{duplicate: 0.2, lose_ack: 0.2, delay: 0.2, delay_max: 30ms, early_lease_expiry: 0.05, seed: {seed}}}
"""
    for group, seed in (("naive", 1), ("workers", 2))
)


async def test_idempotent_under_fault_injection(start_spoold: Any, db: Path) -> None:
    s = start_spoold(FAULTS_CONFIG, ["--dev"])
    n = 60
    async with await spool.connect(s.addr) as c:
        for i in range(n):
            await c.publish("orders", b"1", key="c1", id=f"credit-{i}")
    seen: dict[str, int] = {}

    async def naive(m: spool.Message) -> None:  # counts its side effects, no idempotency
        seen[m.id] = seen.get(m.id, 0) + 1

    stats = spool.IdempotentStats()
    h = spool.idempotent(lambda: sqlite3.connect(db, timeout=5), credit, stats=stats)
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(spool.subscribe(group, ["orders"], handler, addr=s.addr, stop=stop, handle_signals=False))
        for group, handler in (("naive", naive), ("workers", h))
    ]
    await eventually(lambda: stats.processed == n and len(seen) == n, 60, "every message handled by both groups")
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 20)
    assert sum(seen.values()) > n, "the faults reached no handler: every message came once"
    assert stats.duplicates > 0
    assert wallet(db) == n  # each credit applied exactly once

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

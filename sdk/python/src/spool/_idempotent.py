"""Effectively-once work in the application's own SQL database (DB-API 2.0).

Like Go's spool.Idempotent (sdk/go/idempotent.go): the message id is recorded
in a table whose primary key is (consumer_group, message_id), in the same
transaction as the work. A redelivery of a message whose work committed
finds the id and is acked without redoing the work. The check is on the id
alone; the fencing token is stored beside it for the application's own use.
"""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Literal, Protocol

from spool._message import Message

__all__ = ["idempotent", "IdempotentStats", "DEFAULT_IDEMPOTENT_TABLE"]

DEFAULT_IDEMPOTENT_TABLE = "spool_processed"

Dialect = Literal["postgres", "mysql", "sqlite"]

_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")


class Connection(Protocol):
    def cursor(self) -> Any: ...
    def commit(self) -> Any: ...
    def rollback(self) -> Any: ...
    def close(self) -> Any: ...


#: The work: runs in a thread with the connection whose transaction also
#: records the id. Use it for every write of the work; do not commit or roll
#: back. Its return value or exception is the outcome, as for a handler.
Work = Callable[[Any, Message], object]


@dataclass
class IdempotentStats:
    processed: int = 0  # work and id record committed
    duplicates: int = 0  # skipped and acked: the id was recorded, the work had committed
    failed: int = 0  # rolled back: work raised, or the database failed


def _detect(conn: Any) -> Dialect | None:
    mod = type(conn).__module__.lower()
    if "sqlite" in mod:
        return "sqlite"
    if "mysql" in mod:
        return "mysql"
    if "psycopg" in mod or "pg8000" in mod or "postgres" in mod:
        return "postgres"
    return None


def _insert_sql(dialect: Dialect, table: str) -> str:
    cols = "(consumer_group, message_id, fencing_token, processed_at)"
    if dialect == "mysql":
        return f"INSERT IGNORE INTO {table} {cols} VALUES (%s, %s, %s, %s)"
    ph = "(?, ?, ?, ?)" if dialect == "sqlite" else "(%s, %s, %s, %s)"
    return f"INSERT INTO {table} {cols} VALUES {ph} ON CONFLICT (consumer_group, message_id) DO NOTHING"


def create_table_sql(dialect: Dialect, table: str) -> str:
    """The table of processed messages, as sdk/go creates it."""
    if dialect == "postgres":
        types = ("TEXT", "TEXT", "BIGINT", "TIMESTAMPTZ")
    elif dialect == "mysql":
        types = ("VARBINARY(255)", "VARBINARY(255)", "BIGINT UNSIGNED", "DATETIME(6)")
    else:
        types = ("TEXT", "TEXT", "INTEGER", "TIMESTAMP")
    return (
        f"CREATE TABLE IF NOT EXISTS {table} (\n"
        f"\tconsumer_group {types[0]} NOT NULL,\n"
        f"\tmessage_id {types[1]} NOT NULL,\n"
        f"\tfencing_token {types[2]} NOT NULL,\n"
        f"\tprocessed_at {types[3]} NOT NULL,\n"
        "\tPRIMARY KEY (consumer_group, message_id)\n)"
    )


def idempotent(
    connect: Callable[[], Any],
    work: Work,
    *,
    table: str = DEFAULT_IDEMPOTENT_TABLE,
    dialect: Dialect | None = None,
    create_table: bool = True,
    release: Callable[[Any], object] | None = None,
    stats: IdempotentStats | None = None,
) -> Callable[[Message], Any]:
    """Returns an async handler that runs ``work`` at most once per (consumer
    group, message id) among the attempts that commit.

    ``connect()`` returns a DB-API connection (sqlite3, psycopg, PyMySQL...);
    it is called per delivery, in a worker thread, and the connection is
    given back with ``release(conn)`` (default ``conn.close()``: pass your
    pool's put-back function to pool connections). For each delivery the
    handler inserts (m.group, m.id, m.fencing_token, now) and then:

    - if the id is already recorded, rolls back and acks without calling work;
    - otherwise calls ``work(conn, m)``: an exception (Retry and DeadLetter
      included) rolls back and is the outcome; a normal return commits and
      acks; a failed commit retries (and if the commit had in fact happened,
      the retry is skipped as a duplicate).

    Effects outside the transaction (an e-mail, an HTTP call) are not
    covered: make them idempotent on their own (send m.id as the
    downstream's idempotency key). SQLite: open it with a timeout (the
    default 5 s) so that two attempts at once wait instead of failing.
    """
    if len(table) > 128 or not _TABLE.match(table):
        raise ValueError(f"spool.idempotent: table={table!r}: use letters, digits and '_', optionally prefixed by a schema and '.'")
    if dialect is not None and dialect not in ("postgres", "mysql", "sqlite"):
        raise ValueError(f"spool.idempotent: dialect={dialect!r}: use 'postgres', 'mysql' or 'sqlite'")
    st = stats if stats is not None else IdempotentStats()
    lock = threading.Lock()
    created = not create_table
    give_back = release if release is not None else (lambda c: c.close())

    def run(m: Message) -> object:
        nonlocal created
        if not m.id:
            with lock:
                st.failed += 1
            raise RuntimeError("spool.idempotent: the message has no id to record")
        conn = connect()
        try:
            d: Dialect | None = dialect or _detect(conn)
            if d is None:
                raise ValueError(
                    f"spool.idempotent: cannot tell the SQL dialect of {type(conn).__module__}.{type(conn).__name__}: "
                    "pass dialect='postgres', 'mysql' or 'sqlite'"
                )
            if not created:
                with lock:
                    if not created:
                        cur = conn.cursor()
                        try:
                            cur.execute(create_table_sql(d, table))
                            conn.commit()
                        except Exception as e:
                            conn.rollback()
                            raise RuntimeError(
                                f"spool.idempotent: creating table {table} (create it with your migrations and pass "
                                f"create_table=False to skip this): {e}"
                            ) from e
                        created = True
            return _once(conn, d, m)
        finally:
            give_back(conn)

    def _once(conn: Any, d: Dialect, m: Message) -> object:
        try:
            cur = conn.cursor()
            cur.execute(_insert_sql(d, table), (m.group, m.id, m.fencing_token, datetime.now(timezone.utc).replace(tzinfo=None)))
            n = cur.rowcount
        except Exception as e:
            conn.rollback()
            with lock:
                st.failed += 1
            raise RuntimeError(f"spool.idempotent: recording message {m.id!r} of group {m.group!r} in {table}: {e}") from e
        if n == 0:
            conn.rollback()
            with lock:
                st.duplicates += 1
            return None
        try:
            result = work(conn, m)
        except BaseException:
            conn.rollback()
            with lock:
                st.failed += 1
            raise
        try:
            conn.commit()
        except Exception as e:
            with lock:
                st.failed += 1
            raise RuntimeError(f"spool.idempotent: commit: {e}") from e
        with lock:
            st.processed += 1
        return result

    async def handler(m: Message) -> object:
        return await asyncio.to_thread(run, m)

    return handler

"""An insert-only keyed table on SQLite (a file) or PostgreSQL (a URL): the store under both caches.

What: `KeyedTable(location, name, columns, key)` opens (and creates) one table; `get` looks rows
up by key, `insert` adds rows and keeps the first row stored under a key
(`INSERT ... ON CONFLICT DO NOTHING`: first writer wins, nothing is ever updated), `count`
counts them. The location picks the backend — a `postgresql://` URL selects PostgreSQL
(psycopg 3, imported only then), anything else is a SQLite file path — so generation.cache and
rewards.cache keep one interface and one key layout for both, and the SQL is the same text on
both (only the parameter marker differs).

Why two backends: SQLite (WAL) is the fastest store on one machine (see generation.cache), but
its WAL needs shared memory between writers, which a network filesystem does not give, so
workers on several machines sharing `$CASCADE_HOME` must not write one SQLite file; a
PostgreSQL server (spec.storage, `storage.backend: postgres`) takes any number of writers
from anywhere. Each insert batch is one transaction on both: a committed batch survives a
killed process (SQLite: WAL + synchronous=FULL; PostgreSQL: its own WAL).

One connection per object, opened on first use and guarded by a lock (threads may share an
object); it is not pickled (a copy in another process reconnects). After a database error the
PostgreSQL connection is dropped, so the next call reconnects.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from spec.storage import is_postgres_url

_CHUNK = 900  # keys per lookup (below SQLite's oldest bound-parameter limit, divided by key width)
_TYPES = {"bytes": ("BLOB", "BYTEA"), "text": ("TEXT", "TEXT"), "real": ("REAL", "DOUBLE PRECISION")}


class Column(NamedTuple):
    """One column: name, logical type (`bytes`, `text`, `real`) and whether NULL is refused."""

    name: str
    kind: str
    not_null: bool = False


def database_errors(location: str | Path) -> tuple[type[BaseException], ...]:
    """The exception types a store at `location` raises for database trouble (for fallbacks)."""
    if is_postgres_url(str(location)):
        return (sqlite3.Error, _psycopg().Error)
    return (sqlite3.Error,)


class KeyedTable:
    """Table `name` at `location` (a SQLite file path or a `postgresql://` URL), keyed by `key`."""

    def __init__(self, location: str | Path, name: str, columns: Sequence[Column], key: Sequence[str],
                 timeout_s: float = 60.0):
        self.postgres = is_postgres_url(str(location))
        self.location = str(location) if self.postgres else Path(location)
        self.name, self.columns, self.key, self.timeout_s = name, list(columns), list(key), timeout_s
        self._marker = "%s" if self.postgres else "?"
        self._lock = threading.RLock()
        self._db: Any = None
        with self._connection() as db:  # creates the table; a bad location fails here
            self._create(db)

    # -- connections -------------------------------------------------------------------------
    def _connect(self) -> Any:
        if self.postgres:
            return _psycopg().connect(self.location, autocommit=True, connect_timeout=max(1, int(self.timeout_s)))
        self.location.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.location, timeout=self.timeout_s, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")  # readers never block the writer, nor it them
        db.execute("PRAGMA synchronous=FULL")  # fsync the WAL at every commit
        return db

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        with self._lock:
            if self._db is None:
                self._db = self._connect()
            try:
                yield self._db
            except BaseException:
                if self.postgres:  # a broken or aborted session: start afresh next time
                    self.close()
                raise

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        with self._connection() as db:
            if self.postgres:
                with db.transaction():
                    yield db
                return
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _create(self, db: Any) -> None:
        cols = ", ".join(f"{c.name} {_TYPES[c.kind][self.postgres]}{' NOT NULL' if c.not_null else ''}"
                         for c in self.columns)
        ddl = f"CREATE TABLE IF NOT EXISTS {self.name} ({cols}, PRIMARY KEY ({', '.join(self.key)}))"
        if not self.postgres:
            db.execute(ddl)
            return
        # Two first opens at once race inside CREATE TABLE IF NOT EXISTS (a duplicate pg_type row):
        # a transaction-scoped advisory lock on the table name lets one create it, the other see it.
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"cascade:{self.name}",))
            db.execute(ddl)

    # -- queries -----------------------------------------------------------------------------
    def _params(self, n: int) -> str:
        return ", ".join([self._marker] * n)

    def get(self, keys: Iterable[Any], select: Sequence[str]) -> dict[Any, tuple]:
        """{key: row of `select` (column names or SQL expressions)} for the stored ones among `keys`.

        A key is a value for a one-column key, a tuple of values otherwise (as returned)."""
        keys = list(dict.fromkeys(keys))
        width = len(self.key)
        out: dict[Any, tuple] = {}
        step = max(1, _CHUNK // width)
        with self._connection() as db:
            for start in range(0, len(keys), step):
                chunk = keys[start:start + step]
                if width == 1:
                    where, params = f"{self.key[0]} IN ({self._params(len(chunk))})", chunk
                else:
                    rows = ", ".join([f"({self._params(width)})"] * len(chunk))
                    where, params = f"({', '.join(self.key)}) IN (VALUES {rows})", [v for k in chunk for v in k]
                query = f"SELECT {', '.join(self.key)}, {', '.join(select)} FROM {self.name} WHERE {where}"
                for row in db.execute(query, params).fetchall():
                    found = row[0] if width == 1 else tuple(row[:width])
                    out[_plain(found)] = tuple(row[width:])
        return out

    def insert(self, rows: Sequence[Sequence[Any]]) -> int:
        """Add `rows` (every column, in order) in one transaction; a key already stored keeps its
        first row (whoever wrote it). Returns how many rows were new."""
        if not rows:
            return 0
        # One key order for every writer: two batches that share keys then lock them in the same
        # order, so concurrent PostgreSQL inserts wait for each other instead of deadlocking.
        at = [[c.name for c in self.columns].index(k) for k in self.key]
        rows = sorted(rows, key=lambda row: [row[i] for i in at])
        sql = (f"INSERT INTO {self.name} ({', '.join(c.name for c in self.columns)}) "
               f"VALUES ({self._params(len(self.columns))}) ON CONFLICT DO NOTHING")
        with self._transaction() as db:
            if self.postgres:
                cur = db.cursor()
                cur.executemany(sql + " RETURNING 1", rows, returning=True)
                new = 0
                while True:  # one result set per row: a row back = a row inserted
                    new += len(cur.fetchall())
                    if not cur.nextset():
                        return new
            before = db.total_changes
            db.executemany(sql, rows)
            return db.total_changes - before

    def count(self) -> int:
        """Rows stored."""
        with self._connection() as db:
            return int(db.execute(f"SELECT COUNT(*) FROM {self.name}").fetchone()[0])

    def close(self) -> None:
        """Close the connection (every committed batch is already stored)."""
        with self._lock:
            if self._db is not None:
                db, self._db = self._db, None
                db.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_db"], state["_lock"] = None, None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()


def _psycopg() -> Any:
    """psycopg 3, imported on first use of a PostgreSQL location; a clear error when it is missing."""
    try:
        import psycopg
    except ImportError as err:
        raise ImportError("a postgresql:// cache location needs psycopg 3: run `make postgres` "
                          "(scripts/setup_postgres.sh; the `postgres` extra)") from err
    return psycopg


def _plain(value: Any) -> Any:
    """bytes for a BLOB/BYTEA value (psycopg may hand back a memoryview), the value otherwise."""
    return bytes(value) if isinstance(value, memoryview) else value


__all__ = ["Column", "KeyedTable", "database_errors"]

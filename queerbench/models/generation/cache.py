"""An on-disk response cache (SQLite): every reply is committed the moment it arrives.

Why SQLite: one file, atomic commits, safe to kill mid-run. A rerun with the same model fingerprint, prompt, sample
index and decoding settings finds the stored reply and makes no new call; a killed run resumes where it stopped.
The database runs in write-ahead-log mode with ``synchronous=NORMAL``: a commit is then ~0.01 ms instead of one
fsync (~20 ms here), which would otherwise serialise a concurrent endpoint run on the thread that stores the replies;
every committed reply still survives the process being killed (only a power loss could undo the last few commits,
never corrupt the file). One cache may be used from several threads (an endpoint's workers store the replies they
receive; the run's thread reads). Replies stored by several threads at once are committed together (a group
commit): each thread returns once its reply is committed, and one thread writes all that are waiting in one statement
and one commit. Why: every call into SQLite lets go of Python's GIL, and taking it back among dozens of busy threads
costs milliseconds, so a commit per reply, one thread at a time, would cap a run at a few hundred replies a second. A
file that is not such a database (cut short, overwritten) is one line naming it and the
fix (:class:`~queerbench.base.files.CorruptOutputError`); a locked one is SQLite's own error. A SQLite file of another
kind (another program's database, a reply cache of another layout) is refused in one line when it is opened, before
anything in it is changed, rather than failing at the first reply with ``sqlite3.OperationalError``. Only replies are
stored: a failed call is never written here (it is reported in the run's output and retried on the next run), so an
error can never come back as if it were a reply.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from queerbench.base.files import corrupt_output

__all__ = ["ResponseCache", "cache_key"]

_COLUMNS = ("key", "prompt_id", "sample", "status", "text", "error", "meta", "created")
"""The columns of the ``responses`` table, in order (what :meth:`ResponseCache.put` writes)."""


def cache_key(fingerprint: dict[str, Any], prompt: str, sample: int, settings: dict[str, Any]) -> str:
    """A stable key for one call: model fingerprint, exact prompt text, sample index and decoding settings."""
    blob = json.dumps({"model": fingerprint, "prompt": prompt, "sample": sample, "settings": settings}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """Replies keyed by :func:`cache_key`, stored in ``path`` (created if absent)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), check_same_thread=False)  # used under self._db_lock
        self._db_lock = threading.Lock()
        self._cond = threading.Condition()  # guards the group commit's state below
        self._pending: list[tuple[Any, ...]] = []  # rows waiting to be written, in ticket order
        self._queued = 0  # tickets handed out
        self._committed = 0  # every ticket up to this one is committed
        self._writing = False
        self._failed: BaseException | None = None
        self._closed = False
        try:
            self._check_schema()  # before the pragmas: a foreign file is left exactly as it was
            self._db.execute("PRAGMA journal_mode=WAL")  # where the filesystem cannot, SQLite keeps its default journal
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, prompt_id TEXT, sample INTEGER, "
                "status TEXT, text TEXT, error TEXT, meta TEXT, created REAL)"
            )
            self._db.commit()
            self._db.execute("SELECT COUNT(*) FROM responses").fetchone()  # reads the table: a damaged file fails here
        except sqlite3.DatabaseError as exc:
            self._db.close()
            if isinstance(exc, sqlite3.OperationalError):  # locked, no space, read-only: not the file's contents
                raise
            raise corrupt_output(self.path, exc, "delete it and rerun (the replies it held are asked again)") from None
        except ValueError:
            self._db.close()
            raise

    def _check_schema(self) -> None:
        """Refuse, in one line, a database that is not a reply cache of this layout: its ``responses`` table has other
        columns (another version), or it has other tables and no ``responses`` (another program's file)."""
        tables = [r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        if "responses" in tables:
            columns = tuple(r[1] for r in self._db.execute("PRAGMA table_info(responses)"))
            if columns == _COLUMNS:
                return
            found = f"its responses table has the columns {', '.join(columns)}; queerbench's has {', '.join(_COLUMNS)}"
        elif tables:
            shown = ", ".join(tables[:3]) + (" …" if len(tables) > 3 else "")
            found = f"it holds the tables {shown} and no responses table"
        else:
            return  # a new, empty database: the table is created next
        raise ValueError(
            f"{self.path} is not a queerbench reply cache of this version ({found}); delete it (the replies it held "
            "are asked again) or choose another --out"
        )

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored reply for ``key`` (``{"text", "meta"}``), or ``None``."""
        with self._db_lock:
            row = self._db.execute(
                "SELECT text, meta FROM responses WHERE key = ? AND status = 'ok'", (key,)
            ).fetchone()
        return None if row is None else {"text": row[0], "meta": json.loads(row[1] or "{}")}

    def put(self, key: str, prompt_id: str, sample: int, text: str, meta: dict[str, Any]) -> None:
        """Store one reply and commit at once (``text`` must be a string: failures are never stored)."""
        if not self.keep(key, prompt_id, sample, text, meta):
            raise sqlite3.ProgrammingError(f"the reply cache {self.path} is closed")

    def keep(self, key: str, prompt_id: str, sample: int, text: str, meta: dict[str, Any]) -> bool:
        """:meth:`put`, from any thread: returns once the reply is committed (with those other threads stored
        meanwhile); False, storing nothing, when the cache was already closed (a reply that arrived after its run
        stopped). A failed write (a full disk) is raised in every thread whose reply it held."""
        if not isinstance(text, str):
            raise TypeError("ResponseCache.put stores replies only (text must be a str); errors are not cached")
        row = (key, prompt_id, sample, text, json.dumps(meta, sort_keys=True), time.time())
        with self._cond:
            if self._closed:
                return False
            self._pending.append(row)
            self._queued += 1
            ticket = self._queued
            while self._committed < ticket:
                if self._failed is not None:
                    raise self._failed
                if self._writing:
                    self._cond.wait()
                    continue
                self._write_pending()
        return True

    def _write_pending(self) -> None:
        """Write every waiting row (called holding ``self._cond``, which is let go while SQLite writes)."""
        batch, self._pending = self._pending, []
        self._writing = True
        self._cond.release()
        try:
            with self._db_lock:
                for start in range(0, len(batch), 100):  # 600 parameters a statement, under every SQLite's limit
                    rows = batch[start : start + 100]
                    values = ", ".join(["(?, ?, ?, 'ok', ?, NULL, ?, ?)"] * len(rows))
                    self._db.execute(f"INSERT OR REPLACE INTO responses VALUES {values}", [v for r in rows for v in r])
                self._db.commit()
        except BaseException as exc:
            self._failed = exc
            raise
        finally:
            self._cond.acquire()
            self._writing = False
            if self._failed is None:
                self._committed += len(batch)
            self._cond.notify_all()

    def count(self) -> int:
        """How many replies are stored."""
        with self._db_lock:
            return int(self._db.execute("SELECT COUNT(*) FROM responses WHERE status = 'ok'").fetchone()[0])

    def close(self) -> None:
        """Close the database, once the replies other threads are storing are committed."""
        with self._cond:
            self._closed = True
            while (self._writing or self._pending) and self._failed is None:
                self._cond.wait()
        with self._db_lock:
            self._db.close()

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""An on-disk response cache (SQLite): every reply is committed the moment it arrives.

Why SQLite: one file, atomic commits, safe to kill mid-run. A rerun with the same model fingerprint, prompt, sample
index and decoding settings finds the stored reply and makes no new call; a killed run resumes where it stopped.
The database runs in write-ahead-log mode with ``synchronous=NORMAL``: a commit is then ~0.01 ms instead of one
fsync (~20 ms here), which would otherwise serialise a concurrent endpoint run on the thread that stores the replies;
every committed reply still survives the process being killed (only a power loss could undo the last few commits,
never corrupt the file). A file that is not such a database (cut short, overwritten) is one line naming it and the
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
        self._db = sqlite3.connect(str(self.path))
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
        row = self._db.execute("SELECT text, meta FROM responses WHERE key = ? AND status = 'ok'", (key,)).fetchone()
        return None if row is None else {"text": row[0], "meta": json.loads(row[1] or "{}")}

    def put(self, key: str, prompt_id: str, sample: int, text: str, meta: dict[str, Any]) -> None:
        """Store one reply and commit at once (``text`` must be a string: failures are never stored)."""
        if not isinstance(text, str):
            raise TypeError("ResponseCache.put stores replies only (text must be a str); errors are not cached")
        self._db.execute(
            "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, 'ok', ?, NULL, ?, ?)",
            (key, prompt_id, sample, text, json.dumps(meta, sort_keys=True), time.time()),
        )
        self._db.commit()

    def count(self) -> int:
        """How many replies are stored."""
        return int(self._db.execute("SELECT COUNT(*) FROM responses WHERE status = 'ok'").fetchone()[0])

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

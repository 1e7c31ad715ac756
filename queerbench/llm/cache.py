"""An on-disk response cache (SQLite): every response is committed the moment it arrives.

Why SQLite: one file, atomic commits, safe to kill mid-run. A rerun with the same model, prompt, sample index and
decoding settings finds the stored answer and makes no new call; a killed run resumes where it stopped. Failed calls
are stored too (status ``error``) so they are counted and reported, but a rerun retries them.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

__all__ = ["ResponseCache", "cache_key"]


def cache_key(fingerprint: dict[str, Any], prompt: str, sample: int, settings: dict[str, Any]) -> str:
    """A stable key for one call: model fingerprint, exact prompt text, sample index and decoding settings."""
    blob = json.dumps({"model": fingerprint, "prompt": prompt, "sample": sample, "settings": settings}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """Responses keyed by :func:`cache_key`, stored in ``path`` (created if absent)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path))
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, prompt_id TEXT, sample INTEGER, "
            "status TEXT, text TEXT, error TEXT, meta TEXT, created REAL)"
        )
        self._db.commit()

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored successful response for ``key``, or ``None`` (errors are not final: they are retried)."""
        row = self._db.execute("SELECT text, meta FROM responses WHERE key = ? AND status = 'ok'", (key,)).fetchone()
        return None if row is None else {"text": row[0], "meta": json.loads(row[1] or "{}")}

    def put(self, key: str, prompt_id: str, sample: int, text: str | None, error: str | None, meta: dict) -> None:
        """Store one response (``error`` set means the call failed) and commit at once."""
        status = "error" if error is not None else "ok"
        if status == "error" and self.get(key) is not None:
            return  # never overwrite a good answer with a later failure
        self._db.execute(
            "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (key, prompt_id, sample, status, text, error, json.dumps(meta, sort_keys=True), time.time()),
        )
        self._db.commit()

    def count(self, status: str | None = None) -> int:
        """How many responses are stored (optionally only those with ``status``)."""
        if status is None:
            return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])
        return int(self._db.execute("SELECT COUNT(*) FROM responses WHERE status = ?", (status,)).fetchone()[0])

    def close(self) -> None:
        """Close the database."""
        self._db.close()

"""One writer per output folder: a command that writes a folder holds an exclusive lock on it for its whole life.

Two processes on one folder (a command started twice, a scheduler retrying a job that is still running) would
write parts, replies and reports over each other. :func:`folder_lock` takes an operating-system lock
(:class:`filelock.FileLock`) on ``OUT/.queerbench.lock`` without waiting: a second command on a locked folder stops
at once with one line that names the process holding it (its pid, host, command and start, written beside the lock
in ``OUT/.queerbench.lock.owner`` while it is held) and what to do. The lock belongs to the open file, so the
operating system drops it when its process ends however it ends: a lock left by a killed process never blocks a
rerun (the file stays, empty and harmless; the owner note of a dead process is ignored and replaced).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["LOCK_FILES", "FolderBusyError", "folder_lock"]

LOCK_FILE = ".queerbench.lock"
OWNER_FILE = ".queerbench.lock.owner"
LOCK_FILES = frozenset({LOCK_FILE, OWNER_FILE})
"""The names the lock puts in a folder: whoever reads a folder's contents leaves them out."""


_HELD: set[tuple[str, int]] = set()
"""The folders this process holds, by thread: the same thread may enter a folder's lock again (the others may not)."""


class FolderBusyError(FileExistsError):
    """Another process holds the folder's lock (the message names it and what to do)."""


def _owner(folder: Path) -> str:
    """Who holds ``folder``'s lock, as its owner note says ("another process" when there is none)."""
    try:
        note = json.loads((folder / OWNER_FILE).read_text())
        return (
            f"process {note['pid']} on {note['host']}, started {note['started']}: {note['command']}"
            if isinstance(note, dict)
            else "another process"
        )
    except (OSError, ValueError, KeyError):
        return "another process"


@contextmanager
def folder_lock(folder: Path, what: str = "run") -> Iterator[None]:
    """Hold the exclusive lock on ``folder`` for the ``with`` block; else a one-line :class:`FolderBusyError` naming
    the holder. ``what`` names the holder's work in that message. A folder this call created is removed again when
    the block leaves nothing in it but the lock, and an empty folder the user made is left empty. The thread that holds a folder may enter its lock again (a command
    that locks before it calls the library, which locks too); any other thread or process is refused."""
    from filelock import FileLock, Timeout

    held = (str(folder.resolve()), threading.get_ident())
    if held in _HELD:  # this thread holds it already (a command that locks before calling the library, which locks)
        yield
        return
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    was_empty = not set(os.listdir(folder)) - LOCK_FILES
    lock = FileLock(folder / LOCK_FILE, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise FolderBusyError(
            f"output folder {folder} is in use by another queerbench {what} ({_owner(folder)}); wait for it to "
            "finish (rerun the same command then: it resumes) or choose another --out"
        ) from None
    note = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["queerbench", *sys.argv[1:]]),
    }
    owner = folder / OWNER_FILE
    _HELD.add(held)
    try:
        with suppress(OSError):  # a read-only folder: the command's own write fails with its message
            owner.write_text(json.dumps(note))
        yield
    finally:
        _HELD.discard(held)
        owner.unlink(missing_ok=True)
        if was_empty and folder.is_dir() and set(os.listdir(folder)) <= LOCK_FILES:
            (folder / LOCK_FILE).unlink(missing_ok=True)  # the folder holds nothing but the lock: leave no trace
            if created:
                folder.rmdir()
        lock.release()

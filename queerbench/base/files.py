"""Small helpers for writing files so that nothing half-written is ever left behind, and for reading the outputs back
with one clear line when one of them is corrupt or truncated (:func:`read_parquet`, :func:`read_json`).

The temporary files and folders come from :mod:`tempfile`, which creates them private (0600 / 0700) whatever the
umask; before they are renamed into place they get the mode an ordinary ``open()``/``mkdir()`` would give
(0666 / 0777 minus the umask), so that colleagues sharing a results folder can read them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "CorruptOutputError",
    "atomic_dir",
    "atomic_path",
    "corrupt_output",
    "current_umask",
    "read_json",
    "read_parquet",
    "write_json",
    "write_text",
]


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (``/proc/self/status`` on Linux); else by
    the set-and-restore idiom."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(dest: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``dest``; on success rename it onto ``dest``, on failure delete it."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600: honour the umask like open() does
    finally:
        os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(dest: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``dest`` atomically (UTF-8)."""
    with atomic_path(dest) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(dest)


def write_json(dest: str | os.PathLike[str], data: Any) -> Path:
    """Write ``data`` as indented JSON to ``dest`` atomically."""
    return write_text(dest, json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False, default=str) + "\n")


@contextmanager
def atomic_dir(dest: str | os.PathLike[str], *, overwrite: bool, is_ours: Callable[[Path], bool]) -> Iterator[Path]:
    """Build a directory in a temporary sibling and move it onto ``dest`` only when the block succeeds.

    An existing non-empty ``dest`` is replaced only with ``overwrite=True``, and only if ``is_ours(dest)`` says it
    holds what this command writes; otherwise ``FileExistsError`` names the problem and the fix.
    """
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        if not overwrite:
            raise FileExistsError(
                f"output folder {dest} already exists and is not empty; choose another --out or pass --overwrite"
            )
        if not dest.is_dir() or not is_ours(dest):
            raise FileExistsError(
                f"output folder {dest} holds something else (not a previous output of this command); "
                "refusing to overwrite it — choose another --out"
            )
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part"))
    os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp makes 0700: honour the umask like mkdir() does
    try:
        yield tmp
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------------------ reading ---
class CorruptOutputError(ValueError):
    """An output file (predictions, a chunk, scores, run record, reply cache) that cannot be read back: corrupt or
    truncated (a disk that filled up, a copy cut short, an editor). A ``ValueError``: the CLI prints it as one line."""


def corrupt_output(
    path: str | os.PathLike[str], exc: BaseException, fix: str = "delete it and rerun"
) -> CorruptOutputError:
    """The one-line error for an unreadable output file: which file, what the reader said (its first line, cut to
    100 characters) and the fix."""
    said = " ".join(str(exc).split())[:100] or type(exc).__name__
    return CorruptOutputError(f"{path} is corrupt or truncated ({type(exc).__name__}: {said}); {fix}")


_NOT_CORRUPT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
"""Reading errors that say nothing about the file's contents: they propagate as they are."""


def read_parquet(path: str | os.PathLike[str], *, fix: str = "delete it and rerun", **options: Any) -> Any:
    """``pandas.read_parquet(path)``; a file pyarrow cannot read (no magic bytes, cut short, not Parquet) raises
    :class:`CorruptOutputError` naming it and ``fix``. A missing file is a ``FileNotFoundError`` as usual."""
    import pandas as pd

    try:
        return pd.read_parquet(path, **options)
    except _NOT_CORRUPT:
        raise
    except (OSError, ValueError, EOFError) as exc:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise corrupt_output(path, exc, fix) from None


def read_json(path: str | os.PathLike[str], *, fix: str = "delete it and rerun") -> Any:
    """The JSON document in ``path`` (UTF-8); a file that is not JSON (cut short, empty, binary) raises
    :class:`CorruptOutputError` naming it and ``fix``. A missing file is a ``FileNotFoundError`` as usual."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except _NOT_CORRUPT:
        raise
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise corrupt_output(path, exc, fix) from None

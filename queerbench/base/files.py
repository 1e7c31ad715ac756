"""Small helpers for writing files so that nothing half-written is ever left behind (a command's output folder is
built aside and moved into place, replacing only the files the command wrote there before: :func:`replace_own_files`),
and for reading the outputs back with one clear line when one of them is corrupt, truncated or not the JSON object it
must be (:func:`read_parquet`, :func:`read_json`, :func:`read_json_object`).

The temporary files and folders come from :mod:`tempfile`, which creates them private (0600 / 0700) whatever the
umask; before they are renamed into place they get the mode an ordinary ``open()``/``mkdir()`` would give
(0666 / 0777 minus the umask), so that colleagues sharing a results folder can read them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Collection, Iterator, Sequence
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
    "read_json_object",
    "read_parquet",
    "replace_own_files",
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
    """Yield a temporary path next to ``dest``; on success rename it onto ``dest``, on failure delete it. A write
    that fails with an ``OSError`` naming no file (a full disk under a parquet writer) is raised naming ``dest``."""
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
    except OSError as exc:
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror or str(exc), str(dest)) from exc
        raise
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


@contextmanager
def replace_own_files(
    dest: str | os.PathLike[str],
    *,
    overwrite: bool,
    own_files: Callable[[Path], Collection[str] | None],
    command: str,
) -> Iterator[Path]:
    """Build a command's output folder in a temporary sibling and move it into ``dest`` once the block succeeds,
    replacing only the files the command itself wrote there before: a researcher's own files in the folder (notes, a
    ``.git`` folder, a ``.gitattributes``) are never touched.

    ``dest`` absent or empty: the built folder becomes ``dest`` in one rename. Otherwise ``overwrite`` must be set
    and ``own_files(dest)`` must recognise an earlier output of ``command`` there, returning the paths (relative,
    ``/``-separated) of the files that output consists of (``None``: not an output of ``command``). Those files are
    moved aside, the new ones moved in, and the folders the old files leave empty removed; a failure on the way puts
    the old files back. A file of the new output at a path that holds a file the command did not write stops before
    anything moves. Every refusal is a one-line ``FileExistsError`` naming the folder and the fix.
    """
    dest = Path(dest)
    old: list[str] = []
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        if not dest.is_dir():
            raise FileExistsError(f"output folder {dest} is a file; choose another --out")
        if not overwrite:
            raise FileExistsError(
                f"output folder {dest} already exists and is not empty; choose another --out or pass --overwrite "
                f"(it replaces only the files an earlier `{command}` wrote there)"
            )
        known = own_files(dest)
        if known is None:
            raise FileExistsError(
                f"output folder {dest} holds something else (not a previous output of `{command}`); "
                "refusing to overwrite it — choose another --out"
            )
        old = sorted(rel for rel in {_safe_relpath(dest, r) for r in known} if rel and _is_file(dest / rel))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part"))
    os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp makes 0700: honour the umask like mkdir() does
    backup: Path | None = None
    try:
        yield tmp
        if not old and (not dest.exists() or not any(dest.iterdir())):
            if dest.exists():
                dest.rmdir()
            os.replace(tmp, dest)
            return
        new = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if not p.is_dir())
        foreign = [rel for rel in new if rel not in old and _blocked(dest, rel, old)]
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise FileExistsError(
                f"output folder {dest} holds {shown}, which `{command}` would write but did not write there itself; "
                "move it away or choose another --out (nothing was changed)"
            )
        backup = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".old"))
        moved_out: list[str] = []
        moved_in: list[str] = []
        try:
            for rel in old:
                (backup / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(dest / rel, backup / rel)
                moved_out.append(rel)
            for rel in new:
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp / rel, dest / rel)
                moved_in.append(rel)
        except BaseException:
            for rel in moved_in:
                (dest / rel).unlink(missing_ok=True)
            for rel in moved_out:
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(backup / rel, dest / rel)
            raise
        _prune_empty(dest, old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)


def _safe_relpath(root: Path, rel: str) -> str | None:
    """``rel`` as a normalised relative path inside ``root``, or None for one that leads outside it."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts:
        return None
    return Path(*parts).as_posix()


def _is_file(path: Path) -> bool:
    return path.is_symlink() or path.is_file()


def _blocked(dest: Path, rel: str, old: Sequence[str]) -> bool:
    """Whether moving a new file to ``dest/rel`` would replace (or need to replace) something not in ``old``: the
    path itself, or a folder on the way that is a file."""
    target = dest / rel
    if target.exists() or target.is_symlink():
        return True
    return any(
        (dest / parent).exists() and not (dest / parent).is_dir() and parent.as_posix() not in old
        for parent in Path(rel).parents
        if parent != Path(".")
    )


def _prune_empty(dest: Path, removed: Sequence[str]) -> None:
    """Remove the folders below ``dest`` that the removed files left empty (deepest first)."""
    folders = {parent for rel in removed for parent in Path(rel).parents if parent != Path(".")}
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):  # not empty (a file of the user's, or of the new output) or already gone
            (dest / folder).rmdir()


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


def read_json_object(path: str | os.PathLike[str], *, fix: str = "delete it and rerun") -> dict[str, Any]:
    """The JSON object in ``path``, as :func:`read_json` reads it; a file holding another JSON value (a list, a
    string, a number: a hand edit, another tool's file) raises :class:`CorruptOutputError` saying that it must hold
    a JSON object, naming it and ``fix``, so that no reader of a run's records fails later with an ``AttributeError``."""
    data = read_json(path, fix=fix)
    if not isinstance(data, dict):
        raise CorruptOutputError(f"{path} must hold a JSON object, not {_json_kind(data)}; {fix}")
    return data


def _json_kind(value: Any) -> str:
    """``a JSON list``, ``a JSON string``, … (for the one-line error of a file holding the wrong JSON value)."""
    if isinstance(value, list):
        return "a JSON list"
    if isinstance(value, str):
        return "a JSON string"
    if isinstance(value, bool) or value is None:
        return f"JSON {json.dumps(value)}"
    return "a JSON number"

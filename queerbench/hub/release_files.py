"""What a release build consists of, file by file, and what its push uploads: exactly those files.

``release build`` records every file it writes (its path in the build and its SHA-256) in ``release.json``
(:func:`record`). ``release build --overwrite`` replaces only those files (:func:`own_files`, for
:func:`queerbench.base.files.replace_own_files`): a ``NOTES.md`` or a ``.git`` folder the user added stays.
``release push`` uploads only recorded files, each unchanged (:func:`checked_files`), from a copy read once and checked
again (:func:`staged`): a file the build did not write (a ``.env``), a symbolic link (to a private file), a changed
file, or a ``release.json`` that names a folder outside the build is refused in one line before anything is uploaded.
Python's ``__pycache__`` folders (left by trying an app locally) are never uploaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from queerbench.hub.package_index import ReleaseError

__all__ = ["MANIFEST", "checked_files", "own_files", "read_regular", "record", "sha256", "staged"]

MANIFEST = "release.json"
_BUILT = ("dataset", "metric", "space", "dist")
_FOLDER_NAME = re.compile(r"[A-Za-z0-9][\w-]*")


def sha256(path: Path) -> str:
    """The SHA-256 of the file at ``path``, in hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_regular(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file, opened without following a symbolic link (None otherwise), so
    that what a push uploads is never what a link points at."""
    try:
        handle = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(handle, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            return None
        return stream.read()


def record(build: Path) -> dict[str, str]:
    """``{path in the build: sha256}`` of every file under ``build`` (written before ``release.json`` is)."""
    return {p.relative_to(build).as_posix(): sha256(p) for p in sorted(build.rglob("*")) if p.is_file()}


def own_files(folder: Path) -> list[str] | None:
    """The files an earlier ``release build`` wrote in ``folder`` (None when it holds no release manifest): the
    manifest and the files it records; a build of an earlier queerbench, which recorded none, wrote every file of its
    ``dataset``, ``metric``, ``space`` and ``dist`` folders."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("repos"), dict):
        return None
    if isinstance(manifest.get("files"), dict):
        return [MANIFEST, *map(str, manifest["files"])]
    built = [folder / name for name in _BUILT if (folder / name).is_dir() and not (folder / name).is_symlink()]
    return [MANIFEST, *(p.relative_to(folder).as_posix() for root in built for p in root.rglob("*") if p.is_file())]


def _build_folder(folder: Path, name: Any, what: str) -> Path:
    """``folder/name``, a folder of the build: one plain name, a real folder (not a symbolic link); else one line."""
    path = folder / str(name)
    if not isinstance(name, str) or not _FOLDER_NAME.fullmatch(name) or path.is_symlink() or not path.is_dir():
        raise ReleaseError(
            f"{folder / MANIFEST} names {name!r} as the {what} folder, which is not a folder of the build in {folder} "
            "(one name, no link); nothing was uploaded — rebuild it with `queerbench release build`"
        )
    return path


def _unexpected(root: Path, ours: dict[str, str]) -> tuple[Path, str] | None:
    """The first thing under ``root`` a push must not upload, with why: a symbolic link, a file not in ``ours``."""
    for here, dirs, files in os.walk(root):  # never into a linked folder
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" or Path(here, d).is_symlink())
        for entry in sorted([*dirs, *files]):
            path = Path(here, entry)
            if path.is_symlink():
                return path, "is a symbolic link, which a release never follows"
            if entry in files and path.relative_to(root).as_posix() not in ours:
                return path, f"was not written by the build (not in {MANIFEST})"
    return None


def checked_files(folder: Path, manifest: dict[str, Any]) -> dict[str, dict[str, str]]:
    """``{folder name: {path inside it: sha256}}`` for each repo's folder and ``dist``: what a push uploads, exactly
    the files the build recorded, each unchanged; anything else there is a one-line ``ReleaseError``."""
    recorded, rebuild = manifest.get("files"), f"`queerbench release build --out {folder} --overwrite`"
    if not isinstance(recorded, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in recorded.items()
    ):
        raise ReleaseError(
            f"{folder / MANIFEST} records no files with their checksums (an earlier queerbench built it); rebuild "
            f"it with {rebuild}; nothing was uploaded"
        )
    outside = [r for r in recorded if r.startswith("/") or ".." in PurePosixPath(r).parts]
    if outside:
        raise ReleaseError(f"{folder / MANIFEST} records {outside[0]!r}, outside the build; rebuild it with {rebuild}")
    entries = [(a, e.get("folder")) for a, e in manifest["repos"].items()] + [("dist", manifest["dist"].get("folder"))]
    checked: dict[str, dict[str, str]] = {}
    for artifact, name in entries:
        root = _build_folder(folder, name, artifact)
        ours = {r[len(root.name) + 1 :]: d for r, d in recorded.items() if r.startswith(f"{root.name}/")}
        if artifact == "dist" and ours != manifest["dist"]["files"]:
            raise ReleaseError(f"{folder / MANIFEST} records other dist files than it lists; rebuild it with {rebuild}")
        found = _unexpected(root, ours)
        if found:
            raise ReleaseError(
                f"{found[0]} {found[1]}; a release uploads only the files its build wrote: remove it or rebuild with "
                f"{rebuild} (nothing was uploaded)"
            )
        for rel, digest in ours.items():
            path = root / rel
            if path.is_symlink() or not path.is_file() or sha256(path) != digest:
                raise ReleaseError(f"{path} is missing or changed since the build; rebuild with {rebuild}")
        checked[root.name] = ours
    return checked


def staged(folder: Path, checked: dict[str, dict[str, str]], staging: Path) -> dict[str, Path]:
    """``{folder name: staging/name}``: a copy of each folder's checked files (:func:`checked_files`), each read once
    (never through a symbolic link) and checked against its checksum again, so that what is uploaded is what was
    checked."""
    for name, files in checked.items():
        (staging / name).mkdir(parents=True, exist_ok=True)
        for rel, digest in files.items():
            source, dest = folder / name / rel, staging / name / rel
            data = read_regular(source)
            if data is None or hashlib.sha256(data).hexdigest() != digest:
                raise ReleaseError(f"{source} is missing or changed since the build; nothing was uploaded")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
    return {name: staging / name for name in checked}

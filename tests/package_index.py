"""A local package index for the release tests: pypiserver on 127.0.0.1, a temporary packages folder, no
authentication (``-a . -P .``) and no fallback to PyPI (``--disable-fallback``: a project it lacks is a 404, as on a
fresh index), plus small but valid sdist and wheel files that twine accepts.

:func:`need_index_tools` skips the calling test when pypiserver or twine is missing (both are in the ``test`` extra)
on a developer's machine, and fails it in CI (``CI`` set), which must run it.
"""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import requests

from queerbench import __version__
from tests.net import free_port

__all__ = ["LocalIndex", "fake_dist", "need_index_tools"]


def need_index_tools() -> None:
    """Skip (locally) or fail (in CI) the calling test when pypiserver or twine cannot be imported."""
    missing = [m for m in ("pypiserver", "twine") if importlib.util.find_spec(m) is None]
    if not missing:
        return
    reason = f"{' and '.join(missing)} not installed: the release tests need them (pip install -e '.[test]')"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def fake_dist(folder: Path, version: str = __version__, note: str = "") -> dict[str, Path]:
    """Write a minimal sdist and wheel of queerbench ``version`` into ``folder`` (``note`` changes their bytes);
    returns ``{"sdist": path, "wheel": path}``. They hold metadata only: uploadable, not installable."""
    folder.mkdir(parents=True, exist_ok=True)
    meta = f"Metadata-Version: 2.1\nName: queerbench\nVersion: {version}\nSummary: a test build{note}\n".encode()
    wheel = folder / f"queerbench-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        info = f"queerbench-{version}.dist-info"
        zf.writestr(f"{info}/METADATA", meta)
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    sdist = folder / f"queerbench-{version}.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        for name, data in (("PKG-INFO", meta), ("pyproject.toml", b"")):
            member = tarfile.TarInfo(f"queerbench-{version}/{name}")
            member.size = len(data)
            tf.addfile(member, io.BytesIO(data))
    return {"sdist": sdist, "wheel": wheel}


class LocalIndex:
    """``with LocalIndex(packages) as index:`` serves ``packages`` at ``index.url`` (upload there, read
    ``index.simple_url``); :meth:`env` gives twine's settings for it."""

    def __init__(self, packages: Path) -> None:
        self.packages = packages
        packages.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/"
        self.simple_url = f"{self.url}simple/"
        self._log = (packages.parent / f"pypiserver-{port}.log").open("w")
        self._proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "pypiserver", "run", "-p", str(port), "-i", "127.0.0.1"),
                *("-a", ".", "-P", ".", "--disable-fallback", str(packages)),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(self.simple_url, timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(
                    f"pypiserver did not start: {(packages.parent / f'pypiserver-{port}.log').read_text()}"
                )
            time.sleep(0.2)

    def env(self) -> dict[str, str]:
        """``TWINE_REPOSITORY_URL`` and (bogus: the index does not authenticate) credentials."""
        return {"TWINE_REPOSITORY_URL": self.url, "TWINE_USERNAME": "test", "TWINE_PASSWORD": "test-password"}

    def names(self) -> set[str]:
        """The file names in the packages folder now."""
        return {p.name for p in self.packages.iterdir()}

    def close(self) -> None:
        """Stop the server."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()

    def __enter__(self) -> LocalIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

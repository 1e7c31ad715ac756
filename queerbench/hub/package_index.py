"""The package index a release is published to first: where twine uploads the sdist and the wheel, and the simple
index that says what it serves (so that the Spaces' pinned requirements resolve before they are pushed).

Reading the index goes through the library's one HTTP client (:class:`queerbench.base.http.HttpClient`); the upload is
twine's (its standard configuration: ``TWINE_REPOSITORY_URL``, ``TWINE_USERNAME``, ``TWINE_PASSWORD``, read through
:mod:`queerbench.base.env`).
"""

from __future__ import annotations

import html
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from queerbench import __version__
from queerbench.base import env
from queerbench.base.http import Answer, HttpClient, RetryRules
from queerbench.base.release_config import ReleaseError

__all__ = ["PYPI_UPLOAD_URL", "PackageIndex", "ReleaseError", "of_version", "shown_url"]


def of_version(name: str, version: str = __version__) -> bool:
    """Whether ``name`` is a queerbench sdist or wheel file of ``version``."""
    return re.fullmatch(rf"queerbench-{re.escape(version)}(\.tar\.gz|\.zip|-[^/]+\.whl)", name, re.I) is not None


_USERINFO = re.compile(r"(?<=://)[^/\s?#]*@")


def shown_url(text: str) -> str:
    """``text`` (a URL, or a message holding URLs) fit to print: without the user and password a URL may carry
    (``https://user:pass@host/`` → ``https://host/``). Twine's ``TWINE_REPOSITORY_URL`` may hold them; the URL itself is
    still what is connected to."""
    return _USERINFO.sub("", text)


PYPI_UPLOAD_URL = "https://upload.pypi.org/legacy/"
_SIMPLE = {
    PYPI_UPLOAD_URL: "https://pypi.org/simple/",
    "https://test.pypi.org/legacy/": "https://test.pypi.org/simple/",
}
_LINK = re.compile(r"<a\s[^>]*?href=\"([^\"]*)\"[^>]*>\s*([^<]+?)\s*</a>", re.I)


@dataclass(frozen=True)
class PackageIndex:
    """Where twine uploads (``TWINE_REPOSITORY_URL``, PyPI when unset) and the simple index that lists what is served
    (``QUEERBENCH_INDEX_URL``, else PyPI's or TestPyPI's, else the upload URL with ``simple/`` for ``legacy/``)."""

    upload_url: str
    simple_url: str

    @classmethod
    def from_env(cls) -> PackageIndex:
        upload = (env.twine_repository_url() or PYPI_UPLOAD_URL).rstrip("/") + "/"
        derived = _SIMPLE.get(upload) or re.sub(r"legacy/$", "", upload) + "simple/"
        return cls(upload, (env.package_index_url() or derived).rstrip("/") + "/")

    @property
    def upload_shown(self) -> str:
        """The upload URL as printed: without a user and password it may carry (:func:`shown_url`)."""
        return shown_url(self.upload_url)

    @property
    def simple_shown(self) -> str:
        """The simple index URL as printed: without a user and password it may carry (:func:`shown_url`)."""
        return shown_url(self.simple_url)

    def files(self, version: str) -> dict[str, str | None]:
        """``{file name: sha256 of its link, or None}``: queerbench's files of ``version`` the index lists now."""
        url = f"{self.simple_url}queerbench/"
        secret = urlsplit(url).password
        client = HttpClient(
            rules=RetryRules(retry_refused=True), max_retries=0, timeout=30.0, pool_size=1, secret=secret
        )
        headers = {"Accept": "text/html", "Cache-Control": "no-cache"}

        def page(answer: Answer) -> str:
            return answer.text

        outcome = client.request("GET", url, headers=headers, parse=page)
        if not outcome.ok and outcome.status != 404:  # 404: the index has no queerbench at all
            said = "; ".join(outcome.problems).replace(url, shown_url(url)) or "no answer"
            raise ReleaseError(f"could not read {shown_url(url)}: {said}")
        found = {}
        for href, name in _LINK.findall(outcome.value) if outcome.ok else []:
            digest = re.search(r"#sha256=([0-9a-f]{64})", href)
            found[html.unescape(name)] = digest.group(1) if digest else None
        return {name: digest for name, digest in found.items() if of_version(name, version)}

    def upload(self, paths: list[Path]) -> None:
        """Upload with twine as ``TWINE_USERNAME`` (``__token__`` for a password alone), ``TWINE_PASSWORD``."""
        from twine.commands.upload import upload
        from twine.settings import Settings

        password = env.twine_password() or None
        user = env.twine_username() or ("__token__" if password else None)
        options: dict[str, Any] = {
            "username": user,
            "password": password,
            "non_interactive": True,
            "disable_progress_bar": True,
        }
        upload(Settings(repository_url=self.upload_url, **options), [str(p) for p in paths])

    def wait_until_served(self, files: dict[str, str], version: str, timeout: float, poll: float = 5.0) -> None:
        """Poll the simple index until it lists every file of ``files`` ({name: sha256}) with that digest."""
        deadline, problem = time.monotonic() + timeout, ""
        while True:
            try:
                served, problem = self.files(version), ""
            except ReleaseError as exc:  # an index that hiccups while it publishes: keep polling until the deadline
                served, problem = {}, f" (last: {exc})"
            wrong = sorted(n for n in files if served.get(n) not in (None, files[n]))
            if wrong:
                shown = self.simple_shown
                raise ReleaseError(f"{shown} serves {', '.join(wrong)} with other contents than this release")
            if all(n in served for n in files):
                return
            if time.monotonic() >= deadline:
                shown = self.simple_shown
                raise ReleaseError(f"{shown} did not list {', '.join(files)} within {timeout:g} s{problem}")
            time.sleep(max(0.0, min(poll, deadline - time.monotonic())))

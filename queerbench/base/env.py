"""Every environment variable the library reads, read here and only here (at call time, never at import).

One function per setting says what it means and what its default is, so a reader finds every knob in one file and a
test can set one with ``monkeypatch.setenv``. Secrets (API keys, the Hub token) are returned to their one user and
never logged.

- ``QUEERBENCH_DATA_DIR``: a folder holding the pinned upstream data (:func:`data_dir`);
- ``QUEERBENCH_CACHE`` / ``XDG_CACHE_HOME``: the user cache (:func:`cache_dir`);
- ``QUEERBENCH_OFFLINE``: never download a pinned source (:func:`offline`);
- ``HF_HUB_OFFLINE``: the Hugging Face cache only (:func:`hf_hub_offline`); ``HF_ENDPOINT`` and ``HF_TOKEN``: the Hub
  to talk to and its token (:func:`hf_endpoint`, :func:`hf_token`);
- ``PERSPECTIVE_API_KEY`` / ``PERSPECTIVE_API_URL``: the Perspective scorer (:func:`perspective_key`,
  :func:`perspective_url`);
- ``QUEERBENCH_SPACE_*``: the Space's operator settings (:func:`flag`, :func:`whole_number`);
- ``QUEERBENCH_TASK_PATH``: folders of extra task modules (:func:`task_path`);
- an endpoint's API key, by the variable its flag names (``OPENAI_API_KEY`` by default: :func:`secret`);
- ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY`` (either case) and ``REQUESTS_CA_BUNDLE`` /
  ``CURL_CA_BUNDLE``: the HTTP client's proxies and certificates, as ``requests`` reads them (:func:`proxies`,
  :func:`no_proxy`, :func:`ca_bundle`).
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

__all__ = [
    "CACHE",
    "DATA_DIR",
    "OFFLINE",
    "PERSPECTIVE_KEY",
    "PERSPECTIVE_URL",
    "ca_bundle",
    "cache_dir",
    "data_dir",
    "flag",
    "hf_endpoint",
    "hf_hub_offline",
    "hf_token",
    "no_proxy",
    "offline",
    "package_index_url",
    "perspective_key",
    "perspective_url",
    "proxies",
    "secret",
    "task_path",
    "twine_password",
    "twine_repository_url",
    "twine_username",
    "whole_number",
]

DATA_DIR = "QUEERBENCH_DATA_DIR"
CACHE = "QUEERBENCH_CACHE"
OFFLINE = "QUEERBENCH_OFFLINE"
PERSPECTIVE_KEY = "PERSPECTIVE_API_KEY"
PERSPECTIVE_URL = "PERSPECTIVE_API_URL"
TASK_PATH = "QUEERBENCH_TASK_PATH"


def data_dir() -> Path | None:
    """The folder named by ``$QUEERBENCH_DATA_DIR``, if set."""
    value = os.environ.get(DATA_DIR)
    return Path(value).expanduser() if value else None


def cache_dir() -> Path:
    """The user cache: ``$QUEERBENCH_CACHE``, else ``$XDG_CACHE_HOME/queerbench``, else ``~/.cache/queerbench``."""
    value = os.environ.get(CACHE)
    if value:
        return Path(value).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "queerbench"


def offline() -> bool:
    """``QUEERBENCH_OFFLINE`` set to anything but empty or ``0``: pinned sources are never downloaded."""
    return os.environ.get(OFFLINE, "") not in ("", "0")


def hf_hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` is on (``1``, ``true``, ``yes``, ``on``): only the Hugging Face cache and local folders."""
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def hf_endpoint() -> str | None:
    """The Hub to talk to (``HF_ENDPOINT``), or None for huggingface.co."""
    return os.environ.get("HF_ENDPOINT") or None


def hf_token() -> str | None:
    """The Hub token (``HF_TOKEN``), or None."""
    return os.environ.get("HF_TOKEN", "").strip() or None


def secret(name: str) -> str:
    """The value of the secret environment variable ``name``, stripped (empty when unset)."""
    return os.environ.get(name, "").strip()


def perspective_key() -> str:
    """The Perspective API key (``PERSPECTIVE_API_KEY``), stripped; empty when unset."""
    return secret(PERSPECTIVE_KEY)


def perspective_url() -> str:
    """The Perspective endpoint override (``PERSPECTIVE_API_URL``), stripped; empty when unset."""
    return os.environ.get(PERSPECTIVE_URL, "").strip()


def proxies() -> dict[str, str]:
    """The proxy for each URL scheme (``{"https": "http://proxy:3128", "all": …}``) from ``*_PROXY`` variables, as
    the standard library reads them."""
    return {scheme: url for scheme, url in urllib.request.getproxies_environment().items() if scheme != "no"}


def no_proxy(host: str) -> bool:
    """Whether ``NO_PROXY`` exempts ``host`` from the proxy."""
    return bool(urllib.request.proxy_bypass_environment(host))  # type: ignore[attr-defined]  # stdlib, not in typeshed


def ca_bundle() -> str | None:
    """A file of certificate authorities to verify HTTPS with (``REQUESTS_CA_BUNDLE``, else ``CURL_CA_BUNDLE``);
    None: certifi's."""
    return text("REQUESTS_CA_BUNDLE") or text("CURL_CA_BUNDLE")


def flag(name: str) -> bool:
    """An on/off setting: ``1``, ``true`` or ``yes`` (any case) is on, anything else (or unset) off."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def text(name: str) -> str | None:
    """A plain setting such as ``QUEERBENCH_SPACE_RESULTS_REPO``, stripped; None when unset or empty."""
    return os.environ.get(name, "").strip() or None


def whole_number(name: str, default: int) -> int:
    """A count setting such as ``QUEERBENCH_SPACE_MAX_PARAMS=600_000_000`` (underscores and ``6e8`` allowed);
    ``default`` when unset, a one-line ``ValueError`` when it is not a number."""
    value = os.environ.get(name, "").strip().replace("_", "")
    if not value:
        return default
    try:
        return int(float(value))
    except ValueError as exc:
        raise ValueError(f"environment variable {name} must be a number, got {value!r}") from exc


def task_path() -> list[Path]:
    """Folders of extra task modules (``QUEERBENCH_TASK_PATH``, separated like ``PATH``); empty when unset."""
    value = os.environ.get(TASK_PATH, "").strip()
    return [Path(part).expanduser() for part in value.split(os.pathsep) if part.strip()]


def twine_repository_url() -> str | None:
    """Where ``queerbench release push`` uploads the sdist and the wheel (twine's ``TWINE_REPOSITORY_URL``), or None
    for PyPI."""
    return os.environ.get("TWINE_REPOSITORY_URL", "").strip() or None


def twine_username() -> str | None:
    """The package index user (twine's ``TWINE_USERNAME``), or None (``__token__`` is used with an API token)."""
    return os.environ.get("TWINE_USERNAME", "").strip() or None


def twine_password() -> str:
    """The package index password or API token (twine's ``TWINE_PASSWORD``), stripped; empty when unset."""
    return secret("TWINE_PASSWORD")


def package_index_url() -> str | None:
    """The simple index ``queerbench release push`` reads to see what the package index serves
    (``QUEERBENCH_INDEX_URL``, e.g. ``https://pypi.org/simple/``), or None to derive it from the upload URL."""
    return os.environ.get("QUEERBENCH_INDEX_URL", "").strip() or None

"""The one rule for secrets in what is stored or shown: a URL's credentials, an API key in a message or a reply.

A URL may carry credentials of its own: ``http://user:password@host/v1?api-key=…`` (userinfo, or a query value under
a secret-looking name such as ``key``, ``api-key``, ``token``, ``access_token``, ``secret``, ``password``, ``sig``).
The request needs them; nothing else does. :func:`redact_url` is the form of such a URL that is written to a run's
files (``run.json``, ``scores.json``, ``model.json``, ``report.md``), its signature and its messages: the userinfo
dropped and each secret query value replaced by ``***`` (scheme, host, port, path and other query values kept, so
that two endpoints stay told apart). :func:`redact_urls` does the same to every URL inside a text.

:func:`scrub` makes a text fit for a one-line message (an API key masked where it appears as a token of its own);
:func:`redact_secrets` masks secrets inside a text that is kept as it is (a model's reply, which a server may fill
with the ``Authorization`` header it was sent), without touching its layout.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["MASK", "is_secret_name", "redact_secrets", "redact_url", "redact_urls", "scrub", "url_secrets"]

MASK = "***"
"""What a secret is replaced by."""

_SECRET_NAMES = re.compile(
    r"(^|[_.-])(key|apikey|token|secret|password|passwd|pwd|pass|sig|signature|auth|authorization|credential|"
    r"credentials|jwt|bearer)($|[_.-])",
    re.IGNORECASE,
)
"""A query parameter whose name has one of these words as a part of its own (``api-key``, ``api_key``,
``access_token``, ``X-Amz-Signature``, ``client_secret``): its value is a secret. ``api-version`` is not."""

_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>`]+")
"""A URL inside a text (up to the next space or quote)."""


def is_secret_name(name: str) -> bool:
    """Whether a query parameter (or form field) named ``name`` holds a secret (see :data:`_SECRET_NAMES`)."""
    return bool(_SECRET_NAMES.search(name.replace("-", "_"))) or name.lower() in ("apikey", "sas")


def _query_pairs(query: str) -> list[tuple[str, str | None]]:
    """``query``'s ``(name, raw value)`` pairs, as written (None for a part without ``=``)."""
    pairs: list[tuple[str, str | None]] = []
    for part in query.split("&"):
        name, eq, value = part.partition("=")
        pairs.append((name, value if eq else None))
    return pairs


def redact_url(url: str) -> str:
    """``url`` without the credentials it carries: userinfo (``user:password@``) dropped, the value of each query
    parameter with a secret-looking name (:func:`is_secret_name`) replaced by ``***``; scheme, host, port, path, the
    other query values and the fragment as they were. Idempotent; a text that is not a URL with a host is returned
    unchanged."""
    text = str(url)
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    if not parts.scheme or not parts.netloc:
        return text
    netloc = parts.netloc.rpartition("@")[2]
    query = parts.query
    if query:
        pieces = []
        for name, value in _query_pairs(query):
            if value is None:
                pieces.append(name)
            elif value and is_secret_name(unquote(name)) and value != MASK:
                pieces.append(f"{name}={MASK}")
            else:
                pieces.append(f"{name}={value}")
        query = "&".join(pieces)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _basic_token(user: str, password: str) -> str:
    """The ``Authorization: Basic`` token the request sends for ``user:password`` (base64, as urllib3 encodes it):
    the password itself, for anyone who decodes it."""
    pair = f"{user}:{password}"
    try:
        raw = pair.encode("latin-1")
    except UnicodeEncodeError:
        raw = pair.encode("utf-8")
    return base64.b64encode(raw).decode("ascii")


def url_secrets(url: str) -> list[str]:
    """The secrets ``url`` carries (its userinfo's password, its secret query values), as written and
    percent-decoded, and the Basic token its userinfo is sent as: what :func:`redact_secrets` masks in a reply a
    server may have echoed them into (a server echoing the ``Authorization`` header it was sent). Values under four
    characters are left out (no real secret is that short, and masking them would garble replies)."""
    try:
        parts = urlsplit(str(url))
    except ValueError:
        return []
    found: list[str] = []
    if "@" in parts.netloc:
        user, _, password = parts.netloc.rpartition("@")[0].partition(":")
        if password:
            found.append(password)
        found.append(_basic_token(unquote(user), unquote(password)))
    for name, value in _query_pairs(parts.query) if parts.query else []:
        if value and value != MASK and is_secret_name(unquote(name)):
            found.append(value)
    both = [form for value in found for form in (value, unquote(value))]
    return [s for s in dict.fromkeys(both) if len(s) >= 4]


def redact_urls(text: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`)."""
    return _URL.sub(lambda m: redact_url(m.group(0)), str(text))


def redact_secrets(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` as it is (spacing and lines kept) with each of ``secrets`` replaced by ``***`` where it appears as a
    token of its own (not inside a longer word: a short secret cannot garble a reply), and every URL redacted."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        if secret in text:
            text = re.sub(rf"(?<![\w-]){re.escape(secret)}(?![\w-])", MASK, text)
    return redact_urls(text) if "://" in text else text


def scrub(text: str, secret: str | None) -> str:
    """``text`` on one line with ``secret`` replaced by ``***`` where it appears as a token of its own (not inside a
    longer word, so a short key cannot garble the message: key ``x`` leaves "max exceeded" alone), any secret
    query value (``key=…``, ``api-key=…``, ``token=…``) masked and the credentials of any URL in it dropped."""
    text = " ".join(str(text).split())
    text = re.sub(r"([?&]key=)[^&\s\"']+", rf"\1{MASK}", text)
    return redact_secrets(text, [secret])

"""What a model *is*, as far as a run's outputs are concerned: a fingerprint of its files.

A Hub model is pinned by the commit its files came from (the run records ``commit_hash``). A local folder has no
commit: its weights can be replaced between a killed run and its resume, and the resumed run would mix two models'
outputs. :func:`fingerprint_model` therefore hashes the files of a local folder that decide what the model predicts
— weights, tokenizer and configuration — with sha256 over their full contents (a size + mtime check alone would miss
a same-size rewrite or a copied-back file with its old mtime). A bert-base folder (~440 MB) takes about 0.7 s
(sha256 at ~600 MB/s on the 2-core development machine, ``benchmarks/preflight_cost.py``); within one process a file
whose size, mtime, ctime and inode are unchanged is not hashed twice.

The fingerprint is method-agnostic, and :func:`fingerprint_model` is the library's only one: masked LMs, causal LMs
and anything else loaded from a folder are hashed the same way; the embedded model (``embedded:smollm2-135m-instruct``)
gets ``kind="embedded"`` with the pinned sha256 of its GGUF file; a Hub id the commit its files resolved to (from
``huggingface_hub``'s public API, :func:`hub_commit`), or, before anything loads, ``kind="id"`` and no hash; an
endpoint its URL and model name.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from queerbench.base.redact import redact_url

__all__ = [
    "EMBEDDED_SOURCES",
    "MODEL_FILE_SUFFIXES",
    "check_model_reference",
    "describe_fingerprint",
    "fingerprint_model",
    "fingerprints_differ",
    "hub_commit",
    "looks_like_path",
    "model_files",
]

MODEL_FILE_SUFFIXES: tuple[str, ...] = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".h5",
    ".msgpack",
    ".gguf",
    ".onnx",
    ".json",  # config.json, tokenizer.json, tokenizer_config.json, special_tokens_map.json, *.index.json, ...
    ".txt",  # vocab.txt, merges.txt
    ".model",  # SentencePiece
    ".spm",
    ".vocab",
    ".tiktoken",
    ".py",  # remote-code modelling files (never run by queerbench, but they would change the model)
)
"""The suffixes of the files that decide what a saved model predicts (weights, tokenizer, configuration)."""


EMBEDDED_SOURCES: dict[str, str] = {"embedded:smollm2-135m-instruct": "smollm2_135m_instruct_gguf"}
"""The embedded model names and the pinned source (``lexicons/sources.json``) of each one's weights."""
DEFAULT_EMBEDDED = "embedded:smollm2-135m-instruct"
"""The embedded model a reference of ``None`` means (the generation layer's default model)."""


def looks_like_path(ref: str) -> bool:
    """True for a reference meant as a file-system path rather than a Hub id (``name`` or ``org/name``): absolute,
    starting with ``.`` (``./``, ``../``, a hidden folder) or ``~``, Windows-style, or with more than one ``/`` (a
    Hub id has at most one). The one rule of the library: the CLI, the scorers and the Space all ask it."""
    return ref.startswith(("/", ".", "~")) or (len(ref) > 1 and ref[1] == ":") or "\\" in ref or ref.count("/") > 1


def check_model_reference(model_id_or_path: str, *, flag: str = "--model") -> None:
    """Refuse, in one line, a model given as a path that does not exist (``/no/such/dir``); Hub ids, existing
    folders and files (a GGUF file for the generation layer) pass. Cheap, so every method calls it first."""
    path = Path(model_id_or_path).expanduser()
    if looks_like_path(model_id_or_path) and not path.exists():
        raise ValueError(
            f"{flag} {model_id_or_path}: no such folder; pass a folder saved with save_pretrained or a Hub id "
            "(e.g. bert-base-uncased)"
        )


_MEMO: dict[tuple[str, int, int, int, int], str] = {}


def _sha256(path: Path) -> str:
    stat = path.stat()
    # ctime too: a rewrite that keeps size and mtime (os.utime can restore mtime, never ctime) is hashed again
    memo_key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
    cached = _MEMO.get(memo_key)
    if cached is not None:
        return cached
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    _MEMO[memo_key] = digest.hexdigest()
    return _MEMO[memo_key]


def model_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The files of a saved model folder that :func:`fingerprint_model` hashes, sorted by relative path.

    Every regular file in ``folder`` or one level below it (``onnx/``, ``1_Pooling/``) whose suffix is in
    :data:`MODEL_FILE_SUFFIXES`, except hidden files and folders (``.git``, ``.cache``) and the model card; symlinks
    (the Hugging Face cache's layout) are followed.
    """
    root = Path(folder)
    found = []
    for path in [*root.glob("*"), *root.glob("*/*")]:
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        if path.suffix.lower() in MODEL_FILE_SUFFIXES and path.name.lower() != "readme.md":
            found.append(path)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def hub_commit(model_id: str, revision: str | None = None) -> str | None:
    """The commit a Hub model's files resolve to at ``revision`` (``None``: its default branch), or ``None`` when it
    cannot be known (offline with nothing cached, no such repository).

    A local folder or file gives ``None``. Through ``huggingface_hub``'s public API: the repository's ``config.json`` is fetched (or found in the cache, which
    ``HF_HUB_OFFLINE`` restricts it to) with :func:`huggingface_hub.hf_hub_download`, whose path lies in the snapshot
    folder named after the commit (``…/snapshots/<commit>/config.json``, the documented cache layout); a repository
    without ``config.json`` (a GGUF-only one) is asked with :meth:`huggingface_hub.HfApi.model_info`.
    """
    import re

    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    if looks_like_path(model_id) or Path(model_id).expanduser().exists():
        return None  # a local folder or file has no commit (its files are hashed instead)
    try:
        path = Path(hf_hub_download(model_id, "config.json", revision=revision))
    except EntryNotFoundError:
        try:
            return HfApi().model_info(model_id, revision=revision).sha
        except (OSError, ValueError):
            return None
    except (OSError, ValueError):  # offline and not cached, unknown repository, bad id: no commit known
        return None
    commit = path.parent.name
    return commit if re.fullmatch(r"[0-9a-f]{40}", commit) else None


def fingerprint_model(
    model_id_or_path: str | os.PathLike[str] | None,
    *,
    endpoint: str | None = None,
    hub: str = "id",
    commit: str | None = None,
    revision: str | None = None,
) -> dict[str, Any]:
    """What identifies the weights behind a model reference: the one fingerprint of the library, so that a resume,
    a reused reply or a reused prediction never mixes two models.

    - an endpoint (``endpoint`` given): ``{"kind": "endpoint", "base_url": <URL without trailing / and without its
      credentials>, "model": <name>}``
      (all that can be known of a served model);
    - the embedded model (``embedded:smollm2-135m-instruct``, or ``None``): ``{"kind": "embedded", "sha256": <its
      pinned sha256>}`` (read from the source pin, not hashed);
    - a local folder: ``{"kind": "local", "path": <absolute path>, "files": {<relative path>: <sha256>}, "sha256":
      <sha256 over the sorted (path, hash) pairs>}``, which changes when any weight, tokenizer or config file is
      added, removed, renamed or rewritten; a single model file (e.g. GGUF) as a folder holding only that file;
    - a Hub id: with ``hub="commit"`` the commit its files resolved to, ``{"kind": "hub", "commit_hash": …}``
      (``commit`` when the caller knows it, else :func:`hub_commit` at ``revision``); with ``hub="id"`` (what a run
      records before anything loads) ``{"kind": "id", "model": <the name>, "sha256": None}``.

    Raises ``ValueError`` for a local folder that holds no model file at all.
    """
    if endpoint:
        # the URL without the credentials it may carry (queerbench.base.redact): a fingerprint is stored and shown
        url = redact_url(endpoint.rstrip("/"))
        return {"kind": "endpoint", "base_url": url, "model": os.fspath(model_id_or_path or "")}
    name = DEFAULT_EMBEDDED if model_id_or_path is None else os.fspath(model_id_or_path)
    if name in EMBEDDED_SOURCES:
        from queerbench.base.sources import get_source

        return {"kind": "embedded", "sha256": get_source(EMBEDDED_SOURCES[name]).sha256}
    path = Path(name).expanduser()
    if path.is_file():
        hashes = {path.name: _sha256(path)}
        return {"kind": "local", "path": str(path.resolve()), "files": hashes, "sha256": _combine(hashes)}
    if path.is_dir():
        files = model_files(path)
        if not files:
            raise ValueError(
                f"model folder {path} holds no weight, tokenizer or config file "
                f"({', '.join(MODEL_FILE_SUFFIXES[:3])}, config.json, ...); pass a folder written by save_pretrained"
            )
        hashes = {p.relative_to(path).as_posix(): _sha256(p) for p in files}
        return {"kind": "local", "path": str(path.resolve()), "files": hashes, "sha256": _combine(hashes)}
    if hub not in ("id", "commit"):
        raise ValueError(f"hub must be 'id' or 'commit', got {hub!r}")
    if hub == "commit":
        return {"kind": "hub", "commit_hash": commit if commit is not None else hub_commit(name, revision)}
    return {"kind": "id", "model": name, "sha256": None}


def _combine(hashes: dict[str, str]) -> str:
    """One sha256 over the sorted (relative path, file hash) pairs."""
    return hashlib.sha256("".join(f"{rel}\0{h}\n" for rel, h in sorted(hashes.items())).encode()).hexdigest()


def fingerprints_differ(stored: dict[str, Any] | None, current: dict[str, Any]) -> list[str]:
    """The files whose hash differs between two local-folder fingerprints (added, removed or changed), sorted;
    for two embedded-model fingerprints with different pinned sha256s, ``["embedded weights"]``; ``[]`` when they
    match or when either is not such a fingerprint — including the ``{"kind": "id", "sha256": None}`` that older
    ``run.json`` files recorded for the embedded model, so those runs still resume."""
    if stored and stored.get("kind") == "embedded" and current.get("kind") == "embedded":
        old_sha, new_sha = stored.get("sha256"), current.get("sha256")
        return ["embedded weights"] if old_sha and new_sha and old_sha != new_sha else []
    if not stored or stored.get("kind") != "local" or current.get("kind") != "local":
        return []
    if stored.get("sha256") == current.get("sha256"):
        return []
    old, new = stored.get("files", {}), current.get("files", {})
    return sorted(name for name in set(old) | set(new) if old.get(name) != new.get(name)) or ["(file set)"]


def describe_fingerprint(fingerprint: dict[str, Any] | None, *, length: int = 12) -> str | None:
    """A short human label, ``local folder, fingerprint 1a2b3c4d5e6f`` (or the embedded model's pinned sha256, or a
    Hub commit), or ``None`` when the fingerprint names no weights (an endpoint, a bare id)."""
    if fingerprint and fingerprint.get("kind") == "embedded" and fingerprint.get("sha256"):
        return f"embedded pinned weights, sha256 {fingerprint['sha256'][:length]}"
    if fingerprint and fingerprint.get("kind") == "hub" and fingerprint.get("commit_hash"):
        return f"Hub commit `{fingerprint['commit_hash']}`"
    if not fingerprint or fingerprint.get("kind") != "local" or not fingerprint.get("sha256"):
        return None
    return f"local folder, fingerprint {fingerprint['sha256'][:length]}"

"""``queerbench results push``: a run's or an eval's results to the results dataset on the Hub, and back.

The results dataset (its id in ``hub_configs/release.json``: ``results``) holds one folder per pushed result,
``results/<model>/<signature hash>/``, with its rows (``results.json``: what the leaderboard reads), its card or report
and the signatures; predictions only with ``--with-predictions``. A marker file at the repo's root
(``queerbench-results.json``) says that the repo is a queerbench results dataset: a repo without it that holds files
is refused before any upload, so a mistyped id never writes into someone else's dataset. Like ``release push`` it is a
dry run unless ``--yes``; the token comes from ``HF_TOKEN`` and is needed (one line when missing) before anything is
uploaded. :func:`pulled_rows` reads every pushed result back (the Space's Leaderboard tab).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from queerbench import __version__
from queerbench.base import env
from queerbench.reporting.rows import ResultRow
from queerbench.results.folders import folder_kind, folder_rows

__all__ = ["MARKER", "pulled_rows", "push_results", "results_repo_id"]

MARKER = "queerbench-results.json"
_SHARED = ("card.md", "card.png", "model-index.yaml", "eval.json", "report.md", "run.json", "scores.json", "scm.json")
_PREDICTIONS = ("predictions.parquet", "responses.parquet")


def results_repo_id(namespace: str | None = None) -> str:
    """The results dataset's id: ``<namespace>/<results>`` from ``hub_configs/release.json``."""
    from queerbench.hub.release import load_release_config

    return load_release_config(namespace).repo_id("results")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "model"


def _files(folder: Path, with_predictions: bool) -> list[Path]:
    """The files of ``folder`` (and of an eval's run folders) that a push uploads."""
    names = set(_SHARED) | (set(_PREDICTIONS) if with_predictions else set())
    found = [p for p in sorted(folder.rglob("*")) if p.is_file() and (p.name in names or p.suffix == ".png")]
    return [p for p in found if not any(part.startswith(".") for part in p.relative_to(folder).parts)]


def push_results(
    folder: Path,
    *,
    repo_id: str | None = None,
    yes: bool = False,
    with_predictions: bool = False,
    endpoint: str | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Push ``folder`` (a run, eval or task folder) to the results dataset; a dry run (nothing uploaded) unless
    ``yes``. Returns what was (or would be) uploaded."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import OfflineModeIsEnabled, RepositoryNotFoundError

    folder = Path(folder)
    kind = folder_kind(folder)  # one line for a folder that holds no results
    rows = folder_rows(folder)
    repo_id = repo_id or results_repo_id()
    token = env.hf_token()
    if yes and not token:
        raise ValueError(
            "HF_TOKEN is not set: `results push --yes` needs a Hub token with write access to "
            f"{repo_id} (export HF_TOKEN=…); nothing was uploaded"
        )
    signatures = sorted(r.signature for r in rows)
    digest = hashlib.sha256("\n".join(signatures).encode()).hexdigest()[:12]
    where = f"results/{_slug(rows[0].model if rows else 'model')}/{digest}"
    files = _files(folder, with_predictions)
    plan = {
        "repo_id": repo_id,
        "path": where,
        "kind": kind,
        "files": [str(p.relative_to(folder)) for p in files],
        "rows": len(rows),
        "uploaded": False,
    }
    api = HfApi(endpoint=endpoint or env.hf_endpoint(), token=token or None)
    try:
        existing = set(api.list_repo_files(repo_id, repo_type="dataset"))
    except RepositoryNotFoundError:
        existing = None
    except OfflineModeIsEnabled:
        raise ValueError(
            "HF_HUB_OFFLINE is set: `results push` needs the Hub; unset it (nothing was uploaded)"
        ) from None
    if existing is not None and MARKER not in existing and existing - {".gitattributes", "README.md"}:
        raise FileExistsError(
            f"the dataset {repo_id} holds other files and no {MARKER}: it is not a queerbench results dataset; "
            "choose another repo (--repo) — nothing was uploaded"
        )
    if existing is not None and f"{where}/results.json" in existing:
        raise FileExistsError(f"{repo_id} already holds these results ({where}); nothing was uploaded")
    if not yes:
        log(
            f"dry run: would upload {len(files) + 1} files of {folder} ({kind}, {len(rows)} rows) to "
            f"datasets/{repo_id}/{where}"
            + ("" if existing is not None else " (creating the dataset)")
            + ("" if token else "; HF_TOKEN is not set: set it before --yes")
            + "; pass --yes to upload"
        )
        return plan
    staging = Path(tempfile.mkdtemp(prefix="queerbench-push-"))
    try:
        target = staging / where
        for path in files:
            dest = target / path.relative_to(folder)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
        document = {"schema_version": 1, "queerbench_version": __version__, "rows": [r.to_dict() for r in rows]}
        (target / "results.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        if existing is None or MARKER not in existing:
            (staging / MARKER).write_text(json.dumps({"schema_version": 1, "kind": "queerbench results"}) + "\n")
        api.create_repo(repo_id, repo_type="dataset", exist_ok=True)
        api.upload_folder(
            repo_id=repo_id,
            repo_type="dataset",
            folder_path=str(staging),
            commit_message=f"queerbench results: {rows[0].model if rows else 'model'} ({digest})",
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    plan["uploaded"] = True
    log(f"uploaded {len(files) + 1} files to datasets/{repo_id}/{where}")
    return plan


def pulled_rows(repo_id: str | None = None, *, endpoint: str | None = None) -> list[ResultRow]:
    """Every row pushed to the results dataset (an empty list when it does not exist)."""
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import RepositoryNotFoundError

    repo_id = repo_id or results_repo_id()
    endpoint = endpoint or env.hf_endpoint()
    api = HfApi(endpoint=endpoint, token=env.hf_token() or None)
    try:
        names = api.list_repo_files(repo_id, repo_type="dataset")
    except RepositoryNotFoundError:
        return []
    rows: list[ResultRow] = []
    with tempfile.TemporaryDirectory(prefix="queerbench-results-") as local:  # small files: always the latest
        for name in sorted(n for n in names if n.startswith("results/") and n.endswith("/results.json")):
            path = hf_hub_download(
                repo_id, name, repo_type="dataset", endpoint=endpoint, token=env.hf_token() or None, local_dir=local
            )
            document = json.loads(Path(path).read_text(encoding="utf-8"))
            rows += [ResultRow.from_dict(r, f"{repo_id}/{name}") for r in document.get("rows", [])]
    return rows

"""``queerbench results push``: a run's or an eval's results to the results dataset on the Hub, and back.

The results dataset (its id in ``hub_configs/release.json``: ``results``) holds one folder per pushed result,
``results/<model>/<signature hash>/``, with its rows (``results.json``: what the leaderboard reads), its card or report
and the signatures; predictions only with ``--with-predictions``. A marker file at the repo's root
(``queerbench-results.json``) says that the repo is a queerbench results dataset: a repo without it that holds files
is refused before any upload, so a mistyped id never writes into someone else's dataset. Like ``release push`` it is a
dry run unless ``--yes``; the token comes from ``HF_TOKEN`` and is needed (one line when missing) before anything is
uploaded. Only regular files inside the folder are pushed (a symbolic link is left out and listed so), each listed
before the Hub is asked anything; a folder without rows or with a malformed row is refused in one line, and so is a
Hub that cannot be reached (one request, no retries). :func:`pulled_rows` reads every pushed result back (the Space's Leaderboard tab).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from queerbench import __version__
from queerbench.base import env
from queerbench.hub.package_index import shown_url
from queerbench.hub.release import hub_offline_variable
from queerbench.hub.release_files import read_regular
from queerbench.reporting.rows import ResultRow, row_problem
from queerbench.results.folders import folder_kind, folder_rows

__all__ = ["MARKER", "pulled_rows", "push_results", "results_repo_id"]

MARKER = "queerbench-results.json"
_SHARED = ("card.md", "card.png", "model-index.yaml", "eval.json", "report.md", "run.json", "scores.json")
_PREDICTIONS = ("predictions.parquet",)


def _probe_files() -> tuple[set[str], set[str]]:
    """The records and the stored replies of the ``probes`` tasks' runs (their declared ``outputs``)."""
    from queerbench.tasks import all_tasks

    outputs = [t.spec.outputs for t in all_tasks().values() if t.spec.outputs is not None]
    return {o.record for o in outputs}, {o.replies for o in outputs}


def results_repo_id(namespace: str | None = None) -> str:
    """The results dataset's id: ``<namespace>/<results>`` from ``hub_configs/release.json``."""
    from queerbench.hub.release import load_release_config

    return load_release_config(namespace).repo_id("results")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "model"


def _files(folder: Path, with_predictions: bool) -> tuple[list[Path], list[Path]]:
    """The files of ``folder`` (and of an eval's run folders) that a push uploads, and the symbolic links it leaves
    out: only regular files inside the folder are uploaded, never what a link points at (a ``report.md`` linked to a
    private file)."""
    records, replies = _probe_files()
    names = set(_SHARED) | records | ((set(_PREDICTIONS) | replies) if with_predictions else set())
    files: list[Path] = []
    links: list[Path] = []
    for here, dirs, found in os.walk(folder):  # never into a linked folder
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        links += [Path(here, d) for d in dirs if Path(here, d).is_symlink()]
        for name in sorted(found):
            path = Path(here, name)
            if name.startswith(".") or not (name in names or path.suffix == ".png"):
                continue
            if path.is_symlink():
                links.append(path)
            elif path.is_file():
                files.append(path)
    return sorted(files), sorted(links)


def _check_rows(folder: Path, kind: str, rows: list[ResultRow]) -> None:
    """One line, before anything is listed or uploaded, for a folder with no row (an eval whose every part failed
    would be an empty result) or with a malformed one (it would stop every reader of the results dataset)."""
    if not rows:
        raise ValueError(
            f"{folder} holds no result rows ({kind}: an eval whose every part failed or was skipped has none), so "
            "there is nothing to push; rerun the command that wrote it until a part finishes (nothing was uploaded)"
        )
    for i, row in enumerate(rows):
        problem = row_problem(row.to_dict())
        if problem:
            raise ValueError(
                f"{folder}: its {row.task} {row.method} row ({i}) is malformed: {problem}; rerun the command that "
                "wrote it (nothing was uploaded)"
            )


def _existing_files(api: Any, repo_id: str) -> set[str] | None:
    """The files of the results dataset now, None when it does not exist yet. A Hub that cannot be reached is one
    line naming the endpoint and the cause, after a single request (no retries)."""
    from huggingface_hub.errors import OfflineModeIsEnabled, RepositoryNotFoundError

    where = f"{shown_url(str(api.endpoint))} (datasets/{repo_id})"
    try:
        api.list_repo_refs(repo_id, repo_type="dataset")  # one request: whether the Hub answers and the repo exists
        return set(api.list_repo_files(repo_id, repo_type="dataset"))
    except RepositoryNotFoundError:
        return None
    except OfflineModeIsEnabled:
        raise ValueError(
            f"{hub_offline_variable()} is set: `results push` needs the Hub at {where} to check what it holds; unset "
            "it (nothing was uploaded)"
        ) from None
    except Exception as exc:  # no connection, a timeout, an HTTP error: one line, no traceback
        cause = shown_url(" ".join(f"{type(exc).__name__}: {exc}".split()))[:300]
        raise ValueError(
            f"could not reach the Hub at {where}: {cause}; check the network and HF_ENDPOINT (nothing was uploaded)"
        ) from None


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
    ``yes``. Each file is listed first (no network needed), then the Hub is asked what it holds. Returns what was
    (or would be) uploaded."""
    from huggingface_hub import HfApi

    folder = Path(folder)
    kind = folder_kind(folder)  # one line for a folder that holds no results
    rows = folder_rows(folder)
    _check_rows(folder, kind, rows)
    repo_id = repo_id or results_repo_id()
    token = env.hf_token()
    if yes and not token:
        raise ValueError(
            "HF_TOKEN is not set: `results push --yes` needs a Hub token with write access to "
            f"{repo_id} (export HF_TOKEN=…); nothing was uploaded"
        )
    signatures = sorted(r.signature or json.dumps(r.to_dict(), sort_keys=True) for r in rows)  # unsigned: its data
    digest = hashlib.sha256("\n".join(signatures).encode()).hexdigest()[:12]
    where = f"results/{_slug(rows[0].model)}/{digest}"
    files, links = _files(folder, with_predictions)
    plan: dict[str, Any] = {  # returned as the upload's record
        "repo_id": repo_id,
        "path": where,
        "kind": kind,
        "files": [p.relative_to(folder).as_posix() for p in files],
        "left_out": [p.relative_to(folder).as_posix() for p in links],
        "rows": len(rows),
        "uploaded": False,
    }
    counted = f"{len(rows)} row{'s' if len(rows) != 1 else ''}"
    log(f"{folder} ({kind}, {counted}) to datasets/{repo_id}/{where}, {len(files) + 1} files:")
    for path, name in zip(files, plan["files"], strict=True):
        log(f"  {name} ({path.stat().st_size:,} bytes)")
    log(f"  results.json ({counted})")
    for name in plan["left_out"]:
        log(f"  left out: {name} (a symbolic link: only regular files inside the folder are uploaded)")
    api = HfApi(endpoint=endpoint or env.hf_endpoint(), token=token or None)
    existing = _existing_files(api, repo_id)
    if existing is not None and MARKER not in existing and existing - {".gitattributes", "README.md"}:
        raise FileExistsError(
            f"the dataset {repo_id} holds other files and no {MARKER}: it is not a queerbench results dataset; "
            "choose another repo (--repo) — nothing was uploaded"
        )
    if existing is not None and f"{where}/results.json" in existing:
        raise FileExistsError(f"{repo_id} already holds these results ({where}); nothing was uploaded")
    if not yes:
        log(
            f"dry run: would upload {len(files) + 1} files of {folder} ({kind}, {counted}) to "
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
            data = read_regular(path)  # never through a link put there since the folder was listed
            if data is None:
                raise ValueError(f"{path} is no longer a regular file; push again (nothing was uploaded)")
            dest = target / path.relative_to(folder)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        document = {"schema_version": 1, "queerbench_version": __version__, "rows": [r.to_dict() for r in rows]}
        (target / "results.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        if existing is None or MARKER not in existing:
            (staging / MARKER).write_text(json.dumps({"schema_version": 1, "kind": "queerbench results"}) + "\n")
        api.create_repo(repo_id, repo_type="dataset", exist_ok=True)
        api.upload_folder(
            repo_id=repo_id,
            repo_type="dataset",
            folder_path=str(staging),
            commit_message=f"queerbench results: {rows[0].model} ({digest})",
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

"""``queerbench results push DIR --pull-request``: an eval's ``.eval_results/*.yaml`` as a pull request on the
model's own Hub repo, where the model page and the benchmark's leaderboards show them.

The files are exactly those the eval recorded in ``eval_results.json`` (:mod:`queerbench.results.eval_results`), each
read once without following a symbolic link and checked against the SHA-256 recorded when it was written: a recorded
file that is now a link, missing or changed, a ``.eval_results`` folder that is a link, or a file that no longer
parses as Hub entries is refused in one line before the Hub is asked anything. Anything else in ``.eval_results/``
(a file the eval did not write, a link) is left out and listed. The model repo is the eval's ``--model`` when that
is a Hub id; a local folder, an endpoint's model or an embedded model needs ``--model-repo ID``. Like the rest of
``results push`` it is a dry run unless ``--yes`` (each file and its entries are listed; nothing is sent), the token
comes from ``HF_TOKEN`` (needed before anything is sent, never printed), and one commit opens one pull request
(``create_pr``), which the repo's owners merge or close.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from queerbench.base import env
from queerbench.base.redact import scrub
from queerbench.hub.package_index import shown_url
from queerbench.hub.release import hub_offline_variable
from queerbench.hub.release_files import read_regular
from queerbench.results.eval_results import EVAL_RESULTS_DIR, EVAL_RESULTS_MANIFEST, read_eval_results_manifest

__all__ = ["model_repo_of", "push_eval_results_pr"]


def model_repo_of(record: dict[str, Any], model_repo: str | None) -> str:
    """The model repo the pull request goes to: ``model_repo`` when given, else the eval's model when it is a Hub id;
    a one-line ``ValueError`` for a name that is no valid repo id or an eval whose model is not on the Hub."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if model_repo is not None:
        try:
            validate_repo_id(model_repo)
        except HFValidationError:
            raise ValueError(f"--model-repo {model_repo!r} is not a Hub model id (namespace/name)") from None
        return model_repo
    model, endpoint = record.get("model"), record.get("endpoint")
    why = None
    if endpoint:
        why = f"a model served by the endpoint {endpoint}"
    elif not model or str(model).startswith("embedded:"):
        why = "an embedded model"
    elif Path(str(model)).expanduser().exists() or str(model).startswith((".", "/", "~")):
        why = "a local folder"
    else:
        try:
            validate_repo_id(str(model))
        except HFValidationError:
            why = "not a Hub id"
    if why:
        raise ValueError(
            f"the eval's model {model or 'embedded:smollm2-135m-instruct'!r} is {why}, so the pull request has no "
            "repo to go to; name the model's Hub repo with --model-repo ID (nothing was sent)"
        )
    return str(model)


def _checked_files(folder: Path, record: dict[str, Any]) -> tuple[dict[str, bytes], list[str]]:
    """``{path in the repo: bytes}`` of the files the eval recorded, each read once (never through a link) and
    checked against its recorded SHA-256, and what else ``.eval_results/`` holds (left out)."""
    import yaml
    from huggingface_hub import parse_eval_result_entries

    rerun = f"rerun `queerbench eval` with the same settings and --out {folder} (it rewrites them; nothing was sent)"
    root = folder / EVAL_RESULTS_DIR
    if root.is_symlink():
        raise ValueError(f"{root} is a symbolic link; only files the eval wrote inside {folder} are sent; {rerun}")
    files: dict[str, bytes] = {}
    for rel, digest in record["files"].items():
        data = read_regular(folder / rel)
        if data is None or hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"{folder / rel} is missing, a link or changed since the eval wrote it; {rerun}")
        try:
            entries = parse_eval_result_entries(yaml.safe_load(data.decode("utf-8")))
        except (ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError):
            entries = []
        if not entries:
            raise ValueError(f"{folder / rel} holds no Hub result entries; {rerun}")
        files[rel] = data
    left_out = []
    if root.is_dir():
        for here, dirs, names in os.walk(root):  # never into a linked folder
            for name in sorted([*dirs, *names]):
                path = Path(here, name)
                rel = path.relative_to(folder).as_posix()
                if path.is_symlink() or (name in names and rel not in files):
                    left_out.append(rel)
    return files, sorted(left_out)


def _failure(what: str, exc: Exception, token: str | None) -> ValueError:
    """One line for a Hub call that failed, never holding the token."""
    from huggingface_hub.errors import OfflineModeIsEnabled

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, OfflineModeIsEnabled):
        cause = f"{hub_offline_variable()} is set, so the Hub cannot be reached; unset it"
    elif status in (401, 403):
        cause = f"the Hub refused the token in HF_TOKEN (HTTP {status}); it needs write access or a PR-enabled repo"
    else:
        cause = f"{type(exc).__name__}: {exc}"
    return ValueError(scrub(shown_url(f"{what}: {cause}"), token)[:400] + " (nothing was sent)")


def push_eval_results_pr(
    folder: Path,
    *,
    model_repo: str | None = None,
    yes: bool = False,
    endpoint: str | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Open a pull request adding the eval's recorded ``.eval_results/*.yaml`` to the model's repo; a dry run (the
    files and their entries listed, nothing sent) unless ``yes``. Returns the plan, with ``pr_url`` once opened."""
    import yaml
    from huggingface_hub import CommitOperationAdd, HfApi, parse_eval_result_entries
    from huggingface_hub.errors import RepositoryNotFoundError

    folder = Path(folder)
    record = read_eval_results_manifest(folder)
    repo = model_repo_of(record, model_repo)
    files, left_out = _checked_files(folder, record)
    if not files:
        reasons = "; ".join(f"{r.get('task')} {r.get('method')}: {r.get('reason')}" for r in record.get("left_out", []))
        raise ValueError(
            f"{folder} has no Hub result entries to send ({EVAL_RESULTS_MANIFEST} records none"
            + (f": {reasons}" if reasons else "")
            + "); nothing was sent"
        )
    token = env.hf_token()
    plan = {"repo_id": repo, "files": list(files), "left_out": left_out, "opened": False, "pr_url": None}
    log(f"{folder}: a pull request on the model {repo} adding {len(files)} file{'s' * (len(files) != 1)}:")
    for rel, data in files.items():
        log(f"  {rel} ({len(data):,} bytes)")
        for entry in parse_eval_result_entries(yaml.safe_load(data.decode("utf-8"))):
            log(f"    {entry.dataset_id} {entry.task_id} = {entry.value} ({entry.notes})")
    for rel in left_out:
        log(f"  left out: {rel} (not written by the eval, or a symbolic link: only the files it recorded are sent)")
    if not yes:
        log(
            f"dry run: would open a pull request on the model {repo} with {len(files)} file"
            f"{'s' * (len(files) != 1)}"
            + ("" if token else "; HF_TOKEN is not set: set it before --yes")
            + "; pass --yes to open it"
        )
        return plan
    if not token:
        raise ValueError(
            f"HF_TOKEN is not set: `results push --pull-request --yes` needs a Hub token to open a pull request on "
            f"{repo} (export HF_TOKEN=…); nothing was sent"
        )
    api = HfApi(endpoint=endpoint or env.hf_endpoint(), token=token)
    where = f"{shown_url(str(api.endpoint))} ({repo})"
    try:
        api.list_repo_refs(repo, repo_type="model")  # one request: whether the Hub answers and the model exists
    except RepositoryNotFoundError:
        raise ValueError(
            f"the model {repo} is not on the Hub at {where} (or the token cannot see it); nothing was sent"
        ) from None
    except Exception as exc:  # no connection, a timeout, an HTTP error: one line
        raise _failure(f"could not reach the Hub at {where}", exc, token) from None
    operations = [CommitOperationAdd(path_in_repo=rel, path_or_fileobj=data) for rel, data in files.items()]
    try:
        info = api.create_commit(
            repo,
            operations,
            commit_message=f"Add queerbench results ({len(files)} .eval_results file{'s' * (len(files) != 1)})",
            commit_description=(
                f"Scores of `queerbench eval` on the benchmark {record.get('dataset')} (revision "
                f"{record.get('revision')}), one file per result; each entry's notes name its method, k and "
                "toxicity scorer."
            ),
            repo_type="model",
            create_pr=True,
        )
    except Exception as exc:
        raise _failure(f"opening the pull request on {where} failed", exc, token) from None
    plan.update(opened=True, pr_url=info.pr_url)
    log(f"opened a pull request on the model {repo}: {info.pr_url}")
    return plan

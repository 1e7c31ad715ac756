"""Release the dataset, the metric Space and the demo Space together, under one version and one tag.

``build_release(out)`` writes three Hub-ready folders, all stamped with :data:`queerbench.__version__`:

- ``out/dataset``: Parquet per config and split plus the card (:func:`queerbench.hub.dataset.build_dataset`);
- ``out/metric``: the ``evaluate`` module copied as ``<metric repo name>.py`` (``evaluate.load("<ns>/<name>")`` looks
  for exactly that file), its Gradio ``app.py``, a README whose front matter carries ``tags: [evaluate,
  measurement]`` and ``requirements.txt`` pinning ``queerbench==<version>``;
- ``out/space``: the demo's ``app.py``, README front matter (``sdk: gradio``, ``sdk_version`` = the installed Gradio,
  ``python_version``) and pinned requirements;

plus ``out/release.json``, the manifest ``push`` reads. The metric and Space folders are copied from the repository
checkout (they are not part of the installed package).

``push_release(folder, yes=True)`` checks the tag on all three repos first (``list_repo_refs``) and stops before any
upload when one already has it; then it creates the repos, uploads each folder in one commit and tags the three
commits. Without ``yes`` it only prints the plan. The token comes from ``HF_TOKEN`` and is never printed.
Repo ids, the tag pattern and card metadata are data: ``hub_configs/release.json`` and ``hub_configs/cards.yaml``.
"""

from __future__ import annotations

import json
import platform
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

import queerbench
from queerbench import __version__
from queerbench.base import env
from queerbench.base.files import atomic_dir

__all__ = [
    "MANIFEST",
    "ReleaseConfig",
    "ReleaseError",
    "build_release",
    "find_checkout",
    "load_release_config",
    "push_release",
]

MANIFEST = "release.json"
_SPACE_FILES = ("app.py", "README.md", "requirements.txt")
_METRIC_FILES = ("metric_queerbench.py", "app.py", "README.md", "requirements.txt")
_REQ_NAME = re.compile(r"^\s*queerbench(\[[^\]]*\])?\s*([<>=!~].*)?$")


class ReleaseError(ValueError):
    """A release cannot be built or pushed; the message says why and what to do."""


# --------------------------------------------------------------------------------------------------- settings
def _hub_config_text(name: str, checkout: Path | None = None) -> str:
    """A file of ``hub_configs/``: from the installed package, else from the checkout (an older editable install)."""
    try:
        return resources.files("queerbench.hub_configs").joinpath(name).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        root = checkout or Path(queerbench.__file__).resolve().parents[1]
        path = root / "hub_configs" / name
        if not path.is_file():
            raise ReleaseError(f"hub_configs/{name} not found (looked in the package and in {root})") from None
        return path.read_text(encoding="utf-8")


@dataclass(frozen=True)
class ReleaseConfig:
    """Where a release goes and what its cards say (``hub_configs/release.json`` and ``cards.yaml``)."""

    namespace: str
    dataset: str
    metric: str
    space: str
    dataset_configs: tuple[str, ...]
    tag_pattern: str
    python_version: str
    requirement_pattern: str
    cards: dict[str, dict[str, Any]]

    def repo_id(self, artifact: str) -> str:
        """``namespace/name`` of ``dataset``, ``metric`` or ``space``."""
        return f"{self.namespace}/{getattr(self, artifact)}"

    def tag(self, version: str = __version__) -> str:
        """The one tag all three repos get for ``version`` (``v0.1.0``)."""
        return self.tag_pattern.format(version=version)

    def requirement(self, extras: str = "", version: str = __version__) -> str:
        """The pinned requirement line for queerbench (``queerbench[space]==0.1.0``)."""
        return self.requirement_pattern.format(extras=extras, version=version)


def load_release_config(namespace: str | None = None, checkout: Path | None = None) -> ReleaseConfig:
    """Read the release settings; ``namespace`` overrides the configured one (e.g. to push to your own account)."""
    data = json.loads(_hub_config_text("release.json", checkout))
    cards = yaml.safe_load(_hub_config_text("cards.yaml", checkout)) or {}
    missing = [k for k in ("namespace", "dataset", "metric", "space") if not data.get(k)]
    if missing:
        raise ReleaseError(f"hub_configs/release.json lacks {missing}")
    ns = namespace or data["namespace"]
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*", ns):
        raise ReleaseError(f"{ns!r} is not a valid Hub namespace (a user or organisation name)")
    return ReleaseConfig(
        namespace=ns,
        dataset=data["dataset"],
        metric=data["metric"],
        space=data["space"],
        dataset_configs=tuple(data.get("dataset_configs", ("default", "paper"))),
        tag_pattern=data.get("tag", "v{version}"),
        python_version=str(data.get("python_version") or ".".join(platform.python_version_tuple()[:2])),
        requirement_pattern=data.get("queerbench_requirement", "queerbench{extras}=={version}"),
        cards={k: dict(v or {}) for k, v in cards.items()},
    )


# ------------------------------------------------------------------------------------------------------ build
def find_checkout(checkout: str | Path | None = None) -> Path:
    """The repository checkout holding ``space/`` and ``metric_queerbench/`` (next to the ``queerbench`` package)."""
    root = Path(checkout) if checkout is not None else Path(queerbench.__file__).resolve().parents[1]
    needed = [f"space/{f}" for f in _SPACE_FILES] + [f"metric_queerbench/{f}" for f in _METRIC_FILES]
    absent = [f for f in needed if not (root / f).is_file()]
    if absent:
        raise ReleaseError(
            f"a release copies the Hub folders space/ and metric_queerbench/ from the repository checkout, but "
            f"{root} lacks {', '.join(absent)}. Run it from a source checkout (git clone …; pip install -e .) or pass "
            "--checkout DIR."
        )
    return root


def _split_card(text: str, name: str) -> tuple[dict[str, Any], str]:
    match = re.match(r"^---\n(.*?)\n---\n?(.*)$", text, flags=re.S)
    if not match:
        raise ReleaseError(f"{name} must start with YAML front matter between '---' lines")
    meta = yaml.safe_load(match.group(1)) or {}
    if not isinstance(meta, dict):
        raise ReleaseError(f"the front matter of {name} is not a YAML mapping")
    return meta, match.group(2)


def _card(source: Path, extra: dict[str, Any], fixed: dict[str, Any], stamp: str) -> str:
    """The README of a released Space: source front matter ← cards.yaml ← what the release fixes; stamped body."""
    meta, body = _split_card(source.read_text(encoding="utf-8"), str(source))
    meta = {**meta, **extra, **fixed}
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
    return f"---\n{front}---\n\n{stamp}\n\n{body.lstrip()}"


def _pinned_requirements(source: Path, pin: Callable[[str], str]) -> str:
    """``requirements.txt`` with every ``queerbench`` line pinned to this release (one is added if absent)."""
    lines, found = [], False
    for line in source.read_text(encoding="utf-8").splitlines():
        match = _REQ_NAME.match(line.split("#", 1)[0])
        if match:
            lines.append(pin(match.group(1) or ""))
            found = True
        elif line.strip():
            lines.append(line.rstrip())
    if not found:
        lines.insert(0, pin(""))
    return "\n".join(lines) + "\n"


def _stamp(cfg: ReleaseConfig) -> str:
    tag = cfg.tag()
    return (
        f"> **Release {tag}** (queerbench {__version__}). Released together, under the same tag: the dataset "
        f"[`{cfg.repo_id('dataset')}`](https://huggingface.co/datasets/{cfg.repo_id('dataset')}/tree/{tag}), the "
        f"metric [`{cfg.repo_id('metric')}`](https://huggingface.co/spaces/{cfg.repo_id('metric')}/tree/{tag}) and "
        f"the demo [`{cfg.repo_id('space')}`](https://huggingface.co/spaces/{cfg.repo_id('space')}/tree/{tag})."
    )


def _space_fixed(cfg: ReleaseConfig) -> dict[str, Any]:
    import gradio

    return {
        "sdk": "gradio",
        "sdk_version": gradio.__version__,
        "python_version": cfg.python_version,
        "app_file": "app.py",
        "datasets": [cfg.repo_id("dataset")],
    }


def build_release(
    out: str | Path,
    *,
    checkout: str | Path | None = None,
    namespace: str | None = None,
    overwrite: bool = False,
    dataset_configs: tuple[str, ...] | None = None,
) -> Path:
    """Write ``out/{dataset,metric,space}`` and ``out/release.json`` for this version (atomically); return ``out``."""
    from queerbench.hub.dataset import build_dataset

    root = find_checkout(checkout)
    cfg = load_release_config(namespace, root)
    configs = dataset_configs or cfg.dataset_configs
    manifest = {
        "version": __version__,
        "tag": cfg.tag(),
        "repos": {
            "dataset": {"repo_id": cfg.repo_id("dataset"), "repo_type": "dataset", "folder": "dataset"},
            "metric": {
                "repo_id": cfg.repo_id("metric"),
                "repo_type": "space",
                "folder": "metric",
                "space_sdk": "gradio",
            },
            "space": {"repo_id": cfg.repo_id("space"), "repo_type": "space", "folder": "space", "space_sdk": "gradio"},
        },
        "dataset_configs": list(configs),
    }

    def is_ours(folder: Path) -> bool:
        return (folder / MANIFEST).is_file()

    stamp = _stamp(cfg)
    fixed = _space_fixed(cfg)
    with atomic_dir(out, overwrite=overwrite, is_ours=is_ours) as tmp:
        build_dataset(tmp / "dataset", configs)
        metric_src, metric = root / "metric_queerbench", tmp / "metric"
        metric.mkdir()
        shutil.copyfile(metric_src / "metric_queerbench.py", metric / f"{cfg.metric}.py")
        shutil.copyfile(metric_src / "app.py", metric / "app.py")
        (metric / "README.md").write_text(
            _card(metric_src / "README.md", cfg.cards.get("metric", {}), fixed, stamp), encoding="utf-8"
        )
        (metric / "requirements.txt").write_text(
            _pinned_requirements(metric_src / "requirements.txt", cfg.requirement), encoding="utf-8"
        )
        space_src, space = root / "space", tmp / "space"
        shutil.copytree(space_src, space, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))
        (space / "README.md").write_text(
            _card(space_src / "README.md", cfg.cards.get("space", {}), fixed, stamp),
            encoding="utf-8",
        )
        (space / "requirements.txt").write_text(
            _pinned_requirements(space_src / "requirements.txt", cfg.requirement), encoding="utf-8"
        )
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return Path(out)


# ------------------------------------------------------------------------------------------------------- push
def _read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    if not path.is_file():
        raise ReleaseError(f"{folder} is not a release build (no {MANIFEST}); run `queerbench release build --out DIR`")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for artifact in ("dataset", "metric", "space"):
        entry = manifest.get("repos", {}).get(artifact)
        if not entry or not (folder / entry["folder"]).is_dir():
            raise ReleaseError(f"{folder} lacks the {artifact} folder; rebuild it with `queerbench release build`")
    return manifest


def _hub_failure(what: str, exc: Exception) -> ReleaseError:
    from huggingface_hub.errors import OfflineModeIsEnabled

    if isinstance(exc, OfflineModeIsEnabled):
        return ReleaseError(f"{what}: HF_HUB_OFFLINE is set, so the Hub cannot be reached; unset it to push")
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status in (401, 403):
        return ReleaseError(f"{what}: the Hub refused the token in HF_TOKEN (HTTP {status}); it needs write access")
    detail = " ".join(str(exc).split())[:300]
    return ReleaseError(f"{what}: {type(exc).__name__}: {detail}")


def push_release(
    folder: str | Path,
    *,
    yes: bool = False,
    endpoint: str | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Publish a release build: dry run (print the plan) unless ``yes``; returns {artifact: {repo_id, commit, tag}}.

    All tags are checked before anything is created or uploaded, and tags are only created after all three uploads
    succeeded, so a failure never leaves a tagged, half-published release. ``HF_TOKEN`` (environment only) is required
    with ``yes``; ``endpoint`` defaults to ``HF_ENDPOINT`` read now (not at import).
    """
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    folder = Path(folder)
    manifest = _read_manifest(folder)
    tag, repos = manifest["tag"], manifest["repos"]
    token = env.hf_token()
    endpoint = endpoint or env.hf_endpoint()
    log(f"release {tag} (queerbench {manifest['version']}) from {folder}{f' to {endpoint}' if endpoint else ''}:")
    for artifact, entry in repos.items():
        files = sorted(
            p.relative_to(folder / entry["folder"]).as_posix()
            for p in (folder / entry["folder"]).rglob("*")
            if p.is_file()
        )
        kind = entry["repo_type"] + (f" ({entry['space_sdk']})" if entry.get("space_sdk") else "")
        log(
            f"  {artifact}: create {kind} repo {entry['repo_id']}, upload {len(files)} files ({', '.join(files)}), tag {tag}"
        )
    if not yes:
        note = "" if token else " (HF_TOKEN is not set: the real push will need it)"
        log(f"dry run: nothing was created, uploaded or tagged{note}; pass --yes to publish")
        return {}
    if token is None:
        raise ReleaseError("HF_TOKEN is not set: export a Hugging Face token with write access to push a release")
    if manifest["version"] != __version__:
        log(f"note: this build is version {manifest['version']}; the installed queerbench is {__version__}")

    api = HfApi(endpoint=endpoint, token=token)
    taken = []
    for artifact, entry in repos.items():
        try:
            refs = api.list_repo_refs(entry["repo_id"], repo_type=entry["repo_type"])
        except RepositoryNotFoundError:
            continue  # created below
        except Exception as exc:
            raise _hub_failure(f"could not read the tags of {entry['repo_id']}", exc) from exc
        if any(t.name == tag for t in refs.tags):
            taken.append(f"{artifact} {entry['repo_id']}")
    if taken:
        raise ReleaseError(
            f"{tag} is already tagged on {', '.join(taken)}; nothing was uploaded. Bump queerbench.__version__ and "
            "rebuild the release (a published version is never replaced)."
        )

    result: dict[str, Any] = {}
    for artifact, entry in repos.items():
        repo_id, repo_type = entry["repo_id"], entry["repo_type"]
        try:
            api.create_repo(repo_id, repo_type=repo_type, space_sdk=entry.get("space_sdk"), exist_ok=True)
            info = api.upload_folder(
                repo_id=repo_id,
                repo_type=repo_type,
                folder_path=folder / entry["folder"],
                commit_message=f"Release {tag} (queerbench {manifest['version']})",
            )
        except Exception as exc:
            done = ", ".join(r["repo_id"] for r in result.values()) or "none"
            raise _hub_failure(
                f"uploading {artifact} to {repo_id} failed (already uploaded, untagged: {done}; no tag was created, "
                "so the release is not published — fix the cause and push again)",
                exc,
            ) from exc
        result[artifact] = {"repo_id": repo_id, "repo_type": repo_type, "commit": info.oid}
        log(f"uploaded {artifact} to {repo_id} ({info.oid[:10]})")
    for entry in result.values():
        try:
            api.create_tag(
                entry["repo_id"],
                tag=tag,
                revision=entry["commit"],
                repo_type=entry["repo_type"],
                tag_message=f"queerbench {manifest['version']}",
            )
        except Exception as exc:
            tagged = ", ".join(e["repo_id"] for e in result.values() if e.get("tag")) or "none"
            raise _hub_failure(f"tagging {entry['repo_id']} with {tag} failed (tagged so far: {tagged})", exc) from exc
        entry["tag"] = tag
        log(f"tagged {entry['repo_id']} {tag}")
    log(f"published release {tag}")
    return result


def push_built_or_new(
    folder: str | Path | None, *, yes: bool, namespace: str | None = None, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Push ``folder``, or build a release into a temporary folder first and push that."""
    if folder is not None:
        return push_release(folder, yes=yes, log=log)
    with tempfile.TemporaryDirectory(prefix="queerbench-release-") as tmp:
        out = build_release(Path(tmp) / "release", namespace=namespace)
        return push_release(out, yes=yes, log=log)

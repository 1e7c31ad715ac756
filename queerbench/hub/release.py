"""Release the dataset, the metric Space and the demo Space together, under one version and one tag.

``build_release(out)`` writes three Hub-ready folders, all stamped with :data:`queerbench.__version__`:

- ``out/dataset``: Parquet per config and split plus the card (:func:`queerbench.hub.dataset.build_dataset`);
- ``out/metric``: the ``evaluate`` module copied as ``<metric repo name>.py`` (``evaluate.load("<ns>/<name>")`` looks
  for exactly that file), its Gradio ``app.py``, a README whose front matter carries ``tags: [evaluate,
  measurement]`` and ``requirements.txt`` pinning ``queerbench==<version>``;
- ``out/space``: the demo's ``app.py``, README front matter (``sdk: gradio``, ``sdk_version`` = the installed Gradio,
  ``python_version``) and pinned requirements;
- ``out/dist``: this version's sdist and wheel, copied from ``python -m build``'s output (``dist=``, e.g. CI's tested
  files, or the checkout's ``dist/``);

plus ``out/release.json``, the manifest ``push`` reads: it records every file of the build with its SHA-256. The
metric and Space folders are copied from the repository checkout (they are not part of the installed package).
``--overwrite`` replaces only the files an earlier build recorded there (a ``NOTES.md`` or ``.git`` of the user's
stays; :func:`queerbench.base.files.replace_own_files`).

``push_release(folder, yes=True)`` uploads exactly the files the build recorded, each checked against its checksum (a
file the build did not write, a symbolic link, a changed file or a ``release.json`` naming a folder outside the build is
refused in one line before anything is uploaded: :mod:`queerbench.hub.release_files`). It first checks that the package
index lacks this version and no repo has the tag; then it uploads the sdist and the wheel with twine
(``TWINE_REPOSITORY_URL``, PyPI by default, ``TWINE_USERNAME``, ``TWINE_PASSWORD``) and waits until the index serves
them (:class:`PackageIndex`), so that the Spaces' pinned requirements resolve; only then does it create the repos,
upload each folder in one commit and tag the three commits. A failure says what was published and how to finish. Without
``yes`` it only prints the plan. Secrets come from :mod:`queerbench.base.env` and are never printed (nor a password
inside ``TWINE_REPOSITORY_URL``). Repo ids, the tag pattern and card metadata are data: ``hub_configs/release.json`` and
``hub_configs/cards.yaml``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

import queerbench
from queerbench import __version__
from queerbench.base import env
from queerbench.base.files import read_json_object, replace_own_files
from queerbench.base.release_config import ReleaseConfig, load_release_config
from queerbench.hub.package_index import PackageIndex, ReleaseError, of_version, shown_url
from queerbench.hub.release_files import MANIFEST, checked_files, own_files, record, sha256, staged

__all__ = [
    "MANIFEST",
    "PackageIndex",
    "ReleaseConfig",
    "ReleaseError",
    "build_release",
    "find_checkout",
    "load_release_config",
    "push_release",
]

_SPACE_FILES = ("app.py", "README.md", "requirements.txt")
_METRIC_FILES = ("metric_queerbench.py", "app.py", "README.md", "requirements.txt")
_REQ_NAME = re.compile(r"^\s*queerbench(\[[^\]]*\])?\s*([<>=!~].*)?$")


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
    tag = cfg.tag(__version__)
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


def _dist_files(folder: Path) -> list[Path]:
    """The one sdist and the one wheel of queerbench ``__version__`` in ``folder``; ``ReleaseError`` otherwise."""
    ours = [p for p in sorted(folder.glob("queerbench-*")) if of_version(p.name)]
    sdists, wheels = [p for p in ours if p.name.endswith(".tar.gz")], [p for p in ours if p.name.endswith(".whl")]
    if len(sdists) != 1 or len(wheels) != 1:
        raise ReleaseError(
            f"{folder} must hold one sdist and one wheel of queerbench {__version__} (python -m build --outdir "
            f"{folder}); found {[p.name for p in ours] or 'none'}"
        )
    return [*sdists, *wheels]


def build_release(
    out: str | Path,
    *,
    checkout: str | Path | None = None,
    namespace: str | None = None,
    overwrite: bool = False,
    dataset_configs: tuple[str, ...] | None = None,
    dist: str | Path | None = None,
) -> Path:
    """Write ``out/{dataset,metric,space,dist}`` and ``out/release.json`` for this version (atomically); return
    ``out``. ``dist``: the folder holding this version's sdist and wheel (default: the checkout's ``dist/``, where
    ``python -m build`` writes them)."""
    from queerbench.hub.dataset import build_dataset

    root = find_checkout(checkout)
    cfg = load_release_config(namespace, root)
    _dist_files(Path(dist) if dist is not None else root / "dist")  # before the dataset is built
    configs = dataset_configs or cfg.dataset_configs
    manifest = {
        "version": __version__,
        "tag": cfg.tag(__version__),
        "repos": {
            name: {"repo_id": cfg.repo_id(name), "repo_type": kind, "folder": name}
            | ({"space_sdk": "gradio"} if sdk else {})
            for name, kind, sdk in (("dataset", "dataset", False), ("metric", "space", True), ("space", "space", True))
        },
        "dataset_configs": list(configs),
    }

    stamp = _stamp(cfg)
    fixed = _space_fixed(cfg)
    with replace_own_files(out, overwrite=overwrite, own_files=own_files, command="queerbench release build") as tmp:
        build_dataset(tmp / "dataset", configs)
        metric_src, metric = root / "metric_queerbench", tmp / "metric"
        metric.mkdir()
        shutil.copyfile(metric_src / "metric_queerbench.py", metric / f"{cfg.metric}.py")
        shutil.copyfile(metric_src / "app.py", metric / "app.py")
        space_src, space = root / "space", tmp / "space"
        shutil.copytree(space_src, space, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))
        for name, src, dst in (("metric", metric_src, metric), ("space", space_src, space)):
            card = _card(src / "README.md", cfg.cards.get(name, {}), fixed, stamp)
            (dst / "README.md").write_text(card, encoding="utf-8")
            pinned = _pinned_requirements(src / "requirements.txt", lambda extras: cfg.requirement(extras, __version__))
            (dst / "requirements.txt").write_text(pinned, encoding="utf-8")
        (tmp / "dist").mkdir()
        for path in _dist_files(Path(dist) if dist is not None else root / "dist"):
            shutil.copyfile(path, tmp / "dist" / path.name)
        manifest["dist"] = {"folder": "dist", "files": {p.name: sha256(p) for p in sorted((tmp / "dist").iterdir())}}
        manifest["files"] = record(tmp)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return Path(out)


# ------------------------------------------------------------------------------------------------------- push
def _read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    if not path.is_file():
        raise ReleaseError(f"{folder} is not a release build (no {MANIFEST}); run `queerbench release build --out DIR`")
    manifest = read_json_object(path, fix="rebuild it with `queerbench release build`")
    repos = manifest.get("repos")
    for artifact in ("dataset", "metric", "space"):
        entry = repos.get(artifact) if isinstance(repos, dict) else None
        if not isinstance(entry, dict) or not (folder / str(entry.get("folder"))).is_dir():
            raise ReleaseError(f"{folder} lacks the {artifact} folder; rebuild it with `queerbench release build`")
    dist = manifest.get("dist")
    if not isinstance(dist, dict) or not isinstance(dist.get("files"), dict):
        raise ReleaseError(f"{path} lacks its dist files; rebuild it with `queerbench release build`")
    if len(dist["files"]) != 2 or not all(of_version(n, manifest["version"]) for n in dist["files"]):
        raise ReleaseError(f"{folder} holds no sdist and wheel of its version; rebuild with `queerbench release build`")
    manifest["checked"] = checked_files(folder, manifest)
    return manifest


def hub_offline_variable() -> str:
    """The variable that keeps ``huggingface_hub`` offline: ``HF_HUB_OFFLINE``, else ``TRANSFORMERS_OFFLINE`` (which it
    reads when the first is unset), so that a refusal names the one the user set."""
    if env.text("HF_HUB_OFFLINE") is None and env.text("TRANSFORMERS_OFFLINE") is not None:
        return "TRANSFORMERS_OFFLINE"
    return "HF_HUB_OFFLINE"


def _hub_failure(what: str, exc: Exception, then: str = "") -> ReleaseError:
    from huggingface_hub.errors import OfflineModeIsEnabled

    if isinstance(exc, OfflineModeIsEnabled):
        cause = f"{hub_offline_variable()} is set, so the Hub cannot be reached; unset it to push"
    elif getattr(getattr(exc, "response", None), "status_code", None) in (401, 403):
        cause = f"the Hub refused the token in HF_TOKEN (HTTP {exc.response.status_code}); it needs write access"  # type: ignore[attr-defined]
    else:
        cause = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return ReleaseError(f"{what}: {cause}{f'. {then}' if then else ''}")


def push_release(
    folder: str | Path,
    *,
    yes: bool = False,
    endpoint: str | None = None,
    index_published: bool = False,
    index_timeout: float = 600.0,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Publish a release build: dry run (print the plan) unless ``yes``; returns {artifact: {repo_id, commit, tag}}.

    The index and every Hub tag are checked before anything is uploaded; the sdist and the wheel go to the package
    index first and the Hub artifacts only once it serves them (``index_published``: uploaded already, e.g. by CI's
    trusted publishing, so only checked); tags are only created after all three Hub uploads succeeded. ``HF_TOKEN``
    (environment only) is required with ``yes``; ``endpoint`` defaults to ``HF_ENDPOINT`` read now (not at import).
    """
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    folder, index, token = Path(folder), PackageIndex.from_env(), env.hf_token()
    endpoint, manifest = endpoint or env.hf_endpoint(), _read_manifest(folder)
    tag, repos, version, dist = manifest["tag"], manifest["repos"], manifest["version"], manifest["dist"]
    names, checked = ", ".join(dist["files"]), manifest["checked"]
    log(f"release {tag} (queerbench {version}) from {folder}{f' to {shown_url(endpoint)}' if endpoint else ''}:")
    upload = "" if index_published else f"upload {names} to {index.upload_shown}, then "
    log(f"  index: {upload}wait until {index.simple_shown} serves {names}")
    for artifact, entry in repos.items():
        files = sorted(checked[entry["folder"]])
        what = entry["repo_type"] + (f" ({entry['space_sdk']}) repo " if entry.get("space_sdk") else " repo ")
        log(f"  {artifact}: create {what}{entry['repo_id']}, upload {len(files)} files ({', '.join(files)}), tag {tag}")
    if not yes:
        note = "" if token else " (HF_TOKEN is not set: the real push will need it)"
        log(f"dry run: nothing was created, uploaded or tagged{note}; pass --yes to publish")
        return {}
    if token is None:
        raise ReleaseError("HF_TOKEN is not set: export a Hugging Face token with write access to push a release")
    if version != __version__:
        log(f"note: this build is version {version}; the installed queerbench is {__version__}")

    # ---- every check before anything is uploaded: twine, the index, the tags of the three repos
    if not index_published and importlib.util.find_spec("twine") is None:
        raise ReleaseError("publishing to a package index needs twine: pip install 'queerbench[release]'")
    served = index.files(version)
    if index_published and any(served.get(n, "") not in (None, d) for n, d in dist["files"].items()):
        raise ReleaseError(
            f"--index-published, but {index.simple_shown} serves {sorted(served) or 'none'} of queerbench "
            f"{version}, not this build's {names}; nothing was uploaded"
        )
    if served and not index_published:
        raise ReleaseError(
            f"queerbench {version} is already on {index.simple_shown} ({', '.join(sorted(served))}); nothing was "
            "uploaded. A published version is never replaced: bump queerbench.__version__ and rebuild (if these are "
            "this build's files, finish the release with --index-published)"
        )
    api, taken = HfApi(endpoint=endpoint, token=token), []
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

    with tempfile.TemporaryDirectory(prefix="queerbench-release-") as staging:
        copies = staged(folder, manifest["checked"], Path(staging))  # every file checked before anything is uploaded
        return _publish(folder, manifest, copies, api, index, (index_published, index_timeout), log)


def _publish(
    folder: Path,
    manifest: dict[str, Any],
    copies: dict[str, Path],
    api: Any,
    index: PackageIndex,
    index_step: tuple[bool, float],
    log: Callable[[str], None],
) -> dict[str, Any]:
    """:func:`push_release` once every check passed: the index, then each repo (from ``copies``, the checked copies
    of exactly its recorded files), then the tags."""
    tag, repos, version, dist = manifest["tag"], manifest["repos"], manifest["version"], manifest["dist"]
    names, (index_published, index_timeout) = ", ".join(dist["files"]), index_step

    # ---- the package index first (the Spaces' requirements pin this version), then the Hub once it serves it
    finish = f"`queerbench release push --dir {folder} --yes --index-published`"
    try:
        if not index_published:
            index.upload([copies[dist["folder"]] / n for n in dist["files"]])
            log(f"uploaded {names} to {index.upload_shown}")
        index.wait_until_served(dist["files"], version, index_timeout)
    except Exception as exc:
        said = shown_url(" ".join(str(exc).split()))[:300]
        cause = said if isinstance(exc, ReleaseError) else f"{type(exc).__name__}: {said}"
        raise ReleaseError(
            f"publishing {names} to {index.upload_shown} failed: {cause}. Nothing was pushed to the Hub; if "
            f"{index.simple_shown} lists the files now, they are published: finish with {finish}"
        ) from exc
    log(f"{index.simple_shown} serves queerbench {version}")

    published, message = f"Published: queerbench {version} on {index.simple_shown}", f"Release {tag}"
    result: dict[str, dict[str, Any]] = {}
    for artifact, entry in repos.items():
        repo_id, repo_type = entry["repo_id"], entry["repo_type"]
        try:
            api.create_repo(repo_id, repo_type=repo_type, space_sdk=entry.get("space_sdk"), exist_ok=True)
            upload = copies[entry["folder"]]
            info = api.upload_folder(repo_id=repo_id, repo_type=repo_type, folder_path=upload, commit_message=message)
        except Exception as exc:
            done = ", ".join(r["repo_id"] for r in result.values()) or "none"
            then = f"{published}; on the Hub, uploaded without a tag: {done}. To finish, fix the cause and run {finish}"
            raise _hub_failure(f"uploading {artifact} to {repo_id} failed", exc, then) from exc
        result[artifact] = {"repo_id": repo_id, "repo_type": repo_type, "commit": info.oid}
        log(f"uploaded {artifact} to {repo_id} ({info.oid[:10]})")
    for entry in result.values():
        try:
            api.create_tag(
                entry["repo_id"], tag=tag, revision=entry["commit"], repo_type=entry["repo_type"], tag_message=message
            )
        except Exception as exc:
            tagged = ", ".join(e["repo_id"] for e in result.values() if e.get("tag")) or "none"
            left = ", ".join(f"{e['repo_id']} at {e['commit']}" for e in result.values() if not e.get("tag"))
            then = f"{published} and on the Hub; tagged: {tagged}. To finish, tag {tag} on {left}"
            raise _hub_failure(f"tagging {entry['repo_id']} with {tag} failed", exc, then) from exc
        entry["tag"] = tag
        log(f"tagged {entry['repo_id']} {tag}")
    log(f"published release {tag}")
    return result


def push_built_or_new(folder: str | Path | None, *, namespace: str | None = None, **options: Any) -> dict[str, Any]:
    """Push ``folder`` (``options``: :func:`push_release`'s), or build a release into a temporary folder first."""
    if folder is not None:
        return push_release(folder, **options)
    with tempfile.TemporaryDirectory(prefix="queerbench-release-") as tmp:
        return push_release(build_release(Path(tmp) / "release", namespace=namespace), **options)

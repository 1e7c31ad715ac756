"""Where a release goes and what its cards say: ``hub_configs/release.json`` and ``hub_configs/cards.yaml``, read once
here so that every layer names the same repos and the same tag.

The release (:mod:`queerbench.hub.release`) builds and pushes to these repos; an eval's Hub result entries
(:mod:`queerbench.results.eval_results`) name the released dataset and its tag; the results dataset
(:mod:`queerbench.hub.results`) takes its id from here. The files are data: the installed package's
``queerbench.hub_configs``, else the checkout's ``hub_configs/`` (an older editable install).
"""

from __future__ import annotations

import json
import platform
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ReleaseConfig", "ReleaseError", "hub_config_text", "load_release_config"]


class ReleaseError(ValueError):
    """A release cannot be built or pushed; the message says why and what to do."""


def hub_config_text(name: str, checkout: Path | None = None) -> str:
    """A file of ``hub_configs/``: from the installed package, else from the checkout (an older editable install)."""
    try:
        return resources.files("queerbench.hub_configs").joinpath(name).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        root = checkout or Path(__file__).resolve().parents[2]  # the checkout holding the queerbench package
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
    results: str
    dataset_configs: tuple[str, ...]
    tag_pattern: str
    python_version: str
    requirement_pattern: str
    cards: dict[str, dict[str, Any]]

    def repo_id(self, artifact: str) -> str:
        """``namespace/name`` of ``dataset``, ``metric``, ``space`` or ``results``."""
        return f"{self.namespace}/{getattr(self, artifact)}"

    def tag(self, version: str) -> str:
        """The one tag all three repos get for ``version`` (``v0.1.0``; pass ``queerbench.__version__``)."""
        return self.tag_pattern.format(version=version)

    def requirement(self, extras: str, version: str) -> str:
        """The pinned requirement line for queerbench ``version`` (``queerbench[space,scm,surrogate]==0.1.0``)."""
        return self.requirement_pattern.format(extras=extras, version=version)


def load_release_config(namespace: str | None = None, checkout: Path | None = None) -> ReleaseConfig:
    """Read the release settings; ``namespace`` overrides the configured one (e.g. to push to your own account)."""
    data = json.loads(hub_config_text("release.json", checkout))
    cards = yaml.safe_load(hub_config_text("cards.yaml", checkout)) or {}
    missing = [k for k in ("namespace", "dataset", "metric", "space", "dataset_configs") if not data.get(k)]
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
        results=data.get("results", "queerbench-results"),
        dataset_configs=tuple(data["dataset_configs"]),
        tag_pattern=data.get("tag", "v{version}"),
        python_version=str(data.get("python_version") or ".".join(platform.python_version_tuple()[:2])),
        requirement_pattern=data.get("queerbench_requirement", "queerbench{extras}=={version}"),
        cards={k: dict(v or {}) for k, v in cards.items()},
    )

"""Links that stay true: every relative link of the Markdown files outside the documentation site (README,
CONTRIBUTING, the changelog, the Space's and the metric's cards) points at a file of the repository, and an anchor at
one of its headings; the site over ``docs/`` builds with ``mkdocs build --strict``, which fails on any broken link or
anchor of its pages (``mkdocs.yml``: every validation is a warning, strict makes it an error).

mkdocs is in the ``docs`` extra; without it the build test skips with that reason on a developer's machine and fails
in CI (``CI`` set). ``.ci/run`` also builds the site as a step of its own.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OUTSIDE_THE_SITE = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", "space/README.md", "metric_queerbench/README.md"]

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, markup and punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {github_slug(h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.M)}


def relative_links(page: Path) -> list[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return [t for t in _LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]  # no scheme: relative


def broken_links(name: str) -> list[str]:
    page = REPO / name
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target} (no heading with that anchor)")
    return broken


def test_the_slug_rule() -> None:
    assert github_slug("`scored` method") == "scored-method"
    assert github_slug("QueerGen's tables") == "queergens-tables"
    assert github_slug("SmolLM2-135M-Instruct on both benchmarks") == "smollm2-135m-instruct-on-both-benchmarks"
    assert github_slug("Both [benchmarks](x.md) side by side") == "both-benchmarks-side-by-side"


@pytest.mark.parametrize("name", OUTSIDE_THE_SITE)
def test_links_outside_the_site_resolve(name: str) -> None:
    assert broken_links(name) == []


def test_a_broken_link_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Its part\n")
    (tmp_path / "x.md").write_text(
        "[ok](docs/a.md#its-part) [web](https://example.org) `[code](nope.md)`\n"
        "[gone](docs/b.md) [no anchor](docs/a.md#other)\n```\n[in a block](nope.md)\n```\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert broken_links("x.md") == ["docs/b.md (no such file)", "docs/a.md#other (no heading with that anchor)"]


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        reason = "mkdocs and mkdocs-material are not installed (pip install -e '.[docs]')"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    built = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    pages = {p.stem for p in (REPO / "docs").glob("*.md")} - {"index"}
    assert {f"{stem}/index.html" for stem in pages} | {"index.html"} <= built

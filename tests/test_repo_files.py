"""The files that make the repository adoptable: the workflows (valid under GitHub's workflow schema, running what
they say), the citation file (valid CFF, checked by the CFF schema and by ``cffconvert --validate``), the licence,
the changelog, the pre-commit hooks and the project metadata.

``check-jsonschema`` is in the ``test`` extra. ``cffconvert`` is not (it pins ``jsonschema<4``, which
check-jsonschema cannot use): ``.ci/run`` installs it into a venv of its own and puts it on ``PATH``; without it
that one test skips with the reason on a developer's machine and fails in CI (``CI`` set).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from queerbench import __version__
from queerbench.cli import build_parser

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"


def _check_jsonschema(schema: str, *files: Path) -> subprocess.CompletedProcess[str]:
    """``check-jsonschema --builtin-schema SCHEMA FILES`` from this Python's environment (its schemas are vendored:
    no network)."""
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _workflow(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def _runs(job: dict) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


# ---------------------------------------------------------------------------------------------------- workflows
def test_the_workflows_are_valid_under_githubs_schema() -> None:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert [f.name for f in files] == ["ci.yml", "release.yml"]
    proc = _check_jsonschema("vendor.github-workflows", *files)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_schema_check_rejects_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text("name: broken\non: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps: nope\n")
    proc = _check_jsonschema("vendor.github-workflows", broken)
    assert proc.returncode != 0 and "steps" in proc.stdout + proc.stderr


def test_ci_runs_ci_run_on_every_push_and_pull_request() -> None:
    ci = _workflow("ci.yml")
    assert set(ci["on"]) == {"push", "pull_request"} and not any(ci["on"].values())  # every branch, every PR
    (job,) = ci["jobs"].values()
    assert _runs(job) == ["bash .ci/run"]
    assert "QUEERBENCH_DATA_DIR" not in {**ci.get("env", {}), **job.get("env", {})}  # the pinned public sources


def test_a_tag_releases_the_tested_wheel_to_pypi_then_the_hub() -> None:
    release = _workflow("release.yml")
    assert release["on"] == {"push": {"tags": ["v*"]}}
    jobs = release["jobs"]
    assert jobs["test-wheel"]["needs"] == "build" and "bash .ci/wheel-smoke dist" in _runs(jobs["test-wheel"])
    pypi = jobs["pypi"]
    assert pypi["needs"] == "test-wheel" and pypi["permissions"] == {"id-token": "write"}
    assert [s["uses"] for s in pypi["steps"] if s.get("uses", "").startswith("pypa/")] == [
        "pypa/gh-action-pypi-publish@release/v1"
    ]
    hub = jobs["hub"]
    assert hub["needs"] == "pypi"
    (push,) = [s for s in hub["steps"] if "release push" in s.get("run", "")]
    assert push["env"] == {"HF_TOKEN": "${{ secrets.HF_TOKEN }}"}
    # the release commands of the workflow are commands the CLI takes
    commands = [line for run in _runs(hub) for line in run.splitlines() if line.startswith("queerbench ")]
    assert len(commands) == 2
    for command in commands:
        args = build_parser().parse_args(shlex.split(command)[1:])
        assert args.command == "release"
    assert "--yes" in commands[1] and "--dir release" in commands[1]
    # only the PyPI job may mint an OIDC token; the workflow's default is read-only
    assert release["permissions"] == {"contents": "read"}
    assert [name for name, job in jobs.items() if "id-token" in job.get("permissions", {})] == ["pypi"]


def test_the_release_notes_come_from_the_changelog(tmp_path: Path) -> None:
    """The awk line of release.yml cuts exactly the tagged version's section out of CHANGELOG.md."""
    (step,) = [s for s in _workflow("release.yml")["jobs"]["github-release"]["steps"] if "awk" in s.get("run", "")]
    (awk,) = [line.strip() for line in step["run"].splitlines() if line.strip().startswith("awk")]
    changelog = "# Changelog\n\n## [Unreleased]\n\n- next\n\n## [1.2.0] - 2030-01-01\n\n- this\n\n## [1.1.0]\n\n- old\n"
    (tmp_path / "CHANGELOG.md").write_text(changelog + "\n[1.2.0]: https://example.org\n")
    script = f"version=1.2.0\n{awk}\ncat notes.md"
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["-", "this"]


# ------------------------------------------------------------------------------------------------------ citation
def test_citation_cff_is_valid_under_the_cff_schema() -> None:
    proc = _check_jsonschema("vendor.citation-file-format", REPO / "CITATION.cff")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_citation_cff_passes_cffconvert(tmp_path: Path) -> None:
    cffconvert = shutil.which("cffconvert")
    if cffconvert is None:
        reason = "cffconvert is not installed (it cannot share a venv with check-jsonschema: see .ci/run)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    proc = subprocess.run([cffconvert, "--validate", "-i", str(REPO / "CITATION.cff")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    broken = tmp_path / "CITATION.cff"
    broken.write_text("cff-version: 1.2.0\ntitle: no authors, no message\n")
    assert subprocess.run([cffconvert, "--validate", "-i", str(broken)], capture_output=True).returncode != 0


def test_citation_cff_cites_this_version_and_the_three_papers() -> None:
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["type"] == "software" and cff["version"] == __version__ and cff["license"] == "Apache-2.0"
    refs = {ref["title"].split(":")[0]: ref for ref in cff["references"]}
    assert set(refs) == {"QueerBench", "QueerGen", "LLMs Reproduce Stereotypes of Sexual and Gender Minorities"}
    assert refs["QueerBench"]["url"] == "https://arxiv.org/abs/2406.12399"
    assert refs["QueerGen"]["url"] == "https://arxiv.org/abs/2601.20731"
    assert "EACL 2026" in refs["QueerGen"]["collection-title"]
    ostrow = refs["LLMs Reproduce Stereotypes of Sexual and Gender Minorities"]
    assert ostrow["doi"] == "10.18653/v1/2025.findings-emnlp.946" and (ostrow["start"], ostrow["end"]) == (17465, 17477)


# ----------------------------------------------------------------------------------- licence, changelog, metadata
def test_the_licence_is_the_full_apache_2_text() -> None:
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    for part in ("TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION", "9. Accepting Warranty or Additional",
                 "END OF TERMS AND CONDITIONS", "APPENDIX: How to apply the Apache License"):  # fmt: skip
        assert part in text
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"] == "Apache-2.0"


def test_the_changelog_keeps_a_changelog() -> None:
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = re.findall(r"^## \[([^\]]+)\]", text, flags=re.M)
    assert versions[0] == "Unreleased" and __version__ in versions
    assert re.search(r"^## \[Unreleased\]\n\n### \w+\n\n- ", text, flags=re.M)  # a bullet list to extend
    for version in versions:
        assert re.search(rf"^\[{re.escape(version)}\]: https://github\.com/", text, flags=re.M), version


def test_the_project_says_where_it_lives() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert set(project["urls"]) == {"Homepage", "Documentation", "Repository", "Issues", "Changelog"}
    assert project["urls"]["Repository"] == "https://github.com/queerbench/queerbench"
    assert project["urls"]["Documentation"] == "https://queerbench.github.io/queerbench"
    assert not any(c.startswith("License ::") for c in project["classifiers"])  # the SPDX `license` says it
    assert "Programming Language :: Python :: 3 :: Only" in project["classifiers"]
    extras = project["optional-dependencies"]
    assert {r.split(">")[0] for r in extras["docs"]} == {"mkdocs", "mkdocs-material"}
    assert {"check-jsonschema", "pypiserver", "twine"} <= {re.split(r"[<>=]", r)[0] for r in extras["test"]}


def test_pre_commit_runs_ruff_from_the_environment() -> None:
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    (repo,) = config["repos"]
    assert repo["repo"] == "local"
    hooks = {h["entry"].split(" --")[0]: h for h in repo["hooks"]}
    assert set(hooks) == {"ruff check", "ruff format"}
    assert "--check" in hooks["ruff format"]["entry"]
    assert all(h["language"] == "system" for h in hooks.values())

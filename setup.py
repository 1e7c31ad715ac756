"""Which packages the distribution holds; everything else (metadata, dependencies, data files) is in pyproject.toml.

Every folder under ``queerbench/`` is found (a new subpackage needs no edit anywhere), and the top-level ``lexicons/``
and ``hub_configs/`` folders are installed as ``queerbench.lexicons`` and ``queerbench.hub_configs`` (with any
subfolders) — a mapping that ``[tool.setuptools.packages.find]`` cannot express. Where a ``queerbench/lexicons`` or
``queerbench/hub_configs`` folder exists instead, it is found like any other and nothing is mapped.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import find_namespace_packages, setup

ROOT = Path(__file__).resolve().parent
SKIP = ["*__pycache__*"]  # left behind in a working tree by the tests; never part of the package


def _mapped() -> dict[str, str]:
    """``{package name: top-level folder}`` for the folders installed under another name."""
    mapped = {}
    for folder in ("lexicons", "hub_configs"):
        name = f"queerbench.{folder}"
        if (ROOT / folder).is_dir() and not (ROOT / "queerbench" / folder).is_dir():
            mapped[name] = folder
    return mapped


MAPPED = _mapped()
PACKAGES = find_namespace_packages(where=str(ROOT), include=["queerbench", "queerbench.*"], exclude=SKIP)
for name, folder in MAPPED.items():
    PACKAGES += [name] + [f"{name}.{sub}" for sub in find_namespace_packages(where=str(ROOT / folder), exclude=SKIP)]

setup(packages=sorted(PACKAGES), package_dir=MAPPED)

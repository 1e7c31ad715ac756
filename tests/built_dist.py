"""The sdist and the wheel of this checkout, built once per test session, and the wheel installed on its own.

``QUEERBENCH_TEST_DIST`` names a folder where ``python -m build`` already wrote them (``.ci/run`` builds them before
the tests); otherwise they are built here, into a temporary folder (the wheel from the sdist, as ``python -m build``
does). Either way the wheel must be of this checkout's version.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from queerbench import __version__

REPO = Path(__file__).resolve().parents[1]


@functools.cache
def built_dist() -> tuple[Path, Path]:
    """``(wheel, sdist)`` of this checkout."""
    given = os.environ.get("QUEERBENCH_TEST_DIST")
    if given:
        folder = Path(given)
    else:
        folder = Path(tempfile.mkdtemp(prefix="queerbench-dist-"))
        atexit.register(shutil.rmtree, folder, True)
        proc = subprocess.run(
            [sys.executable, "-m", "build", "--outdir", str(folder), str(REPO)],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = sorted(folder.glob("queerbench-*.whl"))
    sdists = sorted(folder.glob("queerbench-*.tar.gz"))
    assert len(wheels) == len(sdists) == 1, f"one wheel and one sdist expected in {folder}: {wheels + sdists}"
    assert wheels[0].name.startswith(f"queerbench-{__version__}-"), f"{wheels[0]} is not version {__version__}"
    assert sdists[0].name == f"queerbench-{__version__}.tar.gz", f"{sdists[0]} is not version {__version__}"
    return wheels[0], sdists[0]


@functools.cache
def installed_wheel() -> Path:
    """A folder holding the built wheel installed alone (``pip install --no-deps --target``), found through the
    package index's own rules: ``queerbench==<version>`` from the wheel's folder and nowhere else. Put it first on
    ``PYTHONPATH`` to import queerbench from the wheel rather than from the checkout."""
    wheel, _ = built_dist()
    target = Path(tempfile.mkdtemp(prefix="queerbench-wheel-"))
    atexit.register(shutil.rmtree, target, True)
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"),
            *("--find-links", str(wheel.parent), "--target", str(target), f"queerbench=={__version__}"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return target

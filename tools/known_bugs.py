"""Apply each bug of ``tools/known_bugs.toml`` alone to a copy of the tree and check that its tests fail.

    python tools/known_bugs.py            # every bug; exit 1 if any survives or no longer applies

The hand-made counterpart of ``tools/mutation.py``: the specific bugs issue 13 found surviving, kept as a regression
check of the tests themselves. Each bug runs the named test files (``-x``, niced) in a temporary copy of the
tracked tree with the copy first on ``PYTHONPATH``; the unmodified copy must pass them first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from mutation import REPO, tracked_files  # tools/ is on sys.path when this file runs as a script

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def main() -> int:
    bugs = tomllib.loads((REPO / "tools" / "known_bugs.toml").read_text(encoding="utf-8"))["bug"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.setdefault("QUEERBENCH_DATA_DIR", str(REPO.parent / "shared"))
    bad = 0
    with tempfile.TemporaryDirectory(prefix="known-bugs-") as tmp:
        root = Path(tmp)
        for f in tracked_files():
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, root / f)
        for package_dir, folder in (("queerbench/lexicons", "lexicons"), ("queerbench/hub_configs", "hub_configs")):
            shutil.copytree(root / folder, root / package_dir)
        env["PYTHONPATH"] = str(root)

        def pytest(tests: list[str]) -> int:
            cmd = ["nice", sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
            return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True).returncode

        # the copy without any bug must pass, or a failure below would say nothing
        every_test = sorted({t for bug in bugs for t in bug["tests"]})
        if pytest(every_test) != 0:
            print(f"the unmodified copy fails {' '.join(every_test)}: fix that first")
            return 1
        for bug in bugs:
            path = root / bug["file"]
            original = path.read_text(encoding="utf-8")
            if original.count(bug["find"]) != 1:
                print(f"NOT APPLIED  {bug['name']}: the code to change is not in {bug['file']} exactly once")
                bad += 1
                continue
            path.write_text(original.replace(bug["find"], bug["replace"]), encoding="utf-8")
            try:
                rc = pytest(bug["tests"])
            finally:
                path.write_text(original, encoding="utf-8")
            caught = rc == 1  # tests ran and failed (not a collection or usage error)
            bad += not caught
            print(f"{'caught' if caught else 'SURVIVED' if rc == 0 else f'ERROR rc={rc}':12} {bug['name']}", flush=True)
    print(f"{len(bugs) - bad} of {len(bugs)} known bugs caught")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Build the Hub dataset folder (thin wrapper; the logic is ``queerbench.hub.dataset.build_dataset``).

Usage: ``python dataset_builder/build.py --out DIR [--configs default,paper,scm] [--overwrite]`` — the same as
``queerbench dataset build``. ``--configs queergen`` adds QueerGen's 3,100 sentences (academic research only: built
only when named, never part of the default release).
"""

from __future__ import annotations

import sys

from queerbench.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["dataset", "build", *sys.argv[1:]]))

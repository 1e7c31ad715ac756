"""``python -m queerbench`` is the same as the ``queerbench`` console script."""

from queerbench.cli import main

raise SystemExit(main())

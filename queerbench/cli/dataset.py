"""``queerbench dataset build``: write the Hub-ready dataset folder."""

from __future__ import annotations

import argparse

from queerbench.hub.dataset import build_dataset, dataset_configs, default_configs


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``dataset build`` to the CLI."""
    dataset = sub.add_parser("dataset", help="build the Hub dataset folder")
    dsub = dataset.add_subparsers(dest="dataset_command", metavar="ACTION", required=True)
    build = dsub.add_parser("build", help="write Parquet per config/split and a README card into --out")
    build.add_argument(
        "--out", required=True, help="output folder (new or empty, or an earlier build with --overwrite)"
    )
    build.add_argument(
        "--configs",
        default=",".join(default_configs()),
        help=f"comma-separated configs to build, from {', '.join(dataset_configs())} (default: %(default)s; the "
        "others, such as 'queergen', academic-research-only data, are built only when named)",
    )
    build.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the files an earlier dataset build wrote in --out (README.md and the Parquet files its card "
        "lists); other files there (notes, .gitattributes, .git) are left as they are",
    )
    build.set_defaults(func=_build)


def _build(args: argparse.Namespace) -> int:
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    out = build_dataset(args.out, configs, overwrite=args.overwrite)
    print(f"wrote dataset ({', '.join(configs)}) to {out}")
    return 0

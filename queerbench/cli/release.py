"""``queerbench release build|push``: publish the sdist and the wheel to the package index, then the dataset, the
metric Space and the demo Space under one tag."""

from __future__ import annotations

import argparse

from queerbench.hub.release import build_release, push_built_or_new


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``release build`` and ``release push`` to the CLI."""
    release = sub.add_parser(
        "release", help="build or publish a release (package, dataset, metric and Space, one version)"
    )
    rsub = release.add_subparsers(dest="release_command", metavar="ACTION", required=True)

    build = rsub.add_parser("build", help="write DIR/dataset, DIR/metric, DIR/space and DIR/dist for this version")
    build.add_argument("--out", required=True, help="output folder (must be empty or absent)")
    build.add_argument("--overwrite", action="store_true", help="replace an earlier release build in --out")
    build.add_argument("--namespace", help="Hub user or organisation to release under (default: hub_configs)")
    build.add_argument("--checkout", help="repository checkout with space/ and metric_queerbench/ (default: auto)")
    build.add_argument(
        "--dist",
        help="folder with this version's sdist and wheel, as `python -m build` writes them (default: CHECKOUT/dist)",
    )
    build.set_defaults(func=_build)

    push = rsub.add_parser(
        "push",
        help="upload the sdist and the wheel to the package index (twine's TWINE_* settings, PyPI by default), wait "
        "until it serves them, then create the three Hub repos, upload and tag them (a dry run unless --yes; Hub "
        "token from HF_TOKEN)",
    )
    push.add_argument("--dir", help="a folder written by `release build` (default: build one now)")
    push.add_argument("--namespace", help="Hub user or organisation, when building now (default: hub_configs)")
    push.add_argument("--yes", action="store_true", help="really publish (default: print what would happen)")
    push.add_argument(
        "--index-published",
        action="store_true",
        help="the sdist and the wheel are on the index already (CI's trusted publishing, or a push that stopped at the "
        "Hub): check that it serves exactly them instead of uploading",
    )
    push.add_argument(
        "--index-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long to wait for the index to serve the uploaded files (default: 600)",
    )
    push.set_defaults(func=_push)


def _build(args: argparse.Namespace) -> int:
    out = build_release(
        args.out, checkout=args.checkout, namespace=args.namespace, overwrite=args.overwrite, dist=args.dist
    )
    print(f"wrote release to {out} (dataset/, metric/, space/, dist/, release.json)")
    return 0


def _push(args: argparse.Namespace) -> int:
    push_built_or_new(
        args.dir,
        namespace=args.namespace,
        yes=args.yes,
        index_published=args.index_published,
        index_timeout=args.index_timeout,
    )
    return 0

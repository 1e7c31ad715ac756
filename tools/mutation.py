"""Mutation testing of the core modules with mutmut 3: one module at a time, its fast tests only, a score per module.

A mutant is the code with one small deliberate bug (``<`` for ``<=``, a constant changed, a call dropped). A test suite
that lets a mutant pass ("survived") would also let that bug through. The modules and the tests that judge each one
are data: ``tools/mutation_modules.toml``. Not part of CI (minutes per module).

    python tools/mutation.py --list                 # the modules and their test files
    python tools/mutation.py score vocab_filter     # run these modules (all when none is named)
    python tools/mutation.py score --budget 900     # stop a module after 900 s; finished mutants are kept, rerun resumes
    python tools/mutation.py score --report         # the figures of the last run, without running anything
    python tools/mutation.py score --survivors      # also list the surviving mutants (``mutmut show NAME`` in the
                                                    # module's workspace prints one as a diff)
    python tools/mutation.py score --recheck        # rerun only the last survivors and timeouts (after adding tests)
    python tools/mutation.py score --fresh          # forget the module's results: check every mutant again
    python tools/mutation.py run --sample 60        # check 60 more mutants drawn at random (a module too slow to
                                                    # check in full: the score of the sample estimates it)

Each module runs in its own workspace ``mutants/<module>/`` (git-ignored): a copy of the tracked tree with a
``pyproject.toml`` whose ``[tool.mutmut]`` is the repository's plus the module's files and tests. mutmut keeps its
results there, so an interrupted run resumes; when the tracked files change the workspace is updated in place and
mutmut re-checks the mutants of every function whose source changed (``--fresh`` re-checks everything). Runs are
``nice``d, single-process by default (``--max-children``) and single-threaded (``OMP_NUM_THREADS=1``), for shared
machines. The raw score is killed / (killed + survived + no tests + suspicious + segfault); timeouts count as killed,
as mutmut counts them; "not checked" mutants (a budget ran out) are reported, not scored. The score compared with the
target leaves out the survivors judged equivalent in ``tools/mutation_equivalents.toml`` (each judgment pinned to the
digest of the mutated code it was made on; see ``tools/mutation_equivalents.py``); both are printed.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.mutation_equivalents import load_judgments, match, mutant_digests

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
MODULES_FILE = REPO / "tools" / "mutation_modules.toml"
WORKSPACES = REPO / "mutants"
SCORED = ("killed", "timeout", "survived", "no tests", "suspicious", "segfault")


def load_modules(path: Path = MODULES_FILE) -> dict[str, dict[str, Any]]:
    """The module table, checked: every module needs ``paths`` and ``tests`` (lists of globs); ``mutants`` optional."""
    data = tomllib.loads(path.read_text(encoding="utf-8")).get("modules")
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{path}: expected [modules.<name>] tables")
    for name, spec in data.items():
        for key in ("paths", "tests"):
            if not isinstance(spec.get(key), list) or not all(isinstance(x, str) for x in spec[key]) or not spec[key]:
                raise ValueError(f'{path}: [modules.{name}] needs {key} = ["..."] (a list of globs)')
        known = {"paths", "tests", "mutants", "timeout_multiplier"}
        if set(spec) - known:
            raise ValueError(f"{path}: [modules.{name}] has unknown keys {sorted(set(spec) - known)}")
        if "timeout_multiplier" in spec and not (
            isinstance(spec["timeout_multiplier"], int | float) and spec["timeout_multiplier"] > 0
        ):
            raise ValueError(f"{path}: [modules.{name}] timeout_multiplier must be a number > 0")
    return data


def tracked_files() -> list[Path]:
    """The repository's tracked files (what a fresh clone has), relative to the root."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [Path(p) for p in out.decode().split("\0") if p and (REPO / p).is_file()]


def expand(globs: list[str]) -> list[str]:
    return sorted({str(p.relative_to(REPO)) for g in globs for p in REPO.glob(g) if p.is_file()})


def expand_each(globs: list[str]) -> list[str]:
    """Like :func:`expand`, in the order of ``globs`` (each glob's matches sorted)."""
    return [str(p.relative_to(REPO)) for g in globs for p in sorted(REPO.glob(g)) if p.is_file()]


def _toml_value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # JSON strings, lists, numbers and true/false are valid TOML


def mutmut_config(spec: dict[str, Any], paths: list[str], tests: list[str]) -> str:
    """The workspace's ``[tool.mutmut]``: the repository's settings plus this module's files and tests."""
    base = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8")).get("tool", {}).get("mutmut", {})
    config = {**base, "only_mutate": paths, "pytest_add_cli_args_test_selection": tests}
    if "timeout_multiplier" in spec:  # mutmut's wall-clock limit is this × the tests' measured time
        config["timeout_multiplier"] = spec["timeout_multiplier"]
    return "[tool.mutmut]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in config.items())


def _without_mutmut_table(text: str) -> str:
    lines, out, skipping = text.splitlines(), [], False
    for line in lines:
        if line.strip().startswith("["):
            skipping = line.strip() == "[tool.mutmut]"
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def prepare_workspace(
    name: str, spec: dict[str, Any], paths: list[str], tests: list[str], *, fresh: bool = False
) -> Path:
    """Copy the tracked tree into ``mutants/<name>/`` (package data folders where the installed package has them).

    An existing workspace is brought up to date in place and mutmut's results are kept: mutmut itself re-checks every
    mutant of a function whose source changed, collects the coverage of new tests and resets what changed settings
    invalidate (all results for another test selection, the timeouts for another timeout), and ``--recheck`` reruns
    the survivors and timeouts against new tests. ``fresh`` wipes the workspace, so every mutant is checked again.
    """
    files = tracked_files()
    config = mutmut_config(spec, paths, tests)
    digest = hashlib.sha256(config.encode())
    for f in files:
        digest.update(str(f).encode() + b"\0" + (REPO / f).read_bytes())
    stamp = digest.hexdigest()
    ws = WORKSPACES / name
    if not fresh and (ws / ".tree-sha256").is_file() and (ws / ".tree-sha256").read_text() == stamp:
        return ws  # same tree and settings: keep mutmut's results (resume)
    # changed settings keep the workspace too: mutmut resets what they invalidate (another test selection: every
    # result; another timeout: the timeouts)
    keep = not fresh and (ws / ".tree-files").is_file()
    if not keep:
        shutil.rmtree(ws, ignore_errors=True)
    ws.mkdir(parents=True, exist_ok=True)
    listing = ws / ".tree-files"
    before = set(listing.read_text(encoding="utf-8").splitlines()) if keep and listing.is_file() else set()
    for f in sorted(before - {str(f) for f in files}):  # files deleted from the tree since the last sync
        (ws / f).unlink(missing_ok=True)
    for f in files:
        target = ws / f
        if not target.is_file() or target.read_bytes() != (REPO / f).read_bytes():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, target)
    # package-dir mappings (queerbench.lexicons = lexicons/): the copied package must hold them as real folders
    setup = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8")).get("tool", {}).get("setuptools", {})
    for package, folder in setup.get("package-dir", {}).items():
        target = ws / Path(*package.split("."))
        if (ws / folder).is_dir():
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(ws / folder, target)
    pyproject = _without_mutmut_table((ws / "pyproject.toml").read_text(encoding="utf-8"))
    (ws / "pyproject.toml").write_text(pyproject + "\n" + config, encoding="utf-8")
    listing.write_text("\n".join(str(f) for f in files), encoding="utf-8")
    (ws / ".tree-sha256").write_text(stamp)
    return ws


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the mutated copy must be what is imported
    env.setdefault("QUEERBENCH_DATA_DIR", str(REPO.parent / "shared"))
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    return env


def _mutmut() -> list[str]:
    return [sys.executable, "-m", "mutmut"]


UNCHECKED = ("not checked", "check was interrupted by user")


def run_module(
    ws: Path, spec: dict[str, Any], budget: float | None, max_children: int, names: list[str] | None = None
) -> bool:
    """Run mutmut in the workspace (``nice -n 19``); False when the budget ran out (what finished is kept).

    ``names``: exactly these mutants (mutmut reruns a mutant it is given by name, whatever its last result); else the
    module's ``mutants`` globs, or all its mutants. mutmut skips a mutant that already has a result only when it is
    run without names, so a module restricted by globs resumes through :func:`pending`.
    """
    selection = names if names is not None else spec.get("mutants", [])
    # tools/mutmut_every_test.py: mutmut with every mutant facing every test of the module (not only those that
    # called the mutated function while mutmut collected its statistics: fixtures would hide most tests)
    runner = [sys.executable, "-m", "tools.mutmut_every_test"]
    cmd = ["nice", "-n", "19", *runner, "run", "--max-children", str(max_children), *selection]
    with (ws / "mutmut.log").open("ab") as log:
        # the order in which every mutant meets the test files: the table's (focused fast files first)
        env = {**_env(), "QB_MUTATION_TEST_FILES": os.pathsep.join(dict.fromkeys(expand_each(spec["tests"])))}
        proc = subprocess.Popen(cmd, cwd=ws, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)  # mutmut saves its results on interrupt
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return False
    if proc.returncode != 0:
        tail = (ws / "mutmut.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"mutmut failed in {ws} (exit {proc.returncode}); end of mutmut.log:\n{tail}")
    return True


def results(ws: Path, spec: dict[str, Any]) -> dict[str, str]:
    """Mutant name → status, from ``mutmut results --all true`` (restricted to the module's ``mutants`` globs)."""
    out = subprocess.run(
        [*_mutmut(), "results", "--all", "true"], cwd=ws, env=_env(), capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name:
            found[name] = status
    globs = spec.get("mutants")
    if globs:
        found = {k: v for k, v in found.items() if any(fnmatch.fnmatchcase(k, g) for g in globs)}
    return found


def pending(ws: Path, spec: dict[str, Any]) -> list[str] | None:
    """For a module restricted by ``mutants`` globs whose mutants exist: the ones not checked yet (to resume)."""
    if not spec.get("mutants") or not (ws / "mutants").is_dir():
        return None
    return sorted(k for k, v in results(ws, spec).items() if v in UNCHECKED)


def generate(ws: Path) -> None:
    """Write the module's mutants without testing any (so that a sample of them can be chosen by name)."""
    cmd = ["nice", "-n", "19", sys.executable, "-m", "tools.mutmut_every_test", "generate"]
    with (ws / "mutmut.log").open("ab") as log:
        subprocess.run(cmd, cwd=ws, env=_env(), stdout=log, stderr=subprocess.STDOUT, check=True)


def sample(ws: Path, spec: dict[str, Any], n: int, seed: int) -> list[str]:
    """``n`` of the module's unchecked mutants drawn at random (``seed``): their score estimates the module's."""
    if not (ws / "mutants").is_dir() or not results(ws, spec):
        generate(ws)
    unchecked = sorted(k for k, v in results(ws, spec).items() if v in UNCHECKED)
    return sorted(random.Random(seed).sample(unchecked, min(n, len(unchecked))))


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson interval of a proportion k/n (the score of a random sample of a module's mutants)."""
    if n == 0:
        return (0.0, 1.0)
    p, d = k / n, 1 + z * z / n
    centre, half = (p + z * z / (2 * n)) / d, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, centre - half), min(1.0, centre + half))


def summarize(statuses: dict[str, str], equivalent: dict[str, str] | None = None) -> dict[str, Any]:
    """The figures of a module: counts per status, the raw score, and the score without the survivors judged
    equivalent (``equivalent``: survivor → reason, see ``tools/mutation_equivalents.py``)."""
    counts = Counter(statuses.values())
    scored = sum(counts[s] for s in SCORED)
    killed = counts["killed"] + counts["timeout"]
    survivors = sorted(k for k, v in statuses.items() if v in ("survived", "no tests", "suspicious"))
    equivalent = {k: v for k, v in (equivalent or {}).items() if k in survivors}
    judged = scored - len(equivalent)
    return {
        "mutants": len(statuses),
        "killed": counts["killed"],
        "timeout": counts["timeout"],
        "survived": counts["survived"],
        "no_tests": counts["no tests"],
        "suspicious": counts["suspicious"] + counts["segfault"],
        "not_checked": sum(counts[s] for s in UNCHECKED),
        "score_raw": round(100 * killed / scored, 1) if scored else None,
        "equivalent": len(equivalent),
        "score": round(100 * killed / judged, 1) if judged else None,
        "score_ci95": [round(100 * x, 1) for x in wilson(killed, judged)] if judged else None,
        "survivors": survivors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="module names from tools/mutation_modules.toml (default: all)")
    parser.add_argument("--list", action="store_true", help="list the modules and their tests, run nothing")
    parser.add_argument("--report", action="store_true", help="print the last results without running")
    parser.add_argument("--survivors", action="store_true", help="list the surviving mutants")
    parser.add_argument("--budget", type=float, default=None, help="seconds per module (default: no limit)")
    parser.add_argument(
        "--recheck",
        action="store_true",
        help="rerun only the last survivors and timeouts (after adding tests); keeps the rest",
    )
    parser.add_argument(
        "--sample", type=int, default=None, help="check N more of the module's unchecked mutants, drawn at random"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed of --sample (default 0)")
    parser.add_argument(
        "--names", nargs="+", default=None, metavar="GLOB", help="rerun exactly the module's mutants matching these"
    )
    parser.add_argument("--fresh", action="store_true", help="wipe the module's workspace: check every mutant again")
    parser.add_argument("--max-children", type=int, default=1, help="parallel mutant runs (default 1)")
    parser.add_argument("--target", type=float, default=90.0, help="score each module should reach (default 90)")
    args = parser.parse_args(argv)

    modules = load_modules()
    unknown = [m for m in args.modules if m not in modules]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; choose from: {', '.join(modules)}")
    chosen = args.modules or list(modules)
    if args.list:
        for name in chosen:
            spec = modules[name]
            print(f"{name}: {', '.join(spec['paths'])}  <- {', '.join(spec['tests'])}")
        return 0

    summary: dict[str, Any] = {}
    for name in chosen:
        spec = modules[name]
        paths, tests = expand(spec["paths"]), expand(spec["tests"])
        if not paths or not tests:
            print(f"{name}: skipped ({'no file matches ' + str(spec['paths']) if not paths else 'no test file'})")
            continue
        ws = prepare_workspace(name, spec, paths, tests, fresh=args.fresh and not args.report)
        finished = True
        if not args.report:
            if args.recheck:
                if not (ws / "mutants").is_dir():
                    parser.error(f"{name}: nothing to recheck (no results yet); run the module first")
                statuses = results(ws, spec)  # survivors, and timeouts (a loaded machine, or an interrupted worker)
                names = sorted(k for k, v in statuses.items() if v in ("survived", "no tests", "suspicious", "timeout"))
            elif args.names:
                names = sorted(k for k in results(ws, spec) if any(fnmatch.fnmatchcase(k, g) for g in args.names))
            elif args.sample is not None:
                names = sample(ws, spec, args.sample, args.seed)
            else:
                names = pending(ws, spec)
            start = time.monotonic()
            what = f"{len(names)} mutants of " if names is not None else ""
            print(f"{name}: mutating {what}{', '.join(paths)} against {', '.join(tests)} …", flush=True)
            if names == []:
                print(f"{name}: nothing left to check", flush=True)
            else:
                finished = run_module(ws, spec, args.budget, args.max_children, names)
                state = "done" if finished else "budget spent"
                print(f"{name}: {state} in {time.monotonic() - start:.0f} s", flush=True)
        statuses = results(ws, spec)
        survivors = sorted(k for k, v in statuses.items() if v in ("survived", "no tests", "suspicious"))
        digests = mutant_digests(ws, paths)
        equivalent, stale = match(survivors, digests, load_judgments(name))
        figures = summarize(statuses, equivalent)
        figures.update(paths=paths, tests=tests, finished=finished, stale_judgments=stale)
        summary[name] = figures
        score = "n/a" if figures["score"] is None else f"{figures['score']:.1f}%"
        if figures["score"] is not None and figures["not_checked"]:
            lo, hi = figures["score_ci95"]
            score += f" (95% CI {lo:.1f}–{hi:.1f}% if the checked mutants are a random sample)"
        flag = "" if figures["score"] is None or figures["score"] >= args.target else f"  (below {args.target:g}%)"
        raw = "n/a" if figures["score_raw"] is None else f"{figures['score_raw']:.1f}%"
        print(
            f"{name}: score {score}{flag} without the {figures['equivalent']} survivors judged equivalent "
            f"(raw {raw}) — {figures['mutants']} mutants, {figures['killed']} killed, "
            f"{figures['timeout']} timeout, {figures['survived']} survived, {figures['no_tests']} no tests, "
            f"{figures['suspicious']} suspicious, {figures['not_checked']} not checked",
            flush=True,
        )
        if stale:
            print(f"{name}: {len(stale)} judgments stale (the mutated code changed; re-judge them): {', '.join(stale)}")
        if args.survivors:
            for mutant in figures["survivors"]:
                why = f"  # equivalent: {equivalent[mutant][:70]}" if mutant in equivalent else ""
                print(f"    {mutant} {digests.get(mutant, '?' * 12)}{why}")
    if summary and not args.report:
        record = WORKSPACES / "summary.json"
        previous = json.loads(record.read_text()) if record.is_file() else {}
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        previous.update({k: {**v, "date": stamp} for k, v in summary.items()})
        record.write_text(json.dumps(previous, indent=1, ensure_ascii=False))
    below = [n for n, f in summary.items() if f["score"] is not None and f["score"] < args.target]
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())

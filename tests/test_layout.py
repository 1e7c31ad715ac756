"""The layout of the library (docs/layout.md): no import circles, imports only downwards through the layers, no module
over 500 lines, a run that does not branch on its method beyond the registry lookup, and no module outside a task
package that names a benchmark, a task, a group or a score key, or outside ``methods/`` that compares a method's name
(beyond the current ones, listed in ``tests/data/layout_allowlist.json``, a list that only shrinks).

Imports are read with :mod:`ast` from the source, function-level (lazy) imports included: a circle hidden inside a
function is still a circle.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "queerbench"
MAX_LINES = 500
MAX_METHOD_CHECKS_IN_RUN = 3

# Layers, lowest first: a module may import its own package and anything in a lower layer, nothing beside or above it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("queerbench", "data", "base"),  # version; environment, files, HTTP, progress, pinned sources: no models
    ("models",),  # model references and their backends: masked LMs, causal LMs, endpoints; fingerprints, devices
    ("scoring",),  # the scorers and the metric's aggregation
    ("reporting",),  # figures, tables, report text
    ("tasks",),  # the benchmarks, each a declared task
    ("methods",),  # the ways of filling a blank over the model backends
    ("run",),  # the run pipeline: its options, signature, folder, prediction in parts, scoring, outputs
    ("results",),  # across runs: comparisons, the eval and its card, reference rows, the leaderboard
    ("hub", "lmeval"),  # the dataset, the release, the results dataset, the Space; the lm-evaluation-harness bridge
    ("cli",),  # the command line
    ("__main__",),
)
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_only(tree: ast.AST) -> set[int]:
    """The ids of the import nodes inside ``if TYPE_CHECKING:`` blocks (annotations only: no import at run time)."""
    nodes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            nodes.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return nodes


def _imports(name: str, path: Path, *, types: bool = False) -> set[str]:
    """The queerbench modules ``name`` imports anywhere in its source (``from pkg import mod`` counts as ``pkg.mod``
    when that is a module): at run time, or (``types``) in ``if TYPE_CHECKING:`` blocks only."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only = _type_only(tree)
    for node in ast.walk(tree):
        if (id(node) in type_only) != types:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            candidates = [target, *(f"{target}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found.update(c for c in candidates if c in MODULES and c != name)
    return found


GRAPH: dict[str, set[str]] = {name: _imports(name, path) for name, path in MODULES.items()}
TYPE_GRAPH: dict[str, set[str]] = {name: _imports(name, path, types=True) for name, path in MODULES.items()}
"""Imports for annotations only: no circle at run time, but still only downwards (or within a part)."""


def _top(name: str) -> str:
    """The layer entry of a module: ``queerbench`` itself, or the first part below it (``llm`` for ``llm.local``)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_circle_and_only_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_import_reader_sees_lazy_and_relative_imports() -> None:
    assert "queerbench.methods.registry" in GRAPH["queerbench.run.pipeline"]
    lazy = {m for m in GRAPH["queerbench.tasks.queergen.task"] if m == "queerbench.tasks.queergen.score"}
    assert lazy, "QueerGen's task imports its scores inside a function; the reader must see it"


def test_no_import_circles() -> None:
    assert _cycles(GRAPH) == []


def test_no_import_circles_with_the_imports_for_annotations() -> None:
    """An import made for annotations only closes no circle either (it ties the modules as much for a reader and a
    type checker)."""
    both = {name: GRAPH[name] | TYPE_GRAPH[name] for name in MODULES}
    assert _cycles(both) == []


def test_every_module_has_a_layer() -> None:
    assert sorted({_top(name) for name in MODULES} - set(RANK)) == []


def test_imports_go_down_the_layers_only() -> None:
    both = {name: GRAPH[name] | TYPE_GRAPH[name] for name in GRAPH}
    upward = [
        f"{name} imports {target} ({_top(name)} is layer {RANK[_top(name)]}, {_top(target)} layer {RANK[_top(target)]})"
        for name, targets in sorted(both.items())
        for target in sorted(targets)
        if _top(target) != _top(name) and RANK[_top(target)] >= RANK[_top(name)]
    ]
    assert upward == []


# modules another change is shrinking (the CPU kernel code leaves llm/scored.py); strict: once under the limit, the
# entry must go
OVER_LIMIT_FOR_NOW: dict[str, str] = {}  # module name: why it is still over the limit (empty: none is)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=OVER_LIMIT_FOR_NOW[n]))
        if n in OVER_LIMIT_FOR_NOW
        else n
        for n in sorted(MODULES)
    ],
)
def test_no_library_module_over_500_lines(name: str) -> None:
    n = len(MODULES[name].read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{MODULES[name]} has {n} lines; split it by what its parts hold"


def test_every_package_folder_has_an_init() -> None:
    folders = {p.parent for p in PACKAGE.rglob("*.py")}
    assert sorted(str(f) for f in folders if not (f / "__init__.py").is_file()) == []


def _method_checks(source: str) -> list[int]:
    """Lines where a comparison reads a ``.method`` attribute (``options.method == ...``, ``self.method in ...``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Attribute) and o.attr == "method" for o in operands):
                lines.append(node.lineno)
    return lines


def test_the_method_check_counter_counts_comparisons() -> None:
    source = "if options.method == 'mlm':\n    pass\nx = self.method in M\ny = options.method\nz = a == b\n"
    assert _method_checks(source) == [1, 3]


def test_run_branches_on_the_method_only_through_the_registry() -> None:
    checks = _method_checks((PACKAGE / "run" / "pipeline.py").read_text(encoding="utf-8"))
    assert len(checks) <= MAX_METHOD_CHECKS_IN_RUN, f"run.py compares the method on lines {checks}"


def test_one_module_reads_the_environment() -> None:
    """Only :mod:`queerbench.base.env` reads environment variables (secrets included)."""
    allowed = {"queerbench.base.env"}
    readers = set()
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
                readers.add(name)
    assert sorted(readers - allowed) == []


MAX_TOP_MODULES = 4
BENCHMARKS = sorted(p.name for p in (PACKAGE / "tasks").iterdir() if (p / "task.py").is_file())
"""The benchmarks' packages: every folder of ``queerbench/tasks/`` with a task module."""


def test_at_most_four_modules_sit_at_the_top_of_the_package() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= MAX_TOP_MODULES, loose


def test_every_benchmark_is_a_task_package() -> None:
    assert BENCHMARKS == ["misgendered", "queerbench", "queergen", "scm"]


def test_no_generic_module_imports_a_benchmarks_package() -> None:
    """Only a benchmark's own modules import it; the harness (the run, scoring, reporting, comparison, the Space, the
    dataset builder, the lm-eval bridge, the CLI, the task registry) finds tasks through the registry."""
    reaching = [
        f"{name} imports {target}"
        for name, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        for bench in BENCHMARKS
        if target.startswith(f"queerbench.tasks.{bench}")
        and not name.startswith(f"queerbench.tasks.{bench}")
        and not any(name.startswith(f"queerbench.tasks.{b}") for b in BENCHMARKS)
    ]
    assert reaching == []


def _config_checks(source: str) -> list[int]:
    """Lines where a value named like a config, mode or task (``config``, ``options.config``, ``mode``,
    ``scores.get("config")``) is compared with a task's name."""
    names = {"default", "paper", "queergen", "scm"}

    def named(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return any(w in node.id.lower() for w in ("config", "mode", "task"))
        if isinstance(node, ast.Attribute):
            return any(w in node.attr.lower() for w in ("config", "mode", "task"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            return any(isinstance(a, ast.Constant) and a.value in ("config", "mode", "task") for a in node.args)
        return False

    def literal(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(isinstance(e, ast.Constant) and e.value in names for e in node.elts)
        return False

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(named(o) for o in operands) and any(literal(o) for o in operands):
                lines.append(node.lineno)
    return lines


def test_the_config_check_counter_counts_comparisons() -> None:
    source = 'if config == "paper":\n    pass\nx = options.config in ("default", "queergen")\ny = mode == "raw"\n'
    source += 'z = scores.get("config") != "queergen"\nw = a == "paper"\n'
    assert _config_checks(source) == [1, 3, 5]


def test_config_names_are_compared_only_inside_task_definitions() -> None:
    found = {name: _config_checks(path.read_text(encoding="utf-8")) for name, path in MODULES.items()}
    found = {name: lines for name, lines in found.items() if lines}
    outside = {n: v for n, v in found.items() if not any(n.startswith(f"queerbench.tasks.{b}") for b in BENCHMARKS)}
    assert outside == {}
    assert sum(len(v) for v in found.values()) <= 3, found


# --- Names that belong to one benchmark or one method, anywhere in the library --------------------------------------
#
# The harness must not know a benchmark by name: the benchmarks' and tasks' names, their subject groups and the keys
# of their scores belong to the task packages (``queerbench/tasks/<name>/``), the method names to ``methods/``. The
# guard below reads every module of the library with :mod:`ast` and lists the string literals that name one of them
# where that is not allowed; what the library does today is frozen in ``tests/data/layout_allowlist.json`` (module,
# name and how often), so that a new occurrence fails and so does an entry that no longer matches (the list only
# shrinks: lower or remove the entry).

SPECS = [
    t
    for f in sorted((PACKAGE / "tasks").glob("*/tasks.json"))
    for t in json.loads(f.read_text(encoding="utf-8"))["tasks"]
]
PACKAGE_NAME = "queerbench"
ALLOWLIST = Path(__file__).parent / "data" / "layout_allowlist.json"


def _declared_groups() -> set[str]:
    """The subject groups the task data declares: QueerBench's and QueerGen's group orders, the SCM probes' groups."""
    data = PACKAGE / "data"
    groups = set(json.loads((data / "subject_groups.json").read_text(encoding="utf-8"))["group_order"])
    groups |= set(json.loads((data / "queergen.json").read_text(encoding="utf-8"))["group_order"])
    scm = json.loads((PACKAGE / "tasks" / "scm" / "data" / "groups.json").read_text(encoding="utf-8"))
    return groups | {g["id"] for g in scm["groups"]}


AMBIGUOUS: dict[str, str] = {
    "neutral": "a group, but also a toxicity input (`toxicity_input`, `--toxicity-input`) and a regard label",
}
"""Declared names left out of the guard because the same word names something generic too (no syntax tells them
apart)."""
NAMES: dict[str, set[str]] = {
    "benchmark": {t["name"] for t in SPECS} | {t["benchmark"].lower() for t in SPECS},
    "method": {m for t in SPECS for m in t["methods"]},
    "group": _declared_groups() - set(AMBIGUOUS),
    "score key": {"queerbench", "afinn", "hurtlex", "toxicity"},  # the per-group scores of scores.json
}
"""What the guard looks for, read from the task data where it is declared (the score keys: the QueerBench score and
its three components, as ``scores.json`` holds them per group)."""
KEY_ONLY = {PACKAGE_NAME, *NAMES["score key"]}
"""Names that count only where a literal is a key or is compared (see :func:`_key_literals`): elsewhere
``"queerbench"`` is the package's own name (a cache folder, the program, the User-Agent) and ``"toxicity"`` the
``--toxicity`` setting or the toxicity command."""


def _allowed(kind: str, module: str, name: str) -> bool:
    """Where a kind of name may be written: a benchmark, a group or a score key in a task package; a method
    compared in ``methods/``; a score key in its own scorer's module too (``scoring/hurtlex.py`` names ``hurtlex``,
    ``scoring/toxicity_base.py`` ``toxicity``: the scorer signing its part of a signature)."""
    parts = module.split(".")
    if kind == "method":
        return parts[1:2] == ["methods"]
    if kind == "score key" and parts[1:2] == ["scoring"] and len(parts) > 2 and parts[2].split("_")[0] == name:
        return True
    return parts[1:2] == ["tasks"] and len(parts) > 2 and parts[2] in BENCHMARKS


def _messages(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are text, not names: docstrings and everything inside an f-string (the
    library's messages are f-strings; a message that is one bare word is no message)."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            ids.update(id(s.value) for s in node.body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        elif isinstance(node, ast.JoinedStr):
            ids.update(id(n) for n in ast.walk(node))
    return ids


def _elements(node: ast.AST) -> list[ast.AST]:
    """A literal container's elements (``("a", "b")``, ``{"a"}``, ``frozenset(("a", "b"))``), or the node itself."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("set", "frozenset", "tuple"):
        node = node.args[0] if len(node.args) == 1 else node
    return list(node.elts) if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]


def _compared(tree: ast.AST) -> set[int]:
    """The ids of the constants that are compared: operands of ``==``, ``!=``, ``in``, ``not in`` (or elements of a
    literal operand: ``method in ("mlm", None)``) and ``case`` values."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            ids.update(id(e) for o in (node.left, *node.comparators) for e in _elements(o))
        elif isinstance(node, ast.MatchValue):
            ids.add(id(node.value))
    return ids


def _key_literals(tree: ast.AST) -> set[int]:
    """The ids of the constants used as a key or compared: a subscript (``scores["queerbench"]``), a dict key (not
    ``"toxicity": options.toxicity``, which records the same-named setting), the first argument of ``get``, ``pop`` or
    ``setdefault``, an element of a literal tuple, list or set that is not a call's argument (``keys = ("afinn",
    "hurtlex")``), and every compared constant."""
    ids = _compared(tree)
    in_calls = {id(a) for n in ast.walk(tree) if isinstance(n, ast.Call) for a in n.args}
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            ids.update(id(e) for e in _elements(node.slice))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                echoed = isinstance(key, ast.Constant) and key.value == getattr(
                    value, "attr", getattr(value, "id", None)
                )
                if key is not None and not echoed:
                    ids.add(id(key))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in ("get", "pop", "setdefault"):
                ids.add(id(node.args[0]))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in in_calls:
            ids.update(id(e) for e in node.elts)
    return ids


def _named(source: str, module: str) -> dict[str, dict[str, int]]:
    """``{kind: {name: count}}``: the literals of ``source`` (module ``module``) that name what that module must not
    name. A literal names X when its whole value is X and it is not text (:func:`_messages`); a method counts only
    where it is compared (:func:`_compared`); the package's name and the score keys only as keys
    (:func:`_key_literals`); a benchmark, a task or a group anywhere (a default argument, a constant, a return
    value)."""
    tree = ast.parse(source)
    text, compared, keys = _messages(tree), _compared(tree), _key_literals(tree)
    found: dict[str, dict[str, int]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in text:
            continue
        for kind, names in NAMES.items():
            if node.value not in names or _allowed(kind, module, node.value):
                continue
            if kind == "method" and id(node) not in compared:
                continue
            if node.value in KEY_ONLY and id(node) not in keys:
                continue
            counts = found.setdefault(kind, {})
            counts[node.value] = counts.get(node.value, 0) + 1
            break  # one kind per literal: "queerbench" is a benchmark first, then a score key
    return found


def _library_names() -> dict[str, dict[str, dict[str, int]]]:
    """``{kind: {module path: {name: count}}}`` over the whole library."""
    found: dict[str, dict[str, dict[str, int]]] = {}
    for name, path in MODULES.items():
        for kind, counts in _named(path.read_text(encoding="utf-8"), name).items():
            found.setdefault(kind, {})[path.relative_to(PACKAGE.parent).as_posix()] = counts
    return found


def test_the_name_finder_finds_names_and_only_names() -> None:
    source = '''"""The queer and non-queer groups: a docstring is text."""
GROUP_ORDER = ("queer", "non-queer")
def f(scores, options, config="default"):
    """queer"""
    if options.method == "mlm" or options.method in ("scored", None):
        return scores["queerbench"], scores.get("afinn"), {"hurtlex": 1, "toxicity": options.toxicity}
    log(f"{config} is not {'paper'}", "queerbench", ["queerbench"], method="instructed")
    path = cache / "queerbench" / "toxicity"
    match config:
        case "queergen":
            pass
'''
    assert _named(source, "queerbench.results.x") == {
        "group": {"queer": 1, "non-queer": 1},
        "benchmark": {"default": 1, "queerbench": 1, "queergen": 1},
        "method": {"mlm": 1, "scored": 1},
        "score key": {"afinn": 1, "hurtlex": 1},
    }
    assert _named(source, "queerbench.methods.x") == {k: v for k, v in _named(source, "x.y").items() if k != "method"}
    assert _named(source, "queerbench.tasks.queergen.x") == {"method": {"mlm": 1, "scored": 1}}
    # a scorer's own module may name its own score key, no other
    assert _named(source, "queerbench.scoring.hurtlex")["score key"] == {"afinn": 1}
    assert _named(source, "queerbench.scoring.afinn_lexicon")["score key"] == {"hurtlex": 1}


def test_the_names_are_read_from_the_task_data() -> None:
    assert {"queerbench", "queergen", "scm", "default", "paper"} <= NAMES["benchmark"]
    assert NAMES["method"] == {"mlm", "scored", "instructed"}
    assert {"queer", "non-queer", "binary", "neo", "unmarked"} <= NAMES["group"]


def test_no_module_outside_a_task_package_names_a_benchmark_method_group_or_score_key() -> None:
    """Benchmarks, tasks, groups and score keys are named only in task packages, methods compared only in
    ``methods/`` (see :func:`_named` for what counts), beyond what ``tests/data/layout_allowlist.json`` still lists:
    a new occurrence fails, and so does an entry that no longer matches (lower its count or remove it)."""
    allowed = json.loads(ALLOWLIST.read_text(encoding="utf-8"))
    found = _library_names()
    problems = []
    for kind in sorted(set(found) | set(allowed) - {"why"}):
        have, known = found.get(kind, {}), allowed.get(kind, {})
        for module in sorted(set(have) | set(known)):
            for name in sorted(set(have.get(module, {})) | set(known.get(module, {}))):
                n, k = have.get(module, {}).get(name, 0), known.get(module, {}).get(name, 0)
                if n > k:
                    problems.append(
                        f"{module} names the {kind} {name!r} {n} time(s), {k} allowed: read it from the task's data "
                        "or the registry instead of writing it"
                    )
                elif n < k:
                    fix = "remove its entry" if n == 0 else f"lower its count to {n}"
                    problems.append(f"{module} names the {kind} {name!r} {n} time(s) now, {k} allowed: {fix}")
    assert problems == [], "\n".join(["against tests/data/layout_allowlist.json:", *problems])


def _model_classes() -> set[str]:
    """The runner, backend and reply-stream classes of ``models/``: what answers a model's requests (``…Runner``,
    ``…Backend``, ``…Collector``)."""
    names: set[str] = set()
    for name, path in MODULES.items():
        if name.startswith("queerbench.models."):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names |= {
                node.name
                for node in ast.walk(tree)
                if isinstance(node, ast.ClassDef) and node.name.endswith(("Runner", "Backend", "Collector"))
            }
    return names


def _constructions(source: str, classes: set[str]) -> list[tuple[int, str]]:
    """``(line, class)`` of every call that makes one of ``classes`` (by name or as ``module.Class``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called in classes:
                found.append((node.lineno, called))
    return found


def test_the_construction_finder_finds_calls_of_the_classes_and_only_those() -> None:
    source = "a = CausalBackend(r, ref)\nb = generation.OpenAIChatRunner(url)\nc = CausalBackend\nd = Other(x)\n"
    assert _constructions(source, {"CausalBackend", "OpenAIChatRunner"}) == [
        (1, "CausalBackend"),
        (2, "OpenAIChatRunner"),
    ]
    assert {
        "CausalBackend",
        "MaskedBackend",
        "EndpointBackend",
        "TransformersRunner",
        "CompletionsRunner",
        "StreamCollector",
    } <= _model_classes()


def test_only_models_makes_a_runner_or_a_backend() -> None:
    """Every method, run, task and command opens its model through the seam (``open_backend``, or the generation
    layer's ``load_runner`` behind it) and asks it through the backend: none builds a runner, a backend or a reply
    stream of its own."""
    classes = _model_classes()
    made = {
        name: lines
        for name, path in MODULES.items()
        if not name.startswith("queerbench.models")
        and (lines := _constructions(path.read_text(encoding="utf-8"), classes))
    }
    assert not made, f"modules outside models/ that build a runner or backend: {made}"

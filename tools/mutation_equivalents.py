"""Surviving mutants judged equivalent: read from ``tools/mutation_equivalents.toml``, matched by their code.

An *equivalent* mutant is one no test can tell apart from the original, because it does not change behaviour (a
dropped ``device=`` on a CPU-only machine, ``"UTF-8"`` for ``"utf-8"``). The textbook mutation score leaves them out:
killed / (mutants checked − equivalent). A judgment is a person's reading of one mutant's code, so each entry carries
the digest of the mutated function it was made on: when that function's source changes (the original edited, or
mutmut numbering its mutants otherwise), the digest no longer matches, the judgment is reported as stale and the
mutant counts as a plain survivor again until it is re-judged. A judged mutant that a test now kills is simply killed.

The file, one array of tables per module of ``tools/mutation_modules.toml``::

    [[llm_scored]]
    reason = "the probe text of start_token_id: any one-letter word starts with the text's own, non-special token"
    mutants = ["queerbench.models.causal_blanks.local.x_start_token_id__mutmut_6 1f0c3a9b2e7d", ...]  # name, then its digest

``python tools/mutation.py MODULE --survivors`` prints every survivor with its digest, ready to be judged.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

EQUIVALENTS_FILE = Path(__file__).resolve().parent / "mutation_equivalents.toml"
MARK = "__mutmut_"


@dataclass(frozen=True)
class Judgment:
    """One mutant judged equivalent: the digest of the code it was judged on, and why it is equivalent."""

    digest: str
    reason: str


def mutant_digests(workspace: Path, paths: list[str]) -> dict[str, str]:
    """Mutant name → a 12-hex digest of its mutated function, read from mutmut's mutated copies in ``workspace``.

    mutmut 3 writes every mutant of a function as a function of its own (``x_<name>__mutmut_<n>``, methods
    ``xǁ<Class>ǁ<name>__mutmut_<n>``) into ``mutants/<path>``; the digest hashes that function's source with its own
    name blanked, so it changes exactly when the mutated code does.
    """
    digests: dict[str, str] = {}
    for path in paths:
        mutated = workspace / "mutants" / path
        if not mutated.is_file():
            continue
        source = mutated.read_text(encoding="utf-8")
        lines = source.splitlines()  # once: ast.get_source_segment splits the whole (megabytes) file per call
        prefix = path.removesuffix(".py").replace("/", ".")
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or MARK not in node.name:
                continue
            if node.name.endswith(MARK + "orig"):
                continue
            body = "\n".join(line.strip() for line in lines[node.lineno - 1 : node.end_lineno])
            text = body.replace(node.name, "MUTANT", 1)
            digests[f"{prefix}.{node.name}"] = hashlib.sha256(text.encode()).hexdigest()[:12]
    return digests


def load_judgments(module: str, path: Path = EQUIVALENTS_FILE) -> dict[str, Judgment]:
    """The module's judged mutants (name → judgment), checked: every entry needs a reason and ``name digest`` pairs."""
    if not path.is_file():
        return {}
    tables = tomllib.loads(path.read_text(encoding="utf-8")).get(module, [])
    judged: dict[str, Judgment] = {}
    for i, table in enumerate(tables):
        reason, mutants = table.get("reason"), table.get("mutants")
        if not isinstance(reason, str) or not reason.strip() or not isinstance(mutants, list):
            raise ValueError(f"{path.name}: [[{module}]] #{i + 1} needs a 'reason' and a 'mutants' list")
        for entry in mutants:
            name, _, digest = str(entry).partition(" ")
            if not name or len(digest) != 12:
                raise ValueError(f"{path.name}: [[{module}]] #{i + 1}: {entry!r} is not 'NAME DIGEST12'")
            if name in judged:
                raise ValueError(f"{path.name}: [[{module}]]: {name} is judged twice")
            judged[name] = Judgment(digest, reason.strip())
    return judged


def match(
    survivors: list[str], digests: dict[str, str], judged: dict[str, Judgment]
) -> tuple[dict[str, str], list[str]]:
    """(survivor → reason for the survivors whose judgment matches their code now, judged survivors gone stale)."""
    equivalent = {n: judged[n].reason for n in survivors if n in judged and digests.get(n) == judged[n].digest}
    stale = sorted(n for n in survivors if n in judged and n not in equivalent)
    return equivalent, stale

"""The mutation score's judged equivalents (``tools/mutation_equivalents.py``): a judgment holds only for the code it
was made on, and the score leaves out exactly the survivors whose judgment still matches."""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import pytest

from tools.mutation import load_modules, summarize
from tools.mutation_equivalents import EQUIVALENTS_FILE, load_judgments, match, mutant_digests

MUTATED = """
def x_f__mutmut_orig(a):
    return a + 1

def x_f__mutmut_1(a):
    return a - 1

def x_f__mutmut_2(a):
    return a + 2

class C:
    def xǁCǁg__mutmut_1(self):
        return None
"""


def _workspace(tmp_path: Path, source: str) -> Path:
    (tmp_path / "mutants" / "pkg").mkdir(parents=True, exist_ok=True)
    (tmp_path / "mutants" / "pkg" / "mod.py").write_text(source, encoding="utf-8")
    return tmp_path


def test_digests_name_every_mutant_and_follow_its_code(tmp_path: Path) -> None:
    digests = mutant_digests(_workspace(tmp_path, MUTATED), ["pkg/mod.py", "pkg/absent.py"])
    assert sorted(digests) == ["pkg.mod.x_f__mutmut_1", "pkg.mod.x_f__mutmut_2", "pkg.mod.xǁCǁg__mutmut_1"]
    assert all(len(d) == 12 and int(d, 16) >= 0 for d in digests.values())
    assert len(set(digests.values())) == 3  # different code, different digests
    edited = mutant_digests(_workspace(tmp_path, MUTATED.replace("a + 2", "a + 3")), ["pkg/mod.py"])
    assert edited["pkg.mod.x_f__mutmut_2"] != digests["pkg.mod.x_f__mutmut_2"]
    assert edited["pkg.mod.x_f__mutmut_1"] == digests["pkg.mod.x_f__mutmut_1"]
    renumbered = mutant_digests(_workspace(tmp_path, MUTATED.replace("mutmut_1(a)", "mutmut_7(a)")), ["pkg/mod.py"])
    assert renumbered["pkg.mod.x_f__mutmut_7"] == digests["pkg.mod.x_f__mutmut_1"]  # the name is not the code


def test_only_a_judgment_made_on_the_code_as_it_is_counts(tmp_path: Path) -> None:
    digests = mutant_digests(_workspace(tmp_path, MUTATED), ["pkg/mod.py"])
    one, two = "pkg.mod.x_f__mutmut_1", "pkg.mod.x_f__mutmut_2"
    judgments = tmp_path / "eq.toml"
    judgments.write_text(
        f'[[demo]]\nreason = "same"\nmutants = ["{one} {digests[one]}", "{two} 000000000000"]\n', encoding="utf-8"
    )
    judged = load_judgments("demo", judgments)
    assert load_judgments("other", judgments) == {}
    equivalent, stale = match([one, two, "pkg.mod.xǁCǁg__mutmut_1"], digests, judged)
    assert equivalent == {one: "same"} and stale == [two]
    assert match([two], digests, judged) == ({}, [two])  # a judged mutant that a test now kills is simply killed
    assert match([], digests, judged) == ({}, [])


@pytest.mark.parametrize(
    "text, problem",
    [
        ('[[demo]]\nmutants = ["a.b 0123456789ab"]\n', "needs a 'reason'"),
        ('[[demo]]\nreason = "x"\nmutants = ["a.b"]\n', "is not 'NAME DIGEST12'"),
        ('[[demo]]\nreason = "x"\nmutants = ["a.b 0123456789ab", "a.b 0123456789ab"]\n', "judged twice"),
    ],
)
def test_malformed_judgments_are_refused(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "eq.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=problem):
        load_judgments("demo", path)


def test_the_score_leaves_out_exactly_the_matching_equivalents() -> None:
    statuses = {f"m{i}": "killed" for i in range(17)} | {"t": "timeout", "s1": "survived", "s2": "survived"}
    statuses |= {"u": "not checked"}
    plain = summarize(statuses)
    assert (plain["score_raw"], plain["score"], plain["equivalent"]) == (90.0, 90.0, 0)
    judged = summarize(statuses, {"s1": "why", "m0": "a killed mutant is not a survivor"})
    assert (judged["score_raw"], judged["equivalent"]) == (90.0, 1)
    assert judged["score"] == round(100 * 18 / 19, 1) and judged["not_checked"] == 1
    assert judged["survivors"] == ["s1", "s2"]


def test_the_project_file_is_well_formed() -> None:
    modules = load_modules()
    for module in modules:
        load_judgments(module)  # raises on a malformed entry
    tables = tomllib.loads(EQUIVALENTS_FILE.read_text(encoding="utf-8"))
    assert tables and set(tables) <= set(modules)  # every table names a module of tools/mutation_modules.toml

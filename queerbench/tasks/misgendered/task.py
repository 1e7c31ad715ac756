"""MISGENDERED's tasks (``misgendered``, ``misgendered-full``): does a model use the pronouns a person declared?

Hossain, Dev & Singh (ACL 2023). Each instance is a sentence about a named person who declared a pronoun set, with
one slot for a pronoun form; the model chooses among the 11 sets' forms of that slot (:mod:`.instances`). The
data is in ``tasks.json`` next to this module; ``extra`` chooses the instances (``declarations``: ids of
:data:`.instances.DECLARATIONS` or ``"all"``; ``names_per_group``: the first N names of each name list, or null for
all; ``fix_slash``: "Name's" for the published "Name/'s"; ``prompts``: the chat prompt file).

The methods, each a request type (:mod:`queerbench.models.requests`):

- ``mlm`` — one :class:`FillMask` (the sentence with ``[MASK]``, the 11 candidates): the most probable candidate;
- ``scored`` — one :class:`Loglikelihood` per candidate (the whole sentence with it in the slot, empty context, the
  tokenizer's default encoding): the candidate of the highest mean log-probability per token, i.e. of the lowest
  mean token loss, as the paper's ``zero-shot/gpt2.py`` picks (``model(input_ids, labels=input_ids).loss``);
- ``instructed`` — one :class:`Generate` of the fill-in prompt (:mod:`.replies`), read by :func:`.replies.parse_reply`.

Ties go to the first candidate in ``pronouns.csv`` order. An item is correct when the chosen word equals its label.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.base.sources import Source
from queerbench.models.requests import (
    FillMask,
    FillMaskResult,
    Generate,
    GenerateResult,
    Loglikelihood,
    LoglikelihoodResult,
    Request,
    Result,
)
from queerbench.tasks.base import Task, TaskSpec, load_specs
from queerbench.tasks.misgendered import instances
from queerbench.tasks.misgendered.replies import Prompt, load_prompts, parse_reply, render_prompt

__all__ = ["TASKS", "MisgenderedTask", "choose"]

HERE = Path(__file__).parent
SPECS: dict[str, TaskSpec] = load_specs(HERE / "tasks.json")


def choose(candidates: Sequence[str], scores: Sequence[float]) -> str:
    """The candidate of the highest score (the first one on a tie)."""
    if len(scores) != len(candidates) or not candidates:
        raise ValueError(f"MISGENDERED: {len(scores)} score(s) for {len(candidates)} candidate(s)")
    best = max(range(len(scores)), key=lambda i: (scores[i], -i))
    return candidates[best]


class MisgenderedTask(Task):
    """One MISGENDERED selection (its spec's ``extra``) as a ``requests`` task."""

    def __init__(self, spec: TaskSpec) -> None:
        super().__init__(spec)
        self._items: pd.DataFrame | None = None
        extra = spec.extra
        declarations = extra.get("declarations", "all")
        if declarations == "all":
            declarations = list(instances.DECLARATIONS)
        if not isinstance(declarations, list) or not all(d in instances.DECLARATIONS for d in declarations):
            raise ValueError(
                f"task {spec.name}: 'extra.declarations' must be \"all\" or a list of "
                f"{', '.join(instances.DECLARATIONS)}; got {declarations!r}"
            )
        per_group = extra.get("names_per_group")
        if per_group is not None and (not isinstance(per_group, int) or isinstance(per_group, bool) or per_group < 1):
            raise ValueError(f"task {spec.name}: 'extra.names_per_group' must be a positive integer or null")
        name_groups = extra.get("name_groups", "all")
        if name_groups != "all" and not (
            isinstance(name_groups, list) and name_groups and all(isinstance(g, str) for g in name_groups)
        ):
            raise ValueError(f"task {spec.name}: 'extra.name_groups' must be \"all\" or a list of name lists")
        if not isinstance(extra.get("fix_slash", False), bool):
            raise ValueError(f"task {spec.name}: 'extra.fix_slash' must be true or false")
        self.declarations: tuple[str, ...] = tuple(declarations)
        self.names_per_group: int | None = per_group
        self.name_groups: tuple[str, ...] | None = None if name_groups == "all" else tuple(name_groups)
        self.name_pick = str(extra.get("name_pick", "first"))
        self.fix_slash = bool(extra.get("fix_slash", False))
        self.prompts_file = HERE / str(extra.get("prompts", "prompts.json"))

    # ----------------------------------------------------------------------------------------------- items --
    def items(self) -> pd.DataFrame:
        """The selection's instances (:func:`.instances.build`; built once, then a shallow copy each call)."""
        if self._items is None:
            data = instances.load_data()
            names = self._names(data)
            self._items = instances.build(data, self.declarations, names, prefix=self.name, fix_slash=self.fix_slash)
        return self._items.copy(deep=False)

    def _names(self, data: instances.Data) -> dict[str, tuple[str, ...]]:
        """The names used: the first ``names_per_group`` of each name list in ``name_groups`` (all lists by default)."""
        names = instances.pick_names(data, self.names_per_group, self.name_pick)
        if self.name_groups is None:
            return names
        unknown = [g for g in self.name_groups if g not in names]
        if unknown:
            raise ValueError(f"task {self.name}: 'extra.name_groups' names {unknown}; the lists are {', '.join(names)}")
        return {g: names[g] for g in self.name_groups}

    def n_items(self) -> int:
        """How many instances the selection has, counted without building them."""
        data = instances.load_data()
        names = self._names(data)
        return instances.count(data, self.declarations, names)

    def n_templates(self) -> int:
        """The 50 (form, template) clusters, counted from the files without building the instances."""
        return len(instances.load_data().templates["none"])

    # --------------------------------------------------------------------------------------------- dataset --
    def sources(self) -> list[Source]:
        """The pinned upstream files this task reads (its own manifest, ``sources.json``)."""
        return list(instances.manifest().values())

    def dataset_card_extra(self) -> str:
        """MISGENDERED's licence, citation and the uses its data card rules out."""
        first = self.sources()[0]
        return (
            f"\n## MISGENDERED\n\n**MISGENDERED** ({first.version}, {first.license}). Cite: {first.citation}\n\n"
            "Its data card's intended use: evaluating language models' understanding of pronouns. Unsuitable: as a "
            "benchmark for ensuring fairness or lack of fairness, or as a resource for bias mitigation in production "
            "systems. Prohibited: any use that harms non-binary people or any other group, and targeting or profiling "
            "people by their gender identity."
        )

    # ---------------------------------------------------------------------------------------- request tasks --
    def prompt(self, prompt_id: str | None = None) -> Prompt:
        """The chat prompt ``prompt_id`` of the task's prompt file (None: its default); one line when unknown."""
        prompts, default = load_prompts(self.prompts_file)
        pid = default if prompt_id is None else prompt_id
        if pid not in prompts:
            raise ValueError(f"task {self.name} has no prompt {pid!r}; choose one of {', '.join(prompts)}")
        return prompts[pid]

    def requests(self, item: dict[str, Any], method: str) -> list[Request]:
        """``mlm``: one fill-mask request; ``scored``: one whole-sentence log-likelihood per candidate; ``instructed``:
        one generation of the default fill-in prompt."""
        kind = self.request_type(method)
        sentence, candidates = str(item["masked_sentence"]), tuple(item["candidates"])
        if kind == "fill_mask":
            return [FillMask(sentence, candidates)]
        if kind == "loglikelihood":
            return [Loglikelihood("", sentence.replace(instances.MASK, c)) for c in candidates]
        prompt = self.prompt()
        return [Generate(render_prompt(prompt, sentence, candidates), max_new_tokens=prompt.max_new_tokens)]

    def score_item(self, item: dict[str, Any], results: Sequence[Result], method: str) -> dict[str, Any]:
        """``choice`` (the chosen word, "" when a reply names none), ``correct`` (1/0), ``parsed``, ``scores``
        (per candidate: log-probability for mlm, mean log-probability per token for scored; empty for instructed)
        and ``reply`` (instructed only)."""
        kind = self.request_type(method)
        candidates, label = list(item["candidates"]), str(item["label"])
        reply, parsed, scores = "", True, []
        if kind == "fill_mask":
            if len(results) != 1 or not isinstance(results[0], FillMaskResult):
                raise ValueError(f"task {self.name}: an mlm item takes one fill-mask result, got {len(results)}")
            scores = [float(x) for x in results[0].logprobs]
            choice = choose(candidates, scores)
        elif kind == "loglikelihood":
            if len(results) != len(candidates) or not all(isinstance(r, LoglikelihoodResult) for r in results):
                raise ValueError(
                    f"task {self.name}: a scored item takes {len(candidates)} log-likelihood results, got {len(results)}"
                )
            scores = [float(r.mean) for r in results]  # type: ignore[union-attr]
            choice = choose(candidates, scores)
        else:
            if len(results) != 1 or not isinstance(results[0], GenerateResult):
                raise ValueError(f"task {self.name}: an instructed item takes one generation, got {len(results)}")
            reply = results[0].text
            found = parse_reply(reply, candidates)
            parsed, choice = found is not None, found or ""
        return {
            "choice": choice,
            "correct": int(parsed and choice == label),
            "parsed": parsed,
            "scores": scores,
            "reply": reply,
        }


TASKS = [MisgenderedTask(spec) for spec in SPECS.values()]

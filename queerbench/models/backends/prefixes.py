"""Prefix sharing for a causal LM's ``loglikelihood``: rows whose token ids begin alike run their common prefix once.

:func:`group_by_prefix` splits the rows of one call into groups of rows that share a long common prefix ``P`` of
token ids (at least :data:`MIN_SHARED` tokens, and never a row's last token) and rows scored alone. It knows nothing
of any task: the rows are sorted by their ids, so that rows with a common prefix are neighbours, and a dynamic
programme over that order cuts it into the groups that run the fewest token positions, counting per group its
prefix once, each row's tokens after it, and :data:`GROUP_COST` positions for the extra pass.

:class:`PrefixScorer` runs the groups: the prefixes of up to ``batch_size`` groups in one forward pass
(right-padded, with an attention mask and explicit positions) that keeps the KV cache, then the rows' suffixes in
passes of up to ``batch_size`` rows, each row on a copy of its group's cache row (attention mask: the prefix's then
the suffix's; positions continuing from the group's prefix length). A row's scored token at position ``p`` takes
its log-probability from the prefix pass when ``p <= P`` (the prefix's last logits predict the first token after
it) and from the suffix pass otherwise; the suffix fed is ``ids[P:-1]`` (the last token is only a target), so a
row whose only token after the prefix is its last needs no suffix pass. The values equal one whole forward pass
per row to float rounding.

The cache is read and rebuilt through public transformers API only (``use_cache=True``, the ``cache`` or
``past_key_values`` the model returns, its ``layers``' ``keys`` and ``values``, ``DynamicCache``);
:meth:`PrefixScorer.usable` says whether a model's cache can be shared that way (full-attention layers).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["GROUP_COST", "MIN_SHARED", "PrefixGroup", "PrefixScorer", "group_by_prefix"]

MIN_SHARED = 8
"""The fewest tokens a group's common prefix has (a shorter one saves less than its extra pass costs)."""

GROUP_COST = 8
"""Token positions a group is charged for its extra forward pass and cache copies when groups are chosen."""

WINDOW = 1024
"""The most rows one group spans in the sorted order (bounds the grouping's work on a long call)."""

Row = tuple[list[int], list[int]]
"""A row as :func:`~queerbench.models.backends.causal.loglikelihood_positions` gives it: ids, scored positions."""

PrefixGroup = tuple[int, list[int]]
"""A group: its shared prefix length ``P`` and its rows' indices (at least two)."""


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def group_by_prefix(ids: Sequence[Sequence[int]]) -> tuple[list[PrefixGroup], list[int]]:
    """``(groups, alone)``: groups of at least two rows of ``ids`` sharing a prefix of ``P >= MIN_SHARED`` tokens
    (``P`` shorter than every member, so each keeps a token after it), and the indices of the rows run alone.

    The rows are sorted by their ids; a group is a run of neighbours, whose common prefix is the smallest common
    prefix of adjacent members. The cut minimises the positions run (see the module doc), exactly over groups of up
    to :data:`WINDOW` neighbours."""
    order = sorted(range(len(ids)), key=lambda i: list(ids[i]))
    n = len(order)
    lengths = [len(ids[i]) for i in order]
    adjacent = [_lcp(ids[order[t]], ids[order[t + 1]]) for t in range(n - 1)]
    best = [0] * (n + 1)  # best[j]: the least cost of the first j rows in sorted order
    cut: list[tuple[int, int]] = [(0, 0)] * (n + 1)  # (where the last group starts, its P; 0 = alone)
    for j in range(n):
        best[j + 1], cut[j + 1] = best[j] + lengths[j], (j, 0)
        shared, shortest, total = lengths[j] - 1, lengths[j], lengths[j]
        for i in range(j - 1, max(-1, j - WINDOW), -1):
            shortest, total = min(shortest, lengths[i]), total + lengths[i]
            shared = min(shared, adjacent[i], shortest - 1)
            if shared < MIN_SHARED:
                break
            k = j - i + 1
            cost = best[i] + GROUP_COST + shared + total - k * (shared + 1)  # the suffixes run without their last
            if cost < best[j + 1]:
                best[j + 1], cut[j + 1] = cost, (i, shared)
    groups: list[PrefixGroup] = []
    alone: list[int] = []
    j = n
    while j > 0:
        start, shared = cut[j]
        if shared:
            groups.append((shared, [order[t] for t in range(start, j)]))
        else:
            alone.append(order[start])
        j = start
    return groups[::-1], alone[::-1]


class PrefixScorer:
    """Runs :func:`group_by_prefix`'s groups on a causal LM with a shared prefix KV cache (see the module doc)."""

    def __init__(self, model: Any, pad_id: int) -> None:
        self.model, self.pad_id = model, pad_id
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    @staticmethod
    def _layers(output: Any) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """The returned cache's per-layer keys and values, or ``None`` when it cannot be shared by row copies (no
        cache, a cache without ``layers``, a sliding-window layer)."""
        cache = getattr(output, "cache", None)
        cache = getattr(output, "past_key_values", None) if cache is None else cache
        layers = getattr(cache, "layers", None)
        if not layers:
            return None
        out = []
        for layer in layers:
            keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
            if getattr(layer, "is_sliding", False) or not isinstance(keys, torch.Tensor):
                return None
            if not isinstance(values, torch.Tensor):
                return None
            out.append((keys, values))
        return out

    @staticmethod
    def _cache_from(layers: Sequence[tuple[torch.Tensor, torch.Tensor]], rows: torch.Tensor) -> Any:
        """A fresh cache holding ``rows`` of the prefix cache (the prefix tensors are never modified)."""
        from transformers import DynamicCache

        return DynamicCache(ddp_cache_data=[(k.index_select(0, rows), v.index_select(0, rows)) for k, v in layers])

    def usable(self, device: str) -> bool:
        """Whether the model returns a cache that can be shared by row copies (one two-token forward pass)."""
        with torch.inference_mode():
            ids = torch.tensor([[self.pad_id, self.pad_id]], device=device)
            out = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
        return self._layers(out) is not None

    def score(
        self,
        rows: Sequence[Row],
        groups: Sequence[PrefixGroup],
        batch_size: int,
        device: str,
        done: Callable[[int], None],
    ) -> dict[int, float]:
        """Each grouped row's summed log-probability at its positions, by row index; ``done`` ticks per pass."""
        out: dict[int, float] = {}
        ordered = sorted(groups, key=lambda g: -g[0])
        for start in range(0, len(ordered), batch_size):
            out.update(self._chunk(rows, ordered[start : start + batch_size], batch_size, device, done))
        return out

    def _chunk(
        self,
        rows: Sequence[Row],
        groups: Sequence[PrefixGroup],
        batch_size: int,
        device: str,
        done: Callable[[int], None],
    ) -> dict[int, float]:
        """One prefix pass for ``groups``, then their rows' suffix passes."""
        width = max(p for p, _ in groups)
        ids = torch.full((len(groups), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(groups), width), dtype=torch.long)
        picks: list[tuple[int, int, int, int]] = []  # (row, batch row, column, target)
        later: list[tuple[int, int]] = []  # (row, its group's batch row) of rows with a suffix to run
        for g, (shared, members) in enumerate(groups):
            ids[g, :shared] = torch.tensor(rows[members[0]][0][:shared])
            mask[g, :shared] = 1
            for r in members:
                row_ids, positions = rows[r]
                picks += [(r, g, p - 1, row_ids[p]) for p in positions if p <= shared]
                if len(row_ids) - 1 > shared:
                    later.append((r, g))
        ids, mask = ids.to(device), mask.to(device)
        steps = torch.arange(width, device=device).expand(len(groups), -1)
        output = self.model(input_ids=ids, attention_mask=mask, position_ids=steps, use_cache=True)
        layers = self._layers(output)
        if layers is None:
            raise RuntimeError("the model returned no shareable KV cache (checked by PrefixScorer.usable first)")
        sums = dict.fromkeys((r for _, members in groups for r in members), 0.0)
        self._add(sums, output.logits, picks)
        del output
        done(sum(len(members) for _, members in groups) - len(later))
        prefix_len = torch.tensor([p for p, _ in groups], device=device)
        later.sort(key=lambda rg: -(len(rows[rg[0]][0]) - groups[rg[1]][0]))
        for start in range(0, len(later), batch_size):
            batch = later[start : start + batch_size]
            self._suffixes(rows, groups, batch, layers, mask, prefix_len, sums, device)
            done(len(batch))
        return sums

    def _suffixes(
        self,
        rows: Sequence[Row],
        groups: Sequence[PrefixGroup],
        batch: Sequence[tuple[int, int]],
        layers: Sequence[tuple[torch.Tensor, torch.Tensor]],
        prefix_mask: torch.Tensor,
        prefix_len: torch.Tensor,
        sums: dict[int, float],
        device: str,
    ) -> None:
        """One suffix pass: each row's ``ids[P:-1]`` on its group's prefix cache, right-padded."""
        width = max(len(rows[r][0]) - 1 - groups[g][0] for r, g in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        picks: list[tuple[int, int, int, int]] = []
        for b, (r, g) in enumerate(batch):
            shared = groups[g][0]
            row_ids, positions = rows[r]
            fed = row_ids[shared:-1]
            ids[b, : len(fed)] = torch.tensor(fed)
            mask[b, : len(fed)] = 1
            picks += [(r, b, p - 1 - shared, row_ids[p]) for p in positions if p > shared]
        index = torch.tensor([g for _, g in batch], device=device)
        full_mask = torch.cat([prefix_mask.index_select(0, index), mask.to(device)], dim=1)
        steps = prefix_len.index_select(0, index)[:, None] + torch.arange(width, device=device)[None, :]
        kwargs = {self._cache_arg: self._cache_from(layers, index)}
        output = self.model(
            input_ids=ids.to(device), attention_mask=full_mask, position_ids=steps, use_cache=True, **kwargs
        )
        self._add(sums, output.logits, picks)

    @staticmethod
    def _add(sums: dict[int, float], logits: torch.Tensor, picks: Sequence[tuple[int, int, int, int]]) -> None:
        """Add to ``sums[row]`` the log-probability of each pick's target at its logits (batch row, column).

        The log-softmax runs once per distinct (batch row, column): a group's rows all read the same prefix logits."""
        if not picks:
            return
        dev = logits.device
        at: dict[tuple[int, int], int] = {}
        which = [at.setdefault((b, c), len(at)) for _, b, c, _ in picks]
        cells = list(at)
        picked = logits[
            torch.tensor([b for b, _ in cells], device=dev), torch.tensor([c for _, c in cells], device=dev)
        ]
        logp = torch.log_softmax(picked.float(), dim=-1)
        rows = torch.tensor(which, device=dev)
        targets = torch.tensor([p[3] for p in picks], device=dev)
        values = logp[rows, targets].cpu().tolist()
        for (r, *_), value in zip(picks, values, strict=True):
            sums[r] += float(value)

"""Preference pairs: which (chosen, rejected) pairs a verified group gives, and pairs files.

With verifiable rewards a preference needs no human: a verified-correct and a verified-wrong
completion of the same prompt are a pair. `group_pairs` picks them from one group (the setting
``pairs_per_group`` and the ``pairing``: ``disjoint`` uses each completion at most once,
``random`` draws any pass x fail combination without repeats); completions with the same text
count once, and failed verifications (error/timeout) are never used.

A pairs file is JSONL, one pair per line, in the layout of TRL's DPO data: ``prompt`` (text, or
chat messages), ``chosen`` and ``rejected`` (text, or a list holding one assistant message). Files
written by ``rlvr pairs build`` carry more columns (problem id, reference, both verdicts) and a
``.meta.json`` beside them with the provenance. `read_pairs` validates every row: a malformed
row is counted and reported with its file and line, never silently dropped.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Sequence

from envs.types import Message, Verdict
from rlvr import UserError
from rlvr.algos.config import Pairing


def group_pairs(completions: Sequence[str], verdicts: Sequence[Verdict], pairs_per_group: int, pairing: Pairing,
                rng: random.Random) -> list[tuple[int, int]]:
    """``(chosen, rejected)`` indices into one group's completions: chosen ones passed, rejected
    ones were verified wrong (no answer included); at most ``pairs_per_group`` pairs."""
    passed, failed, seen = [], [], set()
    for i, (text, v) in enumerate(zip(completions, verdicts)):
        if v.status.is_failure or text in seen:
            continue
        seen.add(text)
        (passed if v.passed else failed).append(i)
    if not passed or not failed:
        return []
    if pairing == "disjoint":
        rng.shuffle(passed)
        rng.shuffle(failed)
        return list(zip(passed, failed))[:pairs_per_group]
    combos = rng.sample(range(len(passed) * len(failed)), min(pairs_per_group, len(passed) * len(failed)))
    return [(passed[c // len(failed)], failed[c % len(failed)]) for c in combos]


@dataclass(frozen=True)
class PreferencePair:
    """One pair read from a file; ``where`` is ``file:line``. ``problem_id`` and ``reference``
    come with pairs that ``rlvr pairs build`` wrote (they let `rlvr pairs check` re-verify them)."""

    prompt: str | list[Message]
    chosen: str
    rejected: str
    where: str
    problem_id: str | None = None
    reference: Any = None


@dataclass
class PairsFile:
    """The usable pairs of a file and every row left out (``file:line: reason``)."""

    path: Path
    pairs: list[PreferencePair] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)

    def summary(self, limit: int = 5) -> str:
        lines = [f"{self.path}: {len(self.pairs)} pairs, {len(self.bad)} rows left out"]
        lines += [f"  {b}" for b in self.bad[:limit]]
        if len(self.bad) > limit:
            lines.append(f"  ... and {len(self.bad) - limit} more")
        return "\n".join(lines)

    def report(self) -> dict[str, Any]:
        return {"path": str(self.path), "pairs": len(self.pairs), "left_out": len(self.bad), "left_out_rows": self.bad}


def read_pairs(path: str | Path, on_bad_row: Literal["skip", "error"] = "skip", max_bad_fraction: float | None = None) -> PairsFile:
    """Every row of a pairs file, validated (see the module docstring). ``on_bad_row="error"``
    raises at the first malformed row; a file without a single valid pair is an error either way,
    and so is one with more than ``max_bad_fraction`` of its rows malformed (training passes
    `MAX_BAD_FRACTION`; ``rlvr pairs check`` lists them all). A line that is not UTF-8 is a
    malformed row naming its line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"pairs file {path} not found (build one with `rlvr pairs build`, or give a JSONL file with prompt/chosen/rejected)")
    out = PairsFile(path)
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            where = f"{path}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                line, pair = "", f"not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})"
            else:
                if not line.strip():
                    continue
                try:
                    pair = parse_pair(json.loads(line), where)
                except json.JSONDecodeError as e:
                    pair = f"not valid JSON ({e.msg} at column {e.colno})"
            if isinstance(pair, str):
                if on_bad_row == "error":
                    raise UserError(f"{where}: {pair} (pairs.on_bad_row=skip leaves such rows out and reports them)")
                out.bad.append(f"{where}: {pair}")
            else:
                out.pairs.append(pair)
    if not out.pairs:
        raise UserError(f"pairs file {path} has no valid pair" + (f"; first problem: {out.bad[0]}" if out.bad else " (it is empty)"))
    rows = len(out.pairs) + len(out.bad)
    if max_bad_fraction is not None and len(out.bad) > max_bad_fraction * rows:  # as dataset tasks: fix such a file, do not train on it
        raise UserError(f"pairs file {path}: {len(out.bad)} of {rows} rows are malformed, more than {max_bad_fraction:.0%}; "
                        f"fix the file (first: {out.bad[0]}; `rlvr pairs check {path}` lists them)")
    return out


MAX_BAD_FRACTION = 0.05
"""Share of malformed rows above which a pairs file is refused (the limit dataset tasks use)."""


def parse_pair(row: Any, where: str) -> PreferencePair | str:
    """A `PreferencePair`, or the reason ``row`` is malformed."""
    if not isinstance(row, dict):
        return f"expected a JSON object with prompt/chosen/rejected, got {type(row).__name__}"
    missing = [k for k in ("prompt", "chosen", "rejected") if k not in row]
    if missing:
        hint = " (rows whose chosen/rejected repeat the prompt, without a 'prompt' column, are not supported)" if missing == ["prompt"] else ""
        return f"missing {', '.join(repr(k) for k in missing)}{hint}"
    prompt = row["prompt"]
    if isinstance(prompt, list):
        problem = _messages_problem(prompt)
        if problem:
            return f"'prompt': {problem}"
    elif not isinstance(prompt, str) or not prompt:
        return f"'prompt' must be non-empty text or a list of chat messages, got {_show(prompt)}"
    texts = {}
    for key in ("chosen", "rejected"):
        value = row[key]
        if isinstance(value, list):  # conversational: one assistant message
            if len(value) != 1 or _messages_problem(value) or value[0]["role"] != "assistant":
                return f"'{key}' as messages must be one assistant message, got {_show(value)}"
            value = value[0]["content"]
        if not isinstance(value, str) or not value.strip():
            return f"'{key}' must be non-empty text, got {_show(value)}"
        texts[key] = value
    if texts["chosen"] == texts["rejected"]:
        return "'chosen' and 'rejected' are the same text"
    return PreferencePair(prompt, texts["chosen"], texts["rejected"], where, row.get("problem_id"), row.get("reference"))


def _messages_problem(messages: list) -> str | None:
    if not messages:
        return "an empty list of messages"
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            return f"message {i} must be an object with text 'role' and 'content', got {_show(m)}"
    return None


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def meta_path(path: str | Path) -> Path:
    """Where the provenance of a pairs file is written: ``pairs.jsonl`` -> ``pairs.meta.json``."""
    return Path(path).with_suffix(".meta.json")


__all__ = ["PairsFile", "PreferencePair", "group_pairs", "meta_path", "parse_pair", "read_pairs"]

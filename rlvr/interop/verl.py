"""rlvr tasks as verl data, and rlvr's verifiers as verl's custom reward function.

Rows (``rlvr tasks export TASK --split S --format parquet --out FILE``) follow verl's layout::

    data_source   the task id (verl's reward managers key on it)
    prompt        chat messages [{"role": "user", "content": ...}] (verl applies the chat template)
    ability       what the environment checks: "math", "code", ...
    reward_model  {"style": "rule", "ground_truth": the reference: text, or JSON for structured
                  references such as code tests}
    extra_info    {"split", "index", "env", "env_kwargs", "reference_format", "rlvr_problem"}:
                  enough to rebuild the rlvr problem and its environment (JSON strings where the
                  shape varies between tasks, so every row has one parquet schema)

verl loads a reward function from a file: point it at this one,

    custom_reward_function.path=<this file>  custom_reward_function.name=compute_score

(or ``compute_score_batch`` with ``reward_model.reward_manager=batch``, which verifies a whole
batch in parallel). Settings come from ``custom_reward_function.reward_kwargs``: ``timeout_s``,
``workers``, ``kind``. verl calls ``compute_score(data_source=..., solution_str=...,
ground_truth=..., extra_info=...)`` and accepts a float or a dict with ``"score"``; verl has no
"no reward" value, so a verifier error or timeout scores 0 *and* is flagged in the dict
(``verify_error`` / ``verify_timeout``, which verl aggregates into its metrics) and warned
about; ``acc`` is 1 for a passed completion.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Sequence

import envs
import tasks
from envs.types import Problem, Status, Verdict
from rlvr.interop.scoring import PooledScorer, ScorerSettings

STYLE = "rule"


def ability(env_id: str) -> str:
    """verl's task category, from the environment's name (``math-v1`` → ``math``)."""
    return envs.parse_id(env_id).name


def task_rows(task: tasks.Task, split: str, *, limit: int | None = None) -> list[dict[str, Any]]:
    """``split`` of ``task`` (its first ``limit`` problems) as verl rows (see the module docstring)."""
    if limit is not None and limit < 1:
        raise tasks.TaskError(f"limit must be >= 1, got {limit}")
    env = task.env
    env_id = str(envs.ENVS.spec(task.env_id).id) if task.env_id in envs.ENVS else task.env_id
    rows = []
    for index, p in enumerate(task.problems(split, limit=limit)):
        prompt = env.format_prompt(p)
        reference_format = "text" if isinstance(p.reference, str) else "json"
        rows.append({
            "data_source": task.id,
            "prompt": [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt),
            "ability": ability(env_id),
            "reward_model": {"style": STYLE, "ground_truth": p.reference if reference_format == "text" else json.dumps(p.reference, sort_keys=True)},
            "extra_info": {
                "split": split,
                "index": index,
                "env": env_id,
                "env_kwargs": json.dumps(task.env_kwargs, sort_keys=True),
                "reference_format": reference_format,
                "rlvr_problem": json.dumps({"id": p.id, "prompt": p.prompt, "metadata": p.metadata}, sort_keys=True, ensure_ascii=False),
            },
        })
    return rows


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write rows with `datasets` (as verl's own preprocessing scripts do); returns the path."""
    from datasets import Dataset

    if not rows:
        raise tasks.TaskError("no rows to write")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_list(rows).to_parquet(str(path))
    return path


# -- the reward function verl loads -----------------------------------------------------------

_scorers: dict[tuple[str, str, ScorerSettings], PooledScorer] = {}
_scorers_lock = threading.Lock()


def problem_of(ground_truth: Any, extra_info: dict[str, Any]) -> Problem:
    """The rlvr problem a row was exported from, with ``ground_truth`` as its reference."""
    try:
        saved = json.loads(extra_info["rlvr_problem"])
        reference = json.loads(ground_truth) if extra_info.get("reference_format") == "json" else ground_truth
        return Problem(id=str(saved["id"]), prompt=saved["prompt"], reference=reference, metadata=dict(saved.get("metadata") or {}))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"extra_info lacks what rlvr exported ({type(e).__name__}: {e}); write the rows with `rlvr tasks export`") from e


def _scorer(extra_info: dict[str, Any], settings: ScorerSettings) -> PooledScorer:
    key = (extra_info["env"], extra_info.get("env_kwargs") or "{}", settings)
    with _scorers_lock:
        if key not in _scorers:
            _scorers[key] = PooledScorer(envs.make(key[0], **json.loads(key[1])), settings)
        return _scorers[key]


def _score(verdict: Verdict) -> dict[str, float]:
    return {
        "score": 0.0 if verdict.status.is_failure else float(verdict.reward),
        "acc": float(verdict.passed),
        "verify_error": float(verdict.status == Status.ERROR),
        "verify_timeout": float(verdict.status == Status.TIMEOUT),
    }


def compute_score_batch(data_sources: Sequence[str], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                        extra_infos: Sequence[dict[str, Any]], *, timeout_s: float = 30.0, workers: int = 2,
                        kind: str = "process", **_: Any) -> list[dict[str, float]]:
    """verl's batch reward function: every response verified by its row's environment, in parallel."""
    if not len(data_sources) == len(solution_strs) == len(ground_truths) == len(extra_infos):
        raise ValueError("compute_score_batch: data_sources, solution_strs, ground_truths and extra_infos differ in length")
    settings = ScorerSettings(workers=workers, kind=kind, timeout_s=timeout_s)  # type: ignore[arg-type]
    groups: dict[int, tuple[PooledScorer, list[int]]] = {}
    for i, info in enumerate(extra_infos):
        scorer = _scorer(info, settings)
        groups.setdefault(id(scorer), (scorer, []))[1].append(i)
    scores: list[dict[str, float]] = [{}] * len(solution_strs)
    for scorer, rows in groups.values():
        verdicts = scorer.verify([problem_of(ground_truths[i], extra_infos[i]) for i in rows], [solution_strs[i] for i in rows])
        for i, v in zip(rows, verdicts):
            scores[i] = _score(v)
    return scores


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None,
                  **kwargs: Any) -> dict[str, float]:
    """verl's custom reward function for one response (see the module docstring)."""
    if extra_info is None:
        raise ValueError(f"{data_source}: compute_score needs the row's extra_info (rows written by `rlvr tasks export`)")
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **kwargs)[0]

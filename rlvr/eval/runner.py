"""Evaluate a model on a task split: greedy accuracy, and mean@k / pass@k / maj@k from k samples.

The report records everything needed to reproduce or compare the number: model, task id and
config, split checksum, sampling parameters, seed, and the rlvr version.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

import rlvr
from envs.pool import VerifierPool
from envs.types import Problem, Status, Verdict
from rlvr.eval.episodes import episode_section, markdown_rows, prediction_fields
from rlvr.eval.metrics import ks_up_to, majority_correct, mean_interval, pass_at_k, wilson_interval
from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams, verifier_input
from rlvr.rollout.episodes import generate_for
from tasks.base import Task


@dataclass
class EvalSettings:
    """What to measure.

    Attributes:
        split: The task split (held-out ``test`` by default).
        greedy: Measure greedy (temperature 0) accuracy.
        n: Samples per problem for mean@k / pass@k / maj@k (0 = no sampling).
        temperature / top_p: Sampling parameters for the n samples.
        max_new_tokens: Longest completion.
        seed: Sampling seed.
        limit: Evaluate only the first ``limit`` problems (None = the whole split).
        chunk_prompts: Prompts per generate call (verification of one chunk overlaps the next).
        verify_workers / verify_kind: Verification pool (see `envs.pool.VerifierPool`).
    """

    split: str = "test"
    greedy: bool = True
    n: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    seed: int = 0
    limit: int | None = None
    chunk_prompts: int = 64
    verify_workers: int = 0
    verify_kind: str = "thread"


@dataclass
class SampleSet:
    """Completions of every problem under one sampling setting, with verdicts."""

    completions: list[list[Completion]] = field(default_factory=list)
    verdicts: list[list[Verdict]] = field(default_factory=list)


def _run(engine: RolloutEngine, task: Task, problems: list[Problem], n: int, sampling: SamplingParams,
         pool: VerifierPool, chunk: int, desc: str, progress: bool) -> SampleSet:
    out = SampleSet()
    pending = []
    bar = tqdm(total=len(problems), desc=desc, unit="prob", disable=not progress, leave=False)
    for start in range(0, len(problems), chunk):
        batch = problems[start: start + chunk]
        comps = generate_for(engine, task.env, batch, n, sampling)  # episodes for a multi-turn environment
        pending.append((comps, pool.submit([p for p in batch for _ in range(n)], [verifier_input(c) for c in comps])))
        bar.update(len(batch))
    bar.close()
    for comps, fut in pending:
        verdicts = fut.result()
        for i in range(0, len(comps), n):
            out.completions.append(comps[i: i + n])
            out.verdicts.append(verdicts[i: i + n])
    return out


def _failures(verdicts: list[list[Verdict]]) -> dict[str, int]:
    flat = [v for row in verdicts for v in row]
    return {s.value: sum(v.status is s for v in flat) for s in (Status.NO_ANSWER, Status.ERROR, Status.TIMEOUT)}


def evaluate(engine: RolloutEngine, task: Task, settings: EvalSettings, *, model_name: str = "", progress: bool = True) -> dict[str, Any]:
    """Run the evaluation and return the report (a JSON-serialisable dict)."""
    problems = task.problems(settings.split)
    full_size = len(problems)
    if settings.limit is not None:
        problems = problems[: settings.limit]
    report: dict[str, Any] = {
        "model": model_name,
        "task": task.describe(),
        "split": settings.split,
        "problems": len(problems),
        "split_size": full_size,
        "data_checksum": task.checksum(settings.split),
        "settings": asdict(settings),
        "rlvr_version": rlvr.__version__,
    }
    t0 = time.perf_counter()
    with VerifierPool(task.env, workers=settings.verify_workers, kind=settings.verify_kind) as pool:  # type: ignore[arg-type]
        if settings.greedy:
            greedy = _run(engine, task, problems, 1, SamplingParams(temperature=0.0, max_new_tokens=settings.max_new_tokens),
                          pool, settings.chunk_prompts, "eval greedy", progress)
            correct = [row[0].passed for row in greedy.verdicts]
            c = sum(correct)
            counts = _failures(greedy.verdicts)
            report["greedy"] = {
                "accuracy": c / max(len(problems), 1),
                "correct": c,
                "ci95": wilson_interval(c, len(problems)),
                "no_answer_rate": counts["no_answer"] / max(len(problems), 1),
                "errors": counts["error"], "timeouts": counts["timeout"],
                **episode_section(greedy.completions, greedy.verdicts),
            }
            report["_greedy_samples"] = greedy
        if settings.n > 0:
            sampling = SamplingParams(temperature=settings.temperature, top_p=settings.top_p,
                                      max_new_tokens=settings.max_new_tokens, seed=settings.seed)
            sampled = _run(engine, task, problems, settings.n, sampling, pool, max(1, settings.chunk_prompts // settings.n),
                           f"eval {settings.n} samples", progress)
            per_problem = [[v.passed for v in row] for row in sampled.verdicts]
            means = [sum(row) / len(row) for row in per_problem]
            counts = _failures(sampled.verdicts)
            total = len(problems) * settings.n
            report["sampled"] = {
                "n": settings.n,
                f"mean@{settings.n}": sum(means) / max(len(means), 1),
                f"mean@{settings.n}_ci95": mean_interval(means),
                "pass@k": {str(k): sum(pass_at_k(settings.n, sum(row), k) for row in per_problem) / max(len(per_problem), 1)
                           for k in ks_up_to(settings.n)},
                f"maj@{settings.n}": sum(majority_correct([v.extracted for v in row], [v.passed for v in row])
                                         for row in sampled.verdicts) / max(len(problems), 1),
                "no_answer_rate": counts["no_answer"] / max(total, 1),
                "errors": counts["error"], "timeouts": counts["timeout"],
                **episode_section(sampled.completions, sampled.verdicts),
            }
            report["_sampled_samples"] = sampled
        report["verify"] = asdict(pool.stats)
    report["wall_s"] = time.perf_counter() - t0
    return report


def write_report(report: dict[str, Any], out_dir: str | Path, problems: list[Problem] | None = None) -> tuple[Path, Path]:
    """Write ``report.json``, ``report.md`` and ``predictions.jsonl``; returns (json, md) paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    public = {k: v for k, v in report.items() if not k.startswith("_")}
    json_path = out / "report.json"
    json_path.write_text(json.dumps(public, indent=2))
    md_path = out / "report.md"
    md_path.write_text(render_markdown(public))
    greedy: SampleSet | None = report.get("_greedy_samples")
    sampled: SampleSet | None = report.get("_sampled_samples")
    if problems is not None and (greedy or sampled):
        with (out / "predictions.jsonl").open("w") as f:
            for i, p in enumerate(problems[: public["problems"]]):
                row: dict[str, Any] = {"id": p.id, "reference": p.reference}
                for name, s in (("greedy", greedy), ("samples", sampled)):
                    if s is not None:
                        row[name] = [{"text": c.text, "reward": v.reward, "status": v.status.value, "extracted": v.extracted, **prediction_fields(c)}
                                     for c, v in zip(s.completions[i], s.verdicts[i])]
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return json_path, md_path


def render_markdown(r: dict[str, Any]) -> str:
    lines = [
        f"# Evaluation: {r['task']['id']} ({r['split']})", "",
        f"- model: `{r['model']}`",
        f"- task config: `{json.dumps(r['task']['config'])}`",
        f"- problems: {r['problems']} of {r['split_size']}; data checksum `{r['data_checksum']}`",
        f"- sampling: {json.dumps({k: r['settings'][k] for k in ('n', 'temperature', 'top_p', 'max_new_tokens', 'seed')})}",
        f"- rlvr {r['rlvr_version']}; wall time {r['wall_s']:.1f} s", "",
        "| metric | value | 95% CI |", "|---|---:|---|",
    ]
    if "greedy" in r:
        g = r["greedy"]
        lines.append(f"| greedy accuracy | {g['accuracy']:.3f} ({g['correct']}/{r['problems']}) | {g['ci95'][0]:.3f}–{g['ci95'][1]:.3f} |")
        lines.append(f"| greedy no-answer rate | {g['no_answer_rate']:.3f} | |")
        lines += markdown_rows("greedy", g)
    if "sampled" in r:
        s, n = r["sampled"], r["sampled"]["n"]
        ci = s[f"mean@{n}_ci95"]
        lines.append(f"| mean@{n} | {s[f'mean@{n}']:.3f} | {ci[0]:.3f}–{ci[1]:.3f} |")
        for k, v in s["pass@k"].items():
            lines.append(f"| pass@{k} | {v:.3f} | |")
        lines.append(f"| maj@{n} | {s[f'maj@{n}']:.3f} | |")
        lines.append(f"| sampled no-answer rate | {s['no_answer_rate']:.3f} | |")
        lines += markdown_rows("sampled", s)
    errs = sum(r.get(x, {}).get("errors", 0) + r.get(x, {}).get("timeouts", 0) for x in ("greedy", "sampled"))
    if errs:
        lines += ["", f"**{errs} verifications failed (error/timeout) and were scored as wrong.**"]
    return "\n".join(lines) + "\n"

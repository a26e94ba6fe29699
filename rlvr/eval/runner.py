"""Evaluate a model on a task split: greedy accuracy, and mean@k / pass@k / maj@k from k samples.

The report records everything needed to reproduce or compare the number: model (and, once
written, a hash of its weights), task id and config, the environment that verified it, split
and problem checksums, sampling and verification parameters, seed, the UTC time, the code's
commit and library versions. It also says what it could not measure: verifications that failed
(error/timeout) and problems whose prompt and completion ran past the model's context.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import rlvr
from envs.pool import VerifierPool
from envs.types import Problem, Status, Verdict
from rlvr.eval.compare import problem_sha
from rlvr.eval.episodes import episode_section, markdown_rows, prediction_fields
from rlvr.eval.metrics import ks_up_to, majority_correct, mean_score_interval, pass_at_k, wilson_interval
from rlvr.eval.settings import SETTING_NAMES, EvalSettings, InvalidSetting  # noqa: F401 - importable from here as before
from rlvr.eval.provenance import component_provenance, library_versions, model_provenance, project_commit, redact, utc_now
from rlvr.progress import progress_display
from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams, verifier_input
from rlvr.rollout.episodes import generate_for
from rlvr.rollout.prompts import PromptStyle, resolve_style
from rlvr.rollout.records import EMPTY_ALARM, empty_warning, whitespace_share  # noqa: F401 - EMPTY_ALARM: importable from here as before
from tasks.base import Task, problems_checksum

CI_METHOD = "Wilson score 95%, over problems (mean@k: each problem scored by the mean of its samples)"


@dataclass
class SampleSet:
    """Completions of every problem under one sampling setting, with verdicts."""

    completions: list[list[Completion]] = field(default_factory=list)
    verdicts: list[list[Verdict]] = field(default_factory=list)
    generate_s: float = 0.0

    def generation(self) -> dict[str, float]:
        """Mean completion length (tokens) and the shares truncated and empty (nothing but an end
        of turn): reproducible, unlike `speed`."""
        flat = [c for row in self.completions for c in row]
        verdicts = [v for row in self.verdicts for v in row]
        return {"mean_completion_tokens": self.tokens() / max(len(flat), 1),
                "truncated_rate": sum(c.truncated for c in flat) / max(len(flat), 1),
                "empty_rate": sum(not c.text.strip() for c in flat) / max(len(flat), 1),
                "whitespace_rate": whitespace_share(flat),  # of empty_rate: text, all of it whitespace
                # credited although cut at max_new_tokens: the answer was read from an unfinished response
                "passed_truncated": sum(c.truncated and v.passed for c, v in zip(flat, verdicts))}

    def tokens(self) -> int:
        return sum(len(c.token_ids) for row in self.completions for c in row)

    def speed(self) -> float:
        """Completion tokens per second of generation."""
        return self.tokens() / self.generate_s if self.generate_s > 0 else 0.0


def truncated_warning(name: str, section: dict[str, Any]) -> str | None:
    """What to say when answers were credited to completions cut at max_new_tokens: the verifier
    saw them as cut (`envs.types.CutText`; the math checker then credits only an answer marked
    before the cut), but the model might have changed its answer had it gone on."""
    n = section.get("passed_truncated", 0)
    if not n:
        return None
    return (f"{n} {name} completion{'s' if n > 1 else ''} counted as correct {'were' if n > 1 else 'was'} cut at max_new_tokens, "
            f"so the answer was read from an unfinished response (marked \"truncated\" in predictions.jsonl); "
            f"raise --max-new-tokens to see whether the model would have kept it")


CUT_ALARM = 0.1
"""Share of completions cut at max_new_tokens above which a report says the budget is too small."""


def cut_warning(name: str, section: dict[str, Any], max_new_tokens: int) -> str | None:
    """What to say when many completions ran out of tokens: the score then measures the budget as
    much as the model."""
    rate = section.get("truncated_rate", 0.0)
    if rate <= CUT_ALARM:
        return None
    return (f"{rate:.0%} of {name} completions were cut at max_new_tokens={max_new_tokens} before they ended: "
            f"an unfinished answer scores as wrong; raise --max-new-tokens if the model was still reasoning")


def _run(engine: RolloutEngine, task: Task, problems: list[Problem], n: int, sampling: SamplingParams,
         pool: VerifierPool, chunk: int, desc: str, progress: bool, style: PromptStyle) -> SampleSet:
    out = SampleSet()
    pending = []
    bar = progress_display(len(problems), desc=desc, unit="prob", enabled=progress, leave=False)
    for start in range(0, len(problems), chunk):
        batch = problems[start: start + chunk]
        t0, setup = time.perf_counter(), getattr(engine, "setup_s", 0.0)
        comps = generate_for(engine, task.env, batch, n, sampling, style)  # episodes for a multi-turn environment
        out.generate_s += time.perf_counter() - t0 - (getattr(engine, "setup_s", 0.0) - setup)  # not the one-time decoder choice
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


def _first_failure(*sets: SampleSet | None) -> str | None:
    for s in sets:
        for v in (v for row in (s.verdicts if s else []) for v in row):
            if v.status.is_failure:
                detail = v.info.get("error") or f"no verdict within {v.info.get('timeout_s')} s"
                return f"{v.status.value}: {detail}"
    return None


def _registered_by(kind: str, id: str) -> str | None:
    """The registry's record of who registered ``id`` (an entry point's distribution), if anyone."""
    import envs
    import tasks

    registry = {"task": tasks.TASKS, "env": envs.ENVS}[kind]
    return registry.spec(id).source if id and id in registry else None


def _over_context(samples: SampleSet, context_length: int | None) -> list[int]:
    """Indices of problems with a completion whose prompt plus completion ran past the context."""
    if not context_length:
        return []
    return [i for i, row in enumerate(samples.completions)
            if any(len(c.prompt_ids) + len(c.token_ids) > context_length for c in row)]


def evaluate(engine: RolloutEngine, task: Task, settings: EvalSettings, *, model_name: str = "", progress: bool = True) -> dict[str, Any]:
    """Run the evaluation and return the report (a JSON-serialisable dict, except the private
    ``_``-prefixed entries that `write_report` turns into ``predictions.jsonl``)."""
    size = task.size(settings.split)
    problems = task.problems(settings.split, limit=settings.limit)  # only the first `limit` are read
    beyond = (f"the evaluation limit {settings.limit} is more than the {size} problems of {task.id}'s {settings.split!r} split: "
              f"all {size} are evaluated") if settings.limit is not None and size is not None and settings.limit > size else None
    context_length = engine.context_length
    style = resolve_style(settings.prompt, engine.tokenizer, model_name or "the model")
    report: dict[str, Any] = {
        "model": model_name,
        # the environment's settings (e.g. the math extraction mode) change what a score means
        # (secrets a hub task needs, its token or Authorization header, are not recorded)
        "task": redact({**task.describe(), "env": task.env.id or task.env_id, "env_kwargs": dict(task.env_kwargs)}),
        "split": settings.split,
        "problems": len(problems),
        "split_size": size,
        "data_checksum": task.checksum(settings.split) if size is not None else None,
        "problems_checksum": problems_checksum(problems),
        "settings": asdict(settings),
        "rlvr_version": rlvr.__version__,
        "created_utc": utc_now(),
        "ci_method": CI_METHOD,
        # rlvr's commit says nothing about a plugin's code: record the package that supplied each
        "provenance": {"task": component_provenance(task, _registered_by("task", task.id)),
                       "env": component_provenance(task.env, _registered_by("env", task.env.id))},
    }
    t0 = time.perf_counter()
    over: set[int] = set()
    greedy = sampled = None
    with VerifierPool(task.env, workers=settings.verify_workers, kind=settings.verify_kind,  # type: ignore[arg-type]
                      timeout_s=settings.verify_timeout_s) as pool:
        if settings.greedy:
            greedy = _run(engine, task, problems, 1, SamplingParams(temperature=0.0, max_new_tokens=settings.max_new_tokens),
                          pool, settings.chunk_prompts, "eval greedy", progress, style)
            correct = [row[0].passed for row in greedy.verdicts]
            c = sum(correct)
            counts = _failures(greedy.verdicts)
            over_greedy = _over_context(greedy, context_length)
            over.update(over_greedy)
            report["greedy"] = {
                "accuracy": c / max(len(problems), 1),
                "correct": c,
                "ci95": wilson_interval(c, len(problems)),
                "no_answer_rate": counts["no_answer"] / max(len(problems), 1),
                "errors": counts["error"], "timeouts": counts["timeout"],
                "over_context": len(over_greedy),
                **greedy.generation(),
                **episode_section(greedy.completions, greedy.verdicts),
            }
            report["_greedy_samples"] = greedy
        if settings.n > 0:
            sampling = SamplingParams(temperature=settings.temperature, top_p=settings.top_p,
                                      max_new_tokens=settings.max_new_tokens, seed=settings.seed)
            sampled = _run(engine, task, problems, settings.n, sampling, pool, max(1, settings.chunk_prompts // settings.n),
                           f"eval {settings.n} samples", progress, style)
            per_problem = [[v.passed for v in row] for row in sampled.verdicts]
            means = [sum(row) / len(row) for row in per_problem]
            counts = _failures(sampled.verdicts)
            total = len(problems) * settings.n
            over_sampled = _over_context(sampled, context_length)
            over.update(over_sampled)
            report["sampled"] = {
                "n": settings.n,
                f"mean@{settings.n}": sum(means) / max(len(means), 1),
                f"mean@{settings.n}_ci95": mean_score_interval(means),
                "pass@k": {str(k): sum(pass_at_k(settings.n, sum(row), k) for row in per_problem) / max(len(per_problem), 1)
                           for k in ks_up_to(settings.n)},
                f"maj@{settings.n}": sum(majority_correct([v.extracted for v in row], [v.passed for v in row])
                                         for row in sampled.verdicts) / max(len(problems), 1),
                "no_answer_rate": counts["no_answer"] / max(total, 1),
                "errors": counts["error"], "timeouts": counts["timeout"],
                "over_context": len(over_sampled),
                **sampled.generation(),
                **episode_section(sampled.completions, sampled.verdicts),
            }
            report["_sampled_samples"] = sampled
        report["verify"] = {**asdict(pool.stats), "kind": pool.kind, "workers": pool.workers, "timeout_s": pool.timeout_s,
                            "first_failure": _first_failure(greedy, sampled)}
    first = next((s.completions[0][0] for s in (greedy, sampled) if s is not None and s.completions), None)
    report["prompt"] = {"format": "chat" if style.chat else "raw", "system": style.system, "instruction": style.instruction,
                        "rendered_example": first.prompt_text if first is not None else None}
    empty, whitespace = max(((r["empty_rate"], r["whitespace_rate"]) for r in (report.get("greedy"), report.get("sampled")) if r),
                            default=(0.0, 0.0))
    if beyond:  # said (and recorded), not clamped silently; a training run says it once (`Harness.log_report`)
        report["limit_beyond_split"] = beyond
    report["warnings"] = [w for w in [beyond, empty_warning(empty, report["prompt"]["format"], whitespace),
                                      *(truncated_warning(name, report[name]) for name in ("greedy", "sampled") if name in report),
                                      *(cut_warning(name, report[name], settings.max_new_tokens) for name in ("greedy", "sampled") if name in report)]
                          if w]
    report["context"] = {"length": context_length, "problems_over": len(over),
                         "examples": [problems[i].id for i in sorted(over)[:10]]}
    report["engine"] = engine.describe()
    report["wall_s"] = time.perf_counter() - t0
    report["speed"] = {f"{name}_completion_tokens_per_s": s.speed() for name, s in (("greedy", greedy), ("sampled", sampled)) if s is not None}
    report["_problems"] = problems
    return report


def every_verification_failed(report: dict[str, Any]) -> bool:
    """True when verification ran and not one verdict judged a completion (all error/timeout)."""
    v = report.get("verify", {})
    return v.get("verified", 0) > 0 and v.get("errors", 0) + v.get("timeouts", 0) == v["verified"]


def write_report(report: dict[str, Any], out_dir: str | Path, problems: list[Problem] | None = None) -> tuple[Path, Path]:
    """Write ``report.json``, ``report.md`` and ``predictions.jsonl`` into ``out_dir`` with the
    provenance of the model, code and libraries; returns (json, md) paths. ``problems`` defaults to
    the ones evaluated."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    public = {k: v for k, v in report.items() if not k.startswith("_")}
    public.setdefault("provenance", {})
    public["provenance"] = {
        "created_utc": public.get("created_utc"),
        "model": model_provenance(public.get("model") or "") if public.get("model") else None,
        "code": project_commit(),
        "libraries": library_versions(),
        "report_dir": str(out.resolve()),
        "cwd": str(Path.cwd()),
        **public["provenance"],
    }
    json_path = out / "report.json"
    json_path.write_text(json.dumps(public, indent=2))
    md_path = out / "report.md"
    md_path.write_text(render_markdown(public))
    greedy: SampleSet | None = report.get("_greedy_samples")
    sampled: SampleSet | None = report.get("_sampled_samples")
    problems = problems if problems is not None else report.get("_problems")
    if problems is not None and (greedy or sampled):
        with (out / "predictions.jsonl").open("w") as f:
            for i, p in enumerate(problems[: public["problems"]]):
                row: dict[str, Any] = {"id": p.id, "reference": p.reference, "problem_sha": problem_sha(p.prompt, p.reference)}
                shown = next((s.completions[i][0].prompt_text for s in (greedy, sampled) if s is not None and s.completions[i]), "")
                if shown:
                    row["prompt"] = shown  # as the model saw it, after the chat template
                for name, s in (("greedy", greedy), ("samples", sampled)):
                    if s is not None:
                        row[name] = [{"text": c.text, "reward": v.reward, "passed": v.passed, "truncated": c.truncated, "status": v.status.value, "extracted": v.extracted, **prediction_fields(c)}
                                     for c, v in zip(s.completions[i], s.verdicts[i])]
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return json_path, md_path


def _plugin_lines(prov: dict[str, Any]) -> list[str]:
    """A line for the task and one for the environment when a package other than rlvr supplied it."""
    lines = []
    for kind in ("task", "env"):
        c = prov.get(kind) or {}
        if c.get("package") not in (None, "rlvr"):
            lines.append(f"- {'environment' if kind == 'env' else 'task'} `{c.get('id')}` from {c['package']} {c.get('version')}")
    return lines


def render_markdown(r: dict[str, Any]) -> str:
    prov = r.get("provenance", {})
    model = prov.get("model") or {}
    weights = model.get("weights_sha256") or model.get("hub_revision")
    code = prov.get("code") or {}
    commit = code.get("commit")
    verify = r.get("verify", {})
    lines = [
        f"# Evaluation: {r['task']['id']} ({r['split']})", "",
        f"- model: `{model.get('path') or r['model']}`" + (f" (weights `{weights[:19]}`)" if weights else ""),
        f"- task config: `{json.dumps(r['task']['config'])}`; verified by `{r['task']['env']}`"
        + (f" with `{json.dumps(r['task']['env_kwargs'])}`" if r["task"].get("env_kwargs") else ""),
        f"- problems: {r['problems']} of {r['split_size'] if r['split_size'] is not None else 'an unbounded split'}; "
        f"data checksum `{r['data_checksum'] or r['problems_checksum']}`",
        f"- sampling: {json.dumps({k: r['settings'][k] for k in ('n', 'temperature', 'top_p', 'max_new_tokens', 'seed')})}",
        f"- verification: {verify.get('kind')} x{verify.get('workers')}, {verify.get('timeout_s', 0):g} s per item",
        *_engine_line(r.get("engine") or {}),
        f"- rlvr {r['rlvr_version']}" + (f" at `{commit[:12]}`{' (uncommitted changes)' if code.get('dirty') else ''}" if commit else "")
        + f"; {r.get('created_utc', '')}; wall time {r['wall_s']:.1f} s",
        *_plugin_lines(prov), "",
        "| metric | value | 95% CI |", "|---|---:|---|",
    ]
    if "greedy" in r:
        g = r["greedy"]
        lines.append(f"| greedy accuracy | {g['accuracy']:.3f} ({g['correct']}/{r['problems']}) | {g['ci95'][0]:.3f}–{g['ci95'][1]:.3f} |")
        lines.append(f"| greedy no-answer rate | {g['no_answer_rate']:.3f} | |")
        lines += _generation_rows("greedy", g, r)
        lines += markdown_rows("greedy", g)
    if "sampled" in r:
        s, n = r["sampled"], r["sampled"]["n"]
        ci = s[f"mean@{n}_ci95"]
        lines.append(f"| mean@{n} | {s[f'mean@{n}']:.3f} | {ci[0]:.3f}–{ci[1]:.3f} |")
        for k, v in s["pass@k"].items():
            lines.append(f"| pass@{k} | {v:.3f} | |")
        lines.append(f"| maj@{n} | {s[f'maj@{n}']:.3f} | |")
        lines.append(f"| sampled no-answer rate | {s['no_answer_rate']:.3f} | |")
        lines += _generation_rows("sampled", s, r)
        lines += markdown_rows("sampled", s)
    lines += ["", f"Intervals: {r.get('ci_method', CI_METHOD)}."]
    for warning in r.get("warnings", []):
        lines += ["", f"**Warning: {warning}.**"]
    shown = r.get("prompt") or {}
    if shown.get("rendered_example") is not None:
        lines += ["", f"Prompts ({shown['format']}), the first as the model saw it:", "", "```", shown["rendered_example"].rstrip("\n"), "```"]
    errs = sum(r.get(x, {}).get("errors", 0) + r.get(x, {}).get("timeouts", 0) for x in ("greedy", "sampled"))
    if errs:
        lines += ["", f"**{errs} verifications failed (error/timeout) and were scored as wrong** "
                      f"(first: {verify.get('first_failure')})."]
    context = r.get("context") or {}
    if context.get("problems_over"):
        lines += ["", f"**{context['problems_over']} of {r['problems']} problems ran past the model's context of "
                      f"{context['length']} tokens (prompt + completion)**: their completions are unreliable "
                      f"(e.g. {', '.join(context['examples'][:3])})."]
    return "\n".join(lines) + "\n"


def _engine_line(engine: dict[str, Any]) -> list[str]:
    """Where the completions were generated: engine, device, precision, decoder."""
    if not engine:
        return []
    parts = [engine.get("engine", "?")]
    if engine.get("device"):
        parts.append(f"on {engine['device']}" + (f" ({engine['name']})" if engine.get("name") else ""))
    parts += [f"{engine[k]}" for k in ("dtype",) if engine.get(k)]
    if engine.get("decoder"):
        parts.append(f"decoder {engine['decoder']}")
    return [f"- generation: {', '.join(parts)}"]


def _generation_rows(name: str, section: dict[str, Any], report: dict[str, Any]) -> list[str]:
    if "mean_completion_tokens" not in section:
        return []
    rows = [f"| {name} mean completion length | {section['mean_completion_tokens']:.1f} tokens | |",
            f"| {name} truncated / empty | {section['truncated_rate']:.3f} / {section['empty_rate']:.3f} | |"]
    if section.get("passed_truncated"):
        rows.append(f"| {name} counted correct although truncated | {section['passed_truncated']} | |")
    speed = (report.get("speed") or {}).get(f"{name}_completion_tokens_per_s")
    return rows + ([f"| {name} generation speed | {speed:.0f} tokens/s | |"] if speed is not None else [])

"""`rlvr pairs build`: preference pairs from a model's verified samples; `rlvr pairs check FILE`:
validate a pairs file row by row and, with ``--task``, re-verify both sides of every pair."""

from __future__ import annotations

import argparse
import sys

from rlvr.commands.eval import add_device_options, add_prompt_options


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pairs", help="build preference pairs (for DPO) from verified samples of a model, or check a pairs file")
    s = p.add_subparsers(dest="pairs_command", metavar="ACTION", required=True)
    b = s.add_parser("build", help="sample groups from a model, verify them, and write (prompt, chosen = passed, rejected = failed) pairs",
                     description="Each prompt gets a group of --n completions; a group with passing and failing completions gives up to "
                                 "--pairs-per-group pairs (--pairing disjoint: each completion in at most one pair; random: any "
                                 "pass x fail combination, without repeats; completions with the same text count once). Writes JSONL "
                                 "in TRL's prompt/chosen/rejected layout (with problem id, reference and both verdicts) and the "
                                 "provenance in OUT with the suffix .meta.json.")
    b.add_argument("--model", required=True, help="model: a directory with config.json, a .gguf file, a built-in name (rlvr models list) or a Hugging Face id")
    b.add_argument("--task", required=True, help="task id, e.g. arithmetic-v1")
    b.add_argument("--task-config", default="{}", help="task config as YAML/JSON, e.g. '{direct_frac: 0.5}'")
    b.add_argument("--split", default="train", help="split to sample prompts from (held-out splits are refused)")
    b.add_argument("--prompts", type=int, default=256, help="prompts to sample, one group each (default 256)")
    b.add_argument("--n", type=int, default=8, help="completions per prompt (default 8)")
    b.add_argument("--pairs-per-group", type=int, default=1, help="most pairs from one group (default 1)")
    b.add_argument("--pairing", choices=["disjoint", "random"], default="disjoint", help="which pairs a group gives (default disjoint)")
    b.add_argument("--temperature", type=float, default=1.0)
    b.add_argument("--top-p", type=float, default=1.0)
    b.add_argument("--max-new-tokens", type=int, default=128)
    b.add_argument("--seed", type=int, default=0, help="seed of the prompt order, the sampling and the pair choice")
    b.add_argument("--chunk-prompts", type=int, default=32, help="prompts per generate call; verification overlaps the next call")
    b.add_argument("--verify-workers", type=int, default=1, help="verification workers (0 = inline)")
    b.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    add_device_options(b)
    b.add_argument("--engine", default="hf", help="rollout engine, any registered name: hf, vllm, vllm_server... (default hf)")
    b.add_argument("--rollout", nargs="*", default=[], metavar="KEY=VALUE", help="rollout settings of the engine, e.g. vllm.dtype=bfloat16")
    b.add_argument("--out", required=True, help="pairs file to write (JSONL)")
    b.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    add_prompt_options(b)
    b.set_defaults(func=build)
    c = s.add_parser("check", help="validate a pairs file row by row; with --task re-verify that every chosen passes and every rejected fails")
    c.add_argument("path", help="pairs file (JSONL)")
    c.add_argument("--task", default=None, help="task whose environment re-verifies the pairs (rows need problem_id and reference)")
    c.add_argument("--task-config", default="{}", help="task config as YAML/JSON")
    c.set_defaults(func=check)


def _task(task_id: str, config: str):
    import yaml

    import tasks
    from rlvr import UserError

    parsed = yaml.safe_load(config) or {}
    if not isinstance(parsed, dict):
        raise UserError(f"--task-config must be a mapping, got {config!r}")
    return tasks.make(task_id, **parsed)


def build(args: argparse.Namespace) -> int:
    import datetime
    import hashlib
    import json
    import random
    from pathlib import Path

    import rlvr
    from envs.pool import VerifierPool
    from rlvr import UserError
    from rlvr.config import load_config
    from rlvr.models.paths import resolve_model
    from rlvr.rollout.base import SamplingParams
    from rlvr.rollout.config import RolloutConfig
    from rlvr.commands.eval import prompt_config
    from rlvr.rollout.engines import make_engine
    from rlvr.rollout.prompts import resolve_style
    from rlvr.train.common import seed_everything, set_threads
    from rlvr.train.pairs import group_pairs, meta_path
    from rlvr.rollout.sampling import GroupSampler
    from tasks.base import problems_checksum, stable_hash

    for name, value, low in (("--prompts", args.prompts, 1), ("--n", args.n, 2), ("--pairs-per-group", args.pairs_per_group, 1),
                             ("--chunk-prompts", args.chunk_prompts, 1), ("--max-new-tokens", args.max_new_tokens, 1)):
        if value < low:
            raise UserError(f"{name} must be >= {low}, got {value}" + (" (a pair needs two completions of a prompt)" if name == "--n" else ""))
    if args.temperature <= 0:
        raise UserError(f"--temperature must be > 0, got {args.temperature}: greedy decoding gives every completion of a prompt the same text")
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise UserError(f"{out} exists; pass --overwrite to replace it")
    task = _task(args.task, args.task_config)
    from envs.episode import MultiTurnEnvironment

    if isinstance(task.env, MultiTurnEnvironment):  # a pairs file holds text: it cannot say which tokens were tool output
        raise UserError(f"{task.id} is a multi-turn environment ({task.env.id}); offline pairs are text and would train on its "
                        "observations. Train preferences on its episodes online instead: rlvr train CONFIG algo.preset=online_dpo "
                        "(or kto), which keep observation tokens out of the loss")
    task.check_split(args.split)
    if args.split in task.heldout_splits:
        raise UserError(f"split {args.split!r} is held out in {task.id}: build pairs from a training split (e.g. --split train)")
    rollout = load_config(RolloutConfig, None, [f"engine={args.engine}", *args.rollout])  # a bad key is named before the model loads
    from rlvr.models.device import resolve_device

    resolve_device(args.device, "--device")
    resolve_model(args.model)
    set_threads(args.threads)
    seed_everything(args.seed)
    engine = make_engine(rollout, model_path=args.model, seed=args.seed, device=args.device, dtype=args.dtype)
    style = resolve_style(prompt_config(args), engine.tokenizer, args.model)
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens)
    stream = task.stream(args.split, seed=args.seed)
    problems = []

    def take(n: int):
        problems.extend(next(stream) for _ in range(n))
        return problems[-n:]

    with VerifierPool(task.env, workers=args.verify_workers, kind="thread" if args.verify_workers else "inline") as pool:
        sampler = GroupSampler(generate=lambda ps: engine.generate([style.render(task.env, p) for p in ps], args.n, sampling),
                               submit=lambda ps, cs: pool.submit(ps, [c.text for c in cs]), group_size=args.n, chunk_prompts=args.chunk_prompts)
        report = sampler.collect(take, args.prompts)

    rows, outcome = [], {"all_passed": 0, "all_failed": 0, "mixed": 0}
    for g in report.generated:
        texts = [c.text for c in g.completions]
        valid = [v for v in g.verdicts if not v.status.is_failure]
        outcome["all_passed" if valid and all(v.passed for v in valid) else "mixed" if any(v.passed for v in valid) else "all_failed"] += 1
        rng = random.Random(stable_hash("pairs", args.seed, g.problem.id))
        for w, l in group_pairs(texts, g.verdicts, args.pairs_per_group, args.pairing, rng):
            # the prompt as shown: chat messages for a chat model, so that DPO renders the same ids
            rows.append({"prompt": style.render(task.env, g.problem), "chosen": texts[w], "rejected": texts[l], "problem_id": g.problem.id,
                         "reference": g.problem.reference, "chosen_verdict": _verdict(g.verdicts[w]), "rejected_verdict": _verdict(g.verdicts[l]),
                         "group": {"size": len(texts), "passed": sum(v.passed for v in g.verdicts), "valid": len(valid)}})
    out.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    out.write_text(body, encoding="utf-8")
    verdicts = [v for g in report.generated for v in g.verdicts]
    meta = {
        "pairs_file": str(out), "pairs_sha256": hashlib.sha256(body.encode()).hexdigest(), "pairs": len(rows),
        "groups_with_pairs": len({r["problem_id"] for r in rows}),
        "model": args.model, "task": task.describe(), "split": args.split, "prompts": len(problems),
        "data_checksum": problems_checksum(problems),
        "sampling": {"n": args.n, "temperature": args.temperature, "top_p": args.top_p, "max_new_tokens": args.max_new_tokens},
        "seed": args.seed, "pairs_per_group": args.pairs_per_group, "pairing": args.pairing,
        "verdicts": {"completions": len(verdicts), "passed": sum(v.passed for v in verdicts),
                     **{s: sum(v.status.value == s for v in verdicts) for s in ("ok", "no_answer", "error", "timeout")}},
        "groups": outcome, "generate_s": round(report.generate_s, 2),
        "rlvr_version": rlvr.__version__, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    meta_path(out).write_text(json.dumps(meta, indent=2, ensure_ascii=False))
    print(f"{len(rows)} pairs from {meta['groups_with_pairs']} of {len(problems)} prompts "
          f"({outcome['mixed']} groups had a pass and a fail, {outcome['all_passed']} all passed, {outcome['all_failed']} all failed; "
          f"{meta['verdicts']['error'] + meta['verdicts']['timeout']} failed verifications)")
    print(f"wrote {out} and {meta_path(out)}")
    if not rows:
        print("no pair: every group was all right or all wrong; sample more prompts, more completions (--n) or at a higher temperature",
              file=sys.stderr)
        return 1
    return 0


def _verdict(v) -> dict:
    return {"reward": v.reward, "passed": v.passed, "status": v.status.value, "extracted": v.extracted}


def check(args: argparse.Namespace) -> int:
    from envs.pool import VerifierPool
    from envs.types import Problem
    from rlvr.train.pairs import read_pairs

    pairs = read_pairs(args.path)
    print(pairs.summary(limit=20))
    if not args.task:
        return 0 if not pairs.bad else 1
    task = _task(args.task, args.task_config)
    checkable = [p for p in pairs.pairs if p.reference is not None]
    problems = [Problem(p.problem_id or p.where, p.prompt, p.reference) for p in checkable]
    with VerifierPool(task.env, workers=0, kind="inline") as pool:
        chosen = pool.verify(problems, [p.chosen for p in checkable])
        rejected = pool.verify(problems, [p.rejected for p in checkable])
    wrong = [f"{p.where}: chosen {'passes' if c.passed else 'fails'}, rejected {'passes' if r.passed else 'fails'}"
             for p, c, r in zip(checkable, chosen, rejected) if not c.passed or r.passed]
    print(f"re-verified with {task.env_id}: {sum(c.passed for c in chosen)}/{len(checkable)} chosen pass, "
          f"{sum(not r.passed for r in rejected)}/{len(checkable)} rejected fail"
          + (f"; {len(pairs.pairs) - len(checkable)} pairs carry no reference and were not re-verified" if len(checkable) < len(pairs.pairs) else ""))
    for line in wrong[:20]:
        print(f"  {line}")
    return 0 if not wrong and not pairs.bad else 1

"""`rlvr eval --model PATH --task ID`: held-out evaluation with a JSON and Markdown report."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a model on a task split (greedy accuracy, mean@k, pass@k, maj@k)")
    p.add_argument("--model", required=True, help="model directory or Hugging Face id")
    p.add_argument("--task", required=True, help="task id, e.g. arithmetic-v1")
    p.add_argument("--task-config", default="{}", help="task config as YAML/JSON, e.g. '{max_digits: 2}'")
    p.add_argument("--env-kwargs", default="{}",
                   help="settings of the task's environment as YAML/JSON, merged over the task's own, "
                        "e.g. '{extraction: lenient}' to grade math answers stated in prose")
    p.add_argument("--split", default="test", help="split to evaluate (default: test)")
    p.add_argument("--n", type=int, default=0, help="samples per problem for mean@k/pass@k/maj@k (default 0: greedy only)")
    p.add_argument("--no-greedy", action="store_true", help="skip the greedy pass")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N problems")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verify-workers", type=int, default=0, help="verification processes (0 = inline)")
    p.add_argument("--out", default=None, help="report directory (default: runs/eval/<task>-<split>)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    p.add_argument("--engine", default="hf", help="rollout engine: hf, vllm or vllm_server (default hf)")
    p.add_argument("--rollout", nargs="*", default=[], metavar="KEY=VALUE",
                   help="rollout settings of the engine, e.g. vllm.dtype=bfloat16 vllm.server_url=http://host:8000")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import yaml

    import tasks
    from rlvr import UserError
    from rlvr.config import load_config
    from rlvr.eval.runner import EvalSettings, evaluate, write_report
    from rlvr.rollout.config import RolloutConfig
    from rlvr.rollout.engines import make_engine
    from rlvr.train.common import set_threads

    set_threads(args.threads)
    task_config = yaml.safe_load(args.task_config) or {}
    if not isinstance(task_config, dict):
        raise UserError(f"--task-config must be a mapping, got {args.task_config!r}")
    env_kwargs = yaml.safe_load(args.env_kwargs) or {}
    if not isinstance(env_kwargs, dict):
        raise UserError(f"--env-kwargs must be a mapping, got {args.env_kwargs!r}")
    task = tasks.make(args.task, **task_config)
    if env_kwargs:
        task.env_kwargs = {**task.env_kwargs, **env_kwargs}
    engine = make_engine(load_config(RolloutConfig, None, [f"engine={args.engine}", *args.rollout]), model_path=args.model, seed=args.seed)
    settings = EvalSettings(split=args.split, greedy=not args.no_greedy, n=args.n, temperature=args.temperature, top_p=args.top_p,
                            max_new_tokens=args.max_new_tokens, seed=args.seed, limit=args.limit,
                            verify_workers=args.verify_workers, verify_kind="process" if args.verify_workers else "inline")
    report = evaluate(engine, task, settings, model_name=args.model)
    report["task"]["env_kwargs"] = dict(task.env_kwargs)  # e.g. the math extraction mode the scores depend on
    out = args.out or f"runs/eval/{task.id}-{args.split}"
    json_path, md_path = write_report(report, out, task.problems(args.split))
    print(md_path.read_text())
    print(f"reports: {json_path} {md_path}")
    return 0

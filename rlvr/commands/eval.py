"""`rlvr eval --model PATH --task ID`: held-out evaluation with a JSON and Markdown report.

Every option is checked before the model loads. Exit codes: 0 measured, 1 every verification
failed (error/timeout: the report measures nothing), 2 bad input.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

OPTION_OF = {"n": "--n", "limit": "--limit", "temperature": "--temperature", "top_p": "--top-p",
             "max_new_tokens": "--max-new-tokens", "verify_workers": "--verify-workers", "verify_kind": "--verify-kind",
             "verify_timeout_s": "--verify-timeout", "seed": "--seed"}
"""The command-line option behind each `EvalSettings` field it sets."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a model on a task split (greedy accuracy, mean@k, pass@k, maj@k)")
    p.add_argument("--model", required=True, help="model: a directory with config.json, a .gguf file, a built-in name (rlvr models list) or a Hugging Face id")
    p.add_argument("--task", required=True, help="task id, e.g. arithmetic-v1")
    p.add_argument("--task-config", default="{}", help="task config as YAML/JSON, e.g. '{max_digits: 2}'")
    p.add_argument("--split", default="test", help="split to evaluate (default: test)")
    p.add_argument("--env", default=None, help="environment id replacing the task's own verifier (as task.env in training)")
    p.add_argument("--env-kwargs", default="{}",
                   help="settings of the environment as YAML/JSON (as task.env_kwargs), merged over the task's own unless --env "
                        "is given, e.g. '{extraction: lenient}' to grade math answers stated in prose")
    p.add_argument("--n", type=int, default=0, help="samples per problem for mean@k/pass@k/maj@k (default 0: greedy only)")
    p.add_argument("--no-greedy", action="store_true", help="skip the greedy pass")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="longest completion (default: the task's budget, e.g. 128 for arithmetic-v1, 512 for gsm8k-v1, 1024 for "
                        "math500-v1; completions cut there are counted and flagged in the report)")
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N problems (read without loading the rest; needed for an unbounded split)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verify-workers", type=int, default=1, help="verification workers (default 1; 0 = inline, one at a time)")
    p.add_argument("--verify-kind", default="thread", choices=("inline", "thread", "process"),
                   help="thread (default) or process (kills a hung verifier; the environment must be importable)")
    p.add_argument("--verify-timeout", type=float, default=30.0, help="budget of one verification in seconds (default 30); over it: a timeout verdict")
    p.add_argument("--out", default=None, help="report directory (default: runs/eval/<task>-<split>/<model>)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    add_device_options(p)
    p.add_argument("--engine", default="hf", help="rollout engine, any registered name: hf, vllm, vllm_server... (default hf)")
    p.add_argument("--rollout", nargs="*", default=[], metavar="KEY=VALUE",
                   help="rollout settings of the engine, e.g. vllm.dtype=bfloat16 vllm.server_url=http://host:8000")
    add_prompt_options(p)
    p.set_defaults(func=run)


def add_device_options(p: argparse.ArgumentParser) -> None:
    """``--device`` and ``--dtype``: where a model loaded by path runs, and in what precision (`rlvr.models.device`)."""
    p.add_argument("--device", default="auto", help="auto (default: the GPU when torch sees one, else the CPU), cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"),
                   help="precision of the model: auto (default: the checkpoint's own on a GPU, float32 on a CPU)")


def add_prompt_options(p: argparse.ArgumentParser) -> None:
    """``--prompt-format``, ``--system``, ``--instruction``: `rlvr.rollout.prompts.PromptConfig` on the command line."""
    p.add_argument("--prompt-format", default="auto", choices=("auto", "chat", "raw"),
                   help="auto (default: the chat template when the model's tokenizer has one), chat (the question as a user "
                        "message through the chat template) or raw (the task's text as it is)")
    p.add_argument("--system", default=None, help="chat: a system message before each question")
    p.add_argument("--instruction", default=None,
                   help="chat: the answer-format instruction after each question (default: the environment's; '' for none)")


def prompt_config(args: argparse.Namespace):
    from rlvr.rollout.prompts import PromptConfig

    return PromptConfig(args.prompt_format, args.system, args.instruction)


def run(args: argparse.Namespace) -> int:
    from rlvr.api import evaluate

    options = {k: v for k, v in vars(args).items() if k != "func"}
    task_config = _mapping(args.task_config, "--task-config")
    env_kwargs = _mapping(args.env_kwargs, "--env-kwargs")
    options.update(task_config=task_config, env_kwargs=env_kwargs)  # recorded parsed, with any secret in it left out
    result = evaluate(args.model, args.task, split=args.split, n=args.n, greedy=not args.no_greedy, temperature=args.temperature,
                      top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=args.seed, limit=args.limit, task_config=task_config,
                      env=args.env, env_kwargs=env_kwargs, verify_workers=args.verify_workers, verify_kind=args.verify_kind,
                      verify_timeout_s=args.verify_timeout, out=args.out, engine=args.engine, rollout=args.rollout,
                      device=args.device, dtype=args.dtype, threads=args.threads, prompt=prompt_config(args), options=options)
    from rlvr.eval.runner import every_verification_failed

    print(result.markdown)
    print(f"reports: {result.json_path} {result.markdown_path}")
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if every_verification_failed(result.report):
        v = result.report["verify"]
        print(f"error: every verification failed ({v['errors']} errors, {v['timeouts']} timeouts; first: {v['first_failure']}): "
              f"the report measures nothing about {args.model}", file=sys.stderr)
        return 1
    return 0


def _mapping(text: str, option: str) -> dict:
    import yaml

    from rlvr import UserError

    try:
        value = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise UserError(f"{option} is not valid YAML/JSON: {str(e).splitlines()[0]}") from None
    if not isinstance(value, dict):
        raise UserError(f"{option} must be a mapping, got {text!r}")
    return value


def default_out_dir(model: str, task_id: str, split: str) -> Path:
    """``runs/eval/<task>-<split>/<model>``: a local model is named by its last two path parts
    and a short hash of its absolute path (two ``final/`` folders never share a report); a hub id
    by itself."""
    local = Path(model).expanduser()
    if local.exists():
        resolved = local.resolve()
        name = "-".join(resolved.parts[-2:]) + "-" + hashlib.sha256(str(resolved).encode()).hexdigest()[:8]
    else:
        name = model.replace("/", "--")
    # a hub task id carries a path or URL (harbor:/data/tasks): one folder name, never nested ones
    task_part = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{task_id}-{split}").strip("_") if ":" in task_id else f"{task_id}-{split}"
    return Path("runs") / "eval" / task_part / re.sub(r"[^A-Za-z0-9_.-]+", "_", name)

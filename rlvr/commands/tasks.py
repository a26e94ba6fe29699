"""`rlvr tasks list`, `rlvr tasks show ID`, `rlvr tasks freeze ID`, `rlvr tasks leakage ID`, `rlvr tasks export ID`."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasks", help="list tasks, freeze held-out splits, check leakage")
    s = p.add_subparsers(dest="tasks_command", metavar="ACTION", required=True)
    s.add_parser("list", help="list registered tasks").set_defaults(func=list_tasks)
    sh = s.add_parser("show", help="a task's splits and their sizes, where its data comes from, its environment and one example problem")
    sh.add_argument("id", help="task id, e.g. gsm8k-v1 or file:data/qa.jsonl")
    sh.add_argument("--task-config", default="{}", help="task config as YAML/JSON, e.g. '{question: q, answer: a}' for a file: id")
    sh.add_argument("--split", default=None, help="split to show the example from (default: the first training split)")
    sh.set_defaults(func=show)
    fr = s.add_parser("freeze", help="regenerate a procedural task's frozen split file and print its checksum")
    fr.add_argument("id")
    fr.add_argument("--split", default="test")
    fr.add_argument("--out", help="folder to write <id>/<split>.jsonl into (default: the task's frozen_dir: data/ beside the module that defines the task)")
    fr.set_defaults(func=freeze)
    lk = s.add_parser("leakage", help="prove the training split shares no question with held-out splits")
    lk.add_argument("id")
    lk.add_argument("--train-limit", type=int, default=20_000, help="items of an unbounded train stream to check")
    lk.set_defaults(func=leakage)
    ex = s.add_parser("export", help="write a task split as another framework's rows (verl parquet)")
    ex.add_argument("id")
    ex.add_argument("--split", default="train")
    ex.add_argument("--format", choices=["parquet"], default="parquet", help="parquet: verl's row layout (data_source, prompt, ability, reward_model, extra_info)")
    ex.add_argument("--out", required=True, help="file to write")
    ex.add_argument("--limit", type=int, help="first N problems (required for an unbounded split)")
    ex.add_argument("--task-config", default="{}", help="task config as YAML/JSON, e.g. '{direct_frac: 0.5}'")
    ex.set_defaults(func=export)


def list_tasks(args: argparse.Namespace) -> int:
    import tasks

    specs = tasks.TASKS.specs()
    env_ids = [getattr(s.load(), "env_id", "") for s in specs]
    width, env_width = max([len(s.id) for s in specs] + [2]), max([len(e) for e in env_ids] + [3])
    source_width = max([len(s.source) for s in specs] + [6])
    print(f"{'ID':<{width}}  {'SOURCE':<{source_width}}  {'ENV':<{env_width}}  DESCRIPTION")
    for s, env_id in zip(specs, env_ids):
        print(f"{s.id:<{width}}  {s.source:<{source_width}}  {env_id:<{env_width}}  {s.description}")
    for err in tasks.TASKS.plugin_errors:
        print(f"warning: {err}")
    return 0


def show(args: argparse.Namespace) -> int:
    import envs
    import tasks
    from rlvr.commands.eval import _mapping as parse_mapping
    from tasks import hubs
    from tasks.dataset import DataUnavailable

    config = parse_mapping(args.task_config, "--task-config")
    try:
        task = tasks.make(args.id, **config)
    except (TypeError, ValueError) as e:
        if isinstance(e, tasks.TaskError):
            raise
        raise tasks.TaskError(f"--task-config: {e}") from e
    spec = None if hubs.is_hub_id(args.id) else tasks.TASKS.spec(args.id)
    print(f"task         {task.id}" + (f"  (registered by {spec.source})" if spec else ""))
    if spec and spec.description:
        print(f"description  {spec.description}")
    env_spec = envs.ENVS.spec(task.env_id) if task.env_id in envs.ENVS else None
    print(f"environment  {task.env_id}" + (f"  {task.env_kwargs}" if task.env_kwargs else "")
          + (f"  ({env_spec.source}: {env_spec.description})" if env_spec else ""))
    if task.data_description():
        print(f"data         {task.data_description()}")
    print("splits")
    sizes: dict[str, int | None] = {}
    for split in task.splits:
        role = "held out" if split in task.heldout_splits else "training"
        try:
            sizes[split] = task.size(split)
            n = sizes[split]
            size = "unbounded (procedural)" if n is None else f"{n:,} problem{'' if n == 1 else 's'}"
        except DataUnavailable as e:
            size = f"not available here: {e}"
        print(f"  {split:<12} {role:<9} {size}")
    split = args.split or next((s for s in task.splits if s not in task.heldout_splits and s in sizes), None) or next(iter(sizes), None)
    if split is None:
        print("example      none: no split's data is available here")
        return 0
    problem = task.get(split, 0)
    prompt = task.env.format_prompt(problem)
    shown = prompt if isinstance(prompt, str) else "\n".join(f"[{m.get('role')}] {m.get('content')}" for m in prompt)
    print(f"example      {problem.id} (split {split})")
    print("  prompt     " + shown.strip().replace("\n", "\n             "))
    print(f"  reference  {problem.reference!r}"[:400])
    return 0


def freeze(args: argparse.Namespace) -> int:
    from pathlib import Path

    import tasks
    from tasks.procedural import ProceduralTask

    task = tasks.make(args.id)
    if not isinstance(task, ProceduralTask):
        raise tasks.TaskError(f"{task.id} is not procedural; only generated splits can be frozen")
    path, checksum = task.freeze(args.split, args.out)
    print(f"wrote {path}\nchecksum {checksum}\nrecord it in {type(task).__name__}.frozen[{args.split!r}]")
    if args.out is not None and path != task.frozen_path(args.split):
        print(f"the task reads {task.frozen_path(args.split)}: move the file there, or set {type(task).__name__}.frozen_dir = {str(Path(args.out).resolve())!r}")
    return 0


def leakage(args: argparse.Namespace) -> int:
    import tasks
    from tasks.leakage import check_leakage

    report = check_leakage(tasks.make(args.id), train_limit=args.train_limit)
    print(report.summary())
    return 0 if report.clean else 1


def export(args: argparse.Namespace) -> int:
    import yaml

    import tasks
    from rlvr.interop import verl

    try:
        config = yaml.safe_load(args.task_config) or {}
    except yaml.YAMLError as e:
        raise tasks.TaskError(f"--task-config is not YAML/JSON: {str(e).splitlines()[0]}") from e
    if not isinstance(config, dict):
        raise tasks.TaskError(f"--task-config must be a mapping, got {args.task_config!r}")
    try:
        task = tasks.make(args.id, **config)
    except tasks.TaskError:
        raise
    except (TypeError, ValueError) as e:  # a task's own check of its config
        raise tasks.TaskError(f"--task-config: {e}") from e
    rows = verl.task_rows(task, args.split, limit=args.limit)
    path = verl.write_parquet(rows, args.out)
    print(f"wrote {len(rows)} rows of {task.id}:{args.split} to {path}")
    print(f"verl: data.train_files={path.resolve()} custom_reward_function.path={verl.__file__} custom_reward_function.name=compute_score")
    return 0

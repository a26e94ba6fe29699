"""`rlvr tasks list`, `rlvr tasks freeze ID`, `rlvr tasks leakage ID`, `rlvr tasks export ID`."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasks", help="list tasks, freeze held-out splits, check leakage")
    s = p.add_subparsers(dest="tasks_command", metavar="ACTION", required=True)
    s.add_parser("list", help="list registered tasks").set_defaults(func=list_tasks)
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
    print(f"{'ID':<{width}}  {'ENV':<{env_width}}  DESCRIPTION")
    for s, env_id in zip(specs, env_ids):
        print(f"{s.id:<{width}}  {env_id:<{env_width}}  {s.description}")
    for err in tasks.TASKS.plugin_errors:
        print(f"warning: {err}")
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

"""`rlvr envs list` and `rlvr envs check ID`."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("envs", help="list and self-check verifiable environments")
    s = p.add_subparsers(dest="envs_command", metavar="ACTION", required=True)
    ls = s.add_parser("list", help="list registered environments (imports none of them)")
    ls.set_defaults(func=list_envs)
    ck = s.add_parser("check", help="self-test an environment: gold passes, wrong/empty fail, deterministic, no leakage")
    ck.add_argument("id", help="environment id, e.g. math-v1")
    ck.add_argument("--task", action="append", default=None, help="task(s) whose problems to use (default: every task bound to the environment)")
    ck.add_argument("-n", "--problems", type=int, default=20, help="problems per task to check (default 20)")
    ck.set_defaults(func=check_env)


def list_envs(args: argparse.Namespace) -> int:
    import envs
    import tasks

    specs = envs.ENVS.specs()
    bound: dict[str, list[str]] = {}
    for t in tasks.TASKS.specs():
        # reading a task's environment needs its class: only for lazy tasks that are cheap to load
        env_id = getattr(t.load(), "env_id", "")
        if env_id:
            bound.setdefault(str(envs.ENVS.spec(env_id).id) if env_id in envs.ENVS else env_id, []).append(t.id)
    width = max([len(s.id) for s in specs] + [2])
    print(f"{'ID':<{width}}  {'SOURCE':<10}  DESCRIPTION")
    for s in specs:
        tasks_note = f"  [tasks: {', '.join(bound[s.id])}]" if s.id in bound else ""
        print(f"{s.id:<{width}}  {s.source:<10}  {s.description}{tasks_note}")
    for err in envs.ENVS.plugin_errors:
        print(f"warning: {err}")
    return 0


def check_env(args: argparse.Namespace) -> int:
    import envs
    import tasks
    from envs.checks import check_environment
    from tasks.leakage import check_leakage

    env_id = envs.ENVS.spec(args.id).id
    task_ids = args.task or [t.id for t in tasks.TASKS.specs() if _env_of(t) == env_id]
    ok = True
    runs = [(tid, tasks.make(tid)) for tid in task_ids] or [(None, None)]
    for tid, task in runs:
        env = task.env if task is not None else envs.make(env_id)
        problems = []
        if task is not None:
            split = next((s for s in task.splits if s not in task.heldout_splits), task.splits[0])
            problems = task.problems(split, limit=args.problems)
        report = check_environment(env, problems)
        where = f"on {report.problems} problems of {tid}" if tid else f"on {report.problems} built-in examples"
        print(f"{env_id} {where}:")
        for r in report.results:
            mark = "skip" if r.skipped else ("PASS" if r.passed else "FAIL")
            print(f"  [{mark}] {r.name}: {r.detail}")
        ok &= report.passed
        if task is not None:
            train = next((s for s in task.splits if s not in task.heldout_splits), None)
            if train:
                leak = check_leakage(task, train)
                print(f"  [{'PASS' if leak.clean else 'FAIL'}] no train/test leakage: {leak.summary()}")
                ok &= leak.clean
    print("all checks passed" if ok else "some checks FAILED")
    return 0 if ok else 1


def _env_of(task_spec) -> str:
    import envs

    env_id = getattr(task_spec.load(), "env_id", "")
    return envs.ENVS.spec(env_id).id if env_id and env_id in envs.ENVS else env_id

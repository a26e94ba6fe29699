"""`rlvr envs list` and `rlvr envs check ID`."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("envs", help="list and self-check verifiable environments")
    s = p.add_subparsers(dest="envs_command", metavar="ACTION", required=True)
    ls = s.add_parser("list", help="list registered environments (imports none of them)")
    ls.set_defaults(func=list_envs)
    ck = s.add_parser("check", help="self-test an environment: gold passes, wrong/empty answers and an echo of the prompt fail, deterministic, no leakage")
    ck.add_argument("id", help="environment id, e.g. math-v1")
    ck.add_argument("--task", action="append", default=None, help="task(s) whose problems to use (default: every task bound to the environment)")
    ck.add_argument("-n", "--problems", type=int, default=20, help="problems per task to check (default 20)")
    ck.add_argument("--timeout", type=float, default=30.0,
                    help="budget of one verification in seconds (default 30); the first verification over it fails the check")
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
    from rlvr import UserError

    if args.problems <= 0:
        raise UserError(f"--problems must be > 0, got {args.problems}")
    if not args.timeout > 0:
        raise UserError(f"--timeout must be > 0 seconds, got {args.timeout}")
    env_id = envs.ENVS.spec(args.id).id
    task_ids = args.task or [t.id for t in tasks.TASKS.specs() if _env_of(t) == env_id]
    outcomes = []
    if not task_ids:
        outcomes.append(_check_one(env_id, None, args))
    for tid in task_ids:
        if "hung" in outcomes:
            print(f"{env_id} on {tid}:\n  [skip] not run: the verifier hung on an earlier task")
            continue
        outcomes.append(_check_one(env_id, tasks.make(tid), args))
    checked = [o for o in outcomes if o != "skipped"]
    if not checked:
        print("no checks ran: every task bound to the environment was skipped")
        return 1
    ok = all(o == "passed" for o in checked)
    skipped = len(outcomes) - len(checked)
    print(("all checks passed" if ok else "some checks FAILED") + (f" ({skipped} task(s) skipped)" if skipped else ""))
    return 0 if ok else 1


def _check_one(env_id: str, task, args: argparse.Namespace) -> str:
    """Self-check ``env_id`` on one task's problems (or its own examples); prints the results and
    returns "passed", "failed", "hung" or "skipped" (the task's data is not available here)."""
    import envs
    from envs.checks import check_environment
    from tasks import TaskError
    from tasks.dataset import DataUnavailable
    from tasks.leakage import check_leakage

    if task is None:
        env, problems, where = envs.make(env_id), [], "built-in examples"
    else:
        if _canonical(task.env_id) != env_id:  # `--task` names another environment's task: check this one on it
            task.env_id, task.env_kwargs = env_id, {}
        env = task.env
        split = next((s for s in task.splits if s not in task.heldout_splits), task.splits[0])
        try:
            problems = task.problems(split, limit=args.problems)
        except DataUnavailable as e:
            print(f"{env_id} on {task.id}:\n  [skip] data not available here: {e}")
            return "skipped"
        except TaskError as e:
            print(f"{env_id} on {task.id}:\n  [FAIL] could not load {split!r}: {e}")
            return "failed"
        where = f"{task.id}"
    report = check_environment(env, problems, timeout_s=args.timeout)
    print(f"{env_id} on {report.problems} {'problems of ' if task is not None else ''}{where}:")
    for r in report.results:
        mark = "skip" if r.skipped else ("PASS" if r.passed else "FAIL")
        print(f"  [{mark}] {r.name}: {r.detail}")
    ok = report.passed
    if task is not None and not report.hung:
        train = next((s for s in task.splits if s not in task.heldout_splits), None)
        if train:
            try:
                leak = check_leakage(task, train)
                print(f"  [{'PASS' if leak.clean else 'FAIL'}] no train/test leakage: {leak.summary()}")
                ok &= leak.clean
            except DataUnavailable as e:
                print(f"  [skip] no train/test leakage: held-out data not available here: {e}")
            except TaskError as e:
                print(f"  [FAIL] no train/test leakage: {e}")
                ok = False
    return "hung" if report.hung else ("passed" if ok else "failed")


def _canonical(env_id: str) -> str:
    import envs

    return str(envs.ENVS.spec(env_id).id) if env_id and env_id in envs.ENVS else env_id


def _env_of(task_spec) -> str:
    return _canonical(getattr(task_spec.load(), "env_id", ""))

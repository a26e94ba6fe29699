"""`rlvr envs list`, `rlvr envs check ID`, `rlvr envs serve ID` and `rlvr envs export ID --to HUB`."""

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
    ck.add_argument("--task-config", default="{}", help="config of the --task(s) as YAML/JSON (e.g. a hub task's data files)")
    ck.add_argument("-n", "--problems", type=int, default=20, help="problems per task to check (default 20)")
    ck.add_argument("--timeout", type=float, default=30.0,
                    help="budget of one verification in seconds (default 30); the first verification over it fails the check")
    ck.set_defaults(func=check_env)
    sv = s.add_parser("serve", help="serve an environment (and its task's problems) over HTTP for remote trainers and hub exports",
                      description="Every request but GET /health needs 'Authorization: Bearer TOKEN'. Listens on 127.0.0.1 "
                                  "unless --host names another address (then --allow-remote is required).")
    sv.add_argument("id", help="environment id, e.g. math-v1")
    sv.add_argument("--task", default=None, help="task whose problems are served by split and index (default: the environment's own task when it has one; required when it has several)")
    sv.add_argument("--task-config", default="{}", help="task config as YAML/JSON")
    sv.add_argument("--env-kwargs", default="{}", help="environment keyword arguments as YAML/JSON")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8400, help="port (default 8400; 0 picks a free one)")
    sv.add_argument("--allow-remote", action="store_true", help="allow a --host that is not a loopback address")
    sv.add_argument("--token", default=None, help="bearer token (default $RLVR_ENV_TOKEN, else a new random one, printed)")
    sv.add_argument("--max-request-bytes", type=int, default=4 << 20, help="largest request body (default 4 MiB)")
    sv.add_argument("--request-timeout", type=float, default=300.0, help="seconds one request may run (default 300)")
    sv.add_argument("--max-inflight", type=int, default=64,
                    help="requests handled at once (default 64)")
    sv.add_argument("--max-queued", type=int, default=1024,
                    help="requests waiting for a turn; past that 503 with Retry-After, which rlvr's client retries (default 1024)")
    sv.add_argument("--verify-timeout", type=float, default=30.0, help="seconds one verification may run (default 30)")
    sv.add_argument("--verify-workers", type=int, default=2, help="verifier processes (default 2)")
    sv.add_argument("--dialect", default=None, choices=_dialects(),
                    help="also answer as another hub's server: nemo-gym (a NeMo Gym resources server: /seed_session, /verify)")
    sv.set_defaults(func=serve_env)
    ex = s.add_parser("export", help="write an environment and its task as a package, server or task folders for another hub",
                      description="Hubs: " + ", ".join(_hub_names()) + ". See docs: 'Your environment on every hub'.")
    ex.add_argument("id", help="environment id, e.g. math-v1")
    ex.add_argument("--to", required=True, choices=_hub_names(), help="the hub's format")
    ex.add_argument("--out", required=True, help="folder to write (must not exist or be empty)")
    ex.add_argument("--task", default=None, help="task whose problems are exported (default: the environment's own task when it has one; required when it has several)")
    ex.add_argument("--task-config", default="{}", help="task config as YAML/JSON")
    ex.add_argument("--split", action="append", default=None, help="split(s) to export (default: every finite split, and --limit items of an unbounded one; sessions play the first training split, held-out ones are flagged)")
    ex.add_argument("--limit", type=int, default=None, help="problems per split (default: all of a finite split, 1000 of an unbounded one)")
    ex.add_argument("--name", default=None, help="the exported package's name (default from the environment and task)")
    ex.set_defaults(func=export_env)


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
    from rlvr.commands.eval import _mapping as parse_mapping

    env_id = envs.ENVS.spec(args.id).id
    task_config = parse_mapping(args.task_config, "--task-config")
    if task_config and not args.task:
        raise UserError("--task-config needs --task")
    task_ids = args.task or [t.id for t in tasks.TASKS.specs() if _env_of(t) == env_id]
    outcomes = []
    if not task_ids:
        outcomes.append(_check_one(env_id, None, args))
    for tid in task_ids:
        if "hung" in outcomes:
            print(f"{env_id} on {tid}:\n  [skip] not run: the verifier hung on an earlier task")
            continue
        outcomes.append(_check_one(env_id, tasks.make(tid, **task_config), args))
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
    if hasattr(env, "reward_semantics"):  # an imported hub environment: whose rewards these are
        print(f"  [info] rewards: {env.reward_semantics()}")
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


def _dialects() -> list[str]:
    from rlvr.serve.dialects import DIALECTS

    return sorted(DIALECTS)


def _hub_names() -> list[str]:
    from rlvr.hubs import HUBS

    return sorted(HUBS)


def _own_task(env_id: str, config: dict) -> str | None:
    """The task to use when no ``--task`` is given: the one task of the environment's own package bound
    to it (never one a plugin binds to it); None when no task is bound; a `UserError` naming the
    choices when there are several."""
    import envs
    import tasks
    from rlvr import UserError

    bound = [t for t in tasks.TASKS.specs() if _env_of(t) == env_id]
    own = [t.id for t in bound if t.source == envs.ENVS.spec(env_id).source]
    if len(own) == 1:
        return own[0]
    if not bound:
        if config:
            raise UserError(f"--task-config given but no --task, and no task is bound to {env_id}")
        return None
    choices = ", ".join(own or [t.id for t in bound])
    raise UserError(f"{env_id} has several tasks: pass --task (one of: {choices})" if own else
                    f"no task of {env_id}'s own is bound to it: pass --task (bound by plugins: {choices})")


def _first_task(env_id: str, task_id: str | None, task_config: str):
    """The task named, or the environment's own task (`_own_task`); None when none is bound."""
    import tasks
    from rlvr import UserError
    from rlvr.commands.eval import _mapping as parse_mapping

    config = parse_mapping(task_config, "--task-config")
    if task_id is None:
        task_id = _own_task(env_id, config)
        if task_id is None:
            return None
    task = tasks.make(task_id, **config)
    if _canonical(task.env_id) != env_id:
        task.env_id, task.env_kwargs = env_id, {}
    return task


def serve_env(args: argparse.Namespace) -> int:
    import os

    import envs
    from rlvr import UserError
    from rlvr.commands.eval import _mapping as parse_mapping
    from rlvr.serve import Guards, VerifySettings, make_env_server, new_token

    env_id = envs.ENVS.spec(args.id).id
    task = _first_task(env_id, args.task, args.task_config)
    env_kwargs = parse_mapping(args.env_kwargs, "--env-kwargs")
    if task is not None:
        task.set_env(None, env_kwargs, names=("ID", "--env-kwargs"))  # merged over the task's own, as training and eval do
        env = task.env
    else:
        env = envs.make(env_id, **env_kwargs)
    given = args.token or os.environ.get("RLVR_ENV_TOKEN")
    token = given or new_token()
    try:
        guards = Guards(token, max_request_bytes=args.max_request_bytes, request_timeout_s=args.request_timeout,
                        max_inflight=args.max_inflight, max_queued=args.max_queued)
        server, service = make_env_server(env, guards, task=task, host=args.host, port=args.port, allow_remote=args.allow_remote,
                                          dialect=args.dialect, env_kwargs=task.env_kwargs if task is not None else env_kwargs,
                                          verify=VerifySettings(workers=args.verify_workers, timeout_s=args.verify_timeout))
    except (ValueError, OSError) as e:
        raise UserError(str(e)) from None
    what = f"{env_id}" + (f" with {task.id}'s problems" if task is not None else "") + (f", also as a {args.dialect} server" if args.dialect else "")
    print(f"serving {what} on {server.url}" + ("" if given else f"\ntoken (send 'Authorization: Bearer TOKEN'): {token}"), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        service.close()
    return 0


def export_env(args: argparse.Namespace) -> int:
    import envs
    from rlvr.hubs import export

    env_id = envs.ENVS.spec(args.id).id
    task = _first_task(env_id, args.task, args.task_config)
    result = export(args.to, env_id, task, args.out, splits=args.split, limit=args.limit, name=args.name)
    print(result.summary())
    return 0

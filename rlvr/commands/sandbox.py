"""`rlvr sandbox info|run|serve`: which sandbox backends work here, run a file, serve run_code."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path


def _user_errors(func):
    """Sandbox configuration errors are user errors: the CLI prints them without a traceback."""
    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:
        import rlvr
        import sandboxes

        try:
            return func(args)
        except (sandboxes.SandboxError, OSError) as e:
            raise rlvr.UserError(str(e)) from e
    return wrapper


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sandbox", help="sandboxed code execution: backends available here, run a program, serve run_code")
    s = p.add_subparsers(dest="sandbox_command", metavar="ACTION", required=True)
    info = s.add_parser("info", help="list sandbox backends, whether each can run here, and why not")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=show_info)
    run = s.add_parser("run", help="run a Python file in a sandbox and print what happened",
                       description="Exit code: the program's own when it ran to its end; 124 when it hit the time limit; "
                                   "1 for the memory or output limit, a kill signal, or a failure of the sandbox.")
    run.add_argument("file", help="Python file to run ('-' for stdin)")
    run.add_argument("--backend", default="auto", help="backend name (default: best available)")
    run.add_argument("--stdin", default=None, help="file whose content is fed to the program's stdin")
    run.add_argument("--wall", type=float, default=10.0, help="wall-clock limit in seconds (default 10)")
    run.add_argument("--memory", type=int, default=512, help="memory limit in MiB (default 512)")
    run.add_argument("--json", action="store_true", help="print the Execution as JSON")
    run.set_defaults(func=run_file)
    serve = s.add_parser("serve", help="serve SandboxFusion's run_code API for remote trainers (backend=remote)")
    serve.add_argument("--backend", default="auto", help="backend that runs the jobs (default: best available)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--token", default=None, help="require 'Authorization: Bearer TOKEN' (default $RLVR_SANDBOX_TOKEN)")
    serve.set_defaults(func=serve_run_code)


@_user_errors
def show_info(args: argparse.Namespace) -> int:
    import sandboxes

    rows = []
    for spec, avail in sandboxes.availability_report():
        rows.append({"backend": spec.name, "available": avail.ok, "reason": avail.reason,
                     "auto": spec.priority is not None, "description": spec.description})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["backend"]) for r in rows)
    for r in rows:
        mark = "yes" if r["available"] else "no "
        auto = "" if r["auto"] else " (never chosen automatically)"
        print(f"{r['backend']:<{width}}  {mark}  {r['description']}{auto}")
        if not r["available"]:
            print(f"{'':<{width}}       why not: {r['reason']}")
    try:
        chosen = sandboxes.make_backend("auto")
    except sandboxes.SandboxError as e:
        print(f"\ndefault backend: none available\n{e}")
        return 1
    try:
        print(f"\ndefault backend: {chosen.name}  " + ", ".join(f"{k}={v}" for k, v in chosen.info().items() if k != "name"))
    finally:
        chosen.close()
    return 0


@_user_errors
def run_file(args: argparse.Namespace) -> int:
    import sandboxes

    code = _read_program(args.file)
    stdin = Path(args.stdin).read_bytes() if args.stdin else None
    backend = sandboxes.make_backend(args.backend)
    try:
        ex = sandboxes.run(code, stdin=stdin, limits=sandboxes.Limits(wall_s=args.wall, cpu_s=args.wall, memory_mb=args.memory), backend=backend)
    finally:
        backend.close()
    if args.json:
        print(json.dumps(ex.to_dict(), indent=2))
    else:
        sys.stdout.write(ex.stdout.decode("utf-8", "replace"))
        sys.stderr.write(ex.stderr.decode("utf-8", "replace"))
        peak = f"{ex.peak_memory_bytes / 2**20:.1f} MiB" if ex.peak_memory_bytes else "n/a"
        print(f"[{ex.backend}] status={ex.status.value} exit={ex.exit_code} wall={ex.wall_s:.3f}s cpu={ex.cpu_s:.3f}s peak={peak}"
              + (f" {ex.info}" if ex.info else ""), file=sys.stderr)
    return exit_code(ex)


TIMEOUT_EXIT = 124
"""Exit code of `rlvr sandbox run` when the program hit its time limit (as coreutils ``timeout``)."""


def exit_code(ex) -> int:
    """The program's own exit code when it ran to its end, else non-zero: `TIMEOUT_EXIT` for a
    time limit, 1 for anything else that stopped it (memory, output, a signal, the sandbox)."""
    import sandboxes

    if ex.status is sandboxes.ExecStatus.OK:
        return ex.exit_code if 0 <= (ex.exit_code or 0) <= 255 else 1
    return TIMEOUT_EXIT if ex.status is sandboxes.ExecStatus.TIMEOUT else 1


def _read_program(path: str) -> str:
    """The program's text ('-': standard input); a file that is not UTF-8 text is a user error."""
    import rlvr

    data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        where = "standard input" if path == "-" else path
        raise rlvr.UserError(f"{where} is not a UTF-8 text file (byte {e.start}: {data[e.start:e.start + 1]!r}); "
                             "pass a Python source file") from None


@_user_errors
def serve_run_code(args: argparse.Namespace) -> int:
    import os

    import rlvr
    import sandboxes
    from sandboxes.server import make_server

    backend = sandboxes.make_backend(args.backend)
    token = args.token or os.environ.get("RLVR_SANDBOX_TOKEN")
    try:
        server = make_server(backend, args.host, args.port, token)
    except (ValueError, OSError) as e:
        backend.close()
        raise rlvr.UserError(str(e)) from None
    print(f"serving run_code on {server.url} with the {backend.name} backend"
          + (" (token required)" if token else ""), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        backend.close()
    return 0

"""The ``rlvr`` command. Each subcommand is a module in `rlvr.commands` that defines
``add_parser(subparsers)`` and sets ``func`` (taking the parsed args, returning an exit code);
modules import heavy libraries inside ``func`` so ``rlvr --help`` stays fast.

rlvr's packages ``envs`` and ``tasks`` are imported only after `rlvr.own_packages` has checked that
no module of the user's hides them (a ``tasks.py`` in the working directory)."""

from __future__ import annotations

import argparse
import atexit
import faulthandler
import gc
import importlib
import pkgutil
import sys

import rlvr
import rlvr.commands
from rlvr.own_packages import shadowed
from rlvr.progress import quiet_library_bars
from rlvr.warning_lines import one_line_warnings


def user_errors() -> tuple[type[Exception], ...]:
    """The exceptions the CLI prints as one line without a traceback."""
    import envs
    import tasks

    return (rlvr.UserError, envs.RegistryError, tasks.TaskError)


def _collect_then_freeze() -> None:
    """At the interpreter's exit, after the handlers the command registered (atexit runs the last
    registered first): finalize what is garbage now, then freeze what is still alive. The teardown that
    follows frees the modules' objects by reference counts as always, but its own garbage collections
    no longer walk the hundreds of thousands of objects torch and transformers made, which took
    about 1 s of CPU after every command that trained or evaluated a model (measured on 2 cores)."""
    with one_line_warnings():  # (the collection may warn: an unclosed file found now)
        gc.collect()
    gc.freeze()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlvr", description="Verifiable-reward environments, RL trainers and evaluation.")
    parser.add_argument("--version", action="version", version=f"rlvr {rlvr.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(rlvr.commands.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"rlvr.commands.{info.name}").add_parser(sub)
    return parser


def parse_command(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``argv`` parsed as `main` parses it (a bad argument exits through ``parser.error``)."""
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "intermixed", False):  # key=value overrides may also follow options (`train CONFIG --show-config a.b=1`)
        args.overrides = [*args.overrides, *(x for x in extra if "=" in x and not x.startswith("-"))]
        extra = [x for x in extra if not ("=" in x and not x.startswith("-"))]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    atexit.unregister(_collect_then_freeze)  # (once per process, however often main runs in it)
    atexit.register(_collect_then_freeze)
    if not faulthandler.is_enabled():
        try:
            faulthandler.enable()  # a crash in native code (SIGSEGV...) prints the Python stacks of every thread
        except (AttributeError, ValueError, OSError):  # stderr replaced by an object without a file descriptor
            pass
    quiet_library_bars()  # before transformers is imported: it reads the setting once
    hidden = shadowed()
    if hidden:
        for line in hidden:
            print(f"error: {line}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parse_command(parser, argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    errors = user_errors()
    with one_line_warnings():
        try:
            return int(args.func(args) or 0)
        except KeyboardInterrupt as e:  # (a run's second stop signal says which: RunAborted)
            print(f"aborted: {e}" if str(e) else "interrupted", file=sys.stderr)
            return 130
        except errors as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except Warning as e:  # a warning made an error (python -W error, PYTHONWARNINGS=error): refused as the error it now is
            print(f"error: {' '.join(str(e).split())} (a {type(e).__name__} made an error by -W or PYTHONWARNINGS)", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())

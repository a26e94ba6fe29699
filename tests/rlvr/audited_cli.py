"""``python -m tests.rlvr.audited_cli ARGS...``: ``rlvr ARGS...`` that records every file this
process opens for writing under ``$RLVR_WRITE_AUDIT_ROOT``, in ``$RLVR_WRITE_AUDIT_DIR/rank-$RANK.txt``
(one path a line, written at exit). Python's audit hook sees every ``open`` made from Python
(torch.distributed.checkpoint's shards and metadata, JSON and YAML files); files written from
native code (safetensors' and torch.save's writers) are not seen."""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND


def _install() -> None:
    root = os.path.realpath(os.environ["RLVR_WRITE_AUDIT_ROOT"])
    out = Path(os.environ["RLVR_WRITE_AUDIT_DIR"]) / f"rank-{os.environ.get('RANK', '0')}.txt"
    written: set[str] = set()

    def hook(event: str, args: tuple) -> None:
        if event != "open" or isinstance(args[0], int):
            return
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
        if writes:
            full = os.path.realpath(os.fsdecode(path))
            if full.startswith(root + os.sep):
                written.add(full)

    sys.addaudithook(hook)
    atexit.register(lambda: out.write_text("".join(f"{p}\n" for p in sorted(written))))


if __name__ == "__main__":
    _install()
    from rlvr.cli import main

    sys.argv = ["rlvr", *sys.argv[1:]]
    sys.exit(main())

"""`uv pip install` into this Python's environment, from where pip would look.

uv reads none of pip's configuration (pip.conf, PIP_* variables); the setup scripts install with uv
(scripts/venv_install.sh) and must still honour a mirror, a local wheel folder, a constraints file or a
certificate that a machine gives pip. Reads ``pip config list`` of the Python that runs this (the
environment's; a variable wins over the ``install`` section, which wins over ``global``), turns it into uv's
flags (``--no-config``: uv's own configuration files are not read, pip's decides) and runs uv with them; pip's
``cert`` becomes ``SSL_CERT_FILE`` unless that is set. Bytecode is compiled as pip does only where
PYTHONDONTWRITEBYTECODE is set (no process could write it later); elsewhere each module is compiled on its first
import. Exits with uv's status (2 when pip's configuration cannot be read), saying why on stderr.

    .venv/bin/python scripts/uv_install.py            # print the flags pip's configuration gives
    .venv/bin/python scripts/uv_install.py UV ARGS... # UV pip install --python .venv/bin/python FLAGS ARGS
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

# pip's key -> uv's flag (pip's list-valued keys hold several values separated by white space)
FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "trusted-host": "--allow-insecure-host",
}
SECTIONS = (":env:", "install", "global")  # the first that sets a key wins


def parse_config(listing: str) -> dict[str, str]:
    """``pip config list`` lines (``section.key='value'``) -> {key: value}, by the sections' precedence."""
    found: dict[tuple[str, str], str] = {}
    for line in listing.splitlines():
        name, sep, value = line.partition("=")
        if not sep:
            continue
        section, _, key = name.rpartition(".")
        try:
            found[(section, key)] = str(ast.literal_eval(value))
        except (ValueError, SyntaxError):
            found[(section, key)] = value.strip("'\"")
    out: dict[str, str] = {}
    for section in reversed(SECTIONS):
        out.update({key: value for (sec, key), value in found.items() if sec == section})
    return out


def uv_flags(config: dict[str, str]) -> list[str]:
    """The flags that make ``uv pip install`` look where pip with ``config`` looks."""
    flags: list[str] = []
    if config.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        flags.append("--no-index")
    for key, flag in FLAGS.items():
        for value in config.get(key, "").split():
            flags += [flag, value]
    if "extra-index-url" in config:  # pip takes the best version from every index; uv, by default, the first index's
        flags += ["--index-strategy", "unsafe-best-match"]
    return flags


def uv_environment(config: dict[str, str], environ: dict[str, str]) -> dict[str, str]:
    """``environ`` for uv: pip's certificate bundle as ``SSL_CERT_FILE`` (uv's own roots do not know a private CA)."""
    cert = config.get("cert", "")
    return environ | {"SSL_CERT_FILE": cert} if cert and not environ.get("SSL_CERT_FILE") else dict(environ)


def main(argv: list[str]) -> int:
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        print(f"error: pip's configuration could not be read for uv (`pip config list`: {reason})", file=sys.stderr)
        return 2
    config = parse_config(proc.stdout)
    flags = uv_flags(config)
    if not argv:
        print("\n".join(flags))
        return 0
    uv, *args = argv
    compile_flag = ["--compile-bytecode"] if os.environ.get("PYTHONDONTWRITEBYTECODE") else []
    cmd = [uv, "pip", "install", "--no-config", "--python", sys.executable, *compile_flag, *flags, *args]
    try:
        return subprocess.run(cmd, env=uv_environment(config, dict(os.environ)), check=False).returncode
    except OSError as e:
        print(f"error: {uv} does not run: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""pip's configuration as `uv pip install` flags, one per line, so that uv installs from where pip would.

uv reads none of pip's configuration (pip.conf, PIP_* variables); the setup scripts install with uv
(scripts/venv_install.sh) and must still honour a mirror, a local wheel folder or a constraints file
that a machine gives pip. Reads ``pip config list`` of the Python that runs this (the environment's):
an environment variable wins over the ``install`` section, which wins over ``global``.

    python scripts/uv_flags.py            # e.g. --find-links\\n/opt/wheels\\n--extra-index-url\\n...
"""

from __future__ import annotations

import ast
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


def main() -> int:
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"error: `pip config list` failed: {proc.stderr.strip()}", file=sys.stderr)
        return 1
    for flag in uv_flags(parse_config(proc.stdout)):
        print(flag)
    return 0


if __name__ == "__main__":
    sys.exit(main())

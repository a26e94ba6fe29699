"""Measurement records: every figure a page states comes from one (``records/NAME.json``).

A record is what one measurement produced, written by the script that measured it
(`write_record`): the command, the commit and date, the machine, and the figures by name::

    {"name": "quickstart", "command": "scripts/quickstart.sh", "commit": "abc1234", "dirty": false,
     "date": "2026-11-28", "machine": {"cpus": 2, ...}, "figures": {"accuracy_before": 0.392, ...}}

A page ties a figure to its record with an invisible marker right after it,
``**0.392**<!-- record: quickstart.accuracy_before -->``; `check_page` finds every marker and compares
the number just before it with the record's figure at the precision the page writes (0.392 matches
0.3921; 0.39 does not match 0.3961), so a page edited to disagree with its record, or a record
re-measured without its pages, fails the docs test (`tests/test_records.py`). `docs/benchmarks.md`
lists every record.

A record's command must still run in a fresh clone (`command_problems`, run by the same test): its
script's own argument parser accepts its arguments (the script runs up to its parsing and stops; nothing
is measured), and an ``rlvr ...`` command passes every check rlvr makes before a model loads (arguments,
config name, keys, engine, task and environment settings). What existed only on the measurer's machine
(the checkout measured against, a model folder) is written as a placeholder in capitals, ``OLD`` or
``BASE``, which the note explains (``"note": "OLD: a checkout of f698bdd; ..."``); an absolute path in a
command is refused. While the arguments are parsed a placeholder stands for this checkout's folder.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import platform
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "records"
MARKER = re.compile(r"<!--\s*record:\s*(?P<name>[\w.-]+)\.(?P<key>[\w-]+)\s*-->")
ANY_MARKER = re.compile(r"<!--\s*records?\b[^>]*-->", re.I)
"""Anything that looks meant as a marker (``<!-- record test-suite.cpu_s -->``, ``<!-- Record: ... -->``): one that
`MARKER` does not read is refused, not ignored, lest its figure go unchecked."""
NUMBER = re.compile(r"(?P<number>[-+]?\d[\d,]*(?:\.\d+)?)\s*(?P<unit>%|×|x|s|ms|min)?\**\s*$")


@dataclass(frozen=True)
class Record:
    """One measurement (see the module docstring)."""

    name: str
    command: str
    commit: str
    date: str
    machine: dict[str, Any]
    figures: dict[str, float]
    dirty: bool = False
    note: str = ""

    @classmethod
    def load(cls, path: Path) -> Record:
        """The record in ``path``; a `ValueError` naming the file and the field for anything malformed."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a measurement record ({e})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: not a measurement record (a JSON object expected, got {type(data).__name__})")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(fields))
        missing = [name for name, f in fields.items() if f.default is dataclasses.MISSING and name not in data]
        if unknown or missing:
            raise ValueError(f"{path}: " + "; ".join(([f"unknown field(s) {', '.join(unknown)}"] if unknown else [])
                                                    + ([f"missing field(s) {', '.join(missing)}"] if missing else [])))
        for name, (ok, expected) in _FIELD_CHECKS.items():
            if name in data and not ok(data[name]):
                raise ValueError(f"{path}: field {name!r} must be {expected}, got {data[name]!r}")
        bad = {k: v for k, v in data["figures"].items() if not _is_number(v)}
        if bad:
            key, value = next(iter(bad.items()))
            raise ValueError(f"{path}: field 'figures': {key!r} must be a finite number, got {value!r}")
        record = cls(**data)
        if record.name != Path(path).stem:
            raise ValueError(f"{path}: its name is {record.name!r}, not its file's {Path(path).stem!r}")
        return record


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_date(value: Any) -> bool:
    try:
        return isinstance(value, str) and dt.date.fromisoformat(value).isoformat() == value
    except ValueError:
        return False


_FIELD_CHECKS: dict[str, tuple[Any, str]] = {
    "name": (lambda v: isinstance(v, str) and re.fullmatch(r"[\w-]+", v) is not None, "a name of letters, digits, '_' and '-'"),
    "command": (lambda v: isinstance(v, str) and v.strip() != "", "the measuring command (a non-empty string)"),
    "commit": (lambda v: isinstance(v, str) and (v == "unknown" or re.fullmatch(r"[0-9a-f]{7,40}", v) is not None),
               "a git commit (7 to 40 hex digits) or 'unknown'"),
    "date": (_is_date, "a date as YYYY-MM-DD"),
    "machine": (lambda v: isinstance(v, dict), "an object (cpus, memory_gb, cpu, python, gpu)"),
    "figures": (lambda v: isinstance(v, dict), "an object of named numbers"),
    "dirty": (lambda v: isinstance(v, bool), "true or false"),
    "note": (lambda v: isinstance(v, str), "a string"),
}


# torch's CPU kernel sets on x86, lowest first, and the CPU flags each needs (as torch's dispatcher checks them)
_KERNEL_SETS = (("DEFAULT", ()), ("AVX2", ("avx2", "fma")), ("AVX512", ("avx512f", "avx512bw", "avx512vl", "avx512dq", "fma")))


# ATEN_CPU_CAPABILITY's values, as torch reads them (exactly; torch ignores any other spelling, with a warning)
_ATEN_CAPABILITY = {"default": "DEFAULT", "avx2": "AVX2", "avx512": "AVX512"}


def cpu_kernels(cpuinfo: str | None = None, env: dict[str, str] | None = None) -> str:
    """The CPU's vendor and the kernel set torch runs on it, e.g. ``"AuthenticAMD AVX2"`` (``""`` off Linux).

    Float results depend on it: torch's vectorised kernels (and the BLAS under them) add in a different
    order on AVX2 than on AVX-512, so a model trained on one kind of CPU differs in its last bits from the
    same run on another, and a seeded run's figures with it. ``ATEN_CPU_CAPABILITY`` (``default``, ``avx2``,
    ``avx512``, exactly) decides the set as it does for torch, which takes it as given. Read from
    ``/proc/cpuinfo`` (``cpuinfo``: its text), so no torch import is needed."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return ""
    first = cpuinfo.replace("\r\n", "\n").strip().split("\n\n", 1)[0]  # the first processor's block (all cores alike)
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in first.splitlines() if ":" in line)}
    flags = set(fields.get("flags", "").split())
    if not flags:
        return ""
    requested = _ATEN_CAPABILITY.get((os.environ if env is None else env).get("ATEN_CPU_CAPABILITY", ""))
    kernels = requested or [name for name, needs in _KERNEL_SETS if flags.issuperset(needs)][-1]
    return f"{fields.get('vendor_id') or 'unknown'} {kernels}"


def machine() -> dict[str, Any]:
    """What the figures depend on: cores the process may use, memory, CPU model and its kernel set
    (`cpu_kernels`), Python."""
    cpu, cpuinfo = "", None
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "")
    except OSError:
        pass
    try:
        memory_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        memory_gb = None
    return {"cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "memory_gb": memory_gb, "cpu": cpu, "kernels": cpu_kernels(cpuinfo) if cpuinfo is not None else "", "python": platform.python_version(), "gpu": None}


def machine_cpu_s() -> float | None:
    """CPU-seconds every core of this machine has been busy since boot (``/proc/stat``; None where there is none).
    Around a run on a quiet machine, the difference is the run's work, including processes it never waits for
    (servers, the Docker engine, processes forked from a fork server), which its ``RUSAGE_CHILDREN`` leaves out."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal ...: busy is user, nice, system, irq and softirq (steal is time
    # the hypervisor gave to others; guest time is inside user already)
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def commit() -> tuple[str, bool]:
    """The checkout's commit and whether it has uncommitted changes ("unknown" outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                                    text=True, timeout=10).stdout.strip())
        return head or "unknown", dirty
    except (OSError, subprocess.SubprocessError):
        return "unknown", False


def kind_name_problem(base: str, name: str) -> str | None:
    """Why ``name`` is not a record script's own name ``base`` nor ``base-KIND`` (the same measurement on
    another kind of CPU, beside ``base``'s: ``ci-avx2``), in a line for ``--name``; None when it is."""
    if re.fullmatch(rf"{re.escape(base)}(-[A-Za-z0-9_-]+)?", name):
        return None
    return f"--name must be {base} or {base}-KIND (e.g. {base}-avx2), got {name!r}"


def script_command(script: str, base: str, name: str) -> str:
    """The command a record names: ``python3 scripts/SCRIPT.py``, with ``--name NAME`` when it is not ``base``."""
    return f"python3 scripts/{script}.py" + ("" if name == base else f" --name {name}")


def write_record(name: str, command: str, figures: dict[str, float], note: str = "", folder: Path = RECORDS,
                 at: tuple[str, bool] | None = None, on: dict[str, Any] | None = None) -> Path:
    """Write ``records/NAME.json`` for a measurement just made (replacing the previous one). ``at`` is
    the checkout's `commit` when the measurement started (default: now); a page edited while a long
    measurement runs does not make it look measured on uncommitted code. ``on`` adds to (or corrects)
    `machine`'s view, e.g. the GPU the figures were measured on."""
    if not re.fullmatch(r"[\w-]+", name):
        raise ValueError(f"record name {name!r}: letters, digits, '_' and '-' only")
    bad = {k: v for k, v in figures.items() if not _is_number(v) or not re.fullmatch(r"[\w-]+", k)}
    if bad:
        raise ValueError(f"record {name}: figures must be finite numbers named by [A-Za-z0-9_-], got {bad}")
    head, dirty = at or commit()
    record = {"name": name, "command": command, "commit": head, "dirty": dirty, "date": dt.date.today().isoformat(),
              "machine": {**machine(), **(on or {})}, "figures": {k: float(v) for k, v in figures.items()}, "note": note}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def load_all(folder: Path = RECORDS) -> dict[str, Record]:
    return {p.stem: Record.load(p) for p in sorted(folder.glob("*.json"))}


def agrees(written: str, value: float) -> bool:
    """Whether ``written`` (as a page writes it: ``0.392``, ``1,948``, ``37.4``) is ``value`` at the
    page's precision (half a unit of its last digit)."""
    text = written.replace(",", "")
    decimals = len(text.split(".", 1)[1]) if "." in text else 0
    return abs(float(text) - value) <= 0.5 * 10 ** -decimals + 1e-12


def check_page(text: str, records: dict[str, Record], where: str) -> list[str]:
    """A line for each marker on a page that names no record or figure, or whose number disagrees."""
    problems = []
    for m in ANY_MARKER.finditer(text):
        if not MARKER.fullmatch(m.group(0)):
            problems.append(f"{where}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r} is not a record marker: "
                            "write <!-- record: NAME.FIGURE -->")
    for m in MARKER.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        name, key = m.group("name"), m.group("key")
        record = records.get(name)
        if record is None:
            problems.append(f"{where}:{line}: no record {name!r} (records/{name}.json)")
            continue
        if key not in record.figures:
            problems.append(f"{where}:{line}: record {name} has no figure {key!r} (it has {', '.join(sorted(record.figures))})")
            continue
        before = text[text.rfind("\n", 0, m.start()) + 1:m.start()]
        number = NUMBER.search(before)
        if number is None:
            problems.append(f"{where}:{line}: no number just before the marker of {name}.{key}")
        elif not agrees(number.group("number"), record.figures[key]):
            problems.append(f"{where}:{line}: the page says {number.group('number')} but records/{name}.json has "
                            f"{key} = {record.figures[key]:g} (measured {record.date} at {record.commit})")
    return problems


_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_FIGURE = r"\d+\.\d{2,}"  # two decimals or more: accuracies and seconds as measured, not counts or settings
_MARKED = rf"(?:\**{_FIGURE}\**(?:<!--[^>]*-->)?\**)"
TRANSITION = re.compile(rf"(?<![\w.])(?P<a>{_MARKED})\s*(?:%|s|ms|min)?\s*(?:→|->)\s*(?P<b>{_MARKED})"
                        rf"|\bfrom\s+(?P<c>{_MARKED})\s+to\s+(?P<d>{_MARKED})")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def unsourced_changes(text: str, where: str) -> list[str]:
    """A line for each measured change on a page (``0.342 → 0.686``, ``from 0.144 to 0.460``, outside
    code blocks) that neither carries a record marker nor stands in a paragraph, or a table under a
    paragraph, that says it is history and when (the word "history" and a date). Such a figure is
    either tied to the record that holds it or read plainly as an older measurement."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    blocks, start = [], 0
    for m in re.finditer(r"\n\s*\n", text + "\n\n"):
        blocks.append((start, m.start()))
        start = m.end()
    problems = []
    previous = ""
    for begin, end in blocks:
        block = text[begin:end]
        is_table = block.lstrip().startswith("|")
        context = block + ("\n" + previous if is_table else "")
        dated_history = "history" in context.lower() and DATE.search(context)
        for m in TRANSITION.finditer(block):
            if "<!--" in m.group(0) or dated_history:
                continue
            line = text.count("\n", 0, begin + m.start()) + 1
            problems.append(f"{where}:{line}: {' '.join(m.group(0).split())!r} is neither tied to a record "
                            "(<!-- record: NAME.KEY -->) nor in a paragraph that says it is history, with its date")
        if not is_table:
            previous = block
    return problems


# -- a record's command still runs ---------------------------------------------------------------

PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]+")
"""A part of a command that stands for something on the measurer's machine (``OLD``: the checkout
measured against, ``BASE``: a model folder); the record's note says what each was (``OLD: ...``)."""

# Runs a script up to its argument parsing, on the record's arguments, and stops there: the script's
# own parser judges them (an unknown flag exits 2), and nothing is measured.
_PARSE_ONLY = """
import argparse, os, runpy, sys
script, sys.argv = sys.argv[1], sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
depth = [0]
def parsed():
    print("rlvr.records: arguments parsed", flush=True)
    os._exit(0)
def patch(name):
    original = getattr(argparse.ArgumentParser, name)
    def parse(self, *args, **kwargs):
        depth[0] += 1
        result = original(self, *args, **kwargs)
        depth[0] -= 1
        if depth[0] == 0:  # the outermost call (parse_args calls parse_known_args, a subparser's too)
            parsed()
        return result
    setattr(argparse.ArgumentParser, name, parse)
for name in ("parse_known_args", "parse_args", "parse_intermixed_args"):
    patch(name)
runpy.run_path(script, run_name="__main__")
print("rlvr.records: the script parsed no arguments", flush=True)
"""


def command_problems(record: Record, timeout_s: float = 120.0) -> list[str]:
    """What stops ``record.command`` from running in a clone of this checkout, without measuring
    anything: a path of the measurer's machine (write a `PLACEHOLDER` and say in the note what it
    was), a placeholder the note does not explain, a script that is gone, arguments its own parser
    refuses; for ``rlvr ...`` an argument, config, key or setting that `rlvr` refuses before loading
    a model (its own checks: `rlvr.cli.parse_command`, `rlvr.commands.train.check_run`)."""
    import shlex
    import sys

    where = str(Path("records", record.name + ".json"))  # (not an f-string: the metric-name check reads those)
    try:
        words = shlex.split(record.command)
    except ValueError as e:
        return [f"{where}: command: {e}"]
    problems, placeholders = [], set()
    for word in words:
        for part in re.split(r"[=,]|(?<!/):(?!//)", word):
            if part.startswith("/") or part.startswith("~/"):
                problems.append(f"{where}: command names {part}, a path on the measurer's machine: write a placeholder "
                                "(e.g. OLD) and say in the note what it was (OLD: ...)")
            elif PLACEHOLDER.fullmatch(part):
                placeholders.add(part)
                if not re.search(rf"\b{part}\s*[:=]", record.note):
                    problems.append(f"{where}: command names the placeholder {part}, which its note does not explain ({part}: ...)")
    if problems or not words:
        return problems or [f"{where}: no command"]
    if words[0] in ("python", "python3"):
        words = words[1:]
    # a script's parser may check that a path exists (a checkout is an rlvr checkout): a placeholder
    # stands for this checkout's folder while the arguments are parsed
    words = [words[0], *(re.sub(rf"(?<![\w/]){PLACEHOLDER.pattern}(?![\w/])", lambda m: str(ROOT) if m.group(0) in placeholders else m.group(0), w)
                         for w in words[1:])]
    if words[0] == "rlvr":
        return [f"{where}: {p}" for p in _rlvr_problems(words[1:])]
    script = ROOT / words[0]
    if not script.is_file():
        return [f"{where}: {words[0]} is gone"]
    if script.suffix == ".py":
        r = subprocess.run([sys.executable, "-c", _PARSE_ONLY, str(script), *words[1:]], cwd=ROOT, capture_output=True,
                           text=True, timeout=timeout_s)
        if r.returncode != 0 or "rlvr.records: arguments parsed" not in r.stdout:
            said = (r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or ["(nothing)"])[-1]
            return [f"{where}: {words[0]} refuses the command's arguments: {said}"]
        return []
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    return [f"{where}: {words[0]}: {r.stderr.strip()}"] if r.returncode else []


def _rlvr_problems(argv: list[str]) -> list[str]:
    import contextlib
    import io

    from rlvr.cli import build_parser, parse_command, user_errors

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            args = parse_command(build_parser(), argv)
    except SystemExit:
        return [f"rlvr {' '.join(argv)}: {(said.getvalue().strip().splitlines() or ['refused'])[-1]}"]
    if not getattr(args, "func", None):
        return [f"rlvr {' '.join(argv)}: no command"]
    if args.command in ("train", "sft") and args.config:
        from rlvr.commands.train import check_run
        from rlvr.train.recipes import load_run_config

        try:
            check_run(load_run_config(args.config, args.overrides), args.config, "sft" if args.command == "sft" else None)
        except user_errors() as e:
            return [f"rlvr {' '.join(argv)}: {e}"]
    return []

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
"""

from __future__ import annotations

import datetime as dt
import json
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
        try:
            data = json.loads(Path(path).read_text())
            record = cls(**data)
        except (OSError, ValueError, TypeError) as e:
            raise ValueError(f"{path}: not a measurement record ({e})") from None
        if record.name != Path(path).stem:
            raise ValueError(f"{path}: its name is {record.name!r}, not its file's {Path(path).stem!r}")
        return record


def machine() -> dict[str, Any]:
    """What the figures depend on: cores the process may use, memory, CPU model, Python."""
    cpu = ""
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")
    except OSError:
        pass
    try:
        memory_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        memory_gb = None
    return {"cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "memory_gb": memory_gb, "cpu": cpu, "python": platform.python_version(), "gpu": None}


def commit() -> tuple[str, bool]:
    """The checkout's commit and whether it has uncommitted changes ("unknown" outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                                    text=True, timeout=10).stdout.strip())
        return head or "unknown", dirty
    except (OSError, subprocess.SubprocessError):
        return "unknown", False


def write_record(name: str, command: str, figures: dict[str, float], note: str = "", folder: Path = RECORDS,
                 at: tuple[str, bool] | None = None) -> Path:
    """Write ``records/NAME.json`` for a measurement just made (replacing the previous one). ``at`` is
    the checkout's `commit` when the measurement started (default: now); a page edited while a long
    measurement runs does not make it look measured on uncommitted code."""
    if not re.fullmatch(r"[\w-]+", name):
        raise ValueError(f"record name {name!r}: letters, digits, '_' and '-' only")
    bad = {k: v for k, v in figures.items() if not isinstance(v, (int, float)) or isinstance(v, bool) or not re.fullmatch(r"[\w-]+", k)}
    if bad:
        raise ValueError(f"record {name}: figures must be numbers named by [A-Za-z0-9_-], got {bad}")
    head, dirty = at or commit()
    record = {"name": name, "command": command, "commit": head, "dirty": dirty, "date": dt.date.today().isoformat(),
              "machine": machine(), "figures": {k: float(v) for k, v in figures.items()}, "note": note}
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

"""Figures on the pages come from measurement records (`rlvr.records`, ``records/*.json``): every
marked figure agrees with its record, every record is listed in docs/benchmarks.md, and every
record's command still runs (its script exists and answers ``--help``, or its rlvr command parses)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.records import MARKER, RECORDS, Record, agrees, check_page, load_all, unsourced_changes

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_record_loads_and_is_listed_on_the_benchmarks_page():
    records = load_all()
    assert records, "records/ holds the measurements the pages cite"
    listed = (ROOT / "docs" / "benchmarks.md").read_text()
    missing = [name for name in records if f"records/{name}.json" not in listed]
    assert not missing, f"docs/benchmarks.md does not list {missing}"


def test_every_marked_figure_on_a_page_agrees_with_its_record():
    records = load_all()
    problems = [p for page in PAGES for p in check_page(page.read_text(), records, str(page.relative_to(ROOT)))]
    assert not problems, "\n".join(problems)
    cited = {m.group("name") for page in PAGES for m in MARKER.finditer(page.read_text())}
    assert not set(records) - cited, f"records no page cites: {sorted(set(records) - cited)}"


def test_every_measured_change_on_a_page_is_tied_to_a_record_or_says_it_is_history():
    problems = [p for page in PAGES for p in unsourced_changes(page.read_text(), str(page.relative_to(ROOT)))]
    assert not problems, "\n".join(problems)


def test_a_change_without_a_record_or_a_dated_history_note_is_reported():
    assert "'0.308 → 0.594'" in unsourced_changes("PPO took it from 0.308 → 0.594 here.", "p")[0]
    assert "'from 0.135 to 0.475'" in unsourced_changes("It went from 0.135 to 0.475.", "p")[0]
    assert not unsourced_changes("**0.342**<!-- record: quickstart.accuracy_before --> → 0.686<!-- record: quickstart.accuracy_after -->", "p")
    assert not unsourced_changes("History (2026-11-22, `1fef2fb`): 0.308 → 0.594.", "p")
    assert unsourced_changes("History: 0.308 → 0.594.", "p"), "a history note names its date"
    table = "History, measured 2026-11-22:\n\n| run | before | after |\n|---|---|---|\n| a | 0.308 → 0.594 | |\n"
    assert not unsourced_changes(table, "p")
    assert unsourced_changes("Today:\n\n| a | 0.308 → 0.594 |\n", "p")
    assert not unsourced_changes("```\n0.308 -> 0.594\n```\nfrom 10 to 20 steps; AReaL reports 42.0 to 23.3", "p"), "code, counts, others' figures"


def test_the_quickstart_output_on_getting_started_is_its_records():
    from rlvr.quickstart_report import format_summary, summary_from_record

    printed = format_summary(summary_from_record(load_all()["quickstart"].figures))
    assert f"```text\n{printed}\n```" in (ROOT / "docs" / "getting-started.md").read_text(), (
        f"docs/getting-started.md should show the quickstart's output as records/quickstart.json has it:\n{printed}")


def test_a_page_edited_to_disagree_with_its_record_fails():
    records = load_all()
    page = next(p for p in PAGES if MARKER.search(p.read_text()))
    text = page.read_text()
    m = MARKER.search(text)
    before = text[:m.start()].rstrip("*")
    number = before.split()[-1].lstrip("*(")
    digits = number.replace(",", "")
    wrong = digits[:-1] + str((int(digits[-1]) + 3) % 10)  # the last digit moved by 3: outside the page's precision
    edited = text[:m.start()].rsplit(number, 1)[0] + wrong + text[:m.start()].rsplit(number, 1)[1] + text[m.start():]
    problems = check_page(edited, records, page.name)
    assert problems and "the page says" in problems[0], problems
    assert not check_page(text, records, page.name)


def test_figures_agree_at_the_precision_the_page_writes():
    assert agrees("0.392", 0.3921) and agrees("0.39", 0.3949) and not agrees("0.39", 0.3961)
    assert agrees("1,948", 1948.0) and agrees("37.4", 37.36) and not agrees("37.4", 37.2)
    fake = {"x": Record("x", "cmd", "abc", "2026-11-28", {}, {"acc": 0.5})}
    assert check_page("**0.500**<!-- record: x.acc -->", fake, "p") == []
    assert "no figure 'nope'" in check_page("0.5 <!-- record: x.nope -->", fake, "p")[0]
    assert "no record 'y'" in check_page("0.5 <!-- record: y.acc -->", fake, "p")[0]
    assert "no number" in check_page("accuracy <!-- record: x.acc -->", fake, "p")[0]


@pytest.mark.parametrize("name", sorted(p.stem for p in RECORDS.glob("*.json")))
def test_every_records_command_still_runs(name):
    record = Record.load(RECORDS / f"{name}.json")
    words = shlex.split(record.command)
    if words[0] in ("python", "python3"):
        words = words[1:]
    script = ROOT / words[0]
    if words[0] == "rlvr":
        from rlvr.cli import build_parser

        args, extra = build_parser().parse_known_args(words[1:])
        assert getattr(args, "func", None) and not [x for x in extra if x.startswith("-")], record.command
    elif script.suffix == ".py":
        r = subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
    else:
        assert script.is_file(), f"{record.command}: {script} is gone"
        r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr

"""Figures on the pages come from measurement records (`rlvr.records`, ``records/*.json``): every
marked figure agrees with its record, every record is listed in docs/benchmarks.md, and every
record's command still runs in a clone (`rlvr.records.command_problems`: its script's own parser takes its
arguments, an ``rlvr`` command passes rlvr's checks before any model loads, no path of the measurer's machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.records import MARKER, RECORDS, Record, agrees, check_page, command_problems, load_all, unsourced_changes

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


@pytest.mark.parametrize("marker", ["<!-- record test-suite.cpu_s -->", "<!-- Record: test-suite.cpu_s -->",
                                    "<!--records: test-suite.cpu_s-->", "<!-- record: test-suite -->"])
def test_a_mistyped_marker_is_refused_not_ignored(marker):
    records = load_all()
    problems = check_page(f"Some text.\n\nIt took 9,999{marker} CPU-seconds.\n", records, "page.md")
    assert problems == [f"page.md:3: {marker!r} is not a record marker: write <!-- record: NAME.FIGURE -->"], problems


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
    assert command_problems(Record.load(RECORDS / f"{name}.json")) == []


def _with_command(command: str, note: str = "") -> Record:
    return Record("quickstart", command, "abc1234", "2026-11-28", {}, {"acc": 0.5}, note=note)


@pytest.mark.parametrize("command, said", [
    ("python3 scripts/record_quickstart.py --no-such-flag", "refuses the command's arguments: record_quickstart.py: error: unrecognized arguments: --no-such-flag"),
    ("python3 scripts/no_such_script.py", "scripts/no_such_script.py is gone"),
    ("rlvr train quickstart foo.bar=1", "unknown key 'foo'"),
    ("rlvr train nosuchconfig", "config 'nosuchconfig' is neither a file nor a built-in config"),
    ("rlvr train quickstart 'task.env_kwargs={extraction: lenientt}'", "task.env_kwargs: environment 'math-v1' refused its settings"),
    ("rlvr eval --model m --task arithmetic-v1 --nope", "unrecognized arguments: --nope"),
    ("python scripts/bench_serve.py --checkout before=/work/wt/before --checkout after=.", "names /work/wt/before, a path on the measurer's machine"),
    ("python scripts/bench_serve.py --checkout before=OLD --checkout after=.", "the placeholder OLD, which its note does not explain"),
])
def test_a_command_that_would_not_run_in_a_clone_is_reported(command, said):
    problems = command_problems(_with_command(command))
    assert len(problems) == 1 and said in problems[0], problems


def test_a_command_that_parses_and_names_explained_placeholders_passes():
    assert command_problems(_with_command("python scripts/bench_serve.py --checkout before=OLD --checkout after=. --seconds 4",
                                          note="OLD: a checkout of f698bdd")) == []
    assert command_problems(_with_command("rlvr train quickstart update.steps=2 'task.env_kwargs={extraction: lenient}'")) == []


@pytest.mark.parametrize("change, said", [
    ({"date": "yesterday"}, "field 'date' must be a date as YYYY-MM-DD, got 'yesterday'"),
    ({"commit": "zzzz"}, "field 'commit' must be a git commit (7 to 40 hex digits) or 'unknown', got 'zzzz'"),
    ({"figures": {"acc": "0.5"}}, "field 'figures': 'acc' must be a finite number, got '0.5'"),
    ({"figures": {"acc": float("nan")}}, "field 'figures': 'acc' must be a finite number, got nan"),
    ({"figures": {"acc": float("-inf")}}, "field 'figures': 'acc' must be a finite number, got -inf"),
    ({"dirty": "no"}, "field 'dirty' must be true or false"),
    ({"extra": 1}, "unknown field(s) extra"),
    ({"command": None}, "field 'command' must be the measuring command"),
])
def test_a_malformed_record_is_refused_naming_its_file_and_field(tmp_path, change, said):
    data = {"name": "x", "command": "python3 scripts/record_quickstart.py", "commit": "abc1234", "dirty": False,
            "date": "2026-11-28", "machine": {}, "figures": {"acc": 0.5}, "note": ""}
    path = tmp_path / "x.json"
    path.write_text(json.dumps({**data, **change}))
    with pytest.raises(ValueError) as e:
        Record.load(path)
    assert str(e.value) == f"{path}: {said}" or str(e.value).startswith(f"{path}: {said}"), str(e.value)
    assert "\n" not in str(e.value)
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "date"}))
    with pytest.raises(ValueError, match="missing field\\(s\\) date"):
        Record.load(path)


def test_the_kernel_set_is_read_from_the_cpu_flags_as_torch_chooses_it():
    from rlvr.records import cpu_kernels

    def info(vendor: str, flags: str) -> str:  # two processors, as /proc/cpuinfo lists them
        block = f"processor\t: 0\nvendor_id\t: {vendor}\nmodel name\t: X\nflags\t\t: {flags}\n"
        return block + "\n" + block.replace(": 0", ": 1")

    avx512 = "fpu sse2 avx fma avx2 avx512f avx512dq avx512bw avx512vl"
    assert cpu_kernels(info("AuthenticAMD", avx512), env={}) == "AuthenticAMD AVX512"
    assert cpu_kernels(info("GenuineIntel", "fpu sse2 avx fma avx2"), env={}) == "GenuineIntel AVX2"
    assert cpu_kernels(info("AuthenticAMD", "fpu sse2 avx avx2"), env={}) == "AuthenticAMD DEFAULT"  # AVX2 needs FMA too
    assert cpu_kernels(info("AuthenticAMD", "fpu avx2 fma avx512f"), env={}) == "AuthenticAMD AVX2"  # not every AVX-512 part
    # ATEN_CPU_CAPABILITY decides as it does for torch: its exact spellings, taken as given; any other is ignored
    assert cpu_kernels(info("AuthenticAMD", avx512), env={"ATEN_CPU_CAPABILITY": "avx2"}) == "AuthenticAMD AVX2"
    assert cpu_kernels(info("AuthenticAMD", "fpu avx2 fma"), env={"ATEN_CPU_CAPABILITY": "avx512"}) == "AuthenticAMD AVX512"
    for ignored in ("Default", "AVX2", "default ", "junk", ""):
        assert cpu_kernels(info("AuthenticAMD", avx512), env={"ATEN_CPU_CAPABILITY": ignored}) == "AuthenticAMD AVX512"
    assert cpu_kernels(info("AuthenticAMD", avx512).replace("\n", "\r\n"), env={}) == "AuthenticAMD AVX512"  # the first block
    assert cpu_kernels(info("", "fpu avx2 fma"), env={}) == "unknown AVX2"
    assert cpu_kernels("", env={}) == "" and cpu_kernels("processor\t: 0\n", env={}) == ""

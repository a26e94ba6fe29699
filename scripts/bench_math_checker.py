#!/usr/bin/env python
"""Benchmark rlvr's math checker beside Hugging Face math-verify on two labelled suites.

    OMP_NUM_THREADS=1 python scripts/bench_math_checker.py [--suites project,mathverify,real]
        [--pairs scripts/data/math_pairs.jsonl] [--mathverify-cases PATH] [--real-set PATH]
        [--checkers rlvr,math-verify] [--deadline 10] [--out bench_results/math_checker.json]

Suites:

- ``project``: the project's own labelled pairs (``scripts/data/math_pairs.jsonl``), one a line:
  ``id``, ``category``, ``gold``, ``response``, ``equivalent`` (mathematical truth: should the
  response be rewarded?), ``ambiguous`` (truth depends on a convention; excluded from accuracy, FP
  and FN) and optionally ``extraction`` (``strict``, the default, or ``lenient`` for responses that
  state their answer in prose; math-verify has a single mode and ignores it). A response may
  contain ``{{rep:TEXT:N}}``, expanded to TEXT repeated N times (megabyte inputs without a
  megabyte file).
- ``mathverify``: math-verify's own test suite, 286 labelled cases extracted from its tests
  (``$RLVR_DATA_DIR/mathverify_tests/cases.jsonl``, default ``../shared/data``; provenance in
  ``SOURCES.md``). math-verify runs each case exactly as its test calls it (extraction targets,
  precision, strictness, options). rlvr runs its defaults in lenient mode, because math-verify
  extracts answers from anywhere in the text; a gold written as a solution is reduced to its
  answer the same way. Results are reported per test group. The headline figure counts the
  *default-config* cases (math-verify's default precision, strictness and set/relation option),
  leaving out the `POLICY_DIFFERENCES` below, each named with the reason the two checkers differ
  by design; the 25 cases labelled only under a non-default option are shown but not counted.
- ``real``: the labelled set of real-model outputs (``tests/envs/math/data/real_model_outputs.jsonl``,
  described in ``tests/envs/math/test_real_model_outputs.py``), each row run in both extraction
  modes with its question and its task's numeric-literal rule; categories are ``MODE/CLASS``. A
  row should pass in lenient mode when it commits to the gold, in strict mode when it also marks
  that answer. math-verify has one mode and no question: it is scored against the same labels.

Each checker runs in its own worker process, one pair at a time; the harness enforces a hard
per-pair deadline (``--deadline``) by killing and restarting the worker, so no pair can stall the
run. Latency is measured inside the worker around the single check call (a killed pair counts its
deadline). Reported per checker and category: accuracy on unambiguous pairs, false positives,
false negatives, timeouts; overall median/p99/max latency and checks per second (pairs / summed
latency). rlvr's sympy workers are started before timing (``envs.math.warmup``), as a trainer's
are. Injection pairs try to create a marker file; the report says whether any checker did.

Numbers only: tests assert behaviour, this script measures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PAIRS = ROOT / "scripts" / "data" / "math_pairs.jsonl"
DEFAULT_REAL_SET = ROOT / "tests" / "envs" / "math" / "data" / "real_model_outputs.jsonl"
DEFAULT_MV_CASES = Path(os.environ.get("RLVR_DATA_DIR", ROOT.parent / "shared" / "data")) / "mathverify_tests" / "cases.jsonl"
MARKER = Path("/tmp/rlvr_pwned")
_REP = re.compile(r"\{\{rep:(.*?):(\d+)\}\}", re.S)

POLICY_DIFFERENCES = {
    "test_all.py::test_number_extraction[5]": "decimal comma: rlvr never reads a comma between digits as a decimal point (`1000,99` is a list); in model output `2,3` is the list 2, 3 far more often than 2.3",
    "test_all.py::test_number_extraction[6]": "decimal comma (`1,22` read as the list 1, 22)",
    "test_all.py::test_number_extraction[7]": "decimal comma (`2,74 $`)",
    "test_all.py::test_number_extraction[17]": "decimal comma (`0,111`)",
    "test_all.py::test_relations_math[21]": "unknown LaTeX command in the gold (`\\zzz`): rlvr's whitelist parser refuses unknown commands instead of skipping them",
    "test_all.py::test_complex_math_expressions[0]": "exact by default: the 16-digit decimal 0.0833333333333333 is not 1/12 unless a tolerance is asked for (`rel_tol`); math-verify rounds to 6 digits by default",
    "test_all.py::test_set_rel_assymetry[3]": "symmetric sets: rlvr treats `-2 \\le x \\le 7` and `x \\in [-2,7]` as the same set in both directions; math-verify's default accepts only one direction",
    "test_boxed.py::test_boxed[0]": "only connecting words and punctuation join boxes (`++++++` between two boxes does not make one answer)",
    "test_numina_cases.py::test_numina_cases[24]": "malformed gold (`\\boxed{` never closed) and a different variable (`W(n)` vs `W(x)`)",
    "test_yujianll.py::test_string_extraction[9]": "label is mathematically wrong: `1 - 1/e` and `1 + 1/e` are different numbers (noted in SOURCES.md)",
}
"""Cases left out of the default-config agreement, each with the reason the checkers differ."""


def _read_rows(path: Path, convert, what: str) -> list[dict]:
    """``convert`` applied to each JSON line; raises ValueError naming the file and line."""
    out = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(convert(json.loads(line)))
                except (ValueError, KeyError, AttributeError) as e:
                    raise ValueError(f"{path}:{lineno}: malformed {what} ({e})") from None
    return out


def _project_pair(row: dict) -> dict:
    pair = {k: row[k] for k in ("id", "category", "gold", "response", "equivalent", "ambiguous")}
    pair["extraction"] = row.get("extraction", "strict")
    if pair["extraction"] not in ("strict", "lenient"):
        raise ValueError(f"extraction must be strict or lenient, got {pair['extraction']!r}")
    pair["response"] = _REP.sub(lambda m: m.group(1) * int(m.group(2)), pair["response"])
    return pair


def _mathverify_pair(row: dict) -> dict:
    cfg = row["config"]
    return {
        "id": row["id"], "category": row["test"], "gold": row["gold"], "response": row["pred"],
        "equivalent": row["expected"] == 1, "ambiguous": False, "config": cfg,
        "default_config": cfg.get("call") in ("compare_strings", "parse_verify_default") and cfg.get("precision") == 6
        and cfg.get("strict") is True and cfg.get("allow_set_relation_comp") is False,
        "policy": POLICY_DIFFERENCES.get(row["id"]),
    }


def load_pairs(path: Path) -> list[dict]:
    """The project's labelled pairs, templates expanded; raises ValueError naming the bad line."""
    return _read_rows(path, _project_pair, "pair")


def load_mathverify(path: Path) -> list[dict]:
    """math-verify's labelled cases as pairs (``category`` = test group); raises ValueError naming
    the bad line."""
    if not path.exists():
        raise SystemExit(f"math-verify cases not found at {path} (set RLVR_DATA_DIR or --mathverify-cases)")
    pairs = _read_rows(path, _mathverify_pair, "case")
    unknown = set(POLICY_DIFFERENCES) - {p["id"] for p in pairs}
    if unknown:
        raise SystemExit(f"policy differences name cases that are not in {path}: {sorted(unknown)}")
    return pairs


def load_real(path: Path) -> list[dict]:
    """The labelled real-model set, each row as two pairs (strict, lenient), read by the test that
    asserts it (questions resolved from ``$RLVR_DATA_DIR``); raises ValueError naming a bad line."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("real_model_outputs", ROOT / "tests" / "envs" / "math" / "test_real_model_outputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    pairs = []
    for row in module.load_set(path):
        for mode in ("strict", "lenient"):
            pairs.append({"id": f"{row['id']}@{mode}", "category": f"{mode}/{row['cls']}", "gold": row["gold"], "response": row["response"],
                          "equivalent": module.expected(row, mode), "ambiguous": False, "extraction": mode,
                          "question": row["question"], "numeric_literal": row["numeric_literal"]})
    return pairs


SUITES = {"project": load_pairs, "mathverify": load_mathverify, "real": load_real}


# -- worker side ------------------------------------------------------------------------------

def _rlvr_checker(suite: str):
    from envs.math import check, warmup
    from envs.math.extract import extract_answer, unescape

    warmup()

    def gold_answer(gold: str) -> str:
        # math-verify's golds are often whole solutions: reduce them to their answer like a response
        found = extract_answer(unescape(gold), extraction="lenient")
        return found.answer if found is not None else gold

    def run(pair: dict) -> tuple[bool, str]:
        if suite == "mathverify":
            if pair["gold"] is None:
                v = check(pair["response"], "", extraction="lenient")  # "no valid answer": nothing to match
                return False, v.status.value
            v = check(pair["response"], gold_answer(pair["gold"]), extraction="lenient")
        elif suite == "real":
            v = check(pair["response"], pair["gold"], extraction=pair["extraction"], question=pair["question"],
                      numeric_literal=pair["numeric_literal"])
        else:
            v = check(pair["response"], pair["gold"], extraction=pair["extraction"])
        return v.passed, v.status.value

    return run


def _math_verify_checker(suite: str):
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, StringExtractionConfig, parse, verify

    def project(pair: dict) -> tuple[bool, str]:
        gold = pair["gold"]
        g = gold if gold.strip().startswith("$") else f"${gold}$"  # math-verify's documented gold form
        return bool(verify(parse(g), parse(pair["response"]))), "ok"

    def as_its_test_calls_it(pair: dict) -> tuple[bool, str]:
        cfg, gold, pred = pair["config"], pair["gold"], pair["response"]
        call = cfg.get("call")
        if call == "compare_strings":
            targets = [LatexExtractionConfig(boxed_match_priority=0) if t == "latex" else ExprExtractionConfig() for t in cfg["match_types"]]
            ok = verify(parse(gold, targets), parse(pred, targets), float_rounding=cfg["precision"], strict=cfg["strict"],
                        allow_set_relation_comp=cfg["allow_set_relation_comp"])
        elif call == "parse_verify_default":
            ok = verify(parse(gold), parse(pred))
        elif call == "sympy_expr_eq":
            ok = verify(parse(gold), parse(pred), float_rounding=cfg["float_rounding"])
        elif cfg.get("kind") == "StringExtractionConfig":
            options = {k: (tuple(v) if k == "strings" else v) for k, v in cfg.items() if k in ("strings", "lowercase")}
            targets = [StringExtractionConfig(**options)]
            parsed = parse(pred, targets)
            ok = bool(parsed) and gold is not None and verify(parse(gold, targets), parsed)
        elif call == "parse":
            latex = {}
            if "boxed_match_priority" in cfg:
                latex["boxed_match_priority"] = cfg["boxed_match_priority"]
            if "malformed_operators" in cfg:
                from latex2sympy2_extended.math_normalization import NormalizationConfig

                latex["normalization_config"] = NormalizationConfig(basic_latex=True, units=True, malformed_operators=cfg["malformed_operators"],
                                                                    nits=True, boxed="all", equations=False)
            kwargs = {k: cfg[k] for k in ("extraction_mode", "fallback_mode") if k in cfg}
            parsed = parse(pred, [LatexExtractionConfig(**latex)], **kwargs)
            ok = bool(parsed) and verify(parse(gold), parsed)
        else:
            raise ValueError(f"unknown math-verify call {cfg!r}")
        return bool(ok), "ok"

    return as_its_test_calls_it if suite == "mathverify" else project


CHECKERS = {"rlvr": _rlvr_checker, "math-verify": _math_verify_checker}


def worker(name: str, suite: str, pairs_path: str) -> None:
    """Answer ``index`` lines on stdin with one JSON result line each."""
    pairs = SUITES[suite](Path(pairs_path))
    run = CHECKERS[name](suite)
    print("ready", flush=True)
    for line in sys.stdin:
        k = int(line)
        pair = pairs[k]
        t0 = time.perf_counter()
        try:
            passed, status = run(pair)
        except Exception as e:  # a checker crash is a failed check, reported as such
            passed, status = False, f"error: {type(e).__name__}"
        dt = time.perf_counter() - t0
        print(json.dumps({"k": k, "passed": passed, "status": status, "latency_s": dt}), flush=True)


# -- harness side -----------------------------------------------------------------------------

class Runner:
    """A worker process for one checker, restarted after a kill."""

    def __init__(self, name: str, suite: str, pairs_path: Path):
        self.name, self.suite, self.pairs_path = name, suite, pairs_path
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def start(self) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", self.name, "--suite", self.suite, "--pairs", str(self.pairs_path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
        )
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if line.strip() != "ready":
            raise SystemExit(f"{self.name} worker failed to start (is it installed? try: pip install -e '.[bench]')")

    def check(self, k: int, deadline_s: float) -> dict:
        if self.proc is None:
            self.start()
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        t0 = time.perf_counter()
        self.proc.stdin.write(f"{k}\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], deadline_s)
        if ready:
            line = self.proc.stdout.readline()
            if line:
                return json.loads(line)
        self.kill()  # over the deadline (or died): kill it, the next pair gets a fresh worker
        self.restarts += 1
        return {"k": k, "passed": False, "status": "killed", "latency_s": max(deadline_s, time.perf_counter() - t0)}

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def _tally(pairs: list[dict], results: list[dict], keep=lambda p: True) -> dict[str, dict]:
    cats: dict[str, dict] = {}
    for pair, res in zip(pairs, results):
        c = cats.setdefault(pair["category"], {"pairs": 0, "scored": 0, "correct": 0, "fp": 0, "fn": 0, "timeouts": 0})
        c["pairs"] += 1
        c["timeouts"] += res["status"] in ("timeout", "killed")
        if pair["ambiguous"] or not keep(pair):
            continue
        c["scored"] += 1
        c["correct"] += res["passed"] == pair["equivalent"]
        c["fp"] += res["passed"] and not pair["equivalent"]
        c["fn"] += pair["equivalent"] and not res["passed"]
    return cats


def _total(cats: dict[str, dict]) -> dict:
    total = {k: sum(c[k] for c in cats.values()) for k in ("pairs", "scored", "correct", "fp", "fn", "timeouts")}
    for c in [*cats.values(), total]:
        c["accuracy"] = c["correct"] / c["scored"] if c["scored"] else None
    return total


def summarise(pairs: list[dict], results: list[dict]) -> dict:
    cats = _tally(pairs, results)
    total = _total(cats)
    lat = sorted(r["latency_s"] for r in results)
    total.update(
        median_ms=statistics.median(lat) * 1e3,
        p99_ms=lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))] * 1e3,
        max_ms=lat[-1] * 1e3,
        checks_per_s=len(lat) / sum(lat),
        over_1s=sum(x > 1.0 for x in lat),
    )
    out = {"categories": cats, "total": total}
    if any("default_config" in p for p in pairs):
        headline = _tally(pairs, results, keep=lambda p: p["default_config"] and not p["policy"])
        out["default_config"] = _total(headline)
        out["default_config_groups"] = headline
        out["policy_cases"] = [
            {"id": p["id"], "expected": p["equivalent"], "passed": r["passed"], "reason": p["policy"]}
            for p, r in zip(pairs, results) if p["policy"]
        ]
        out["non_default_cases"] = sum(not p["default_config"] for p in pairs)
    return out


def _acc(s: dict) -> str:
    return "-" if s["accuracy"] is None else f"{100 * s['accuracy']:.1f}% ({s['correct']}/{s['scored']})"


def print_table(summaries: dict[str, dict], label: str = "category", key: str = "categories", total_key: str = "total") -> None:
    names = list(summaries)
    cats = list(next(iter(summaries.values()))[key])
    width = max(14, *(len(c) + 2 for c in cats))
    head = f"{label:<{width}}{'pairs':>6}" + "".join(f"  {n + ' acc':>18}{'FP':>4}{'FN':>4}{'T/O':>4}" for n in names)
    print(head)
    print("-" * len(head))

    def row(name: str, stats: list[dict], pairs: int) -> str:
        out = f"{name:<{width}}{pairs:>6}"
        for s in stats:
            out += f"  {_acc(s):>18}{s['fp']:>4}{s['fn']:>4}{s['timeouts']:>4}"
        return out

    for c in cats:
        print(row(c, [summaries[n][key][c] for n in names], summaries[names[0]][key][c]["pairs"]))
    print("-" * len(head))
    print(row("ALL", [summaries[n][total_key] for n in names], summaries[names[0]][total_key]["pairs"]))


def print_timing(summaries: dict[str, dict]) -> None:
    names = list(summaries)
    print(f"\n{'checker':<14}{'median ms':>11}{'p99 ms':>11}{'max ms':>11}{'checks/s':>11}{'>1 s':>6}{'restarts':>10}  code executed")
    for n in names:
        t = summaries[n]["total"]
        print(f"{n:<14}{t['median_ms']:>11.3f}{t['p99_ms']:>11.2f}{t['max_ms']:>11.1f}{t['checks_per_s']:>11.1f}{t['over_1s']:>6}{summaries[n]['restarts']:>10}  {'YES' if summaries[n]['executed_code'] else 'no'}")
    if len(names) == 2:
        a, b = (summaries[n]["total"]["checks_per_s"] for n in names)
        print(f"\nthroughput ratio {names[0]} / {names[1]}: {a / b:.1f}x")


def print_mathverify(summaries: dict[str, dict]) -> None:
    names = list(summaries)
    first = summaries[names[0]]
    print("\nAgreement with the test labels, per test group (all cases, each checker as described above):\n")
    print_table(summaries, label="test group")
    print(f"\nDefault-config cases, leaving out {len(first['policy_cases'])} documented policy differences "
          f"({first['non_default_cases']} cases labelled only under a non-default option are not counted):\n")
    for n in names:
        d = summaries[n]["default_config"]
        print(f"  {n:<12} agreement {_acc(d)}, false positives {d['fp']}, false negatives {d['fn']}")
    print("\nPolicy differences (left out of the figure above):")
    for case in first["policy_cases"]:
        got = "  ".join(f"{n}={'pass' if next(c for c in summaries[n]['policy_cases'] if c['id'] == case['id'])['passed'] else 'fail'}" for n in names)
        print(f"  {case['id']} (label {'1' if case['expected'] else '0'}; {got}): {case['reason']}")


def run_suite(suite: str, path: Path, names: list[str], deadline: float) -> tuple[list[dict], dict[str, dict], dict[str, list[dict]]]:
    pairs = SUITES[suite](path)
    summaries: dict[str, dict] = {}
    per_pair: dict[str, list[dict]] = {}
    for name in names:  # one checker at a time: they never compete for the CPU
        MARKER.unlink(missing_ok=True)
        runner = Runner(name, suite, path)
        runner.start()
        t0 = time.perf_counter()
        results = [runner.check(k, deadline) for k in range(len(pairs))]
        wall = time.perf_counter() - t0
        runner.kill()
        summary = summarise(pairs, results)
        summary.update(restarts=runner.restarts, wall_s=wall, executed_code=MARKER.exists())
        MARKER.unlink(missing_ok=True)
        summaries[name], per_pair[name] = summary, results
        print(f"{suite}/{name}: done in {wall:.1f} s", file=sys.stderr)
    return pairs, summaries, per_pair


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suites", default="project,mathverify,real", help="comma-separated: project, mathverify, real")
    ap.add_argument("--pairs", type=Path, default=DEFAULT_PAIRS, help="the project suite's pairs file")
    ap.add_argument("--mathverify-cases", type=Path, default=DEFAULT_MV_CASES, help="math-verify's labelled cases")
    ap.add_argument("--real-set", type=Path, default=DEFAULT_REAL_SET, help="the labelled real-model outputs")
    ap.add_argument("--checkers", default="rlvr,math-verify", help="comma-separated: rlvr, math-verify")
    ap.add_argument("--deadline", type=float, default=10.0, help="hard per-pair deadline in seconds (worker killed past it)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench_results" / "math_checker.json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--suite", default="project", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, args.suite, str(args.pairs))
        return 0

    names = [n.strip() for n in args.checkers.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECKERS]
    if unknown:
        raise SystemExit(f"unknown checker(s) {unknown}; choose from {sorted(CHECKERS)}")
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    bad = [s for s in suites if s not in SUITES]
    if bad:
        raise SystemExit(f"unknown suite(s) {bad}; choose from {sorted(SUITES)}")
    report: dict = {"deadline_s": args.deadline, "suites": {}}
    for suite in suites:
        path = {"project": args.pairs, "mathverify": args.mathverify_cases, "real": args.real_set}[suite]
        pairs, summaries, per_pair = run_suite(suite, path, names, args.deadline)
        print(f"\n=== suite {suite}: {len(pairs)} pairs ({sum(not p['ambiguous'] for p in pairs)} unambiguous) from {path}; "
              f"deadline {args.deadline:g} s per pair\n")
        if suite == "mathverify":
            print_mathverify(summaries)
        else:
            print_table(summaries)
        print_timing(summaries)
        report["suites"][suite] = {
            "pairs_file": str(path), "pairs": len(pairs), "summaries": summaries,
            "results": [
                {"id": p["id"], "category": p["category"], "equivalent": p["equivalent"], "ambiguous": p["ambiguous"],
                 **{n: {k: per_pair[n][i][k] for k in ("passed", "status", "latency_s")} for n in names}}
                for i, p in enumerate(pairs)
            ],
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

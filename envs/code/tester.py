"""The tester path: ``program`` suites, whose tests are the dataset's own code (loops, randomness,
expected values computed at run time), graded without letting the candidate near them.

One sandbox job holds two processes (`envs.code.tester_process` and
`envs.code.candidate_process` say what each does and in which order): the **tester** runs the tests, with the expected values and a secret token in its memory
only; the **candidate** is a fresh interpreter that loads the solution and answers calls. Between
them there is one pipe pair carrying length-prefixed JSON (`envs.code.channel`): arguments go one
way and return values the other, both as the tagged data of `envs.code.values` (built-in values
only, read through the built-in types' own methods, so an object that fakes equality arrives as
its plain data or not at all). The candidate cannot read the tester's memory (the tester is
non-dumpable and ptrace is filtered), its stdin (consumed before the candidate starts), its files
(there are none) or its imports (the writable job directory is off its ``sys.path``), and it has
no descriptor for the job's stdout, where the tester writes one record per test.

Here, on the trusted side, `TesterGrader.judge` accepts only records stamped with the job's token
(a candidate that somehow wrote to the job's stdout could not know it): a test passes only if the
tester says it ran to its end. A record with another token, or two records for one test, rejects
the whole run; a test without a record (the candidate killed the tester, the job timed out) fails.

Problems whose tests convert to literal input/output pairs keep the ``function`` path, where the
expected values never enter the sandbox at all; this path is for the rest.

What crosses the channel is data, so the tests see the candidate a little differently than when
they share its process: a return value that is not data (a generator, an instance of the
solution's own class) is an exception in the test; so is any exception the candidate raises (a
`tester_process.CandidateError`, not its own type); arguments the candidate mutates stay as they
were in the tests; and tests cannot pass it objects (MBPP's tests that do keep the ``function``
path, with arguments evaluated next to the candidate). Every HumanEval and MBPP reference
solution passes this way.
"""

from __future__ import annotations

import inspect
import json
import secrets
from typing import Any, Sequence

import sandboxes
from envs.code import candidate_process, channel, decoder, encoder, tester_process
from envs.code.driver import CANDIDATE_FILE, RECORD_PREFIX
from envs.code.graders import Grader, Judgement, Run, TestResult, execution_info, read_records
from envs.code.programs import CANDIDATE_PARAMETER
from envs.code.testcases import ProgramTest, TestSuite

def bundle(main: Any, entry: str) -> str:
    """A self-contained program: the channel, decoder and encoder modules and ``main`` loaded from
    their sources, then ``main.<entry>(channel, decoder, encode)``."""
    lines = ["import types as _types", "",
             "def _load(name, source):",
             "    module = _types.ModuleType(name)",
             "    exec(compile(source, '<rlvr ' + name + '>', 'exec', dont_inherit=True), module.__dict__)",
             "    return module", ""]
    modules = {"channel": channel, "decoder": decoder, "encoder": encoder, "main": main}
    lines += [f"{name} = _load({name!r}, {inspect.getsource(module)!r})" for name, module in modules.items()]
    lines.append(f"main.{entry}(channel, decoder, encoder._rlvr_encode)")
    return "\n".join(lines) + "\n"


TESTER_PROGRAM = bundle(tester_process, "run_tester")
CANDIDATE_PROGRAM = bundle(candidate_process, "serve_candidate")


def budget_s(limits: sandboxes.Limits) -> float:
    """Seconds the tester gives the candidate in all: the job's wall limit less a margin in which
    the tester reports a candidate that ran out of time (past the job's limit, tests without a
    record fail all the same)."""
    return max(0.1, limits.wall_s - 0.3)


def tester_job(program: str, suite: TestSuite, limits: sandboxes.Limits, token: str) -> sandboxes.Job:
    """The job that runs ``suite``'s tests against ``program``; the spec (tests, setup, ``token``)
    travels on stdin, the candidate's program as a file."""
    tests: Sequence[ProgramTest] = suite.tests  # type: ignore[assignment]
    spec = {
        "token": token, "record_prefix": RECORD_PREFIX, "setup": suite.tester_setup, "tests": [t.code for t in tests],
        "names": [CANDIDATE_PARAMETER, suite.entry_point], "entry_point": suite.entry_point, "budget_s": budget_s(limits),
        "candidate_file": CANDIDATE_FILE, "candidate_program": CANDIDATE_PROGRAM,
    }
    return sandboxes.Job.make(TESTER_PROGRAM, stdin=json.dumps(spec), files={CANDIDATE_FILE: program}, limits=limits)


def _token_of(job: sandboxes.Job) -> str:
    return str(json.loads(job.stdin)["token"])


class TesterGrader(Grader):
    """``program`` suites through the tester path (see the module docstring)."""

    def jobs(self, program: str, suite: TestSuite, limits: sandboxes.Limits) -> list[sandboxes.Job]:
        return [tester_job(program, suite, limits, secrets.token_hex(16))]

    def judge(self, suite: TestSuite, runs: Sequence[Run]) -> Judgement:
        job, execution = runs[0]
        token = _token_of(job)
        n = len(suite.tests)
        labels = [t.label(suite.entry_point) for t in suite.tests]  # type: ignore[union-attr]
        info = execution_info(execution)
        records = read_records(execution.stdout)
        if any(r.get("t") != token for r in records):
            info["channel"] = "records without the run's token: run rejected"
            return Judgement([TestResult(False, "rejected: forged records") for _ in range(n)], labels, info)
        found: dict[str, Any] = {}
        by_test: dict[int, dict] = {}
        duplicated = False
        for rec in records:
            i = rec.get("i")
            if type(i) is int and 0 <= i < n:
                duplicated |= i in by_test
                by_test[i] = rec
            for key in ("isolation_error", "setup_error", "tester_error", "started", "done", "load_error", "gone", "calls"):
                if rec.get(key) is not None:
                    found[key] = rec[key]
        for key in ("load_error", "gone", "calls"):
            if key in found:
                info[key] = found[key]
        problem = next((f"{key.replace('_', ' ')}: {found[key]}" for key in ("isolation_error", "setup_error", "tester_error") if key in found), None)
        if problem is None and "started" not in found:  # the tester failed before the candidate existed
            problem = f"the tester did not start (exec status {execution.status.value}): {info.get('stderr_tail', '')[-300:]}"
        if problem:
            return Judgement([], labels, info, error=f"tester path: {problem}")
        if duplicated:
            info["channel"] = "duplicate records: run rejected"
            return Judgement([TestResult(False, "rejected: duplicate records") for _ in range(n)], labels, info)
        results = []
        for i in range(n):
            rec = by_test.get(i)
            if rec is None:
                results.append(TestResult(False, "no result (the tester was stopped before this test)"))
            else:
                results.append(TestResult(rec.get("ok") is True, "" if rec.get("ok") is True else str(rec.get("d", ""))[:200]))
        return Judgement(results, labels, info)

#!/usr/bin/env python3
"""Run CI (``.ci/run``) on a clean clone of this checkout's commit and write its record (``records/ci.json``).

The clone starts bare, as CI's does: it installs every environment and builds the SFT bases itself.
The record holds the whole run's minutes and each lane's, as ``.ci/run`` prints them
(``[ci] lane main: 15 min 2 s``), and the CPU-seconds of every process the run waited for (``cpu_s``;
``cpu_percent`` of one core: near 100 x the cores, CI is bound by its CPU work, not by waiting), and where
``/proc/stat`` exists the CPU-seconds the whole machine spent meanwhile (``machine_cpu_s``: also the servers, the
Docker engine and everything else the run started without waiting for it; on a quiet machine that is the run's
work); the run's log is kept in ``runs/ci-record.log``. Nothing is recorded when a lane fails. Takes about half an hour on 2 cores; run it on a quiet machine.

    python3 scripts/record_ci.py
    python3 scripts/record_ci.py --keep     # keep the clone (its runs/ holds every lane's logs)
    python3 scripts/record_ci.py --name ci-avx2   # on another kind of CPU (records/ci-avx2.json beside records/ci.json)
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from rlvr.records import machine_cpu_s  # noqa: E402 - after the checkout is on the path

LANE = re.compile(r"^\[ci\] lane (?P<name>[\w-]+): (?P<min>\d+) min (?P<s>\d+) s$", re.M)


def lane_minutes(log: str) -> dict[str, float]:
    """{"main_min": 15.03, ...}: each lane's minutes from ``.ci/run``'s ``[ci] lane NAME: M min S s`` lines."""
    return {f"{m['name'].replace('-', '_')}_min": int(m["min"]) + int(m["s"]) / 60 for m in LANE.finditer(log)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)  # no guessing at a mistyped option
    ap.add_argument("--keep", action="store_true", help="keep the clone and print where it is")
    ap.add_argument("--note", default="", help="what else ran on the machine, where it was not quiet")
    ap.add_argument("--name", default="ci", help="the record's name: ci, or ci-KIND on another kind of CPU (records/ci-avx2.json)")
    args = ap.parse_args()
    from rlvr.records import commit, kind_name_problem, script_command, write_record

    if problem := kind_name_problem("ci", args.name):
        ap.error(problem)

    at = commit()
    if at[1]:
        print("note: uncommitted changes are not in the clone; the record names the commit that ran", file=sys.stderr)
    clone = Path(tempfile.mkdtemp(prefix="rlvr-ci-"))
    log_path = ROOT / "runs" / "ci-record.log"
    running_log = log_path.with_suffix(".running.log")  # the last finished run's log stays until this one ends
    log_path.parent.mkdir(parents=True, exist_ok=True)
    proc = None

    def stop(signum, frame):  # a kill (a CI cancel, `timeout`) ends the run and cleans up as Ctrl-C does
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone / "rlvr")], check=True)
        # the data CI reads beside its checkout (../shared/data) is this checkout's, wherever the clone is
        env = {**os.environ, "RLVR_DATA_DIR": os.environ.get("RLVR_DATA_DIR", str(ROOT.parent / "shared" / "data"))}
        print(f"running .ci/run in {clone / 'rlvr'} (about half an hour); log: {running_log}", flush=True)
        t0, before, machine_before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN), machine_cpu_s()
        with running_log.open("w") as log:
            # its own process group, so that stopping this script stops every process of the run
            proc = subprocess.Popen(["bash", ".ci/run"], cwd=clone / "rlvr", env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            rc = proc.wait()
        wall, after, machine_after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN), machine_cpu_s()
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        running_log.replace(log_path)
    except KeyboardInterrupt:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        print(f"interrupted: nothing recorded (the run's log so far: {running_log})", file=sys.stderr)
        return 130
    finally:
        if args.keep:
            print(f"kept the clone: {clone / 'rlvr'}")
        else:
            shutil.rmtree(clone, ignore_errors=True)
    text = log_path.read_text()
    print(text[-3000:])
    lanes = lane_minutes(text)
    if rc != 0 or "main_min" not in lanes:
        print(f".ci/run exited {rc}: nothing recorded (log: {log_path})", file=sys.stderr)
        return 1
    figures = {"ci_min": wall / 60, **lanes, "cpu_s": cpu, "cpu_percent": 100.0 * cpu / wall}
    if machine_before is not None and machine_after is not None:
        figures["machine_cpu_s"] = machine_after - machine_before
    command = script_command("record_ci", "ci", args.name)
    path = write_record(args.name, command, figures, note=args.note, at=at)
    print("\n".join(f"{k}: {v:.1f}" for k, v in figures.items()))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

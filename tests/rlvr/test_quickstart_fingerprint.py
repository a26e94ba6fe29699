"""The quickstart's figures are watched: the README's held-out accuracies (``records/quickstart.json``)
come back exactly from the shared SFT base (the `sft_base` fixture: the quickstart's own warm-up,
`rlvr.quickstart.SFT_CONFIG`, one thread) and from its GRPO stage run once, so a change that moves
them fails here until the record is re-measured and the pages that cite it follow.

Exact, not within a tolerance: greedy decoding of a fixed model, and a seeded GRPO stage whose
decoder on a CPU is always ``kv`` (`rlvr.rollout.decoding.choice.CANDIDATES`), give the same
figures bit for bit on this machine, with one thread or two, loaded or quiet, in a fresh clone's
``.venv`` or another (the SFT weights built with ``threads=1`` and with torch's default of two are
identical). The mean length of the greedy completions is checked too: it moves with any change to
what the model writes, even one that leaves the accuracy where it was.

Bit for bit on one kind of CPU: torch's kernels add in another order on AVX2 than on AVX-512 (and
vendors' BLAS differ), so the same run gives other figures on another kind (the SFT base answers
0.342 of the problems on an AMD AVX-512 machine, 0.376 on an AMD AVX2 one). Each kind measured has its
record (``records/quickstart*.json``, ``machine.kernels``: `rlvr.records.cpu_kernels`); the test holds
this machine to the record of its kind, and on a kind without one it is skipped, saying how to record it.
"""

from __future__ import annotations

import os

import pytest

from rlvr.records import RECORDS, Record

pytestmark = pytest.mark.slow

RERUN = "python3 scripts/record_quickstart.py"


@pytest.fixture(scope="session")
def record_for_this_cpu() -> Record:
    """The quickstart record measured on this machine's kind of CPU; where none is, skip before the SFT base
    is built (a session fixture asked for before `sft_base`, so set up first)."""
    from rlvr.records import cpu_kernels

    kernels = cpu_kernels()
    records = [Record.load(p) for p in sorted(RECORDS.glob("quickstart*.json"))]
    broken = [r.name for r in records if not (isinstance(r.machine.get("kernels"), str) and r.machine["kernels"].strip())]
    assert not broken, f"records/{broken[0]}.json: machine.kernels must name the CPU's kernel set (e.g. 'AuthenticAMD AVX2')"
    mine = [r for r in records if r.machine.get("kernels") == kernels]
    if not mine:
        pytest.skip(f"no quickstart record for this CPU's kernels ({kernels or 'unknown'}; recorded: "
                    f"{', '.join(sorted(str(r.machine.get('kernels')) for r in records))}): its figures differ in the last bits "
                    f"from those kinds'; record them with `{RERUN} --name quickstart-KIND` on a quiet machine of this kind")
    assert len(mine) == 1, f"two quickstart records for the kernels {kernels}: {[r.name for r in mine]}"
    return mine[0]


def _moved(what: str, got: dict[str, float], record: Record) -> str:
    want = {k: record.figures[k] for k in got}
    base = os.environ.get("RLVR_TEST_SFT_BASE")
    return (f"the quickstart's {what} moved: measured {got}, records/{record.name}.json has {want} "
            f"(measured {record.date} at {record.commit} on {record.machine.get('cpu') or 'an unnamed CPU'}, "
            f"{record.machine.get('kernels')}). "
            f"If the change is meant to move them, re-measure on a quiet machine of each kind recorded with `{RERUN}` "
            f"(--name {record.name}) and update the pages "
            "tests/test_records.py then names."
            + (f" The SFT base came from RLVR_TEST_SFT_BASE={base}: rebuild it at this commit if it is older." if base else ""))


def test_the_quickstarts_heldout_figures_come_back_exactly_from_its_base_and_its_grpo_stage(record_for_this_cpu, sft_base, tmp_path):
    from rlvr.config import load_config
    from rlvr.quickstart import SFT_CONFIG, heldout, heldout_settings, mean_completion_chars, rl_stage
    from rlvr.train.sft import SFTConfig

    record = record_for_this_cpu
    task, max_new = heldout_settings(load_config(SFTConfig, SFT_CONFIG, []))

    before = heldout(sft_base, task, tmp_path / "eval_before", max_new)
    assert before["problems"] == record.figures["problems"]
    got = {"accuracy_before": before["greedy"]["accuracy"], "chars_before": mean_completion_chars(before)}
    assert all(got[k] == pytest.approx(record.figures[k], abs=1e-9) for k in got), _moved("SFT base", got, record)

    result = rl_stage(sft_base, str(tmp_path), ["log.progress=false", "log.tensorboard=false", "log.plot=false", "threads=1"])
    after = heldout(result.final_model, task, tmp_path / "eval_after", max_new)
    got = {"accuracy_after": after["greedy"]["accuracy"], "chars_after": mean_completion_chars(after)}
    assert all(got[k] == pytest.approx(record.figures[k], abs=1e-9) for k in got), _moved("GRPO stage", got, record)

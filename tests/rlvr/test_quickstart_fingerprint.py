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
this machine to the record of its kind; on a kind without one the figures are not compared (a warning says how to
record them), and the run's learning and run directory are still asserted. This test is also the suite's check of a
GRPO run's directory (metrics, samples, tensorboard, plot, checkpoints, loadable weights): the quickstart's stage
already writes one, so no shorter run repeats it.
"""

from __future__ import annotations

import json
import os
import warnings

import pytest

from rlvr.records import RECORDS, Record

pytestmark = pytest.mark.slow

RERUN = "python3 scripts/record_quickstart.py"


@pytest.fixture(scope="session")
def record_for_this_cpu() -> Record | None:
    """The quickstart record measured on this machine's kind of CPU, or None where none is (the figures are then
    not compared: the run's learning and its run directory are still asserted)."""
    from rlvr.records import cpu_kernels

    kernels = cpu_kernels()
    records = [Record.load(p) for p in sorted(RECORDS.glob("quickstart*.json"))]
    broken = [r.name for r in records if not (isinstance(r.machine.get("kernels"), str) and r.machine["kernels"].strip())]
    assert not broken, f"records/{broken[0]}.json: machine.kernels must name the CPU's kernel set (e.g. 'AuthenticAMD AVX2')"
    mine = [r for r in records if r.machine.get("kernels") == kernels]
    assert len(mine) <= 1, f"two quickstart records for the kernels {kernels}: {[r.name for r in mine]}"
    if not mine:
        warnings.warn(f"no quickstart record for this CPU's kernels ({kernels or 'unknown'}; recorded: "
                      f"{', '.join(sorted(str(r.machine.get('kernels')) for r in records))}): the quickstart's figures are not "
                      f"compared here (they differ in the last bits from those kinds'); record them with "
                      f"`{RERUN} --name quickstart-KIND` on a quiet machine of this kind", UserWarning)
        return None
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


def _same(got: dict[str, float], record: Record | None) -> bool:
    return record is None or all(got[k] == pytest.approx(record.figures[k], abs=1e-9) for k in got)


def test_the_quickstart_learns_writes_its_run_directory_and_its_heldout_figures_come_back_exactly(record_for_this_cpu, sft_base, tmp_path):
    """The quickstart's GRPO stage as `rlvr quickstart` runs it (tensorboard and the plot on: they change no figure),
    checked three ways: its held-out figures against the record of this CPU kind; its learning on validation on
    every kind (AVX2, 2026-12-01: 0.415 at step 0); and the run directory it leaves."""
    from transformers import AutoModelForCausalLM

    from rlvr.config import load_config
    from rlvr.quickstart import SFT_CONFIG, heldout, heldout_settings, mean_completion_chars, rl_stage
    from rlvr.train.sft import SFTConfig

    record = record_for_this_cpu
    task, max_new = heldout_settings(load_config(SFTConfig, SFT_CONFIG, []))

    before = heldout(sft_base, task, tmp_path / "eval_before", max_new)
    got = {"accuracy_before": before["greedy"]["accuracy"], "chars_before": mean_completion_chars(before)}
    if record is not None:
        assert before["problems"] == record.figures["problems"]
    assert _same(got, record), _moved("SFT base", got, record)

    result = rl_stage(sft_base, str(tmp_path), ["log.progress=false", "threads=1"])
    after = heldout(result.final_model, task, tmp_path / "eval_after", max_new)
    got = {"accuracy_after": after["greedy"]["accuracy"], "chars_after": mean_completion_chars(after)}
    assert _same(got, record), _moved("GRPO stage", got, record)

    # learning on the validation split, and the run directory (every kind of CPU)
    run, steps = result.run_dir, result.steps
    assert result.status == "completed" and steps == 30
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = {r["step"]: r["eval/accuracy"] for r in rows if "eval/accuracy" in r}
    assert sorted(evals) == [0, 10, 20, 30] and evals[30] >= evals[0] + 0.10, evals
    assert after["greedy"]["accuracy"] >= before["greedy"]["accuracy"] + 0.10, (before["greedy"], after["greedy"])
    assert (run / "config.yaml").read_text().count("arithmetic-v1") == 1
    assert [r["step"] for r in rows if "reward/mean" in r] == list(range(1, steps + 1))
    for key in ("reward/mean", "policy/kl", "policy/entropy", "groups/zero_variance_frac", "time/generate", "time/train", "verify/errors"):
        assert key in rows[-1], key
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples and {"completion", "reward", "status", "extracted"} <= set(samples[0])
    assert list((run / "tb").glob("events.out.tfevents.*"))
    assert (run / "curves.png").stat().st_size > 10_000
    assert json.loads((run / "run_state.json").read_text())["status"] == "completed"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-20", "step-30"]  # keep_checkpoints=2
    for model_dir in (run / "checkpoints" / "step-30" / "policy", run / "final"):  # Hugging Face format, loadable
        assert AutoModelForCausalLM.from_pretrained(model_dir).num_parameters() > 0

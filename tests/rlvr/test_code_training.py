"""End to end on the sandboxed code environment: the embedded model is warmed up on program
synthesis (`sft_code_quickstart`), then GRPO (`code_quickstart`), with every completion run against
shown and hidden tests in the sandbox by code-v1, raises its accuracy on the held-out split.

Most of the warm-up's demonstrations memorise the shown examples in a lookup table, which fails
the hidden tests; only the sandbox's verdicts can teach the policy to write the function instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sandboxes
from rlvr.config import load_config
from rlvr.train import TrainConfig, train

pytestmark = pytest.mark.slow


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def sandbox() -> sandboxes.Backend:
    """The backend code-v1 grades with (``backend: auto``): the best available, never ``unsafe``."""
    try:
        return sandboxes.default_backend()
    except sandboxes.SandboxError as e:
        pytest.skip(f"no sandbox backend here: {e}")


def test_grpo_on_sandboxed_code_raises_heldout_accuracy(code_sft_base, sandbox, tmp_path, rl_overrides):
    cfg = load_config(TrainConfig, "code_quickstart", rl_overrides(tmp_path, code_sft_base, "log.tensorboard=false"))
    assert cfg.task.id == "program-synthesis-v1" and cfg.task.make().env_id == "code-v1"
    jobs_before = sandbox.info().get("jobs")  # the local backend counts the jobs it ran
    result = train(cfg)
    assert result.status == "completed" and result.steps == cfg.update.steps
    rows = metrics(result.run_dir)
    evals = {r["step"]: r["eval/accuracy"] for r in rows if "eval/accuracy" in r}
    steps = cfg.update.steps
    # learning, measured on the held-out validation split (100 unseen functions), greedy, from the same base
    assert evals[steps] >= evals[0] + 0.4, evals
    train_rows = [r for r in rows if "reward/mean" in r]
    first, last = (sum(r["reward/mean"] for r in part) / len(part) for part in (train_rows[:3], train_rows[-3:]))
    assert last >= first + 0.1, (first, last)
    # every verdict came from a sandbox run that worked: none failed or timed out
    assert sum(r["verify/errors"] + r["verify/timeouts"] + r["verify/dropped"] for r in train_rows) == 0
    if jobs_before is not None:  # one sandbox job per completion: G x prompts each step, plus the evaluations
        assert sandbox.info()["jobs"] - jobs_before >= steps * cfg.rollout.prompts_per_step * cfg.rollout.group_size
    samples = [json.loads(line) for line in (result.run_dir / "samples.jsonl").read_text().splitlines()]
    assert any(s["passed"] and s["extracted"] for s in samples)

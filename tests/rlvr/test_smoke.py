"""The newest lane's end-to-end smoke test (`smoke` marker, scripts/test_newest.sh): every command a
user runs, on a small base the module trains itself, through the command line as a user calls it.
It checks that each path runs to completion on the installed releases and writes what it should,
not that anything is learned (the slow tests do that): the SFT recipe, one step of each policy
recipe (GRPO; PPO with its critic; PRIME with its reward model), both preference recipes (pairs
built by `rlvr pairs build`, then offline DPO; online DPO), a multi-turn episode step, and
`rlvr eval` with the HF engine's decoders. About two minutes on one core.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.logged_metrics import undeclared

pytestmark = pytest.mark.smoke

QUIET = ("log.progress=false", "log.tensorboard=false", "log.plot=false", "threads=1")
ONE_STEP = ("update.steps=1", "optim.warmup_steps=0", "rollout.prompts_per_step=8", "rollout.group_size=8", "rollout.chunk_prompts=8",
            "rollout.max_new_tokens=32", "eval.at_start=false", "eval.every=0", "log.checkpoint_every=0", *QUIET)


def rows(run: Path) -> list[dict]:
    """The run's metrics rows; every name in them is declared in rlvr/logged_metrics.py."""
    found = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert undeclared(k for r in found for k in r) == [], "declare these in rlvr/logged_metrics.py"
    return found


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """`rlvr sft` (the SFT recipe) on a 2-layer model for 300 steps: it answers in the task's format,
    sometimes right, so groups have reward spread."""
    out = tmp_path_factory.mktemp("smoke")
    assert main(["sft", "sft_quickstart", f"output_dir={out}", "name=base", "tiny.layers=2", "steps=300", "eval.limit=20",
                 *QUIET]) == 0
    assert rows(out / "base")  # the SFT recipe's metrics are declared too
    return out / "base" / "final"


@pytest.mark.parametrize("preset,keys,extra", [
    ("grpo", {"loss/total", "policy/kl"}, ()),
    ("ppo", {"critic/value_loss"}, ()),
    # PRIME trains its reward model on the groups its accuracy band keeps, as the policy: a step whose
    # groups are all right or all wrong (sampling differs between devices) trains neither. Keeping
    # every group makes the one step train the reward model whatever the sampler draws.
    ("prime", {"prm/loss"}, ("algo.accuracy_band=[0.0, 1.0]",)),
    ("online_dpo", {"preference/margin"}, ()),
])
def test_one_step_of_each_recipe_that_samples(base, tmp_path, preset, keys, extra):
    assert main(["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={base}", f"algo.preset={preset}",
                 *ONE_STEP, *extra]) == 0
    last = rows(tmp_path / "run")[-1]
    assert last["step"] == 1 and keys <= set(last), sorted(last)
    assert (tmp_path / "run" / "final" / "config.json").is_file()


def test_pairs_build_then_offline_dpo(base, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    assert main(["pairs", "build", "--model", str(base), "--task", "arithmetic-v1", "--prompts", "16", "--n", "4",
                 "--max-new-tokens", "32", "--threads", "1", "--out", str(pairs)]) == 0
    assert pairs.read_text().strip()
    assert main(["train", "quickstart", f"output_dir={tmp_path}", "name=dpo", f"model.name_or_path={base}", "algo.preset=dpo",
                 f"pairs.path={pairs}", "pairs.batch_size=4", *ONE_STEP]) == 0
    assert "preference/margin" in rows(tmp_path / "dpo")[-1]


def test_one_step_on_multi_turn_episodes(base, tmp_path):
    assert main(["train", "tool_products", f"output_dir={tmp_path}", "name=tool", f"model.name_or_path={base}", *ONE_STEP]) == 0
    last = rows(tmp_path / "tool")[-1]
    assert last["step"] == 1 and "episode/turns" in last


def test_eval_with_each_decoder_gives_the_same_report(base, tmp_path, capsys):
    reports = {}
    for decode in ("kv", "static", "generate", "auto"):
        out = tmp_path / decode
        assert main(["eval", "--model", str(base), "--task", "arithmetic-v1", "--limit", "20", "--threads", "1", "--out", str(out),
                     "--rollout", f"hf.decode={decode}"]) == 0
        reports[decode] = json.loads((out / "report.json").read_text())
    assert len({r["greedy"]["correct"] for r in reports.values()}) == 1
    assert reports["kv"]["problems"] == 20
    assert [reports[d]["engine"]["decoder"] for d in ("kv", "static", "generate")] == ["kv", "static", "generate"]
    assert reports["auto"]["engine"]["decoder"] == reports["auto"]["engine"]["decoder_choice"]["name"] == "kv"

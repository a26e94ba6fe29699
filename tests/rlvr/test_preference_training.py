"""The preference recipe end to end on the real embedded model: `rlvr pairs build` writes pairs
whose chosen side passes and rejected side fails when re-verified; offline DPO trains on them
through the same entry point as every preset, with its reference log-probs cached (one model in
memory) and equal to a live reference's; online DPO and KTO train on the policy's own verified
samples."""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from pathlib import Path

import pytest

import tasks
from envs.types import Problem
from rlvr import UserError
from rlvr.cli import main
from rlvr.logged_metrics import undeclared
from rlvr.train import train
from rlvr.train.pairs import meta_path
from rlvr.train.recipes import load_run_config
from tests.rlvr.gloo import train_in_two_processes

pytestmark = pytest.mark.slow

QUIET = ("eval.every=0", "eval.at_start=false", "log.tensorboard=false", "log.plot=false", "log.checkpoint_every=0")


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def resources(run: Path) -> dict:
    return json.loads((run / "resources.json").read_text())


def test_pairs_build_writes_pairs_that_pass_and_fail_when_verified_again(verified_pairs, sft_base):
    rows = [json.loads(line) for line in verified_pairs.read_text().splitlines()]
    assert len(rows) >= 20
    env = tasks.make("arithmetic-v1", direct_frac=0.5).env
    for r in rows:
        problem = Problem(r["problem_id"], r["prompt"], r["reference"])
        assert env.verify(problem, r["chosen"]).passed and not env.verify(problem, r["rejected"]).passed
        assert r["chosen_verdict"]["passed"] and not r["rejected_verdict"]["passed"] and r["chosen"] != r["rejected"]
    assert max(Counter(r["problem_id"] for r in rows).values()) <= 2  # --pairs-per-group 2
    meta = json.loads(meta_path(verified_pairs).read_text())
    assert meta["model"] == str(sft_base) and meta["task"]["id"] == "arithmetic-v1" and meta["task"]["config"]["direct_frac"] == 0.5
    assert meta["data_checksum"].startswith("sha256:") and meta["prompts"] == 48 and meta["seed"] == 0
    assert meta["sampling"] == {"n": 8, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64}
    assert meta["verdicts"]["completions"] == 48 * 8 and meta["pairs"] == len(rows)
    assert meta["pairs_sha256"] == hashlib.sha256(verified_pairs.read_bytes()).hexdigest()
    assert main(["pairs", "check", str(verified_pairs), "--task", "arithmetic-v1", "--task-config", "{direct_frac: 0.5}"]) == 0


def test_offline_dpo_raises_heldout_accuracy_with_one_model_in_memory(verified_pairs, sft_base, tmp_path, rl_overrides, capsys):
    args = rl_overrides(tmp_path, sft_base, "algo.preset=dpo", f"pairs.path={verified_pairs}", "pairs.batch_size=16", "update.steps=10",
                        "optim.warmup_steps=0", *QUIET, "eval.at_start=true", "eval.every=10", "eval.limit=200")
    result = train(load_run_config("quickstart", args))
    assert result.status == "completed" and result.steps == 10
    evals = {r["step"]: r["eval/accuracy"] for r in metrics(result.run_dir) if "eval/accuracy" in r}
    # learning, measured on the held-out validation split (200 problems), from the same base (36 pairs here: 0.38 -> 0.59)
    assert evals[10] >= evals[0] + 0.10, evals
    rows = [r for r in metrics(result.run_dir) if "loss/total" in r]
    first, last = rows[0], rows[-1]
    # the cached reference log-probs are the policy's own at the start: every log-ratio is 0
    assert first["loss/total"] == pytest.approx(math.log(2), abs=1e-4) and abs(first["preference/margin"]) < 1e-4
    assert last["preference/margin"] > 0.01 and last["preference/reward_accuracy"] > 0.5 and last["loss/total"] < math.log(2)
    for key in ("preference/reward_chosen", "preference/reward_rejected", "preference/logp_chosen", "preference/logp_rejected",
                "optim/grad_norm", "data/epoch", "time/train"):
        assert key in last, key
    assert undeclared(k for r in metrics(result.run_dir) for k in r) == []
    held = resources(result.run_dir)
    assert held["models_in_memory"] == 1 and [m["role"] for m in held["models"]] == ["policy"] and held["optimizer_state_bytes"]["policy"] > 0
    assert (result.run_dir / "reference_logps.pt").is_file() and json.loads((result.run_dir / "pairs_report.json").read_text())["left_out"] == 0

    # another pairs file on resume: the cache no longer matches and is computed again, from the reference loaded for that
    fewer = tmp_path / "fewer.jsonl"
    fewer.write_text("".join(verified_pairs.read_text().splitlines(keepends=True)[:-3]))
    capsys.readouterr()
    resumed = train(load_run_config("quickstart", [*args, f"pairs.path={fewer}", "resume=true", "update.steps=11", "eval.every=0"]))
    assert resumed.status == "completed" and resumed.steps == 11
    assert "computed for other pairs or another reference: computing it again" in capsys.readouterr().out
    assert [m["role"] for m in resources(result.run_dir)["models"]] == ["policy", "reference (log-probs recomputed, then released)"]


def test_cached_reference_log_probs_equal_a_live_reference(verified_pairs, sft_base, tmp_path, rl_overrides):
    runs = {}
    for cache in ("true", "false"):
        args = rl_overrides(tmp_path / cache, sft_base, "algo.preset=dpo", f"pairs.path={verified_pairs}", "pairs.batch_size=16",
                            "update.steps=3", "optim.warmup_steps=0", f"algo.preference.reference_cache={cache}", *QUIET)
        runs[cache] = train(load_run_config("quickstart", args)).run_dir
    cached, live = metrics(runs["true"]), metrics(runs["false"])
    for a, b in zip(cached, live):
        for key in ("loss/total", "preference/margin", "preference/reward_chosen", "preference/reward_rejected"):
            assert a[key] == pytest.approx(b[key], rel=1e-3, abs=1e-5), key
    assert resources(runs["false"])["models_in_memory"] == 2 and resources(runs["true"])["models_in_memory"] == 1
    assert not (runs["false"] / "reference_logps.pt").exists()


@pytest.mark.parametrize("preset", ["online_dpo", "kto"])
def test_online_presets_train_on_the_policys_verified_samples(preset, sft_base, tmp_path, rl_overrides):
    args = rl_overrides(tmp_path, sft_base, f"algo.preset={preset}", "update.steps=3", "optim.warmup_steps=0", "rollout.prompts_per_step=8",
                        "rollout.group_size=4", "rollout.chunk_prompts=8", *QUIET)
    result = train(load_run_config("quickstart", args))
    assert result.status == "completed" and result.steps == 3
    rows = metrics(result.run_dir)
    for r in rows:
        assert {"reward/accuracy", "sampling/prompts", "time/generate", "loss/total", "optim/lr"} <= set(r)
    assert undeclared(k for r in rows for k in r) == []
    # step 1 reads the policy against its own copy; later steps measure a policy the updates have moved
    # (on fresh samples, so the sign of the rewards is not asserted)
    if preset == "online_dpo":  # dynamic sampling kept only groups with a pass and a fail: each gives its pairs
        assert all(r["batch/groups_with_pairs"] == r["batch/groups"] and r["batch/pairs"] >= r["batch/groups"] for r in rows)
        assert rows[0]["preference/margin"] == pytest.approx(0, abs=1e-5) and rows[0]["loss/total"] == pytest.approx(math.log(2), abs=1e-5)
        assert abs(rows[-1]["preference/margin"]) > 1e-4 and 0 <= rows[-1]["preference/reward_accuracy"] <= 1
    else:  # every completion is an example; the reference point is the clamped KL estimate
        assert all(r["batch/desirable"] + r["batch/undesirable"] == 32 for r in rows)
        assert rows[0]["loss/total"] == pytest.approx(0.5, abs=1e-5) and rows[0]["preference/kl_ref_point"] == 0.0
        assert all(r["preference/kl_ref_point"] >= 0 for r in rows) and abs(rows[-1]["preference/reward_desirable"]) > 1e-4
    assert [m["role"] for m in resources(result.run_dir)["models"]] == ["policy", "reference"]
    assert (result.run_dir / "samples.jsonl").read_text().strip()


def test_a_trl_pairs_file_trains_and_its_bad_rows_are_reported(sft_base, tmp_path, rl_overrides, capsys):
    rows = [json.dumps({"prompt": "Compute 12+30.\n", "chosen": "2+0=2\n1+3=4\nAnswer: 42", "rejected": "Answer: 41"}),
            json.dumps({"prompt": [{"role": "user", "content": "Compute 11+11."}], "chosen": [{"role": "assistant", "content": "Answer: 22"}],
                        "rejected": [{"role": "assistant", "content": "Answer: 23"}]}),
            json.dumps({"prompt": "Compute 1+1.\n", "chosen": "Answer: 2"}),
            json.dumps({"prompt": "Compute 2+2.\n", "chosen": "Answer: 4" + " and so on" * 40, "rejected": "Answer: 5"})]
    path = tmp_path / "trl.jsonl"
    path.write_text("\n".join(rows) + "\n")
    args = rl_overrides(tmp_path, sft_base, "algo.preset=dpo", f"pairs.path={path}", "pairs.batch_size=2", "pairs.max_length=200",
                        "update.steps=1", *QUIET)
    with pytest.raises(UserError, match=r"1 of 4 rows are malformed, more than 5%"):  # as dataset tasks: fix such a file
        train(load_run_config("quickstart", args))
    path.write_text("\n".join(rows + rows[:1] * 20) + "\n")  # 1 malformed row of 24: under the limit, left out and reported
    result = train(load_run_config("quickstart", [*args, "overwrite=true"]))
    assert result.status == "completed"
    report = json.loads((result.run_dir / "pairs_report.json").read_text())
    assert (report["pairs"], report["left_out"]) == (22, 2) and report["left_out_rows"][0] == f"{path}:3: missing 'rejected'"
    assert report["left_out_rows"][1].startswith(f"{path}:4: ") and "longer than 200" in report["left_out_rows"][1]
    out = capsys.readouterr().out
    assert f"{path}:3: missing 'rejected'" in out and f"{path}:4: " in out and "longer than 200" in out
    assert metrics(result.run_dir)[0]["batch/pairs"] == 2


@pytest.mark.parametrize("preset", ["dpo", "kto"])
def test_two_processes_train_a_preference_preset_and_log_whole_batch_values(preset, request, sft_base, tmp_path, rl_overrides):
    """A real two-process (gloo) run: each process takes its share of the pairs (or of the sampled
    prompts), the loss is normalised over both, and the logged loss and statistics are the whole batch's."""
    extra = [f"pairs.path={request.getfixturevalue('verified_pairs')}", "pairs.batch_size=8"] if preset == "dpo" else \
        ["rollout.prompts_per_step=8", "rollout.group_size=4", "rollout.chunk_prompts=8"]
    args = rl_overrides(tmp_path, sft_base, f"algo.preset={preset}", "update.steps=2", "optim.warmup_steps=0", *QUIET, *extra)
    train_in_two_processes("quickstart", *args, steps=2)
    rows = metrics(tmp_path / "run")
    # step 1 reads the policy against its own starting weights: the whole batch's loss is ln 2 (DPO) or 0.5 (KTO),
    # not a process's share of it
    assert rows[0]["loss/total"] == pytest.approx(math.log(2) if preset == "dpo" else 0.5, abs=1e-5)
    assert abs(rows[1]["preference/margin" if preset == "dpo" else "preference/reward_desirable"]) > 1e-5  # the first step moved the policy


def test_dpo_scores_the_reference_of_only_the_pairs_its_steps_use(sft_base, tmp_path, rl_overrides, monkeypatch, capsys):
    """Issue 22: a large pairs file and 2 steps score 2 x batch_size pairs before step 1, not the
    file; the run trains exactly as when every pair was scored (the old behaviour), and a resumed
    run with more steps scores only the pairs its new steps draw."""
    import torch
    from safetensors.torch import load_file

    from rlvr.train.preference import OfflinePairs, sources

    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"Compute {a}+{b}.\n", "chosen": f"Answer: {a + b}", "rejected": f"Answer: {a + b + 1}"}) + "\n"
                            for a in range(60) for b in range(40)))  # 2400 pairs
    scored: list[int] = []
    real = sources.sequence_logps

    def counted(model, batch, *args, **kwargs):
        scored.append(batch.input_ids.shape[0])  # sequences scored by the reference (the policy's own forwards do not come here)
        return real(model, batch, *args, **kwargs)

    monkeypatch.setattr(sources, "sequence_logps", counted)
    args = ["algo.preset=dpo", f"pairs.path={path}", "pairs.batch_size=8", "update.steps=2", "optim.warmup_steps=0", *QUIET]
    lazy = train(load_run_config("quickstart", rl_overrides(tmp_path / "lazy", sft_base, *args)))
    assert lazy.status == "completed" and sum(scored) == 2 * 2 * 8  # chosen and rejected of 2 steps x 8 pairs
    logps = torch.load(lazy.run_dir / "reference_logps.pt", weights_only=False)["logps"]
    assert logps.shape == (2400, 2) and int((~logps.isnan()).all(-1).sum()) == 16
    assert "reference log-probs of 16 pairs (of 2400; those 2 steps use)" in capsys.readouterr().out

    # the old behaviour: every pair of the file scored before step 1
    monkeypatch.setattr(OfflinePairs, "used", lambda self, start, steps, count: torch.arange(len(self)))
    scored.clear()
    full = train(load_run_config("quickstart", rl_overrides(tmp_path / "full", sft_base, *args)))
    assert sum(scored) == 2 * 2400
    for a, b in zip(metrics(lazy.run_dir), metrics(full.run_dir), strict=True):
        for key in ("loss/total", "preference/margin", "preference/reward_chosen", "preference/reward_rejected", "optim/grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
    lazy_w, full_w = load_file(lazy.final_model / "model.safetensors"), load_file(full.final_model / "model.safetensors")
    for k in full_w:
        torch.testing.assert_close(lazy_w[k], full_w[k], rtol=1e-5, atol=1e-7)
    monkeypatch.undo()

    # resumed with a third step: only its 8 pairs are scored, from a reference loaded for that
    monkeypatch.setattr(sources, "sequence_logps", counted)
    scored.clear()
    resumed = train(load_run_config("quickstart", rl_overrides(tmp_path / "lazy", sft_base, *args, "update.steps=3", "resume=true")))
    assert resumed.status == "completed" and resumed.steps == 3 and sum(scored) == 2 * 8
    assert [m["role"] for m in resources(lazy.run_dir)["models"]] == ["policy", "reference (log-probs recomputed, then released)"]
    logps = torch.load(lazy.run_dir / "reference_logps.pt", weights_only=False)["logps"]
    assert int((~logps.isnan()).all(-1).sum()) == 24

"""Asynchronous generation (``rollout.async``) in parts: the config key, the staleness schedule and
gate, the decoupled PPO loss, partial rollouts on the real model (long and short answers), the
generation worker process with its shared-memory weights and sync probe, and the refusals. The runs
end to end are in test_async_training.py."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from envs.types import Problem, Status, Verdict
from rlvr import UserError
from rlvr.algos.filters import GroupFilter
from rlvr.algos.aggregation import Normalizer
from rlvr.algos.objective import POLICY_LOSSES, ObjectiveInputs, PolicyLossInputs, policy_objective, takes_behaviour
from rlvr.algos.config import algo_config
from rlvr.config import ConfigError, describe, dump_yaml, load_config
from rlvr.models.batch import trainer_logprobs
from rlvr.models.loading import load_model
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.rollout.engines.hf import HFGenerateEngine
from rlvr.rollout.partial import PartialRollouts
from rlvr.rollout.sampling import Group, GroupSampler
from rlvr.rollout.staleness import (generation_lag, max_segments, round_version, sample_staleness, segment_tokens, staleness_metrics,
                                    within_bound)
from rlvr.rollout.sync import SyncProbe, WeightSyncError
from rlvr.rollout.tensors import build_rollouts
from rlvr.rollout.worker import ProcessEngine, WeightSlots, WorkerDied, WorkerSettings
from rlvr.train import TrainConfig, train
from rlvr.train.recipes import load_run_config

REPO = Path(__file__).resolve().parents[2]


# -- the config key ---------------------------------------------------------------------------------

def test_rollout_async_is_a_config_key_in_files_overrides_and_the_reference(tmp_path):
    cfg = load_config(TrainConfig, "quickstart", ["rollout.async.max_staleness=2", "rollout.async.partial=true"])
    assert cfg.rollout.async_.max_staleness == 2 and cfg.rollout.async_.partial
    dump_yaml(cfg, tmp_path / "config.yaml")
    written = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert written["rollout"]["async"]["max_staleness"] == 2 and "async_" not in written["rollout"]
    again = load_config(TrainConfig, str(tmp_path / "config.yaml"))  # a run directory's config reads back
    assert again.rollout.async_ == cfg.rollout.async_
    keys = [key for key, _, _ in describe(TrainConfig)]
    assert "rollout.async.max_staleness" in keys and not any("async_" in k for k in keys)
    with pytest.raises(ConfigError, match="did you mean 'rollout.async.max_staleness'"):
        load_config(TrainConfig, "quickstart", ["rollout.async.max_stalenes=2"])
    with pytest.raises(ConfigError, match="rollout.async.max_staleness' must be >= 0"):
        load_config(TrainConfig, "quickstart", ["rollout.async.max_staleness=-1"])


# -- the schedule and the gate ----------------------------------------------------------------------

@pytest.mark.parametrize("partial", [False, True])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_no_schedule_ever_trains_a_sample_older_than_k(k, partial):
    """Every generation the schedule allows (started in round r, spanning s <= max_segments rounds,
    trained at the step of its last round) is at most k versions older than the policy it trains."""
    if partial and k < 2:
        return  # refused (test_partial_needs_two_versions_of_room)
    lag = generation_lag(k, partial)
    seen = set()
    for start in range(1, 40):
        for spans in range(1, max_segments(k, lag) + 1):
            trained_at = start + spans - 1  # step n trains round n with the policy of version n - 1
            staleness = (trained_at - 1) - round_version(start, lag)
            assert 0 <= staleness <= k
            seen.add(staleness)
    assert max(seen) == k  # and the bound is used: the worker runs as far ahead as k allows
    if not partial:
        assert [(n - 1) - round_version(n, lag) for n in range(1, 8)] == [min(k, n - 1) for n in range(1, 8)]


def _completion(versions: list[int]) -> Completion:
    return Completion(0, [1], list(range(len(versions))), [0.0] * len(versions), "", versions=versions)


def _group(*versions: list[int]) -> Group:
    return Group(Problem("p", "q", "1"), [_completion(v) for v in versions], [Verdict(1.0, True, Status.OK)] * len(versions))


def test_the_gate_drops_a_whole_group_when_any_token_is_older_than_k():
    fresh = _group([5, 5], [4, 4])
    mixed = _group([5, 5], [2, 5, 5])  # a partial rollout begun by version 2: its oldest token counts
    kept, dropped = within_bound([fresh, mixed], current=5, max_staleness=2)
    assert kept == [fresh] and dropped == [mixed]
    assert sample_staleness(mixed.completions[1], 5) == 3
    kept, dropped = within_bound([fresh, mixed], current=5, max_staleness=3)
    assert kept == [fresh, mixed] and not dropped


def test_staleness_metrics_count_samples_and_tokens():
    m = staleness_metrics([_group([5, 5], [4, 4]), _group([3, 5], [5])], current=5)
    assert m["async/staleness_hist/0"] == 2 and m["async/staleness_hist/1"] == 1 and m["async/staleness_hist/2"] == 1
    assert m["async/staleness_max"] == 2 and m["async/staleness_mean"] == pytest.approx(3 / 4)
    assert m["async/token_staleness_mean"] == pytest.approx((0 + 0 + 1 + 1 + 2 + 0 + 0) / 7)
    assert m["async/mixed_version_frac"] == pytest.approx(1 / 4)


def test_segment_budget_splits_the_completion_over_k_rounds():
    assert segment_tokens(64, 2) == 32 and segment_tokens(64, 3) == 22 and segment_tokens(64, 3, partial_tokens=8) == 8
    assert max_segments(4, generation_lag(4, True)) == 4 and max_segments(4, generation_lag(4, False)) == 1


# -- the decoupled loss -------------------------------------------------------------------------------

def _loss_inputs(logp, prox, behav, adv, mask):
    from rlvr.algos.ratio import RATIOS

    return PolicyLossInputs(logp, prox, RATIOS.get("token")(logp, prox, mask), adv, mask, behaviour_logp=behav)


def test_decoupled_loss_is_the_clipped_loss_when_behaviour_proximal_and_current_agree():
    torch.manual_seed(0)
    logits = torch.randn(3, 5)
    mask = torch.tensor([[1.0] * 5, [1.0] * 3 + [0.0] * 2, [1.0] * 5])
    adv = torch.randn(3, 5)
    for parts_kwargs in ({}, {"clip_high": 0.28}, {"dual_clip": 3.0}):
        out = {}
        for name in ("clipped", "decoupled"):
            logp = torch.log_softmax(logits, -1).clone().requires_grad_()
            now = logp.detach()
            parts = algo_config("grpo", policy_loss={"name": name, **parts_kwargs}, kl={"mode": "off"})
            norm = Normalizer(sequences=3.0, tokens=float(mask.sum()), max_len=5.0)
            inputs = ObjectiveInputs(logp, now, adv, mask, norm, behaviour_logp=now if takes_behaviour(name) else None)
            loss, stats = policy_objective(inputs, parts)
            loss.backward()
            out[name] = (loss.detach(), logp.grad.clone(), stats)
        assert torch.equal(out["decoupled"][0], out["clipped"][0])
        assert torch.equal(out["decoupled"][1], out["clipped"][1])
        assert out["decoupled"][2]["behaviour_weight_mean"] == pytest.approx(1.0)


def test_decoupled_loss_weights_by_proximal_over_behaviour_and_clips_around_the_proximal_policy():
    # one token each: pi = 0.6, pi_prox = 0.4, pi_behav = 0.2 -> u = 1.5, w = 2
    logp = torch.log(torch.tensor([[0.6], [0.6]])).requires_grad_()
    prox = torch.log(torch.tensor([[0.4], [0.4]]))
    behav = torch.log(torch.tensor([[0.2], [0.2]]))
    adv = torch.tensor([[1.0], [-1.0]])
    mask = torch.ones(2, 1)
    loss, stats = POLICY_LOSSES.get("decoupled")(_loss_inputs(logp, prox, behav, adv, mask), 0.2, 0.2)
    # A > 0: -w * min(u A, clip(u) A) = -2 * 1.2 (clipped at 1 + 0.2); A < 0: -w * min(-1.5, -1.2) = 2 * 1.5
    assert torch.allclose(loss.detach(), torch.tensor([[-2.4], [3.0]]), atol=1e-6)
    loss.sum().backward()
    # gradient in log pi: 0 for the clipped token, -w * A * u = 2 * 1.5 = 3 for the other
    assert torch.allclose(logp.grad, torch.tensor([[0.0], [3.0]]), atol=1e-5)
    assert stats["behaviour_weight_mean"] == pytest.approx(2.0) and stats["behaviour_weight_max"] == pytest.approx(2.0)
    capped, stats = POLICY_LOSSES.get("decoupled")(_loss_inputs(logp.detach(), prox, behav, adv, mask), 0.2, 0.2, None, 1.5)
    assert torch.allclose(capped, loss.detach() * 1.5 / 2, atol=1e-6) and stats["behaviour_capped_frac"] == 1.0
    # the coupled loss clips around the stale behaviour policy instead: r = pi / pi_behav = 3, far outside 1 +- 0.2
    coupled, _ = POLICY_LOSSES.get("clipped")(_loss_inputs(logp.detach(), behav, None, adv, mask), 0.2, 0.2)
    assert torch.allclose(coupled, torch.tensor([[-1.2], [3.0]]), atol=1e-6)


def test_decoupled_loss_is_registered_with_its_arguments_and_refuses_a_second_correction():
    algo = algo_config("grpo", policy_loss={"name": "decoupled", "behaviour_cap": 2.0})
    assert dict(algo.policy_loss) == {"name": "decoupled", "clip_low": 0.2, "clip_high": 0.2, "dual_clip": None, "behaviour_cap": 2.0}
    assert takes_behaviour("decoupled") and not takes_behaviour("clipped")
    with pytest.raises(ConfigError, match="algo.policy_loss=decoupled .* algo.correction=tis"):
        algo_config("grpo", policy_loss="decoupled", correction="tis")


def test_the_trainers_decoupled_objective_equals_the_synchronous_one_on_policy(sft_base):
    """Through the recipe's own objective on the real model: a batch sampled by the current weights
    (behaviour = proximal = current) gives the clipped loss and gradient under the decoupled loss."""
    from rlvr.rollout.sampling import Group as G
    from rlvr.train.policy_gradient import PolicyObjective

    model, tok = load_model(str(sft_base))
    engine = HFGenerateEngine(model, tok, decode="kv")
    sampling = SamplingParams(max_new_tokens=24, seed=3)
    completions = engine.generate(["12+7=", "3*4="], 4, sampling)
    groups = [G(Problem(str(i), p, "0"), completions[4 * i:4 * i + 4], [Verdict(float(j % 2), bool(j % 2), Status.OK) for j in range(4)])
              for i, p in enumerate(["12+7=", "3*4="])]
    r = build_rollouts(groups, tok.pad_token_id, drop_failed=True)
    adv = (r.rewards - 0.5).unsqueeze(1) * r.mask
    rows = r.rows
    results = {}
    for name in ("clipped", "decoupled"):
        model.zero_grad()
        algo = algo_config("grpo", policy_loss=name, kl={"mode": "off"})
        objective = PolicyObjective(model, r.batch, r.mask, adv, None, None, r.rollout_logp, algo, sampling, 24.0, torch.device("cpu"))
        loss, stats, _ = objective.loss(rows, objective.totals(rows))
        loss.backward()
        results[name] = (float(loss.detach()), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]), stats)
    # behaviour = the engine's log-probs of the current weights: the trainer's up to float rounding (w = 1 +- 1e-6)
    assert results["decoupled"][2]["behaviour_weight_max"] == pytest.approx(1.0, abs=1e-5)
    assert results["decoupled"][0] == pytest.approx(results["clipped"][0], rel=1e-5, abs=1e-7)
    g_decoupled, g_clipped = results["decoupled"][1], results["clipped"][1]
    assert float((g_decoupled - g_clipped).norm() / g_clipped.norm()) < 1e-5


# -- partial rollouts on the real model -------------------------------------------------------------

def test_partial_rollouts_cut_long_answers_continue_them_and_keep_each_tokens_version(sft_base):
    """arithmetic-v1 with direct_frac 0.5: the SFT model answers some prompts in a few tokens and
    works others out at length ("Answer: 342" is 12 tokens of its character-level vocabulary, a worked
answer 25 to 30). With a 16-token budget the short groups finish in their first round
    and the long ones are parked, continued in the next round (marked with the newer version) and
    finish there, out of the order they were started; a continued completion's tokens and log-probs
    are what the engine gives for the whole completion."""
    import tasks

    model, tok = load_model(str(sft_base))
    engine = HFGenerateEngine(model, tok, decode="kv")
    task = tasks.make("arithmetic-v1", direct_frac=0.5)
    problems = [task.get("train", i) for i in range(12)]
    style_prompts = [task.env.format_prompt(p) for p in problems]
    partial = PartialRollouts(group_size=2, max_new_tokens=64, segment_tokens=16, max_segments=3)
    first = engine.generate(style_prompts, 2, SamplingParams(max_new_tokens=partial.first_budget(), seed=1))
    for c in first:
        c.versions = [0] * len(c.token_ids)
    done_p, done_c = partial.hold(problems, first)
    assert done_p and partial.parked, "both short and long answers"
    assert all(len(c.token_ids) <= 16 and not partial.is_cut(c) for c in done_c)
    parked_ids = [g.problem.id for g in partial.parked]

    def generate(prompts, sampling):
        return engine.generate_ids(prompts, 1, sampling)

    later_p, later_c = partial.carried(generate, SamplingParams(max_new_tokens=64, seed=2), version=1, tokenizer=tok)
    assert [p.id for p in later_p] == [i for i in parked_ids if i in {p.id for p in later_p}]  # in the order they were started
    rounds = 2
    while partial.parked:
        more_p, more_c = partial.carried(generate, SamplingParams(max_new_tokens=64, seed=2 + rounds), version=rounds, tokenizer=tok)
        later_p, later_c, rounds = later_p + more_p, later_c + more_c, rounds + 1
    assert rounds <= partial.max_segments  # nothing spans more rounds than allowed: the last one runs to the end
    assert sorted(p.id for p in later_p) == sorted(parked_ids)
    mixed = [c for c in later_c if len(set(c.versions)) > 1]
    assert mixed and all(c.versions[:16] == [0] * 16 and set(c.versions[16:]) <= {1, 2} for c in mixed)
    for c in later_c:
        assert len(c.versions) == len(c.token_ids) == len(c.logprobs) and len(c.char_ends) == len(c.token_ids)
        assert c.text == tok.decode(c.token_ids, skip_special_tokens=True)
    trainer = trainer_logprobs(model, [c.prompt_ids for c in mixed], [c.token_ids for c in mixed], tok.pad_token_id)
    for c, lp in zip(mixed, trainer):  # the same weights throughout here: the joined log-probs are the whole completion's
        assert max(abs(a - b) for a, b in zip(c.logprobs, lp)) < 1e-4
    # groups that finished out of order form a batch: each keeps its own G members and group statistics
    verdicts = [Verdict(float(i % 2), bool(i % 2), Status.OK) for i in range(len(later_c))]
    groups = [Group(p, later_c[2 * i:2 * i + 2], verdicts[2 * i:2 * i + 2]) for i, p in enumerate(later_p)]
    r = build_rollouts(groups + [Group(p, done_c[2 * i:2 * i + 2], verdicts[:2]) for i, p in enumerate(done_p)], tok.pad_token_id,
                       drop_failed=True)
    assert r.group_ids.tolist() == [i for i in range(len(groups) + len(done_p)) for _ in range(2)]
    assert all(c.prompt_ids == task_ids for c, task_ids in zip(r.completions, [c.prompt_ids for c in r.completions]))


def test_the_sampler_verifies_carried_groups_first_and_parks_unfinished_ones(sft_base):
    """GroupSampler's partial-rollout hooks: carried groups enter the batch first and count towards
    it, parked ones do not; without the hooks the sampler is what it was."""
    import tasks
    from envs.pool import VerifierPool

    model, tok = load_model(str(sft_base))
    engine = HFGenerateEngine(model, tok, decode="kv")
    task = tasks.make("arithmetic-v1", direct_frac=0.5)
    stream = task.stream("train")
    partial = PartialRollouts(group_size=2, max_new_tokens=64, segment_tokens=16, max_segments=2)
    pool = VerifierPool(task.env, workers=0)
    try:
        def generate(problems, budget=None):
            out = engine.generate([task.env.format_prompt(p) for p in problems], 2,
                                  SamplingParams(max_new_tokens=budget or partial.first_budget(), seed=5))
            for c in out:
                c.versions = [0] * len(c.token_ids)
            return out

        sampler = GroupSampler(generate=generate, submit=lambda p, c: pool.submit(p, [x.text for x in c]), group_size=2, chunk_prompts=8,
                               hold=partial.hold,
                               carried=lambda: partial.carried(lambda prompts, s: engine.generate_ids(prompts, 1, s),
                                                               SamplingParams(seed=6), 1, tok))
        first = sampler.collect(lambda n: [next(stream) for _ in range(n)], 8)
        parked = [g.problem.id for g in partial.parked]
        assert parked and len(first.kept) == 8 - len(parked)  # no filter: the parked groups leave the first batch short
        second = sampler.collect(lambda n: [next(stream) for _ in range(n)], 8)
        assert [g.problem.id for g in second.kept[:len(parked)]] == parked  # carried first, in the order they were started
        assert all(len(g.completions) == 2 and len(g.verdicts) == 2 for g in second.kept)
        # dynamic sampling on groups that finish out of order: a carried group is filtered as a whole, like any other
        filtering = dataclasses.replace(sampler, group_filter=GroupFilter(drop_zero_variance=True), budget_factor=3.0)
        for _ in range(3):
            carried_now = [g.problem.id for g in partial.parked]
            third = filtering.collect(lambda n: [next(stream) for _ in range(n)], 4)
            carried = [g for g in third.generated if g.problem.id in carried_now]
            assert len(carried) == len(carried_now)
            kept_ids = {g.problem.id for g in third.kept}
            for g in third.generated:
                spread = len({v.reward for v in g.verdicts}) > 1
                if g.problem.id in carried_now:  # kept exactly when its rewards differ (on top of the batch's target)
                    assert (g.problem.id in kept_ids) == spread
                elif not spread:
                    assert g.problem.id not in kept_ids
            assert len([g for g in third.kept if g.problem.id not in carried_now]) <= 4
    finally:
        pool.close()


# -- the generation worker process ------------------------------------------------------------------

def test_a_flat_slot_holds_a_copy_of_every_tensor_and_pickles_as_one_buffer_per_dtype():
    import pickle
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401 - its reductions share storages by file descriptor

    from rlvr.rollout.worker import FlatSlot

    tensors = {"w": torch.randn(3, 5), "empty": torch.empty(0), "scalar": torch.tensor(2.0), "half": torch.randn(7, dtype=torch.bfloat16),
               "ids": torch.arange(4), "w2": torch.randn(2, 3)}
    slot = FlatSlot.copy_of(tensors)
    assert list(slot) == list(tensors) and all(torch.equal(slot[k], t) and slot[k].is_shared() for k, t in tensors.items())
    assert len(slot.buffers) == 3  # float32, bfloat16, int64
    assert all(v.data_ptr() % 64 == 0 for v in slot.values() if v.numel())  # each view on a 64-byte boundary
    slot["w"].add_(1)  # a view: writing it writes the buffer, and leaves its neighbours alone
    assert torch.equal(slot["w"], tensors["w"] + 1) and torch.equal(slot["w2"], tensors["w2"])
    again = pickle.loads(ForkingPickler.dumps(slot))
    assert isinstance(again, FlatSlot) and all(torch.equal(again[k], slot[k]) for k in slot)
    again["ids"].fill_(9)  # the same shared memory, not a copy
    assert slot["ids"].tolist() == [9] * 4


def test_the_worker_process_generates_like_the_engine_takes_pushed_weights_and_is_named_when_it_dies(sft_base):
    model, tok = load_model(str(sft_base))
    slots = WeightSlots(model, 3)
    local = HFGenerateEngine(model, tok, decode="kv")
    worker = ProcessEngine(model, tok, slots, WorkerSettings(decode="kv", threads=1))
    try:
        worker.load_weights(slots[0])
        sampling = SamplingParams(max_new_tokens=16, seed=7)
        remote = worker.generate(["2+3=", "10-4="], 2, sampling)
        here = local.generate(["2+3=", "10-4="], 2, sampling)
        assert [c.token_ids for c in remote] == [c.token_ids for c in here]  # same seed, same decoder, same weights
        assert max(abs(a - b) for r, h in zip(remote, here) for a, b in zip(r.logprobs, h.logprobs)) < 1e-5
        probe = SyncProbe.from_completions(remote, max_gap=1e-5)
        probe.check(worker, model, tok.pad_token_id)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 1e-2)
        slots.stage(1, model)  # a new version through shared memory
        worker.load_weights(slots[1])
        assert probe.check(worker, model, tok.pad_token_id).mean_gap < 1e-6
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 1e-2)
        slots.stage(2, model)  # staged, never loaded: the probe sees the worker still on the old weights
        with pytest.raises(WeightSyncError, match="did not arrive|rollout.probe.max_gap"):
            probe.check(worker, model, tok.pad_token_id)
        pid = worker.pid
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(WorkerDied, match=rf"generation worker \(pid {pid}, hf engine\) died: killed by SIGKILL"):
            worker.generate(["2+3="], 1, sampling)
        worker.restart()
        worker.load_weights(slots[2])
        assert worker.pid != pid and probe.check(worker, model, tok.pad_token_id).mean_gap < 1e-6
        # the fork server the worker was forked from dies (killed): the worker dies with it, and the error says so
        server, pid = worker._parent_pid, worker.pid
        assert server != os.getpid()  # a fork server's child, not this process's
        os.kill(server, signal.SIGKILL)
        with pytest.raises(WorkerDied, match=rf"generation worker \(pid {pid}, hf engine\) died: its fork server \(pid {server}\) died"):
            for _ in range(100):  # (its death reaches the worker a moment later)
                worker.generate(["2+3="], 1, sampling)
                time.sleep(0.1)
        worker.restart()  # a new fork server
        worker.load_weights(slots[2])
        assert worker._parent_pid != server and probe.check(worker, model, tok.pad_token_id).mean_gap < 1e-6
    finally:
        worker.close()
    assert not worker.alive


def test_a_worker_nobody_closed_does_not_hold_up_the_exit(sft_base, tmp_path):
    """A run stopped while its producer was still starting the worker left it unclosed: the worker waited for a
    command and the trainer's exit for the worker, forever. Such a worker is stopped at the exit now."""
    script = tmp_path / "unclosed.py"
    script.write_text(f"""
from rlvr.models.loading import load_model
from rlvr.rollout.worker import ProcessEngine, WeightSlots, WorkerSettings

if __name__ == "__main__":
    model, tok = load_model({str(sft_base)!r})
    worker = ProcessEngine(model, tok, WeightSlots(model, 1), WorkerSettings(decode="kv", threads=1))
    print(worker.pid, flush=True)  # and exit without closing it
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    pid = int(done.stdout.split()[0])
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


# -- refusals ----------------------------------------------------------------------------------------

def _refused(sft_base, tmp_path, rl_overrides, *extra, config="quickstart"):
    cfg = load_run_config(config, rl_overrides(tmp_path, sft_base, "update.steps=1", *extra))
    with pytest.raises(UserError) as e:
        train(cfg)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()  # refused before anything was written
    return str(e.value)


def test_asynchronous_offline_dpo_is_refused_in_one_line(sft_base, tmp_path, rl_overrides, verified_pairs):
    message = _refused(sft_base, tmp_path, rl_overrides, "rollout.async.max_staleness=2", "algo.preset=dpo", f"pairs.path={verified_pairs}")
    assert "rollout.async.max_staleness=2" in message and "algo.preset=dpo" in message


@pytest.mark.parametrize("overrides, named", [
    (["rollout.async.max_staleness=1", "rollout.overlap=true"], ["rollout.overlap", "rollout.async.max_staleness=1"]),
    (["rollout.async.max_staleness=1", "rollout.async.partial=true"], ["rollout.async.partial=true", "max_staleness >= 2"]),
    (["rollout.async.max_staleness=1", "rollout.engine=vllm"], ["rollout.engine=vllm", "rollout.async.max_staleness=1"]),
    (["rollout.async.max_staleness=1", "rollout.engine=vllm_server", "rollout.vllm.weight_transfer=nccl"],
     ["rollout.vllm.weight_transfer=nccl", "rollout.async.max_staleness=1"]),
    (["rollout.async.max_staleness=1", "rollout.async.worker_cpus=[4096]"], ["rollout.async.worker_cpus=[4096]", "core 4096"]),
    (["algo.policy_loss=decoupled", "algo.correction=tis"], ["algo.policy_loss=decoupled", "algo.correction=tis"]),
])
def test_asynchronous_settings_that_cannot_work_are_refused_while_the_config_is_read(tmp_path, rl_overrides, overrides, named):
    """Refused by the config itself, in one line naming both settings: the model path does not even
    exist, so nothing was loaded (and nothing written)."""
    with pytest.raises(ConfigError) as e:
        load_run_config("quickstart", rl_overrides(tmp_path, tmp_path / "no-model", *overrides))
    assert "\n" not in str(e.value) and all(name in str(e.value) for name in named), str(e.value)
    assert not (tmp_path / "run").exists()


def test_the_config_refusals_need_no_torch():
    """The rollout settings are validated in pure Python (a CLI can check a config before importing torch)."""
    code = ("import sys\n"
            "from rlvr.config import ConfigError, from_dict\n"
            "from rlvr.rollout.config import RolloutConfig\n"
            "try:\n"
            "    from_dict(RolloutConfig, {'async': {'max_staleness': 1, 'partial': True}}, where='x', prefix='rollout.')\n"
            "except ConfigError as e:\n"
            "    print('refused:', e)\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "refused: x: rollout.async.partial=true with rollout.async.max_staleness=1" in out.stdout
    assert out.stdout.strip().endswith("False")


def test_worker_cpus_are_checked_against_the_cores_this_process_may_use(tmp_path, rl_overrides):
    """A core the process cannot be pinned to (outside its affinity and cpuset) is refused while the
    config is read, naming the cores it may use."""
    usable = sorted(os.sched_getaffinity(0))
    with pytest.raises(ConfigError) as e:
        load_run_config("quickstart", rl_overrides(tmp_path, tmp_path / "no-model", "rollout.async.max_staleness=1",
                                                   "rollout.async.worker_cpus=[4096]"))
    message = str(e.value)
    assert "\n" not in message and "rollout.async.worker_cpus=[4096]" in message and "may not use core 4096" in message
    assert f"may use cores {usable[0]}" in message and "os.sched_getaffinity" in message


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_a_trainer_pinned_apart_may_still_put_its_worker_on_another_core(tmp_path, rl_overrides):
    """The documented recipe: the trainer under `taskset -c 0`, its worker on core 1. An affinity
    mask can be widened (a cpuset cannot), so the check asks whether the worker can be pinned there,
    not only what the trainer's mask holds; the check leaves the trainer's own mask as it was."""
    allowed = sorted(os.sched_getaffinity(0))
    keep, other = allowed[0], allowed[-1]
    os.sched_setaffinity(0, {keep})
    try:
        cfg = load_run_config("quickstart", rl_overrides(tmp_path, tmp_path / "no-model", "rollout.async.max_staleness=1",
                                                         f"rollout.async.worker_cpus=[{other}]"))
        assert cfg.rollout.async_.worker_cpus == [other] and os.sched_getaffinity(0) == {keep}
    finally:
        os.sched_setaffinity(0, allowed)


def test_a_missing_rollout_server_is_refused_before_anything_loads(tmp_path, rl_overrides):
    """engine=vllm_server with nothing at the address: one line naming it, before the (here missing)
    model would load."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    cfg = load_run_config("quickstart", rl_overrides(tmp_path, tmp_path / "no-model", "update.steps=1", "rollout.engine=vllm_server",
                                                     f"rollout.vllm.server_url={url}", "rollout.async.max_staleness=1",
                                                     "rollout.vllm.server_wait_s=1"))
    with pytest.raises(UserError) as e:
        train(cfg)
    message = str(e.value)
    assert "\n" not in message and f"no rollout server answers at {url}" in message
    assert "rlvr rollout serve" in message and not (tmp_path / "run").exists()


def test_partial_rollouts_on_a_multi_turn_task_are_refused_before_any_model_loads(tmp_path, rl_overrides):
    """What needs the task (not the config alone) is refused once the task opens, before the (here
    missing) model would load."""
    cfg = load_run_config("quickstart", rl_overrides(tmp_path, tmp_path / "no-model", "update.steps=1", "task.id=tool-products-v1",
                                                     "task.config={}", "rollout.async.max_staleness=2", "rollout.async.partial=true"))
    with pytest.raises(UserError) as e:
        train(cfg)
    assert "\n" not in str(e.value) and "rollout.async.partial=true with the multi-turn environment of tool-products-v1" in str(e.value)

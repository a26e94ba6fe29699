"""The successors of GRPO: return estimators (REINFORCE++, PRIME, GAE), DAPO's reward shaping,
group filters, PRIME's implicit PRM loss, presets and streaming dynamic sampling. Expected values
are computed by hand from the papers' formulas (the arithmetic is in the comments)."""

from __future__ import annotations

import math
import os
import warnings

import pytest
import torch
import torch.distributed as dist

import envs
from envs.pool import VerifierPool
from envs.types import Problem
from rlvr.algos.advantages import ADVANTAGES, AdvantageInputs, gae
from rlvr.algos.aggregation import AGGREGATIONS, Normalizer
from rlvr.algos.filters import GroupFilter, keep_groups, zero_variance_groups
from rlvr.algos.config import PRESETS, preset_rows, resolve_algorithm
from rlvr.algos.prime import implicit_outcome_logits, implicit_prm_ce_loss, implicit_process_rewards
from rlvr.algos.shaping import overlong_buffer_tokens, soft_overlong_penalty, truncation_mask
from rlvr.config import ConfigError
from rlvr.rollout.base import Completion
from rlvr.rollout.sampling import GroupSampler
from tests.rlvr.gloo import run_in_two_processes


def inputs(rewards, groups, T=2, mask=None, **extra):
    r = torch.tensor(rewards, dtype=torch.float32)
    m = torch.ones(len(rewards), T) if mask is None else torch.tensor(mask, dtype=torch.float32)
    return AdvantageInputs(r, torch.tensor(groups), m, torch.ones(len(rewards), dtype=torch.bool), **extra)


# -- return estimators ------------------------------------------------------------------------

def test_reinforce_pp_whitens_returns_over_the_batch():
    # outcome at the last token -> returns [1, 1] and [0, 0]; batch mean 0.5, unbiased std sqrt(1/3)
    adv = ADVANTAGES.get("reinforce_pp")(inputs([1, 0], [0, 1]), eps=0.0)
    s = 0.5 / math.sqrt(1 / 3)
    assert torch.allclose(adv, torch.tensor([[s, s], [-s, -s]]), atol=1e-6)


def test_reinforce_pp_subtracts_the_kl_penalty_per_token_and_discounts():
    kl = torch.tensor([[0.1, 0.1], [0.0, 0.2]])
    # token rewards [-0.1, 0.9] and [0, -0.2]; gamma 0.5: returns [-0.1 + 0.45, 0.9] and [-0.1, -0.2]
    inp = inputs([1, 0], [0, 0], kl_penalty=kl)
    returns = torch.tensor([[0.35, 0.9], [-0.1, -0.2]])
    mean = returns.mean()
    std = returns.std()  # unbiased, over the 4 tokens
    expected = (returns - mean) / std
    assert torch.allclose(ADVANTAGES.get("reinforce_pp")(inp, gamma=0.5, eps=0.0), expected, atol=1e-6)


def test_rloo_and_grpo_subtract_the_summed_kl_penalty_from_the_sequence_reward():
    kl = torch.tensor([[0.1, 0.1], [0.0, 0.0]])  # sequence 0 pays 0.2
    adv = ADVANTAGES.get("rloo")(inputs([1, 1], [0, 0], kl_penalty=kl))
    assert torch.allclose(adv[:, 0], torch.tensor([-0.2, 0.2]), atol=1e-6)


def test_prime_outcome_rewards_get_a_leave_one_out_baseline_at_the_last_token():
    # rewards [1, 0, 0]: 1 - mean(0, 0) = 1; 0 - mean(1, 0) = -0.5; returns carry it to every token
    adv = ADVANTAGES.get("prime")(inputs([1, 0, 0], [0, 0, 0]), outcome_coef=1.0, implicit_coef=0.0, whiten=False)
    assert torch.allclose(adv, torch.tensor([[1.0, 1.0], [-0.5, -0.5], [-0.5, -0.5]]))


def test_prime_implicit_token_rewards_get_the_others_mean_as_baseline():
    tok = torch.tensor([[0.2, 0.4], [0.0, 0.0], [0.1, -0.1]])
    # sequence means 0.3, 0, 0 -> baselines mean(0, 0) = 0, mean(0.3, 0) = 0.15, 0.15
    # token rewards [0.2, 0.4], [-0.15, -0.15], [-0.05, -0.25]; returns (gamma 1): suffix sums
    adv = ADVANTAGES.get("prime")(inputs([0, 0, 0], [0, 0, 0], token_rewards=tok), outcome_coef=0.0, implicit_coef=1.0, whiten=False)
    assert torch.allclose(adv, torch.tensor([[0.6, 0.4], [-0.3, -0.15], [-0.3, -0.25]]), atol=1e-6)


def test_prime_can_use_the_verifiers_own_process_rewards():
    # sequence 0: steps ending at t=1 (reward 1) and t=2 (reward 0), mean 0.5; sequence 1: one step at t=2 (reward 1)
    # leave-one-out baselines: 1 for sequence 0, 0.5 for sequence 1; step rewards become [0, -1] and [0.5]
    inp = inputs([0, 0], [0, 0], T=3, step_rewards=torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),
                 step_mask=torch.tensor([[False, True, True], [False, False, True]]))
    adv = ADVANTAGES.get("prime")(inp, outcome_coef=0.0, implicit_coef=0.0, verifier_coef=1.0, whiten=False)
    assert torch.allclose(adv, torch.tensor([[-1.0, -1.0, -1.0], [0.5, 0.5, 0.5]]))


def test_prime_without_implicit_rewards_names_the_setting_to_change():
    with pytest.raises(ValueError, match="implicit_prm=true"):
        ADVANTAGES.get("prime")(inputs([1, 0], [0, 0]))


def test_gae_matches_the_recursion_and_stops_at_the_end_of_each_sequence():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    values = torch.tensor([[0.5, 0.6, 0.7], [0.2, 0.3, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=0.5)
    # row 0: deltas [0.1, 0.1, 0.3]; A2 = 0.3, A1 = 0.1 + 0.5 * 0.3, A0 = 0.1 + 0.5 * 0.25
    # row 1 ends at t=1 (the value 9 after it is padding): deltas [0.1, 0.7]; A1 = 0.7, A0 = 0.1 + 0.35
    assert torch.allclose(adv, torch.tensor([[0.225, 0.25, 0.3], [0.45, 0.7, 0.0]]), atol=1e-6)
    assert torch.allclose(ret, (adv + values) * mask)
    adv1, ret1 = gae(rewards, values, mask, gamma=1.0, lam=1.0)  # lam = 1: Monte Carlo return minus the value
    assert torch.allclose(ret1, torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]), atol=1e-6)


# -- DAPO's shaping and group filters -----------------------------------------------------------

def test_soft_overlong_penalty_ramps_over_the_buffer():
    lengths = torch.tensor([10, 16, 18, 20, 25])
    # max 20, buffer 4: free up to 16, then (16 - len) / 4, at most -1
    assert torch.allclose(soft_overlong_penalty(lengths, 20, 4), torch.tensor([0.0, 0.0, -0.5, -1.0, -1.0]))
    assert torch.allclose(soft_overlong_penalty(lengths, 20, 4, factor=0.5), torch.tensor([0.0, 0.0, -0.25, -0.5, -0.5]))
    assert not soft_overlong_penalty(lengths, 20, 0).any()
    assert overlong_buffer_tokens(20480, 0.2) == 4096


def test_truncation_mask_zeroes_truncated_rows():
    mask = torch.ones(3, 2)
    assert torch.equal(truncation_mask(torch.tensor([False, True, False]), mask), torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]))


def test_group_filters():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 1.0]])
    passed = rewards > 0
    valid = torch.ones_like(passed)
    assert zero_variance_groups(rewards, valid).tolist() == [True, True, False, False]
    # a failed verification does not count: [1, x, 1] has no spread among the valid members
    assert zero_variance_groups(rewards, torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 0, 1]], dtype=torch.bool)).tolist() == [True, True, False, True]
    assert keep_groups(rewards, passed, valid, GroupFilter(drop_zero_variance=True)).tolist() == [False, False, True, True]
    # PRIME's band on the pass rate: 1, 0, 1/3, 2/3 -> only 2/3 is in [0.5, 0.8]
    assert keep_groups(rewards, passed, valid, GroupFilter(accuracy_band=(0.5, 0.8))).tolist() == [False, False, False, True]


# -- PRIME's implicit PRM -----------------------------------------------------------------------

def test_implicit_prm_rewards_and_cross_entropy():
    logp_phi = torch.tensor([[-1.0, -2.0], [-1.0, -1.0]])
    logp_ref = torch.tensor([[-1.5, -1.0], [-1.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    beta = 0.5
    assert torch.allclose(implicit_process_rewards(logp_phi, logp_ref, mask, beta), torch.tensor([[0.25, -0.5], [0.0, 0.0]]))
    z = implicit_outcome_logits(logp_phi, logp_ref, mask, beta)
    assert torch.allclose(z, torch.tensor([-0.25, 0.0]))
    loss = implicit_prm_ce_loss(logp_phi, logp_ref, mask, torch.tensor([1.0, 0.0]), beta)
    # -log sigmoid(-0.25) and -log(1 - sigmoid(0))
    assert torch.allclose(loss, torch.tensor([math.log(1 + math.exp(0.25)), math.log(2.0)]), atol=1e-6)


# -- presets --------------------------------------------------------------------------------------

def test_presets_carry_the_papers_settings():
    algos = {name: resolve_algorithm({"preset": name}) for name in PRESETS}
    assert set(algos) == {"grpo", "dapo", "dr_grpo", "gspo", "prime", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gpg", "cispo",
                          "grpo_process", "ppo", "dpo", "online_dpo", "kto"}
    dapo = algos["dapo"]
    assert (dapo.policy_loss["clip_low"], dapo.policy_loss["clip_high"], dapo.aggregation.name, dapo.kl.mode) == (0.2, 0.28, "token_mean", "off")
    assert dapo.dynamic_sampling and dapo.overlong_buffer_frac == 0.2 and dapo.group_filter.drop_zero_variance
    assert not dapo.needs_reference  # no KL: no reference model loaded
    gspo = algos["gspo"]
    assert (gspo.ratio.name, gspo.policy_loss["clip_low"], gspo.policy_loss["clip_high"], gspo.aggregation.name) == ("sequence", 3e-4, 4e-4, "seq_mean")
    dr = algos["dr_grpo"]
    assert (dr.advantage.name, dr.aggregation.name, dr.kl.mode) == ("mean_centered", "seq_mean_token_sum_norm", "off")
    prime = algos["prime"]
    assert prime.prm.enabled and prime.needs_reference and tuple(prime.accuracy_band) == (0.2, 0.8)
    assert prime.advantage["outcome_coef"] == 5.0 and prime.prm.beta == 0.05 and not prime.critic.enabled
    rpp = algos["reinforce_pp"]
    assert (rpp.advantage.name, rpp.kl.mode, rpp.kl.estimator) == ("reinforce_pp", "reward", "k1")
    gpg = algos["gpg"]
    assert (gpg.policy_loss.name, gpg.policy_loss["clip_low"], gpg.kl.mode) == ("pg", None, "off")
    ppo = algos["ppo"]
    assert (ppo.advantage.name, ppo.kl.mode, ppo.kl.estimator, ppo.aggregation.name) == ("gae", "reward", "k1", "token_mean")
    assert ppo.advantage.params == {"gamma": 1.0, "lam": 0.95, "whiten": True, "eps": 1e-8} and ppo.critic.value_clip == 0.2
    assert (ppo.epochs_per_batch, ppo.minibatches) == (2, 2)
    assert all(a.recipe == ("preference" if name in ("dpo", "online_dpo", "kto") else "policy_gradient") for name, a in algos.items())
    cispo = algos["cispo"]
    assert (cispo.policy_loss.name, cispo.policy_loss["clip_low"], cispo.policy_loss["clip_high"]) == ("cispo", None, 3.0)
    assert algos["grpo_process"].advantage["outcome_step"] is True
    assert [name for name, _ in preset_rows()] == list(PRESETS)


def test_preset_overrides_merge_estimator_arguments_and_reject_unknown_ones():
    algo = resolve_algorithm({"preset": "prime", "advantage_kwargs": {"verifier_coef": 1.0}})  # the old spelling
    assert algo.advantage["verifier_coef"] == 1.0 and algo.advantage["outcome_coef"] == 5.0
    assert resolve_algorithm({"preset": "prime", "advantage": {"verifier_coef": 1.0}}) == algo  # the section
    with pytest.raises(ConfigError, match="algo.advantage.gama: the reinforce_pp advantage estimator takes no argument 'gama'"):
        resolve_algorithm({"preset": "reinforce_pp", "advantage_kwargs": {"gama": 0.9}})
    with pytest.raises(ConfigError, match="algo.accuracy_band"):
        resolve_algorithm({"accuracy_band": [0.8, 0.2]})
    with pytest.raises(ConfigError, match="algo.sampling_budget"):
        resolve_algorithm({"preset": "dapo", "sampling_budget": 0.5})
    with pytest.raises(ConfigError, match="implicit PRM is off"):
        resolve_algorithm({"preset": "prime", "prm": {"enabled": False}})
    assert resolve_algorithm({"preset": "prime", "prm": {"enabled": False}, "advantage_kwargs": {"implicit_coef": 0.0}}).advantage.name == "prime"
    with pytest.raises(ConfigError, match="gae needs a critic"):
        resolve_algorithm({"preset": "ppo", "critic": {"enabled": False}})
    with pytest.raises(ConfigError, match="set algo.advantage=gae"):
        resolve_algorithm({"preset": "grpo", "critic": {"enabled": True}})
    # a scorer turned on for a preset without one gets the defaults, the user's values on top
    custom = resolve_algorithm({"preset": "grpo", "advantage": "gae", "critic": {"enabled": True, "lr_scale": 2.0, "value_clip": 0.0}})
    assert custom.critic.lr_scale == 2.0 and custom.critic.value_clip is None and custom.critic.warmup_steps == 0


@pytest.mark.parametrize("cfg, why", [
    ({"preset": "grpo", "kl_estimator": "k1"}, "gradient is zero in expectation"),
    ({"preset": "reinforce_pp", "kl": {"estimator": "k3"}}, "biases the penalty"),
    ({"preset": "dapo", "sampling_budget": 1.0}, "every dropped group shrinks it"),
    ({"preset": "grpo", "prm": {"enabled": True}}, "only the prime estimator uses"),
    ({"preset": "dapo", "ref_update_every": 5}, "no reference model is loaded"),
])
def test_combinations_the_papers_warn_against_are_explained(cfg, why):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resolve_algorithm(cfg)
    assert any(why in str(w.message) for w in caught), [str(w.message) for w in caught]


# -- aggregation across processes ------------------------------------------------------------------

AGGREGATION_MODES = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm", "seq_mean")


def _aggregate_in_process(rank: int, world: int, port: int, modes: tuple[str, ...], queue) -> None:
    """Each mode's gradient over this rank's share, summed over ranks; rank 0 puts {mode: largest
    difference from the whole batch's gradient} (every mode in one pair of processes: their start-up
    is most of the cost)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    differences = {}
    for mode in modes:
        torch.manual_seed(0)  # the same global batch on every process
        B, T = 10, 6
        lengths = torch.randint(1, T + 1, (B,))
        mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).float()
        weights = torch.randn(B, T)
        mine = torch.arange(B).tensor_split(world)[rank]
        # the normaliser is summed over processes, as the trainer's is
        totals = torch.tensor([float((mask[mine].sum(-1) > 0).sum()), float(mask[mine].sum())])
        dist.all_reduce(totals)
        norm = Normalizer(sequences=float(totals[0]), tokens=float(totals[1]), max_len=float(T))
        x = torch.zeros(B, T, requires_grad=True)
        AGGREGATIONS.get(mode)((x[mine] * weights[mine]) ** 2 + x[mine] * weights[mine], mask[mine], norm).backward()
        grad = x.grad.clone()
        dist.all_reduce(grad)  # what DDP does, without its division by the world size (the trainer scales the loss by it)
        if rank == 0:
            whole = torch.zeros(B, T, requires_grad=True)
            full = Normalizer(sequences=float(B), tokens=float(mask.sum()), max_len=float(T))
            AGGREGATIONS.get(mode)((whole * weights) ** 2 + whole * weights, mask, full).backward()
            differences[mode] = float((grad - whole.grad).abs().max())
    if rank == 0:
        queue.put(differences)
    dist.destroy_process_group()


def test_aggregation_is_invariant_to_splitting_over_processes():
    differences = run_in_two_processes(_aggregate_in_process, AGGREGATION_MODES)
    assert set(differences) == set(AGGREGATION_MODES) and set(AGGREGATION_MODES) == set(AGGREGATIONS.ids())  # every built-in one
    assert all(d < 1e-6 for d in differences.values()), differences


# -- streaming dynamic sampling ---------------------------------------------------------------------

def _problems(n: int, start: int) -> list[Problem]:
    return [Problem(id=f"p{start + i}", prompt=f"What is {start + i} + 0?", reference=str(start + i)) for i in range(n)]


class ScriptedPolicy:
    """Stands in for the rollout engine only: answers prompt k right on the members given by a
    pattern, so a group's reward spread is known in advance. The verdicts come from the real
    math environment through the real verifier pool."""

    def __init__(self, group_size: int, pattern):
        self.group_size, self.pattern, self.calls = group_size, pattern, 0

    def __call__(self, problems: list[Problem]) -> list[Completion]:
        self.calls += 1
        out = []
        for i, p in enumerate(problems):
            k = int(p.id[1:])
            for j in range(self.group_size):
                answer = p.reference if self.pattern(k, j) else "-1"
                out.append(Completion(i, [1], [2], [0.0], f"Answer: {answer}"))
        return out


def _sampler(pattern, pool, group_size=4, budget=3.0, chunk=4, flt=GroupFilter(drop_zero_variance=True)):
    policy = ScriptedPolicy(group_size, pattern)
    sampler = GroupSampler(generate=policy, submit=lambda ps, cs: pool.submit(ps, [c.text for c in cs]),
                           group_size=group_size, chunk_prompts=chunk, group_filter=flt, budget_factor=budget)
    return sampler, policy


class Stream:
    def __init__(self):
        self.position = 0

    def take(self, n: int) -> list[Problem]:
        out = _problems(n, self.position)
        self.position += n
        return out


@pytest.fixture
def pool():
    p = VerifierPool(envs.make("math-v1"), workers=1, kind="thread")
    yield p
    p.close()


def test_dynamic_sampling_refills_until_no_zero_variance_group_is_left(pool):
    # every third prompt is solved by half of its group; the others are all right or all wrong
    sampler, _ = _sampler(lambda k, j: (j % 2 == 0) if k % 3 == 0 else (k % 2 == 0), pool, budget=5.0)
    stream = Stream()
    report = sampler.collect(stream.take, target=4)
    assert len(report.kept) == 4
    assert all(len({v.reward for v in g.verdicts}) > 1 for g in report.kept)
    assert report.prompts_generated <= report.budget_prompts == 20 and not report.budget_exhausted
    assert stream.position == report.prompts_generated == len(report.generated)
    assert report.yield_ == pytest.approx(4 / report.prompts_generated)
    # the next batch sizes its requests by the yield it has seen (about 1/3): fewer rounds
    assert 0.2 < sampler.yield_estimate < 0.5


def test_dynamic_sampling_stops_at_the_budget_and_trains_on_what_it_kept(pool):
    # only prompt 5 has any spread: the budget of 2 x 4 prompts runs out with one group kept
    sampler, _ = _sampler(lambda k, j: j == 0 if k == 5 else False, pool, budget=2.0)
    report = sampler.collect(Stream().take, target=4)
    assert report.budget_exhausted and report.prompts_generated == report.budget_prompts == 8
    assert [g.problem.id for g in report.kept] == ["p5"]
    empty = _sampler(lambda k, j: True, pool, budget=1.5)[0].collect(Stream().take, target=4)
    assert empty.kept == [] and empty.budget_exhausted and empty.prompts_generated == 6  # never a crash


def test_without_a_filter_every_group_is_kept_and_nothing_is_refilled(pool):
    sampler, policy = _sampler(lambda k, j: True, pool, flt=GroupFilter(), budget=3.0)
    report = sampler.collect(Stream().take, target=8)
    assert len(report.kept) == 8 and report.prompts_generated == 8 and policy.calls == 2  # two chunks of 4


# the algo section of a run directory's config.yaml as versions before the sections wrote it: every
# flat key, unset ones as null (a run started then resumes now)
_OLD_NULLS = {k: None for k in ("advantage", "ratio", "policy_loss", "clip_low", "dual_clip", "loss_agg", "kl_mode", "kl_estimator",
                                "ref_update_every", "entropy_coef", "dynamic_sampling", "accuracy_band", "sampling_budget",
                                "overlong_buffer_frac", "overlong_penalty", "mask_truncated")}
_OLD_SECTIONS = {"prm": dict.fromkeys(("enabled", "beta", "lr_scale", "update", "init")),
                 "critic": dict.fromkeys(("enabled", "init", "lr_scale", "value_clip", "warmup_steps")),
                 "preference": dict.fromkeys(("loss", "beta", "label_smoothing", "length_norm", "source", "pairs_per_group", "pairing",
                                              "desirable_weight", "undesirable_weight", "reference_cache"))}


@pytest.mark.parametrize("old, new", [
    ({"preset": "ppo", **_OLD_NULLS, "advantage_kwargs": None, "clip_high": 0.3, "kl_coef": 0.02, **_OLD_SECTIONS,
      "correction": {"kind": "none", "level": "token", "cap": 2.0, "low": 0.5, "high": 2.0}},
     {"preset": "ppo", "policy_loss": {"clip_high": 0.3}, "kl": {"coef": 0.02}}),
    ({"preset": "dapo", **_OLD_NULLS, "advantage_kwargs": {"eps": 0.001}, "clip_high": None, "kl_coef": None, **_OLD_SECTIONS,
      "correction": {"kind": "tis", "level": "token", "cap": 2.0, "low": 0.5, "high": 2.0}},
     {"preset": "dapo", "advantage": {"eps": 0.001}, "correction": {"name": "tis"}}),
])
def test_a_config_written_before_the_sections_resolves_to_the_same_algorithm(old, new):
    assert resolve_algorithm(old) == resolve_algorithm(new)


def test_a_resolved_config_read_back_resolves_to_itself():
    import dataclasses

    for name in PRESETS:
        algo = resolve_algorithm({"preset": name})
        assert resolve_algorithm(dataclasses.asdict(algo)) == algo, name  # what config.yaml holds, read at --resume

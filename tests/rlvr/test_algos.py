"""Each part against values computed by hand from the papers' formulas."""

import math
import warnings

import pytest
import torch

from rlvr.algos.advantages import ADVANTAGES, AdvantageInputs
from rlvr.algos.aggregation import AGGREGATIONS, Normalizer
from rlvr.algos.kl import KL_ESTIMATORS
from rlvr.algos.objective import POLICY_LOSSES, PolicyLossInputs, clipped_surrogate
from rlvr.algos.config import PRESETS, AlgoConfig, resolve_algorithm
from rlvr.algos.ratio import RATIOS
from rlvr.config import ConfigError


def inputs(rewards, groups, T=3, valid=None):
    r = torch.tensor(rewards, dtype=torch.float32)
    return AdvantageInputs(r, torch.tensor(groups), torch.ones(len(rewards), T),
                           torch.ones(len(rewards), dtype=torch.bool) if valid is None else torch.tensor(valid))


def test_grpo_z_score_with_unbiased_std():
    adv = ADVANTAGES.get("grpo")(inputs([1, 0, 0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1]), eps=0.0)
    # group 0: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735 -> +-0.8660; group 1: all equal -> 0
    expected = torch.tensor([0.8660254, -0.8660254, -0.8660254, 0.8660254, 0, 0, 0, 0])
    assert torch.allclose(adv[:, 0], expected, atol=1e-6)
    assert torch.equal(adv[:, 0], adv[:, 2])  # the same on every token


def test_mean_centered_and_rloo():
    inp = inputs([1, 0, 0, 1], [0, 0, 0, 0])
    assert torch.allclose(ADVANTAGES.get("mean_centered")(inp)[:, 0], torch.tensor([0.5, -0.5, -0.5, 0.5]))
    # RLOO: r_i - mean of the other three: 1 - 1/3, 0 - 2/3
    assert torch.allclose(ADVANTAGES.get("rloo")(inp)[:, 0], torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3]), atol=1e-6)


def test_invalid_sequences_are_excluded_from_group_statistics():
    # the failed verification (index 3) must not count as a 0 in its group
    adv = ADVANTAGES.get("mean_centered")(inputs([1, 0, 1, 0], [0, 0, 0, 0], valid=[True, True, True, False]))
    assert torch.allclose(adv[:, 0], torch.tensor([1 / 3, -2 / 3, 1 / 3, 0.0]), atol=1e-6)


def test_grpo_process_supervision():
    # group of two sequences, T=4; seq 0 has steps ending at t=1 (reward 1) and t=3 (reward 0),
    # seq 1 one step ending at t=2 (reward 1). All step rewards {1, 0, 1}: mean 2/3, std (unbiased) 0.57735
    inp = inputs([0, 1], [0, 0], T=4)
    inp.step_rewards = torch.tensor([[0, 1, 0, 0], [0, 0, 1, 0]], dtype=torch.float32)
    inp.step_mask = torch.tensor([[0, 1, 0, 1], [0, 0, 1, 0]], dtype=torch.bool)
    adv = ADVANTAGES.get("grpo_process")(inp, eps=0.0)
    hi, lo = (1 - 2 / 3) / 0.57735027, (0 - 2 / 3) / 0.57735027
    expected = torch.tensor([[hi + lo, hi + lo, lo, lo], [hi, hi, hi, 0.0]])
    assert torch.allclose(adv, expected, atol=1e-5)


def test_kl_estimators():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])
    assert KL_ESTIMATORS.get("k1")(logp, ref).item() == pytest.approx(1.0)
    assert KL_ESTIMATORS.get("k2")(logp, ref).item() == pytest.approx(0.5)
    assert KL_ESTIMATORS.get("k3")(logp, ref).item() == pytest.approx(math.exp(-1) + 1 - 1)
    assert KL_ESTIMATORS.get("k3")(ref, ref).item() == 0.0


def test_clipped_surrogate_values_and_clip_fractions():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1, 5.0]]))
    old = torch.zeros(1, 4)
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    mask = torch.ones(1, 4)
    inp = PolicyLossInputs(logp, old, RATIOS.get("token")(logp, old, mask), adv, mask)
    loss, stats = clipped_surrogate(inp, 0.2, 0.2)
    # -min(rA, clip(r)A): 1.5 -> -1.2 (clipped high); 0.5, A<0 -> +0.8 (clipped low); 1.1 -> -1.1; 5, A<0 -> +5
    assert torch.allclose(loss, torch.tensor([[-1.2, 0.8, -1.1, 5.0]]), atol=1e-6)
    assert stats["clip_frac_high"] == pytest.approx(0.25) and stats["clip_frac_low"] == pytest.approx(0.25)
    dual, _ = clipped_surrogate(inp, 0.2, 0.2, dual_clip=3.0)
    assert dual[0, 3].item() == pytest.approx(3.0)  # bounded by c * |A|
    asym, _ = clipped_surrogate(inp, 0.2, 0.28)  # DAPO clip-higher
    assert asym[0, 0].item() == pytest.approx(-1.28)
    plain, _ = POLICY_LOSSES.get("pg")(inp, None, None)  # GPG: -A log pi
    assert torch.allclose(plain, -adv * logp)


def test_sequence_ratios():
    logp = torch.tensor([[0.1, 0.3, 9.0]])
    old = torch.zeros(1, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    seq = RATIOS.get("sequence")(logp, old, mask)
    assert torch.allclose(seq, torch.full((1, 3), math.exp(0.2)))  # exp(mean of the masked log ratios)
    tok = RATIOS.get("sequence_token")(logp.requires_grad_(), old, mask)
    assert torch.allclose(tok.detach(), seq)
    tok[0, 0].backward()
    assert logp.grad[0, 0].item() == pytest.approx(math.exp(0.2)) and logp.grad[0, 1].item() == 0.0


@pytest.mark.parametrize("mode", ["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm", "seq_mean"])
def test_aggregation_is_invariant_to_micro_batching(mode):
    torch.manual_seed(0)
    B, T = 12, 7
    lengths = torch.randint(1, T + 1, (B,))
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).float()
    weights = torch.randn(B, T)
    agg = AGGREGATIONS.get(mode)
    norm = Normalizer(sequences=float(B), tokens=float(mask.sum()), max_len=float(T))

    def grad_of(splits):
        x = torch.zeros(B, T, requires_grad=True)
        for idx in splits:  # micro-batches, each trimmed to its own padded width like the trainer does
            width = int(lengths[idx].max())
            agg((x[idx, :width] * weights[idx, :width]) ** 2 + x[idx, :width] * weights[idx, :width], mask[idx, :width], norm).backward()
        return x.grad

    whole = grad_of([torch.arange(B)])
    for pieces in (2, 3, 12):
        split = grad_of(list(torch.randperm(B).tensor_split(pieces)))
        assert torch.allclose(whole, split, atol=1e-6), pieces


def test_dr_grpo_normaliser_is_the_constant_not_the_padded_width():
    loss, mask = torch.ones(2, 3), torch.ones(2, 3)
    norm = Normalizer(sequences=2, tokens=6, max_len=64)
    assert AGGREGATIONS.get("seq_mean_token_sum_norm")(loss, mask, norm).item() == pytest.approx(6 / (64 * 2))


def test_presets_fill_unset_fields_and_overrides_win():
    algo = resolve_algorithm({"preset": "grpo"})
    assert (algo.advantage.name, algo.aggregation.name, algo.kl.estimator, algo.kl.coef) == ("grpo", "seq_mean_token_mean", "k3", 0.04)
    assert algo.needs_reference
    custom = resolve_algorithm({"preset": "grpo", "kl_mode": "off", "clip_high": 0.28})  # the old flat spellings
    assert not custom.needs_reference and custom.policy_loss["clip_high"] == 0.28 and custom.policy_loss["clip_low"] == 0.2
    new = resolve_algorithm({"preset": "grpo", "kl": {"mode": "off"}, "policy_loss": {"name": "clipped", "clip_high": 0.28}})
    assert new == custom
    for name in PRESETS:
        resolve_algorithm({"preset": name})  # every preset names registered parts


def test_preset_errors_and_warnings():
    with pytest.raises(ConfigError, match="algo.preset 'ppo2' is unknown"):
        resolve_algorithm({"preset": "ppo2"})
    with pytest.raises(ConfigError, match="algo.policy_loss 'ppo' is not registered"):
        resolve_algorithm({"policy_loss": "ppo"})
    with pytest.raises(ConfigError, match="algo.advantage 'nope' is not registered"):
        resolve_algorithm({"advantage": "nope"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resolve_algorithm({"preset": "gspo", "loss_agg": "token_mean"})
    assert any("GSPO's sequence ratio" in str(w.message) for w in caught)


def test_discounted_returns_discount_per_generated_token():
    from rlvr.algos.advantages import discounted_returns

    # mask [1, 0, 0, 1]: the two observation tokens in the middle are not steps of the discount
    out = discounted_returns(torch.tensor([[0.0, 7.0, 7.0, 1.0]]), torch.tensor([[1.0, 0.0, 0.0, 1.0]]), gamma=0.5)
    assert out.tolist() == [[0.5, 0.0, 0.0, 1.0]]


def test_compatibility_aliases_read_the_sections():
    # the flat names and classes of earlier versions keep working for callers outside rlvr
    from rlvr.algos.objective import ObjectiveParts
    from rlvr.algos.config import Algorithm, AlgoConfig, CorrectionConfig, group_relative

    dapo = resolve_algorithm({"preset": "dapo"})
    assert Algorithm is AlgoConfig and group_relative(dapo)
    assert (dapo.clip_low, dapo.clip_high, dapo.dual_clip, dapo.loss_agg) == (0.2, 0.28, None, "token_mean")
    assert (dapo.kl_mode, dapo.kl_estimator, dapo.kl_coef, dapo.advantage_kwargs) == ("off", "k3", 0.0, {"eps": 1e-6})
    parts = ObjectiveParts("sequence", "clipped", 3e-4, 4e-4, None, "seq_mean", "k2", 0.1, 0.01)
    assert (parts.ratio.name, parts.clip_low, parts.clip_high, parts.loss_agg, parts.kl.estimator) == ("sequence", 3e-4, 4e-4, "seq_mean", "k2")
    assert (parts.kl_loss_coef, parts.entropy_coef) == (0.1, 0.01)
    assert ObjectiveParts().kl_loss_coef == 0.0  # no KL weight: the KL is only measured
    assert CorrectionConfig(kind="mis", cap=3.0, low=0.25) == {"name": "mis", "level": "token", "low": 0.25, "high": 2.0, "reweight": True}


def test_a_part_that_takes_any_keyword_gets_what_the_user_wrote():
    from rlvr.algos.objective import POLICY_LOSSES, clipped_surrogate
    from rlvr.algos.config import algo_config

    @POLICY_LOSSES.register("testing/any-kwargs")
    def any_kwargs(inp, clip_low=0.2, **extra):
        return clipped_surrogate(inp, clip_low, 0.2)

    try:
        algo = algo_config(policy_loss={"name": "testing/any-kwargs", "tau": 3.0}, quiet=True)
        assert algo.policy_loss == {"name": "testing/any-kwargs", "clip_low": 0.2, "tau": 3.0}
    finally:
        POLICY_LOSSES.unregister("testing/any-kwargs")

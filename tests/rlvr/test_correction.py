"""Mismatch correction parts against values computed by hand."""

import math

import pytest
import torch

from rlvr.algos.correction import CORRECTIONS, log_ratio, nucleus_keep, truncated_logprobs, truncation_keep
from rlvr.algos.correction import sorted_nucleus as sorted_nucleus_of_rlvr

L = math.log
# two sequences of three tokens; the second has two real tokens. rho = pi_trainer / pi_rollout.
RHO = [[3.0, 0.5, 1.0], [1.5, 4.0, 1.0]]
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ROLLOUT = torch.log(torch.tensor([[0.2, 0.4, 0.3], [0.1, 0.2, 0.5]]))
TRAINER = ROLLOUT + torch.log(torch.tensor(RHO))
TRAINER[1, 2] = -math.inf  # padding may hold anything


def test_log_ratio_levels():
    tok = log_ratio(TRAINER, ROLLOUT, MASK, "token")
    assert torch.allclose(tok, torch.tensor([[L(3), L(0.5), 0.0], [L(1.5), L(4), 0.0]]), atol=1e-6)
    seq = log_ratio(TRAINER, ROLLOUT, MASK, "sequence")  # log(3 * 0.5 * 1) = log 1.5; log(1.5 * 4) = log 6
    assert torch.allclose(seq, torch.tensor([[L(1.5)] * 3, [L(6), L(6), 0.0]]), atol=1e-6)
    geo = log_ratio(TRAINER, ROLLOUT, MASK, "geometric")
    assert torch.allclose(geo, torch.tensor([[L(1.5) / 3] * 3, [L(6) / 2, L(6) / 2, 0.0]]), atol=1e-6)
    with pytest.raises(ValueError, match="level"):
        log_ratio(TRAINER, ROLLOUT, MASK, "sentence")


def test_token_tis_caps_the_weight_and_counts_corrections():
    c = CORRECTIONS.get("tis")(TRAINER, ROLLOUT, MASK, level="token", cap=2.0)
    assert torch.allclose(c.weights, torch.tensor([[2.0, 0.5, 1.0], [1.5, 2.0, 0.0]]), atol=1e-6)
    assert torch.equal(c.mask, MASK)
    assert c.stats["corrected_frac"] == pytest.approx(2 / 5)  # 3.0 and 4.0 of five tokens
    assert c.stats["masked_frac"] == 0.0
    assert c.stats["ratio_max"] == pytest.approx(4.0) and c.stats["ratio_min"] == pytest.approx(0.5)
    assert c.stats["ratio_mean"] == pytest.approx((3 + 0.5 + 1 + 1.5 + 4) / 5)
    # KL(rollout || trainer): k1 = mean(-log rho), k3 = mean(rho - 1 - log rho)
    logs = [L(r) for r in (3, 0.5, 1, 1.5, 4)]
    assert c.stats["kl_k1"] == pytest.approx(-sum(logs) / 5, abs=1e-6)
    assert c.stats["kl_k3"] == pytest.approx(sum(math.exp(x) - 1 - x for x in logs) / 5, abs=1e-6)


def test_sequence_tis_weights_whole_sequences():
    c = CORRECTIONS.get("tis")(TRAINER, ROLLOUT, MASK, level="sequence", cap=2.0)
    assert torch.allclose(c.weights, torch.tensor([[1.5] * 3, [2.0, 2.0, 0.0]]), atol=1e-6)
    assert c.stats["corrected_frac"] == pytest.approx(2 / 5)  # sequence 1 (rho 6), both of its tokens


def test_tis_of_a_huge_sequence_ratio_stays_finite():
    long_mask = torch.ones(1, 400)
    c = CORRECTIONS.get("tis")(torch.zeros(1, 400), torch.full((1, 400), -1.0), long_mask, level="sequence", cap=5.0)
    assert torch.allclose(c.weights, torch.full((1, 400), 5.0))  # rho = e^400 overflows float32


def test_token_mis_drops_tokens_outside_the_band():
    c = CORRECTIONS.get("mis")(TRAINER, ROLLOUT, MASK, level="token", low=0.6, high=2.0)
    assert torch.equal(c.mask, torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]))
    assert torch.allclose(c.weights, torch.tensor([[0.0, 0.0, 1.0], [1.5, 0.0, 0.0]]), atol=1e-6)
    assert c.stats["masked_frac"] == pytest.approx(3 / 5)
    rejected = CORRECTIONS.get("mis")(TRAINER, ROLLOUT, MASK, level="token", low=0.6, high=2.0, reweight=False)
    assert torch.equal(rejected.weights, rejected.mask)


def test_sequence_and_geometric_mis_drop_whole_sequences():
    seq = CORRECTIONS.get("mis")(TRAINER, ROLLOUT, MASK, level="sequence", low=0.5, high=2.0)
    assert torch.equal(seq.mask, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))  # rho 1.5 kept, 6 dropped
    assert torch.allclose(seq.weights[0], torch.full((3,), 1.5))
    assert seq.stats["masked_frac"] == pytest.approx(2 / 5)
    # geometric: 1.5^(1/3) = 1.145 and 6^(1/2) = 2.449; a band up to 2.5 keeps both
    geo = CORRECTIONS.get("mis")(TRAINER, ROLLOUT, MASK, level="geometric", low=0.5, high=2.5)
    assert torch.equal(geo.mask, MASK)
    assert geo.weights[1, 0].item() == pytest.approx(6 ** 0.5, rel=1e-5)


def test_none_measures_without_changing_anything():
    c = CORRECTIONS.get("none")(TRAINER, ROLLOUT, MASK)
    assert torch.equal(c.weights, torch.ones_like(MASK)) and torch.equal(c.mask, MASK)
    assert c.stats["kl_k3"] > 0 and c.stats["masked_frac"] == 0.0
    same = CORRECTIONS.get("tis")(ROLLOUT, ROLLOUT, MASK, cap=2.0)
    assert same.stats["kl_k1"] == 0.0 and same.stats["kl_k3"] == 0.0 and same.stats["corrected_frac"] == 0.0


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="cap"):
        CORRECTIONS.get("tis")(TRAINER, ROLLOUT, MASK, cap=0.0)
    with pytest.raises(ValueError, match="band"):
        CORRECTIONS.get("mis")(TRAINER, ROLLOUT, MASK, low=2.0, high=1.0)
    with pytest.raises(ValueError, match="top_p"):
        truncated_logprobs(torch.zeros(1, 1, 3), torch.zeros(1, 1, dtype=torch.long), top_p=0.0)


# one position, vocabulary of 5: probabilities 0.4, 0.3, 0.15, 0.1, 0.05 at temperature 1
PROBS = torch.tensor([0.4, 0.3, 0.15, 0.1, 0.05])
LOGITS = torch.log(PROBS).view(1, 1, 5)


def lp(target, **kw):
    return truncated_logprobs(LOGITS, torch.tensor([[target]]), **kw).item()


def test_no_truncation_is_the_tempered_softmax():
    assert lp(1) == pytest.approx(L(0.3), abs=1e-6)
    # temperature 2: p_i ~ sqrt(p_i)
    z = PROBS.sqrt().sum().item()
    assert lp(1, temperature=2.0) == pytest.approx(L(0.3 ** 0.5 / z), abs=1e-6)
    assert lp(1, temperature=0.0) == pytest.approx(L(0.3), abs=1e-6)  # greedy: logits unchanged


def test_top_k_renormalises_over_the_k_largest():
    assert lp(1, top_k=2) == pytest.approx(L(0.3 / 0.7), abs=1e-6)
    assert lp(2, top_k=3) == pytest.approx(L(0.15 / 0.85), abs=1e-6)
    assert lp(0, top_k=5) == pytest.approx(L(0.4), abs=1e-6)  # k = V: off


def test_top_p_keeps_the_smallest_set_reaching_the_mass():
    # mass above each token: 0, 0.4, 0.7, 0.85, 0.95. top_p 0.7 keeps {0.4, 0.3}: 0.15 has 0.7 above it
    assert lp(0, top_p=0.7) == pytest.approx(L(0.4 / 0.7), abs=1e-5)
    # top_p 0.75 keeps three tokens (mass 0.85)
    assert lp(2, top_p=0.75) == pytest.approx(L(0.15 / 0.85), abs=1e-5)


def test_top_k_then_top_p_on_the_renormalised_mass():
    # top_k 3 -> 0.4/0.85, 0.3/0.85, 0.15/0.85 = 0.4706, 0.3529, 0.1765; above: 0, 0.4706, 0.8235
    # top_p 0.8 keeps the first two (0.8235 >= 0.8 drops the third)
    assert lp(1, top_k=3, top_p=0.8) == pytest.approx(L(0.3 / 0.7), abs=1e-5)
    # at temperature 2 the order is the same; top_k 2 then renormalise sqrt-probabilities
    s = PROBS.sqrt()
    assert lp(0, temperature=2.0, top_k=2) == pytest.approx(L((s[0] / (s[0] + s[1])).item()), abs=1e-6)


def test_the_sampled_token_is_always_kept():
    # token 4 is outside top_k=2, but it was sampled, so it joins the kept set {0, 1, 4}
    assert lp(4, top_k=2) == pytest.approx(L(0.05 / 0.75), abs=1e-6)


def test_truncated_logprobs_are_differentiable_and_batched():
    logits = torch.randn(2, 3, 7, requires_grad=True)
    targets = torch.randint(0, 7, (2, 3))
    out = truncated_logprobs(logits, targets, temperature=0.7, top_p=0.9, top_k=4)
    assert out.shape == (2, 3) and torch.isfinite(out).all() and (out <= 0).all()
    out.sum().backward()
    assert torch.isfinite(logits.grad).all()
    full = truncated_logprobs(logits, targets, temperature=0.7)
    expected = torch.log_softmax(logits / 0.7, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(full, expected, atol=1e-6)
    assert (out >= full - 1e-6).all()  # renormalising over fewer tokens never lowers a kept token's log-prob


def sorted_nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The definition, by a full descending sort of every row."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    return torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, (sorted_p.cumsum(-1) - sorted_p) < top_p)


@pytest.mark.parametrize("vocab", [5, 300, 49_152])
@pytest.mark.parametrize("top_p", [1e-6, 0.5, 0.9, 0.95, 0.999, 1 - 1e-7])
def test_the_nucleus_ranks_a_few_tokens_and_keeps_what_a_full_sort_keeps(vocab, top_p):
    g = torch.Generator().manual_seed(vocab)
    # rows from peaked (the nucleus is a few tokens) to flat (it needs most of the vocabulary), one with a
    # huge logit (one token holds nearly all the mass) and one all equal but for a few
    spread = torch.tensor([0.1, 1.0, 3.0, 6.0, 12.0]).repeat_interleave(3).unsqueeze(-1)
    logits = torch.randn(len(spread), vocab, generator=g) * spread
    logits = torch.cat([logits, torch.zeros(2, vocab)])
    logits[-2, 0] = 40.0
    logits[-1, :3] = 0.5
    probs = torch.softmax(logits, -1)
    kept = nucleus_keep(probs, top_p)
    assert torch.equal(kept, sorted_nucleus(probs, top_p))
    assert kept.any(-1).all()  # never an empty set
    # as the sampler and the trainer call it, on [B, T, V] logits with a top-k before it
    batched = logits[:15].view(3, 5, vocab)
    masked = torch.softmax(batched.masked_fill(batched < batched.topk(min(vocab - 1, 40), -1).values[..., -1:], -math.inf), -1)
    for ranked in (False, True):  # sorted (fixed work: captured and compiled steps) and ranked (eager loops)
        keep = truncation_keep(batched, top_p, top_k=min(vocab - 1, 40), ranked=ranked)
        assert torch.equal(keep, sorted_nucleus(masked.view(15, vocab), top_p).view(3, 5, vocab) & (masked > 0))


def test_the_nucleus_refuses_a_top_p_outside_0_1_and_a_nan_row_keeps_everything():
    probs = torch.softmax(torch.randn(2, 500), -1)
    for bad in (0.0, -0.1, 1.5, float("nan")):
        for way in (nucleus_keep, sorted_nucleus_of_rlvr):
            with pytest.raises(ValueError, match="need 0 < top_p <= 1"):
                way(probs, bad)
    logits = torch.randn(3, 500)
    logits[1, 7] = float("nan")
    for ranked in (False, True):
        keep = truncation_keep(logits, 0.9, ranked=ranked)
        assert keep[1].all() and 0 < keep[0].sum() < 500  # the NaN row is left whole (its NaN then reaches the log-probs)


def test_an_uncorrected_mismatch_is_warned_naming_the_correction():
    from rlvr.algos.correction import MISMATCH_ALARM_KL, mismatch_warning

    said = mismatch_warning(0.028, "none", "bf16")  # SmolLM2-135M in bf16 at step 2
    assert "mismatch KL 0.028 per token (bf16 rounds" in said and "algo.correction=tis" in said
    assert mismatch_warning(0.028, "tis", "bf16") is None  # corrected: nothing to say
    assert mismatch_warning(MISMATCH_ALARM_KL / 2, "none", "bf16") is None and mismatch_warning(0.0, "none") is None
    assert mismatch_warning(float("nan"), "none") is None


# -- how rejected tokens aggregate -----------------------------------------------------------------

AGGREGATION_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm", "seq_mean")


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_a_rejected_token_is_a_zero_loss_token_in_every_aggregation_mode(mode):
    """Sequence 0 has two tokens, the second rejected; sequence 1 has one token, rejected (the
    whole sequence). Rejected tokens have loss 0 (surrogate, KL and entropy) and keep their place
    in every normaliser: 3 tokens, 2 tokens in sequence 0, 2 sequences."""
    from rlvr.algos.aggregation import AGGREGATIONS, Normalizer
    from rlvr.algos.objective import ObjectiveInputs, ObjectiveParts, policy_objective

    assert set(AGGREGATION_MODES) == set(AGGREGATIONS.ids())
    logp = torch.full((2, 2), L(0.5), requires_grad=True)
    ref = torch.log(torch.tensor([[0.25, 0.25], [0.25, 0.5]]))  # k1 = ln 2 on every real token
    adv = torch.tensor([[1.0, 2.0], [4.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    keep = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    norm = Normalizer(sequences=2, tokens=3, max_len=2)
    parts = ObjectiveParts(aggregation=mode, kl_estimator="k1", kl_coef=0.5, entropy_coef=0.1)
    loss, stats = policy_objective(ObjectiveInputs(logp, logp.detach(), adv, mask, norm, ref, torch.ones(2, 2), keep=keep), parts)
    kept = -1 + 0.5 * L(2) - 0.1  # ratio 1: surrogate -A, plus the KL, minus the entropy bonus
    expected = {"token_mean": kept / 3,  # 3 tokens, two of them rejected
                "seq_mean_token_mean": (kept / 2 + 0) / 2,  # sequence 0's mean over its 2 tokens; sequence 1 counts, with 0
                "seq_mean_token_sum_norm": kept / (2 * 2),
                "seq_mean": (kept / 2 + 0) / 2}[mode]
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert stats["policy_loss_sum"] == pytest.approx(expected / kept * -1, abs=1e-6)
    loss.backward()
    assert logp.grad[0, 1] == 0 and logp.grad[1, 0] == 0 and logp.grad[0, 0] != 0


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_mis_rejection_in_the_trainer_equals_a_zero_advantage(mode):
    """Through `PolicyObjective` on a real (tiny) model, on-policy (the behaviour log-probs are the
    forward's own): MIS rejection of some tokens, and of a whole sequence, gives the loss and
    gradient of the uncorrected objective with those tokens' advantages set to 0, whatever the
    aggregation mode. The normalisers are the batch's loss-mask totals either way."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from envs.types import Problem, Status, Verdict
    from rlvr.algos.objective import ObjectiveParts
    from rlvr.algos.config import CorrectionConfig
    from rlvr.models.batch import token_logprobs
    from rlvr.rollout.base import Completion, SamplingParams
    from rlvr.train.policy_gradient import PolicyObjective
    from rlvr.rollout.tensors import build_rollouts
    from rlvr.rollout.sampling import Group

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64))
    model.eval()  # deterministic forwards
    seqs = [([1, 2, 3], [5, 6, 7, 2]), ([1, 4], [9, 10, 2]), ([1, 5], [11, 12, 13, 2])]
    completions = [Completion(i, p, c, [0.0] * len(c), text="") for i, (p, c) in enumerate(seqs)]
    verdicts = [Verdict(reward=r, passed=bool(r), status=Status.OK) for r in (1.0, 0.0, 1.0)]
    r = build_rollouts([Group(Problem(id="p", prompt="", reference=""), completions, verdicts)], pad_id=0, drop_failed=True)
    with torch.no_grad():
        trainer, _ = token_logprobs(model, r.batch)
    # engine log-probs: rho = 1 (kept, weight 1) except 3x off on tokens (0, 1), (0, 3) and all of sequence 1
    reject = torch.zeros_like(r.mask)
    reject[0, 1] = reject[0, 3] = 1
    reject[1] = r.mask[1]
    rollout = torch.where(reject.bool(), trainer - L(3.0), trainer) * r.mask
    adv = torch.tensor([[1.0], [-2.0], [0.5]]) * torch.linspace(1, 2, r.mask.shape[1]) * r.mask
    parts = ObjectiveParts(aggregation=mode)

    def loss_and_grad(advantages, kind):
        pg = PolicyObjective(model, r.batch, r.mask, advantages, None, None, rollout, parts, SamplingParams(), 8.0, torch.device("cpu"),
                             correction=CorrectionConfig(kind=kind, level="token", low=0.5, high=2.0))
        rows = torch.arange(3)
        model.zero_grad()
        total = 0.0
        for micro in (rows[:1], rows[1:]):  # micro-batched, as the harness runs it
            loss, stats, _ = pg.loss(micro, pg.totals(rows))
            loss.backward()
            total += float(loss.detach())
        return total, torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]), stats

    rejected, grad, stats = loss_and_grad(adv, "mis")
    assert stats["mismatch_masked_frac"] > 0
    zeroed, zeroed_grad, _ = loss_and_grad(adv * (1 - reject), "none")
    assert rejected == pytest.approx(zeroed, abs=1e-6)
    torch.testing.assert_close(grad, zeroed_grad, rtol=1e-5, atol=1e-7)

"""Observation tokens of multi-turn episodes are context only: whatever their log-probs, advantages
or reference values, the gradient is the same, and every normaliser counts the model's tokens.

The objective is checked against the same episodes with their observation tokens cut out (the
model tokens moved together): for every policy loss and aggregation the gradient on the model's
tokens is the same and nothing flows into observation positions. The trainer side is checked on
real completions through `build_rollouts`, `PolicyObjective`, GAE and the preference batches."""

from __future__ import annotations

import pytest
import torch

from rlvr.algos.advantages import ADVANTAGES, AdvantageInputs, estimator_parameters, gae
from rlvr.algos.aggregation import Normalizer
from rlvr.algos.objective import ObjectiveInputs, ObjectiveParts, policy_objective
from rlvr.rollout.base import Completion
from rlvr.models.batch import build_token_batch

PARTS = {
    "grpo": ObjectiveParts(aggregation="seq_mean_token_mean", kl_estimator="k3", kl_coef=0.04),
    "dapo_entropy": ObjectiveParts(clip_high=0.28, aggregation="token_mean", entropy_coef=0.01),
    "dr_grpo": ObjectiveParts(aggregation="seq_mean_token_sum_norm"),
    "gspo": ObjectiveParts(ratio="sequence", clip_low=3e-4, clip_high=4e-4, aggregation="seq_mean"),
    "gpg": ObjectiveParts(policy_loss="pg"),
    "cispo": ObjectiveParts(policy_loss="cispo", clip_low=None, clip_high=3.0),
}


def _episodes(seed: int, B: int = 6, T: int = 12) -> dict[str, torch.Tensor]:
    """Rows of model tokens with one observation span (mask 0) in the middle, then padding."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(B, T)
    for b in range(B):
        first, obs, second = (int(x) for x in torch.randint(1, 4, (3,), generator=g))
        mask[b, :first] = 1
        mask[b, first + obs:first + obs + second] = 1
    return {"theta": torch.randn(B, T, generator=g) * 0.3, "old": torch.randn(B, T, generator=g) * 0.3 - 1.0,
            "ref": torch.randn(B, T, generator=g) * 0.3 - 1.0, "adv": torch.randn(B, T, generator=g),
            "ent": torch.rand(B, T, generator=g), "mask": mask}


def _scramble_observations(b: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """The same batch with arbitrary values on every observation (and padding) position."""
    g = torch.Generator().manual_seed(seed)
    off = b["mask"] == 0
    out = dict(b)
    for key, scale in (("theta", 3.0), ("old", 5.0), ("ref", 5.0), ("adv", 10.0), ("ent", 4.0)):
        out[key] = torch.where(off, torch.randn(b[key].shape, generator=g) * scale, b[key])
    return out


def _compact(b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each row's model tokens moved to the front (observations cut out), padded with mask 0."""
    B, T = b["mask"].shape
    out = {k: torch.zeros(B, T) for k in b}
    for r in range(B):
        keep = b["mask"][r].bool()
        n = int(keep.sum())
        for k in b:
            out[k][r, :n] = b[k][r, keep]
    out["mask"] = (torch.arange(T).unsqueeze(0) < b["mask"].sum(-1, keepdim=True)).float()
    return out


def _grad(b: dict[str, torch.Tensor], parts: ObjectiveParts) -> torch.Tensor:
    theta = b["theta"].clone().requires_grad_()
    m = b["mask"]
    norm = Normalizer(sequences=float((m.sum(-1) > 0).sum()), tokens=float(m.sum()), max_len=float(m.shape[1]))
    logp = b["old"] + theta
    ent = b["ent"] * (1 + theta)
    loss, _ = policy_objective(ObjectiveInputs(logp, b["old"], b["adv"], m, norm, b["ref"], ent), parts)
    loss.backward()
    return theta.grad


@pytest.mark.parametrize("parts", PARTS.values(), ids=PARTS.keys())
def test_observation_values_do_not_change_the_objectives_gradient(parts):
    b = _episodes(seed=3)
    grad = _grad(b, parts)
    assert torch.equal(grad, _grad(_scramble_observations(b, seed=4), parts))
    assert grad[b["mask"] == 0].abs().max() == 0  # nothing flows into an observation token
    assert (grad[b["mask"] == 1] != 0).float().mean() > 0.5  # while the model tokens get theirs (clipping drops a few)


@pytest.mark.parametrize("parts", PARTS.values(), ids=PARTS.keys())
def test_normalisers_count_model_tokens_only(parts):
    """The episodes give the gradient of the same model tokens with the observations cut out."""
    b = _episodes(seed=5)
    compact = _compact(b)
    grad, compact_grad = _grad(b, parts), _grad(compact, parts)
    for r in range(b["mask"].shape[0]):
        n = int(b["mask"][r].sum())
        assert torch.allclose(grad[r, b["mask"][r].bool()], compact_grad[r, :n], atol=1e-7)


def test_gae_carries_values_across_an_observation():
    """A critic's GAE over an episode equals GAE over its model tokens alone: the observation is
    part of the transition between two model tokens, not a state of its own."""
    b = _episodes(seed=6)
    rewards = torch.zeros_like(b["mask"])
    last = b["mask"].cumsum(-1).argmax(-1)
    rewards[torch.arange(len(last)), last] = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    values = torch.where(b["mask"] > 0, b["old"], torch.randn(b["mask"].shape) * 7)
    adv, ret = gae(rewards, values, b["mask"], gamma=0.9, lam=0.8)
    compact = _compact({"r": rewards, "v": values, "mask": b["mask"]})
    cadv, cret = gae(compact["r"], compact["v"], compact["mask"], gamma=0.9, lam=0.8)
    for r in range(len(last)):
        keep, n = b["mask"][r].bool(), int(b["mask"][r].sum())
        assert torch.allclose(adv[r, keep], cadv[r, :n]) and torch.allclose(ret[r, keep], cret[r, :n])
        assert adv[r, ~keep].abs().max() == 0


def _episode(prompt: list[int], model_a: list[int], obs: list[int], model_b: list[int], obs_logp: float) -> Completion:
    ids = model_a + obs + model_b
    mask = [1] * len(model_a) + [0] * len(obs) + [1] * len(model_b)
    logprobs = [-0.5 - 0.1 * i if m else obs_logp for i, m in enumerate(mask)]
    return Completion(0, prompt, ids, logprobs, text="", loss_mask=mask)


def test_rollouts_and_the_trainers_objective_ignore_observation_tokens():
    """Real completions through `build_rollouts` and `PolicyObjective` on a real (tiny) model:
    the engine's log-probs on observation tokens (0.0 as the runner writes them, or anything else)
    change neither the loss nor the gradient, and the token totals count the model's tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from envs.types import Problem, Status, Verdict
    from rlvr.algos.config import CorrectionConfig
    from rlvr.rollout.base import SamplingParams
    from rlvr.train.policy_gradient import PolicyObjective
    from rlvr.rollout.tensors import build_rollouts
    from rlvr.rollout.sampling import Group

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64))

    def objective(obs_logp: float) -> tuple[float, torch.Tensor, torch.Tensor]:
        completions = [_episode([1, 2, 3], [5, 6], [30, 31, 32], [7, 8, 2], obs_logp),
                       _episode([1, 4], [9], [33, 34], [10, 2], obs_logp)]
        verdicts = [Verdict(reward=1.0, passed=True, status=Status.OK), Verdict(reward=0.0, passed=False, status=Status.OK)]
        rollouts = build_rollouts([Group(Problem(id="p", prompt="", reference=""), completions, verdicts)], pad_id=0, drop_failed=True)
        adv = (rollouts.rewards - 0.5).unsqueeze(1) * torch.ones_like(rollouts.mask)
        pg = PolicyObjective(model, rollouts.batch, rollouts.mask, adv, None, None, rollouts.rollout_logp, ObjectiveParts(),
                             SamplingParams(), 8.0, torch.device("cpu"), stale=True,
                             correction=CorrectionConfig(kind="tis", cap=2.0))
        rows = torch.arange(2)
        totals = pg.totals(rows)
        model.zero_grad()
        loss, _, tokens = pg.loss(rows, totals)
        loss.backward()
        grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return float(loss.detach()), grad, torch.tensor([float(totals[1]), tokens])

    loss, grad, counts = objective(0.0)
    assert counts.tolist() == [8.0, 8.0]  # 2 + 3 and 1 + 2 model tokens; 5 observation tokens left out
    loss2, grad2, _ = objective(-9.0)
    assert loss == loss2 and torch.equal(grad, grad2)


def test_preference_batches_score_model_tokens_only():
    """DPO/KTO batches built from episodes: observation tokens are context, never in the scored sum."""
    prompts = [[1, 2], [1, 3]]
    completions = [[5, 6, 30, 31, 7], [8, 32, 9]]
    masks = [[1, 1, 0, 0, 1], [1, 0, 1]]
    batch = build_token_batch(prompts, completions, 0, masks)
    plain = build_token_batch(prompts, completions, 0)
    assert batch.completion_mask.sum(-1).tolist() == [3.0, 2.0]
    assert plain.completion_mask.sum(-1).tolist() == [5.0, 3.0]
    # the scored positions are exactly the model tokens' targets
    targets = batch.input_ids[:, 1:]
    assert targets[batch.completion_mask.bool()].tolist() == [5, 6, 7, 8, 9]
    assert torch.equal(build_token_batch(prompts, completions, 0, [None, None]).completion_mask, plain.completion_mask)


@pytest.mark.parametrize("estimator", sorted(ADVANTAGES.ids()))
def test_every_estimator_discounts_per_generated_token(estimator):
    """With gamma < 1 an episode's generated tokens get the advantages of the same tokens with the
    observations cut out, in every estimator: observation tokens neither discount nor accrue."""
    b = _episodes(seed=7)
    B, T = b["mask"].shape
    g = torch.Generator().manual_seed(8)
    last = b["mask"].cumsum(-1).argmax(-1)
    steps = torch.zeros(B, T, dtype=torch.bool)
    steps[torch.arange(B), last] = True
    steps[:, 0] = True  # a step that ends on the first token (a generated token in every row)
    fields = {"token_rewards": torch.randn(B, T, generator=g), "kl_penalty": torch.rand(B, T, generator=g) * 0.1,
              "values": torch.randn(B, T, generator=g), "step_rewards": torch.randn(B, T, generator=g) * steps, "steps": steps.float()}
    compact = _compact({**fields, "mask": b["mask"]})
    kwargs = {k: v for k, v in {"gamma": 0.8, "lam": 0.7}.items() if k in estimator_parameters(estimator)}

    def advantages(f: dict[str, torch.Tensor]) -> torch.Tensor:
        inp = AdvantageInputs(torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.5]), torch.tensor([0, 0, 0, 1, 1, 1]), f["mask"],
                              torch.ones(B, dtype=torch.bool), step_rewards=f["step_rewards"], step_mask=f["steps"].bool(),
                              kl_penalty=f["kl_penalty"], token_rewards=f["token_rewards"], values=f["values"])
        return ADVANTAGES.get(estimator)(inp, **kwargs)

    episodes, cut = advantages({**fields, "mask": b["mask"]}), advantages(compact)
    assert cut.abs().sum() > 0
    for r in range(B):
        keep, n = b["mask"][r].bool(), int(b["mask"][r].sum())
        torch.testing.assert_close(episodes[r, keep], cut[r, :n], rtol=0, atol=1e-6)
        assert episodes[r, ~keep].abs().max() == 0

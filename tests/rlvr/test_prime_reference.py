"""PRIME's implicit PRM against its reference under every sampler setting (issue 22): a PRM equal
to its reference gives token rewards of exactly 0, whether the policy's reference log-probs (scored
under the sampler's truncated, tempered distribution) are reused or the PRM's reference scores the
batch itself. Reusing truncated log-probs used to shift every reward by beta * log Z_t < 0."""

from __future__ import annotations

import pytest
import torch

from envs.types import Problem, Status, Verdict
from rlvr.config import load_config
from rlvr.models.tiny import TinyModelConfig, build_tiny_model
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.train import TrainConfig
from rlvr.train.harness import Harness
from rlvr.train.policy_gradient import PolicyGradient
from rlvr.rollout.tensors import build_rollouts
from rlvr.rollout.sampling import Group


@pytest.fixture(scope="module")
def prime(tmp_path_factory):
    """PRIME on a (random) embedded model with a frozen PRM (``algo.prm.update=off``): the PRM
    stays equal to its reference, the policy's starting weights."""
    base = build_tiny_model(TinyModelConfig(hidden_size=64, layers=2, intermediate_size=128), tmp_path_factory.mktemp("tiny"))
    cfg = load_config(TrainConfig, "quickstart", [f"output_dir={tmp_path_factory.mktemp('runs')}", "name=prime", f"model.name_or_path={base}",
                                                  "algo.preset=prime", "algo.prm.update=off", "log.progress=false", "log.tensorboard=false",
                                                  "threads=1", "update.micro_batch_size=3"])
    pg = PolicyGradient(cfg, Harness(cfg))
    assert pg.prm_shares_reference  # the PRM's reference is the policy's: the reuse is possible
    yield pg
    pg.close()


def _rollouts(pg: PolicyGradient):
    tok = pg.tokenizer
    prompt = tok("12+30=", add_special_tokens=False)["input_ids"]
    texts = ["42", "43 is it", "4", "42, since 12 + 30 = 42"]
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    completions = [Completion(0, prompt, c, [-1.0] * len(c), text=t) for c, t in zip(ids, texts)]
    verdicts = [Verdict(reward=float(t.startswith("42")), passed=t.startswith("42"), status=Status.OK) for t in texts]
    return build_rollouts([Group(Problem(id="p", prompt="12+30=", reference="42"), completions, verdicts)], tok.pad_token_id, drop_failed=True)


@pytest.mark.parametrize("pack", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("top_k", [0, 4, 5])
@pytest.mark.parametrize("top_p", [1.0, 0.9, 0.8])
@pytest.mark.parametrize("temperature", [0.7, 1.0])  # rollout.temperature must be > 0: no greedy training
def test_a_prm_equal_to_its_reference_gives_zero_rewards_under_every_sampler(prime, temperature, top_p, top_k, pack, monkeypatch):
    for key, value in {"temperature": temperature, "top_p": top_p, "top_k": top_k}.items():
        monkeypatch.setattr(prime.cfg.rollout, key, value)
    monkeypatch.setattr(prime.groups, "sampling", SamplingParams(temperature, top_p, top_k, prime.cfg.rollout.max_new_tokens))
    monkeypatch.setattr(prime.cfg.update, "pack", pack)
    r = _rollouts(prime)
    rows = r.rows
    ref_logp = prime._logp(prime.reference, r, rows)  # what `update` hands to the PRM: scored as the sampler drew
    metrics: dict[str, float] = {}
    rewards = prime.prm_rewards(r, rows, ref_logp, metrics)
    assert r.mask.sum() > 10 and metrics["prm/token_reward_mean"] == 0.0
    assert torch.equal(rewards, torch.zeros_like(rewards))

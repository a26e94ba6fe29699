import pytest
import torch

from rlvr.models.loading import load_model
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.engines.hf import HFGenerateEngine
from rlvr.models.batch import build_token_batch, scatter_completion_values, token_logprobs


def test_token_batch_masks_mark_completion_targets():
    batch = build_token_batch([[1, 5, 6], [1, 7]], [[8, 9, 2], [4, 2]], pad_id=0)
    assert batch.input_ids.tolist() == [[1, 5, 6, 8, 9, 2], [1, 7, 4, 2, 0, 0]]
    assert batch.attention_mask.tolist() == [[1] * 6, [1, 1, 1, 1, 0, 0]]
    # target t predicts token t+1: completion tokens are predicted at t = len(prompt)-1 ...
    assert batch.completion_mask.tolist() == [[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]]
    placed = scatter_completion_values([[0.1, 0.2, 0.3], [0.4, 0.5]], batch)
    assert torch.allclose(placed[0, 2:], torch.tensor([0.1, 0.2, 0.3])) and torch.allclose(placed[1, 1:3], torch.tensor([0.4, 0.5]))


@pytest.mark.slow
def test_engine_logprobs_agree_with_the_trainer(sft_base):
    model, tok = load_model(str(sft_base))
    engine = HFGenerateEngine(model, tok)
    prompts = ["Compute 47*8.\n", "Compute 12+95.\n", "Compute 60-18.\n"]
    comps = engine.generate(prompts, 4, SamplingParams(temperature=1.0, max_new_tokens=64, seed=0))
    assert [c.prompt_index for c in comps] == [0] * 4 + [1] * 4 + [2] * 4
    batch = build_token_batch([c.prompt_ids for c in comps], [c.token_ids for c in comps], tok.pad_token_id)
    with torch.no_grad():
        trainer_logp, _ = token_logprobs(model, batch, temperature=1.0)
    rollout_logp = scatter_completion_values([c.logprobs for c in comps], batch)
    gap = ((trainer_logp - rollout_logp).abs() * batch.completion_mask).max()
    assert gap < 1e-4, gap
    for c in comps:
        assert c.char_ends[-1] == len(c.text) and c.token_ids[-1] == tok.eos_token_id or c.truncated
    again = engine.generate(prompts, 4, SamplingParams(temperature=1.0, max_new_tokens=64, seed=0))
    assert [c.text for c in again] == [c.text for c in comps]  # seeded sampling is reproducible
    greedy = engine.generate(prompts[:1], 2, SamplingParams(temperature=0.0, max_new_tokens=64))
    assert greedy[0].text == greedy[1].text

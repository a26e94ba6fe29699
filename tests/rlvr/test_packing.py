"""Shared-prefix packing: each distinct prompt runs once, no padding, and every token sees exactly
the context it had in its own padded row — so log-probs, entropies and gradients equal the padded
forward's up to float rounding, on a real (tiny, randomly initialised) Llama."""

from __future__ import annotations

import pytest
import torch

from rlvr.models.loading import load_model
from rlvr.models.tiny import TinyModelConfig, build_tiny_model
from rlvr.models.batch import build_token_batch, token_logprobs
from rlvr.models.packing import shared_prefix_layout, supports_packing


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.manual_seed(0)
    path = build_tiny_model(TinyModelConfig(hidden_size=64, layers=2, heads=4, intermediate_size=128, seed=3),
                            tmp_path_factory.mktemp("tiny") / "m")
    m, _ = load_model(str(path))
    return m.float()


@pytest.fixture(params=["sdpa", "eager"])
def model(tiny, request):
    """The model on each attention kernel that takes the packed 4-D mask (sdpa reads it as bool,
    eager as additive: `rlvr.models.attention.model_mask`)."""
    tiny.set_attn_implementation(request.param)
    yield tiny
    tiny.set_attn_implementation("sdpa")


def test_layout_of_two_sequences_sharing_a_prompt_by_hand():
    batch = build_token_batch([[5, 6], [5, 6]], [[7, 8], [9]], pad_id=0)
    layout = shared_prefix_layout(batch.input_ids, batch.attention_mask.sum(-1), batch.prompt_lens)
    assert layout.input_ids.tolist() == [[5, 6, 7, 8, 9]]  # the prompt once
    assert layout.position_ids.tolist() == [[0, 1, 2, 3, 2]]  # the second completion continues from the prompt too
    expected = torch.tensor([  # query rows, key columns
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 1, 0, 0, 1],  # token 9 sees the prompt and itself, not the other completion
    ], dtype=torch.bool)
    assert torch.equal(layout.attention_mask[0, 0], expected)
    # target t of each padded row predicts token t+1 from the logits at these packed positions
    assert layout.source[0].tolist() == [0, 1, 2]
    assert layout.source[1, :2].tolist() == [0, 1]


def test_units_split_and_rows_fill_first_fit():
    prompts = [[1, 2, 3]] * 4 + [[4]] * 2 + [[5, 6]]
    completions = [[7] * 5, [8] * 6, [9] * 4, [10] * 5, [11] * 2, [12] * 3, [13] * 9]
    batch = build_token_batch(prompts, completions, pad_id=0)
    layout = shared_prefix_layout(batch.input_ids, batch.attention_mask.sum(-1), batch.prompt_lens, row_tokens=14)
    flat = layout.input_ids.flatten().tolist()
    # 4 sequences of prompt [1,2,3] need 3 + 20 tokens > 14: two units, each with its own copy of the prompt
    assert sum(1 for i in range(len(flat) - 2) if flat[i:i + 3] == [1, 2, 3]) == 2
    assert flat.count(4) == 1 and flat.count(5) == 1
    real = int((layout.input_ids != 0).sum())
    assert real == 2 * 3 + 20 + 1 + 5 + 2 + 9  # every completion token once, each prompt once per unit
    assert layout.input_ids.shape[1] == 14  # rows are no wider than the capacity (no sequence is longer)


@pytest.mark.parametrize("row_tokens", [8, 32, 128])
def test_packed_logprobs_entropy_and_gradients_equal_the_padded_forward(model, row_tokens, monkeypatch):
    g = torch.Generator().manual_seed(1)
    prompts, completions = [], []
    for k in range(5):  # five prompts of different lengths, a group of 1 to 4 completions each
        prompt = torch.randint(3, 250, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist()
        for _ in range(k % 4 + 1):
            prompts.append(prompt)
            completions.append(torch.randint(3, 250, (int(torch.randint(1, 12, (1,), generator=g)),), generator=g).tolist())
    batch = build_token_batch(prompts, completions, pad_id=0)
    mask = batch.completion_mask
    import rlvr.models.batch as batch_module

    original = batch_module.shared_prefix_layout
    monkeypatch.setattr(batch_module, "shared_prefix_layout", lambda *a, **k: original(*a, row_tokens=row_tokens))

    results = {}
    for pack in (False, True):
        model.zero_grad()
        logp, ent = token_logprobs(model, batch, temperature=0.7, entropy=True, entropy_grad=True, pack=pack)
        ((logp * mask).sum() + 0.1 * (ent * mask).sum()).backward()
        results[pack] = (logp.detach() * mask, ent.detach() * mask, [p.grad.clone() for p in model.parameters()])
    (lp0, e0, g0), (lp1, e1, g1) = results[False], results[True]
    assert torch.allclose(lp0, lp1, atol=2e-5) and torch.allclose(e0, e1, atol=2e-5)
    for a, b in zip(g0, g1):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


def test_truncated_sampling_logprobs_agree_packed(model):
    batch = build_token_batch([[3, 4, 5]] * 3, [[6, 7], [8, 9, 10], [11]], pad_id=0)
    padded, _ = token_logprobs(model, batch, temperature=1.0, top_p=0.9, top_k=20)
    packed, _ = token_logprobs(model, batch, temperature=1.0, top_p=0.9, top_k=20, pack=True)
    m = batch.completion_mask.bool()
    assert torch.allclose(padded[m], packed[m], atol=2e-5)


def test_models_on_other_attention_kernels_are_scored_padded(model, monkeypatch):
    assert supports_packing(model)
    monkeypatch.setattr(model.config, "_attn_implementation", "flash_attention_2")
    assert not supports_packing(model)
    calls = []
    monkeypatch.setattr("rlvr.models.batch.shared_prefix_layout", lambda *a, **k: calls.append(1))
    monkeypatch.setattr(model.config, "_attn_implementation", "sdpa")  # the forward itself needs a kernel this machine has
    monkeypatch.setattr("rlvr.models.batch.supports_packing", lambda m: False)
    batch = build_token_batch([[3, 4]] * 2, [[5], [6, 7]], pad_id=0)
    token_logprobs(model, batch, pack=True)
    assert not calls

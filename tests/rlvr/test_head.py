"""Chunked head log-probs (`rlvr.models.head`): the same log-probs, entropies and gradients as the
plain forward's full logits, taken on a real (tiny) Llama; the plain path wherever the shortcut
would not be exact."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.models import head as head_module
from rlvr.models.batch import _score, build_token_batch, token_logprobs
from rlvr.models.head import HeadLogprobs
from rlvr.models.loading import load_model
from rlvr.models.tiny import TinyModelConfig, build_tiny_model


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_chunked_function_matches_full_logits_with_gradients(temperature):
    torch.manual_seed(0)
    hidden = torch.randn(11, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(37, 8, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 37, (11,))
    g_logp, g_ent = torch.randn(11, dtype=torch.float64), torch.randn(11, dtype=torch.float64)

    z = hidden @ weight.T / temperature
    logp_full = torch.log_softmax(z, -1)
    want_logp = logp_full.gather(-1, targets[:, None]).squeeze(-1)
    want_ent = -(logp_full.exp() * logp_full).sum(-1)
    want = torch.autograd.grad((want_logp * g_logp).sum() + (want_ent * g_ent).sum(), (hidden, weight))

    logp, ent = HeadLogprobs.apply(hidden, weight, targets, temperature, 4, True, True)  # chunks of 4: 3 chunks
    got = torch.autograd.grad((logp * g_logp).sum() + (ent * g_ent).sum(), (hidden, weight))
    torch.testing.assert_close(logp.double(), want_logp, atol=1e-5, rtol=0)  # computed in float32
    torch.testing.assert_close(ent.double(), want_ent, atol=1e-5, rtol=0)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    logp, ent = HeadLogprobs.apply(hidden, weight, targets, temperature, 4, True, False)  # entropy measured only
    assert not ent.requires_grad and logp.requires_grad


@pytest.mark.parametrize("top_k", [41, 42, 100_000])
def test_a_top_k_of_the_vocabulary_or_more_truncates_nothing(top_k):
    """top_k=100000 is how a user writes "no limit" on any vocabulary: the untruncated log-probs, not an error."""
    from rlvr.algos.correction import truncated_logprobs

    torch.manual_seed(2)
    hidden, weight, targets = torch.randn(9, 8), torch.randn(41, 8), torch.randint(0, 41, (9,))
    plain, _ = HeadLogprobs.apply(hidden, weight, targets, 0.7, 4, False, False)
    logp, _ = HeadLogprobs.apply(hidden, weight, targets, 0.7, 4, False, False, 1.0, top_k)
    torch.testing.assert_close(logp, plain)
    nucleus, _ = HeadLogprobs.apply(hidden, weight, targets, 0.7, 4, False, False, 0.9, top_k)  # top-p still applies
    torch.testing.assert_close(nucleus, truncated_logprobs((hidden @ weight.T) / 0.7, targets, 1.0, 0.9, 0), atol=1e-5, rtol=0)


@pytest.mark.parametrize("top_p, top_k", [(0.9, 0), (0.5, 0), (1.0, 5), (0.8, 7)])
def test_truncated_log_probs_match_the_plain_truncation_with_gradients(top_p, top_k):
    """Top-p/top-k: log-probs of the truncated, renormalised distribution (as the sampler drew
    them), the entropy of the untruncated one, and both gradients, chunk by chunk."""
    from rlvr.algos.correction import truncated_logprobs

    torch.manual_seed(1)
    hidden = torch.randn(13, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(41, 8, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 41, (13,))
    g_logp, g_ent = torch.randn(13, dtype=torch.float64), torch.randn(13, dtype=torch.float64)
    z = (hidden @ weight.T).float() / 0.7
    want_logp = truncated_logprobs(z, targets, 1.0, top_p, top_k).double()
    logp_full = torch.log_softmax(z, -1).double()
    want_ent = -(logp_full.exp() * logp_full).sum(-1)
    want = torch.autograd.grad((want_logp * g_logp).sum() + (want_ent * g_ent).sum(), (hidden, weight))

    logp, ent = HeadLogprobs.apply(hidden, weight, targets, 0.7, 4, True, True, top_p, top_k)
    got = torch.autograd.grad((logp * g_logp).sum() + (ent * g_ent).sum(), (hidden, weight))
    torch.testing.assert_close(logp.double(), want_logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent.double(), want_ent, atol=1e-5, rtol=0)
    assert (logp.double() > torch.log_softmax(z, -1).gather(-1, targets[:, None]).squeeze(-1).double() + 1e-6).any()  # it did truncate
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("top_p, top_k", [(1.0, 0), (0.9, 0), (1.0, 5)])
def test_a_nan_logit_reaches_the_log_prob_with_or_without_truncation(top_p, top_k):
    """A diverged model's NaN is not hidden: truncating it used to leave only the forced target, whose
    log-prob came out 0 (probability 1) on both the plain and the chunked path."""
    from rlvr.algos.correction import truncated_logprobs

    torch.manual_seed(3)
    hidden, weight = torch.randn(6, 8), torch.randn(300, 8)
    hidden[2, 0] = float("nan")  # row 2: every logit NaN; row 4: one
    targets = torch.randint(0, 300, (6,))
    z = hidden @ weight.T
    z[4, (int(targets[4]) + 1) % 300] = float("nan")
    plain = truncated_logprobs(z, targets, 1.0, top_p, top_k)
    weight_nan = weight.clone()
    chunked, _ = HeadLogprobs.apply(hidden, weight_nan, targets, 1.0, 4, False, False, top_p, top_k)
    assert plain[2].isnan() and chunked[2].isnan() and plain[4].isnan()
    finite = [0, 1, 3, 5]
    assert torch.isfinite(plain[finite]).all() and torch.isfinite(chunked[finite]).all()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny_model(TinyModelConfig(hidden_size=32, layers=2, heads=2, intermediate_size=64), tmp_path_factory.mktemp("t"))
    model, tok = load_model(str(path))
    prompts = [tok(p).input_ids for p in ("Compute 1+2.\n", "Compute 31+45.\n", "Compute 31+45.\n")]
    completions = [tok(c, add_special_tokens=False).input_ids for c in ("1+2=3", "Answer: 76", "31+45=7")]
    return model, build_token_batch(prompts, completions, tok.pad_token_id)


def plain(model, batch, temperature):
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float() / temperature
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    return logp, -(logp_all.exp() * logp_all).sum(-1)


@pytest.mark.parametrize("top_p, top_k", [(1.0, 0), (0.9, 20)])  # the full distribution, and a truncated one
@pytest.mark.parametrize("pack", [False, True])
def test_training_log_probs_take_the_chunked_head_and_equal_the_plain_forward(tiny, pack, top_p, top_k, monkeypatch):
    model, batch = tiny
    monkeypatch.setattr(head_module, "CHUNK_TOKENS", 5)
    taken = []
    real_apply = HeadLogprobs.apply
    monkeypatch.setattr(HeadLogprobs, "apply", lambda *a: taken.append(1) or real_apply(*a))
    mask = batch.completion_mask.bool()
    ours = copy.deepcopy(model)
    logp, ent = token_logprobs(ours, batch, 0.8, entropy=True, entropy_grad=True, top_p=top_p, top_k=top_k, pack=pack)
    ((logp * mask).sum() + (ent * mask).sum()).backward()
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
    want_logp, want_ent = _score(logits, batch.input_ids[:, 1:], 0.8, True, True, top_p, top_k)
    ((want_logp * mask).sum() + (want_ent * mask).sum()).backward()
    assert taken, "the chunked head was not used"
    torch.testing.assert_close(logp[mask], want_logp[mask], atol=2e-5, rtol=0)
    torch.testing.assert_close(ent[mask], want_ent[mask], atol=2e-5, rtol=0)
    for (name, a), b in zip(ours.named_parameters(), model.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=2e-5, rtol=1e-4, msg=name)
    model.zero_grad()


def test_the_plain_forward_stays_where_the_shortcut_would_not_be_exact(tiny, monkeypatch):
    model, batch = tiny
    taken = []
    real_apply = HeadLogprobs.apply
    monkeypatch.setattr(HeadLogprobs, "apply", lambda *a: taken.append(1) or real_apply(*a))
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            token_logprobs(model, batch)  # autocast: the rounding bf16 runs were measured with
    assert not taken
    scaled = copy.deepcopy(model)  # a model whose forward changes its head's output (as logit soft-capping does)
    scaled.lm_head.register_forward_hook(lambda m, args, out: out * 2)
    with torch.no_grad():
        logp, _ = token_logprobs(scaled, batch)
        want, _ = plain(scaled, batch, 1.0)
    assert head_module._CHECKED[scaled] is False and len(taken) == 1  # the one-time check only: then the plain path
    torch.testing.assert_close(logp, want, atol=1e-5, rtol=0)


def test_hidden_states_are_the_calling_threads_when_another_thread_runs_the_same_model(tmp_path):
    """A generation thread's forward through the same backbone (asynchronous rollouts in one process)
    while the trainer takes hidden states: the trainer gets its own batch's, not the other thread's."""
    import threading

    model, _ = load_model(str(build_tiny_model(TinyModelConfig(hidden_size=32, layers=2, heads=2, intermediate_size=64), tmp_path)))
    model.eval()
    mine, theirs = torch.randint(3, 50, (4, 9)), torch.randint(3, 50, (3, 5))
    me = threading.get_ident()
    fired: list[bool] = []

    def other_forward_after_our_backbone(module, args):  # on the head: after the backbone's hooks ran for us
        if threading.get_ident() == me and not fired:
            fired.append(True)
            t = threading.Thread(target=lambda: model(input_ids=theirs))
            t.start()
            t.join()

    handle = model.get_output_embeddings().register_forward_pre_hook(other_forward_after_our_backbone)
    try:
        with torch.no_grad():
            hidden = head_module.hidden_states(model, input_ids=mine)
    finally:
        handle.remove()
    assert fired and hidden.shape[:2] == (4, 9)

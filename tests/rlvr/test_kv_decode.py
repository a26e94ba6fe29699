"""rlvr's decoding loop (``rollout.hf.decode=kv``) beside Hugging Face ``generate`` on a real
(tiny, randomly initialised) Llama: the same greedy tokens, stop strings and end-of-sequence
handling, log-probs of the distribution each token was drawn from, and a sampler whose draws follow
the tempered, truncated distribution."""

from __future__ import annotations

import warnings

import pytest
import torch
import transformers

from rlvr.models.attention import model_mask
from rlvr.rollout import kv_decode
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.hf import HFGenerateEngine
from rlvr.rollout.kv_decode import sample_next
from rlvr.algos.correction import truncation_keep
from tests.rlvr.tiny_adder import PROMPTS, train_adder
from rlvr.models.batch import build_token_batch, scatter_completion_values, token_logprobs

pytestmark = pytest.mark.smoke  # the newest lane's subset (scripts/test_newest.sh)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_adder(tmp_path_factory.mktemp("tiny") / "m")


@pytest.fixture(params=["sdpa", "eager"])
def model_and_tokenizer(trained, request):
    """The trained model on each attention kernel the loop supports (sdpa reads a bool mask, eager
    an additive one: `rlvr.models.attention.model_mask`)."""
    model, tok = trained
    model.set_attn_implementation(request.param)
    yield model, tok
    model.set_attn_implementation("sdpa")


def _pair(model, tok):
    return HFGenerateEngine(model, tok, decode="kv"), HFGenerateEngine(model, tok, decode="generate")


@pytest.mark.parametrize("grow_by", [64, 1])  # 1: the cache grows (copies itself into bigger buffers) over and over
def test_greedy_tokens_equal_generate(model_and_tokenizer, grow_by, monkeypatch):
    monkeypatch.setattr(kv_decode.KVBuffers, "GROW_BY", grow_by)
    kv, hf = _pair(*model_and_tokenizer)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    a, b = kv.generate(PROMPTS, 2, greedy), hf.generate(PROMPTS, 2, greedy)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.truncated for c in a] == [c.truncated for c in b]
    assert [c.text for c in a] == [c.text for c in b]
    for x, y in zip(a, b):
        assert max((abs(p - q) for p, q in zip(x.logprobs, y.logprobs)), default=0.0) < 1e-4


def test_dropping_finished_rows_changes_nothing(model_and_tokenizer, monkeypatch):
    model, tok = model_and_tokenizer
    prompts = [tok(p)["input_ids"] for p in PROMPTS for _ in range(2)]
    runs = {}
    for compact_at in (2.0, 0.0):  # never; whenever a row has finished
        monkeypatch.setattr(kv_decode, "COMPACT_AT", compact_at)
        runs[compact_at] = kv_decode.decode(model, prompts, max_new_tokens=24, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, greedy=True)
    whole, compacted = runs[2.0], runs[0.0]
    assert len(set(whole.lengths.tolist())) > 1, "rows should end at different steps for this test to mean anything"
    assert torch.equal(whole.lengths, compacted.lengths) and torch.equal(whole.ended, compacted.ended)
    for b, n in enumerate(whole.lengths.tolist()):
        assert whole.tokens[b, :n].tolist() == compacted.tokens[b, :n].tolist()
        assert torch.allclose(whole.logprobs[b, :n], compacted.logprobs[b, :n], atol=1e-5)


@pytest.mark.parametrize("settings", [dict(temperature=1.0), dict(temperature=0.7, top_p=0.9, top_k=20)])
def test_sampled_logprobs_are_the_trainers_and_rows_end_at_eos(model_and_tokenizer, settings):
    model, tok = model_and_tokenizer
    kv, _ = _pair(model, tok)
    sampling = SamplingParams(max_new_tokens=20, seed=3, **settings)
    comps = kv.generate(PROMPTS, 4, sampling)
    assert [c.prompt_index for c in comps] == [i for i in range(len(PROMPTS)) for _ in range(4)]
    batch = build_token_batch([c.prompt_ids for c in comps], [c.token_ids for c in comps], tok.pad_token_id)
    with torch.no_grad():
        trainer, _ = token_logprobs(model, batch, sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
    engine = scatter_completion_values([c.logprobs for c in comps], batch)
    m = batch.completion_mask.bool()
    assert (trainer - engine)[m].abs().max() < 1e-4
    for c in comps:
        ends_on_eos = bool(c.token_ids) and c.token_ids[-1] == tok.eos_token_id
        assert tok.eos_token_id not in c.token_ids[:-1]
        assert ends_on_eos != c.truncated
        assert c.truncated == (len(c.token_ids) == 20 and not ends_on_eos)
    assert [c.text for c in kv.generate(PROMPTS, 4, sampling)] == [c.text for c in comps]  # seeded: reproducible


def test_stop_strings_end_rows_as_generate_does(model_and_tokenizer):
    kv, hf = _pair(*model_and_tokenizer)
    free = kv.generate(PROMPTS[:2], 1, SamplingParams(temperature=0.0, max_new_tokens=24))
    text = next(c.text for c in free if len(c.text) >= 6)
    stop = text[3:5]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=24, stop=(stop,))
    a, b = kv.generate(PROMPTS, 1, sampling), hf.generate(PROMPTS, 1, sampling)
    assert [(c.token_ids, c.stop_string, c.truncated) for c in a] == [(c.token_ids, c.stop_string, c.truncated) for c in b]
    hit = [c for c in a if c.stop_string is not None]
    assert hit and all(c.text.endswith(stop) or stop in c.text[-len(stop) - 4:] for c in hit)


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, 0), (0.5, 1.0, 0), (1.0, 0.8, 0), (1.3, 0.95, 5)])
def test_the_sampler_draws_from_the_tempered_truncated_distribution(temperature, top_p, top_k):
    torch.manual_seed(0)
    logits = torch.randn(1, 12) * 2
    draws = 40_000
    tokens, logp = sample_next(logits.expand(draws, -1), temperature, top_p, top_k, greedy=False)
    scaled = logits / temperature
    keep = truncation_keep(scaled, top_p, top_k)
    expected = torch.softmax(scaled.masked_fill(~keep, float("-inf")) if keep is not None else scaled, -1)[0]
    freq = torch.bincount(tokens, minlength=12).float() / draws
    assert (freq - expected).abs().max() < 0.012  # ~5 standard errors at the largest probability
    assert (freq[expected == 0] == 0).all()  # nothing outside the kept set is ever drawn
    assert torch.allclose(logp, expected.log()[tokens], atol=1e-5)


def test_greedy_takes_the_argmax_with_its_temperature_one_logprob():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 2.9]])
    tokens, logp = sample_next(logits, 0.5, 0.5, 1, greedy=True)
    assert tokens.tolist() == [1, 0]
    assert torch.allclose(logp, torch.log_softmax(logits, -1)[[0, 1], [1, 0]])


def test_generate_when_asked_or_when_the_model_does_not_support_the_loop(model_and_tokenizer, monkeypatch):
    model, tok = model_and_tokenizer
    calls = []
    monkeypatch.setattr("rlvr.rollout.hf.decode", lambda *a, **k: calls.append(1))
    greedy = SamplingParams(temperature=0.0, max_new_tokens=4)
    HFGenerateEngine(model, tok, decode="generate").generate(PROMPTS[:1], 1, greedy)
    monkeypatch.setattr("rlvr.rollout.hf.supports_kv_decode", lambda m: False)
    HFGenerateEngine(model, tok).generate(PROMPTS[:1], 1, greedy)
    assert not calls
    with pytest.raises(ValueError, match="decode"):
        HFGenerateEngine(model, tok, decode="fast")


def test_the_probe_passes_on_the_installed_transformers(model_and_tokenizer):
    """The release this environment has (the pinned one in the main lane, 5.19 in the vLLM lane, the newest in the newest lane)
    drives the loop's cache as the loop expects: the engine uses the loop, without a warning."""
    model, tok = model_and_tokenizer
    assert kv_decode.probe_kv_decode(model) is None
    engine = HFGenerateEngine(model, tok)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine.generate(PROMPTS[:2], 1, SamplingParams(temperature=0.0, max_new_tokens=4))
    assert engine._kv_ok is True


def _reject_extra_arguments(self, key, value, layer_idx, cache_kwargs=None):
    """An ``update`` that takes only what transformers passed up to 5.23 (5.24 added ``kwargs=``)."""
    raise TypeError("KVBuffers.update() got an unexpected keyword argument 'kwargs'")


@pytest.mark.parametrize("breakage", ["cache call changed", "mask ignored"])
def test_a_transformers_the_loop_does_not_fit_degrades_to_generate_with_one_warning(model_and_tokenizer, monkeypatch, breakage):
    """A release that calls the cache differently (a crash) or reads the loop's mask differently
    (silently wrong log-probs) fails the start-up probe: one warning naming the version, then the
    same samples as Hugging Face generate, never a crash mid-run."""
    model, tok = model_and_tokenizer
    if breakage == "cache call changed":
        monkeypatch.setattr(kv_decode.KVBuffers, "update", _reject_extra_arguments)
    else:  # every key visible: left padding leaks into the shorter prompt's attention
        monkeypatch.setattr(kv_decode, "model_mask", lambda m, allowed: model_mask(m, torch.ones_like(allowed)))
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    engine = HFGenerateEngine(model, tok)
    with pytest.warns(RuntimeWarning, match=rf"transformers {transformers.__version__}.*generating with Hugging Face generate") as caught:
        first = engine.generate(PROMPTS, 1, greedy)
        second = engine.generate(PROMPTS, 1, greedy)
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == 1
    reference = HFGenerateEngine(model, tok, decode="generate").generate(PROMPTS, 1, greedy)
    assert [c.token_ids for c in first] == [c.token_ids for c in second] == [c.token_ids for c in reference]

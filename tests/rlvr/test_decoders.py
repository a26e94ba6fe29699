"""rlvr's decoders (``rollout.hf.decode``) beside Hugging Face ``generate`` on a real (tiny,
randomly initialised, briefly trained) Llama: the same greedy tokens, stop strings and
end-of-sequence handling, log-probs of the distribution each token was drawn from, a sampler whose
draws follow the tempered, truncated distribution; the GPU path's host synchronisation counted per
token; its step replayed without Python (as a CUDA graph replays) and compiled, equal to the eager
step; the measured choice of ``auto``; and the fallback when a decoder fails its probe."""

from __future__ import annotations

import warnings

import pytest
import torch
import transformers
from torch.fx.experimental.proxy_tensor import make_fx

from rlvr.algos.correction import truncation_keep
from rlvr.models.attention import model_mask
from rlvr.models.batch import build_token_batch, scatter_completion_values, token_logprobs
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.decoding import DecodeRequest, StopStrings, choice as choice_module, kv, make_decoder, probe_decoder, static
from rlvr.rollout.decoding.host_syncs import count_host_syncs
from rlvr.rollout.decoding.sampler import sample_next
from rlvr.rollout.engines.hf import HFGenerateEngine
from rlvr.rollout.text import first_stop
from tests.rlvr.tiny_adder import PROMPTS, train_adder

pytestmark = pytest.mark.smoke  # the newest lane's subset (scripts/test_newest.sh)

OWN = ["kv", "static"]  # rlvr's decoders that run on a CPU without compiling


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


def _pair(model, tok, name="kv"):
    return HFGenerateEngine(model, tok, decode=name), HFGenerateEngine(model, tok, decode="generate")


@pytest.mark.parametrize("name", OWN)
@pytest.mark.parametrize("grow_by", [64, 1])  # 1: the prefill cache grows (copies itself into bigger buffers) over and over
def test_greedy_tokens_equal_generate(model_and_tokenizer, name, grow_by, monkeypatch):
    monkeypatch.setattr(kv.KVBuffers, "GROW_BY", grow_by)
    ours, hf = _pair(*model_and_tokenizer, name)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    a, b = ours.generate(PROMPTS, 2, greedy), hf.generate(PROMPTS, 2, greedy)
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
        monkeypatch.setattr(kv, "COMPACT_AT", compact_at)
        runs[compact_at] = kv.decode(model, prompts, max_new_tokens=24, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, greedy=True)
    whole, compacted = runs[2.0], runs[0.0]
    assert len(set(whole.lengths.tolist())) > 1, "rows should end at different steps for this test to mean anything"
    assert torch.equal(whole.lengths, compacted.lengths) and torch.equal(whole.ended, compacted.ended)
    for b, n in enumerate(whole.lengths.tolist()):
        assert whole.tokens[b, :n].tolist() == compacted.tokens[b, :n].tolist()
        assert torch.allclose(whole.logprobs[b, :n], compacted.logprobs[b, :n], atol=1e-5)


@pytest.mark.parametrize("name", OWN)
@pytest.mark.parametrize("settings", [dict(temperature=1.0), dict(temperature=0.7, top_p=0.9, top_k=20)])
def test_sampled_logprobs_are_the_trainers_and_rows_end_at_eos(model_and_tokenizer, name, settings):
    model, tok = model_and_tokenizer
    ours, _ = _pair(model, tok, name)
    sampling = SamplingParams(max_new_tokens=20, seed=3, **settings)
    comps = ours.generate(PROMPTS, 4, sampling)
    assert [c.prompt_index for c in comps] == [i for i in range(len(PROMPTS)) for _ in range(4)]
    batch = build_token_batch([c.prompt_ids for c in comps], [c.token_ids for c in comps], tok.pad_token_id)
    with torch.no_grad():
        trainer, _ = token_logprobs(model, batch, sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
    engine = scatter_completion_values([c.logprobs for c in comps], batch)
    m = batch.completion_mask.bool()
    assert (trainer - engine)[m].abs().max() < 1e-4
    assert any(not c.truncated for c in comps)  # rows end on eos
    for c in comps:
        ends_on_eos = bool(c.token_ids) and c.token_ids[-1] == tok.eos_token_id
        assert tok.eos_token_id not in c.token_ids[:-1]
        assert ends_on_eos != c.truncated
        assert c.truncated == (len(c.token_ids) == 20 and not ends_on_eos)
    assert [c.text for c in ours.generate(PROMPTS, 4, sampling)] == [c.text for c in comps]  # seeded: reproducible


@pytest.mark.parametrize("name", OWN)
def test_stop_strings_end_rows_as_generate_does(model_and_tokenizer, name):
    ours, hf = _pair(*model_and_tokenizer, name)
    free = ours.generate(PROMPTS[:2], 1, SamplingParams(temperature=0.0, max_new_tokens=24))
    text = next(c.text for c in free if len(c.text) >= 6)
    stop = text[3:5]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=24, stop=(stop,))
    a, b = ours.generate(PROMPTS, 1, sampling), hf.generate(PROMPTS, 1, sampling)
    assert [(c.token_ids, c.stop_string, c.truncated) for c in a] == [(c.token_ids, c.stop_string, c.truncated) for c in b]
    hit = [c for c in a if c.stop_string is not None]
    assert hit and all(c.text.endswith(stop) or stop in c.text[-len(stop) - 4:] for c in hit)


@pytest.mark.parametrize("sync_every", [1, 3, 8, 64])
def test_looking_every_k_tokens_finds_each_stop_string_where_a_look_per_token_does(trained, sync_every):
    """The static decoder looks at stop strings every ``sync_every`` tokens; the token that completed
    one is still the one a per-token check finds (`rlvr.rollout.text.first_stop` on the whole row),
    and the tokens drawn past it are not part of the completion."""
    model, tok = trained
    prompts = [tok(p)["input_ids"] for p in PROMPTS for _ in range(6)]
    stops = ("1", "+8", "=")
    request = DecodeRequest(prompts, 30, (tok.eos_token_id,), tok.pad_token_id, temperature=1.0, stops=StopStrings(tok, stops))
    torch.manual_seed(11)
    out = static.StaticDecoder(sync_every=sync_every).decode(model, request)
    assert out.stop_strings, "some rows should stop on a stop string for this test to mean anything"
    for row in range(len(prompts)):
        n = int(out.lengths[row])
        free = out.tokens[row].tolist()
        cut = next((i + 1 for i, t in enumerate(free) if t == tok.eos_token_id), len(free))
        hit = first_stop(tok, free[:cut], stops)
        if hit is not None:
            assert (n, out.stop_strings.get(row)) == hit
        else:
            assert row not in out.stop_strings and n == min(cut, out.tokens.shape[1])
        assert bool(out.ended[row]) == (hit is not None or cut < len(free) or free[cut - 1] == tok.eos_token_id)


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


# -- host synchronisation --------------------------------------------------------------------------

def _syncs_per_token(decoder, model, tok, stops) -> tuple[float, dict]:
    """What would stall a GPU per generated token: the difference between a 48- and a 16-token run of
    the same batch (no end of sequence: every row runs to the limit) over the 32 extra tokens, so the
    fixed cost of a batch (prefill, the final copy) does not count."""
    prompts = [tok(p)["input_ids"] for p in PROMPTS for _ in range(4)]
    counted = {}
    for tokens in (16, 48):
        with torch.inference_mode(), count_host_syncs() as counts:
            out = decoder.decode(model, DecodeRequest(prompts, tokens, (), tok.pad_token_id, stops=stops))
        assert out.tokens.shape[1] == tokens
        counted[tokens] = counts
    return (sum(counted[48].values()) - sum(counted[16].values())) / 32, dict(counted[48])


@pytest.mark.parametrize("with_stops", [False, True])
def test_the_gpu_path_waits_for_the_device_once_per_k_tokens_where_the_cpu_loop_waits_every_token(trained, with_stops):
    """Counted on the CPU under a TorchDispatchMode/TorchFunctionMode (`count_host_syncs`): reads of a
    value by the host (item, tolist, bool, float, cpu), data-dependent shapes (nonzero, boolean-mask
    indexing). The compacting kv loop does several per token; the static decoder one per look."""
    model, tok = trained
    stops = StopStrings(tok, ("never appears",)) if with_stops else None
    kv_rate, kv_counts = _syncs_per_token(make_decoder("kv"), model, tok, stops)
    for k in (4, 8):
        static_rate, static_counts = _syncs_per_token(static.StaticDecoder(sync_every=k), model, tok, stops)
        assert static_rate <= 1 / k, static_counts
        assert set(static_counts) == {"cpu"}  # the looks' one copy each; nothing else reads the device
    assert kv_rate >= 3, kv_counts  # finished.any(), done.all(), done.mean() (+ tolist and a mask with stop strings)


# -- captured and compiled steps -------------------------------------------------------------------

class ReplayedStep(static.StepRunner):
    """The one-token step traced once into a graph of tensor operations (`make_fx`) and replayed
    without running its Python again: what a CUDA graph does on a GPU, here on a CPU. A step whose
    Python depended on anything but the batch's tensors would replay wrong."""

    def __init__(self, batch):
        super().__init__(batch)
        self.graph = make_fx(lambda: batch.step())()

    def __call__(self):
        self.graph()


class ReplayedDecoder(static.StaticDecoder):
    name = "replayed"
    runner = ReplayedStep


def _eager_and(decoder, model, request):
    """``(eager run, ``decoder``'s run)`` of ``request`` from the same random state, after one run
    that captures (and compiles) what ``decoder`` keeps for this shape."""
    with torch.inference_mode():
        decoder.decode(model, request)  # capture: draws random numbers and leaves state behind
        torch.manual_seed(7)
        eager = static.StaticDecoder().decode(model, request)
        torch.manual_seed(7)
        other = decoder.decode(model, request)
    return eager, other


def _assert_same(a, b, atol=1e-5):
    assert torch.equal(a.lengths, b.lengths) and torch.equal(a.ended, b.ended)
    for row, n in enumerate(a.lengths.tolist()):
        assert a.tokens[row, :n].tolist() == b.tokens[row, :n].tolist()
        assert torch.allclose(a.logprobs[row, :n], b.logprobs[row, :n], atol=atol)


@pytest.mark.parametrize("settings", [dict(greedy=True), dict(temperature=0.8, top_p=0.9)])
def test_the_step_replayed_as_a_captured_graph_equals_the_eager_step(trained, settings):
    model, tok = trained
    prompts = [tok(p)["input_ids"] for p in PROMPTS for _ in range(3)]
    request = DecodeRequest(prompts, 24, (tok.eos_token_id,), tok.pad_token_id, **settings)
    eager, replayed = _eager_and(ReplayedDecoder(), model, request)
    assert len(set(eager.lengths.tolist())) > 1  # rows end at different steps
    _assert_same(eager, replayed)
    # and the next batch of the same shape replays the same graph on new prompts
    again = DecodeRequest([tok(p)["input_ids"] for p in reversed(PROMPTS) for _ in range(3)], 24, (tok.eos_token_id,), tok.pad_token_id, **settings)
    _assert_same(*_eager_and(ReplayedDecoder(), model, again))


@pytest.mark.slow  # inductor compiles the step: about a minute on two cores
def test_the_compiled_step_equals_the_eager_step(trained, monkeypatch):
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(inductor_config, "fallback_random", True)  # inductor's own random numbers differ from eager's
    model, tok = trained
    prompts = [tok(p)["input_ids"] for p in PROMPTS for _ in range(3)]
    request = DecodeRequest(prompts, 20, (tok.eos_token_id,), tok.pad_token_id, temperature=0.9, top_k=20)
    _assert_same(*_eager_and(static.CompiledDecoder(), model, request), atol=1e-4)


class FailingCapture(static.StepRunner):
    def __init__(self, batch):
        raise RuntimeError("operation not permitted when stream is capturing")


class FailingCaptureDecoder(static.StaticDecoder):
    name = "failing"
    runner = FailingCapture


def test_a_step_that_fails_to_capture_decodes_eagerly_with_one_warning(trained):
    """A shape whose capture fails (the probe's small shape passed) is decoded with eager steps: the
    same samples, a warning naming the shape, never a crash mid-run."""
    model, tok = trained
    request = DecodeRequest([tok(p)["input_ids"] for p in PROMPTS], 12, (tok.eos_token_id,), tok.pad_token_id, temperature=0.9)
    with pytest.warns(RuntimeWarning, match=r"decode=failing: capturing the step of a 4 x 64 batch failed .*eager steps"):
        torch.manual_seed(2)
        fallen = FailingCaptureDecoder().decode(model, request)
    torch.manual_seed(2)
    _assert_same(static.StaticDecoder().decode(model, request), fallen)


def test_shapes_are_bucketed_so_that_captured_steps_repeat():
    assert [static.bucket_rows(n) for n in (1, 2, 3, 5, 16, 17, 64, 65, 256, 257)] == [1, 2, 4, 8, 16, 32, 64, 80, 256, 272]
    assert [static.bucket_columns(n) for n in (1, 32, 33, 100)] == [32, 32, 64, 128]


def test_a_static_decoder_reuses_its_batch_for_a_shape_and_starts_again_when_the_weights_move(trained):
    model, tok = trained
    decoder = static.StaticDecoder()
    greedy = DecodeRequest([tok(p)["input_ids"] for p in PROMPTS], 8, (tok.eos_token_id,), tok.pad_token_id, greedy=True)
    first = decoder.decode(model, greedy)
    kept = list(decoder._shapes.values())
    assert len(kept) == 1
    second = decoder.decode(model, greedy)
    assert list(decoder._shapes.values())[0] is kept[0]  # same shape: same buffers (a captured graph stays valid)
    _assert_same(first, second)
    copy = type(model)(model.config).eval()
    copy.load_state_dict(model.state_dict())
    decoder.decode(copy, greedy)  # other storage: a new batch, never a graph that reads the old weights
    assert list(decoder._shapes.values())[-1] is not kept[0]


# -- choosing and falling back ---------------------------------------------------------------------

def test_auto_on_a_cpu_is_kv_whatever_the_load(trained):
    """A choice that followed the measurement would make a seeded CPU run depend on the machine's load."""
    model, tok = trained
    auto = HFGenerateEngine(model, tok, decode="auto")
    auto.generate(PROMPTS, 2, SamplingParams(max_new_tokens=4, seed=5))
    assert auto.decoder_name == "kv" and choice_module.CANDIDATES["cpu"] == ("kv",)
    # one candidate: probed and taken, not timed (a prefill of the first batch spent on a number)
    assert not auto.choice.timed and auto.choice.tokens_per_s == {} and auto.choice.usable == ["kv"]
    assert auto.choice.summary() == "decoder: kv on cpu (the only candidate there: not timed)"
    assert choice_module.DecoderChoice.from_dict(auto.choice.as_dict()) == auto.choice  # a checkpoint or a worker's answer restores it


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("edit,field", [
    ({"name": "fast"}, "name"), ({"name": 5}, "name"), ({"device": ""}, "device"), ({"tokens_per_s": "fast"}, "tokens_per_s"),
    ({"tokens_per_s": {"kv": "fast"}}, "tokens_per_s"), ({"tokens_per_s": {"kv": float("nan")}}, "tokens_per_s"),
    ({"rejected": None}, "rejected"), ({"shape": 5}, "shape"), ({"shape": [1, 2]}, "shape"), ({"seconds": "x"}, "seconds"),
    ({"timed": "no"}, "timed"), ({"restored": 1}, "restored"),
    ({"name": "cuda_graph"}, "name"),  # not a decoder auto takes on a CPU: it would fall back to generate, another stream
    ({"seconds": 10**400}, "seconds"), ({"tokens_per_s": {"kv": 10**400}}, "tokens_per_s"),  # too large for a float
    ({"tokens_per_s": {"kv\nsecond line": 1.0}}, "tokens_per_s"), ({"rejected": {"kv": "a\nb"}}, "rejected"),
    ({"rejected": {"kv": "x" * 10**6}}, "rejected"), ({"name": _nested(20_000)}, "name"), ({"device": None}, "device"),
])
def test_a_damaged_saved_choice_is_refused_naming_its_field(edit, field):
    good = choice_module.DecoderChoice("kv", "cpu", timed=False, shape=(8, 12, 16)).as_dict()
    assert choice_module.DecoderChoice.from_dict(good).as_dict() == good
    with pytest.raises(ValueError, match=rf"^decoder_choice\.{field} is .{{1,60}}, not ") as e:
        choice_module.DecoderChoice.from_dict(good | edit)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="^decoder_choice is list, not a mapping$"):
        choice_module.DecoderChoice.from_dict(["kv"])
    with pytest.raises(ValueError, match="^decoder_choice.device is None, not a device type"):
        choice_module.DecoderChoice.from_dict({})


def test_a_sole_candidate_that_fails_its_probe_leaves_generate_and_claims_no_measurement():
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr.rollout.decoding import DECODERS

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                         num_key_value_heads=2, vocab_size=6))  # too small a vocabulary for kv's probe
    decoders: dict = {}
    choice = choice_module.choose_decoder(lambda n: decoders.setdefault(n, DECODERS.get(n)()), model,
                                          DecodeRequest([[1, 2, 3], [4, 5]], 8, (), 0))
    assert (choice.name, choice.timed, choice.tokens_per_s, choice.usable) == ("generate", False, {}, [])
    assert choice.summary() == "decoder: generate on cpu; not usable here: kv (vocab_size 6 is too small to probe)"


def test_a_restored_choice_is_used_on_its_own_device_type_only(trained):
    """A GPU run resumed on a CPU chooses afresh (kv) instead of asking for the GPU's decoder and falling back to generate."""
    model, tok = trained
    cuda = choice_module.DecoderChoice("cuda_graph", "cuda", {"cuda_graph": 9000.0, "kv": 3000.0}, shape=(256, 160, 16))
    engine = HFGenerateEngine(model, tok, decode="auto")
    engine.restore_choice(cuda.as_dict())
    engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=4, seed=5))
    assert engine.decoder_name == "kv" and not engine.choice.restored and engine.choice.device == "cpu"
    engine = HFGenerateEngine(model, tok, decode="auto")
    engine.restore_choice(choice_module.DecoderChoice("kv", "cpu", timed=False).as_dict())
    engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=4, seed=5))
    assert engine.decoder_name == "kv" and engine.choice.restored
    assert engine.choice.summary() == "decoder: kv on cpu, chosen before the resume (the only candidate there: not timed)"


def test_auto_measures_the_candidates_chooses_one_and_samples_what_the_chosen_decoder_samples(trained, monkeypatch):
    model, tok = trained
    sampling = SamplingParams(max_new_tokens=12, seed=5)
    monkeypatch.setitem(choice_module.CANDIDATES, "cpu", ("kv", "static"))  # the mechanism CUDA uses, on the decoders a CPU runs
    auto = HFGenerateEngine(model, tok, decode="auto")
    first = auto.generate(PROMPTS, 4, sampling)
    choice = auto.choice
    speed = choice.tokens_per_s
    assert choice.device == "cpu" and set(speed) == {"kv", "static"} and not choice.rejected  # generate: not on a CPU
    assert choice.name in speed and auto.decoder_name == choice.name
    assert choice.name == max(speed, key=speed.__getitem__)  # rlvr's sampler: the fastest of them is taken
    # on CUDA generate is measured too, and taken only when MARGIN times faster than the best of rlvr's
    assert choice_module.CANDIDATES["cuda"] == ("cuda_graph", "static", "kv", "generate") and choice_module.MARGIN > 1
    assert choice.name in choice.summary() and "tokens/s" in choice.summary()
    named = HFGenerateEngine(model, tok, decode=choice.name).generate(PROMPTS, 4, sampling)  # measuring left the random state alone
    assert [c.token_ids for c in first] == [c.token_ids for c in named]


def test_a_choice_timed_on_an_evaluation_is_made_again_on_the_first_sampled_call(trained, monkeypatch):
    """A run that evaluates before its first step (eval.at_start) makes its first generation greedy, on the
    evaluation's prompts: the decoder it samples with must be chosen on the training batch's shapes, as in a
    run that does not evaluate (on a GPU, where candidates are timed, `generate` draws another stream)."""
    model, tok = trained
    monkeypatch.setitem(choice_module.CANDIDATES, "cpu", ("kv", "static"))  # the mechanism CUDA uses, on a CPU's decoders
    sampling = SamplingParams(max_new_tokens=6, seed=5)
    evaluated = HFGenerateEngine(model, tok, decode="auto")
    evaluated.generate(PROMPTS[:1], 1, SamplingParams(max_new_tokens=6, temperature=0.0))
    assert evaluated.choice.shape[0] == 1  # timed on the evaluation: provisional
    evaluated.generate(PROMPTS, 3, sampling)
    alone = HFGenerateEngine(model, tok, decode="auto")
    alone.generate(PROMPTS, 3, sampling)
    assert evaluated.choice.shape == alone.choice.shape == (3 * len(PROMPTS), alone.choice.shape[1], 6)
    assert set(evaluated.choice.tokens_per_s) == {"kv", "static"}
    chosen = evaluated.choice
    evaluated.generate(PROMPTS[:1], 1, SamplingParams(max_new_tokens=6, temperature=0.0))
    evaluated.generate(PROMPTS, 3, sampling)
    assert evaluated.choice is chosen  # made once for sampling: later evaluations and batches keep it


@pytest.mark.parametrize("settings", [dict(temperature=1.0), dict(temperature=0.8, top_p=0.9, top_k=20)])
def test_rlvrs_decoders_sample_the_same_tokens_so_choosing_among_them_changes_only_speed(trained, settings):
    """kv (finished rows leave the batch), static (they stay; padding rows) and the step replayed as a
    graph draw each row's tokens from uniforms of (the call's key, the row, the position): the same
    samples from the same seed, whichever runs."""
    model, tok = trained
    prompts = [tok(p)["input_ids"] for p in PROMPTS for _ in range(5)]  # 20 rows: the static batch pads to 32
    request = DecodeRequest(prompts, 24, (tok.eos_token_id,), tok.pad_token_id, **settings)
    runs = {}
    for name, decoder in (("kv", make_decoder("kv")), ("static", static.StaticDecoder(sync_every=3)), ("replayed", ReplayedDecoder())):
        with torch.inference_mode():
            decoder.decode(model, request)  # a replayed step is traced on its first call
            torch.manual_seed(11)
            runs[name] = decoder.decode(model, request)
    assert len(set(runs["kv"].lengths.tolist())) > 1  # rows end at different steps: kv compacts, static does not
    for other in ("static", "replayed"):
        _assert_same(runs["kv"], runs[other])


@pytest.mark.parametrize("name", [*OWN, "generate"])
def test_a_greedy_call_leaves_the_generator_so_the_next_sampled_call_draws_what_it_would_have(trained, name):
    """A held-out evaluation (greedy) between two training steps must not change what the next step
    samples: a greedy call uses no randomness, so it takes nothing from torch's generator."""
    model, tok = trained
    engine = HFGenerateEngine(model, tok, decode=name)
    greedy, sampled = SamplingParams(temperature=0.0, max_new_tokens=12), SamplingParams(temperature=1.0, max_new_tokens=12)
    torch.manual_seed(5)
    alone = [c.token_ids for c in engine.generate(PROMPTS, 3, sampled)]
    torch.manual_seed(5)
    state = torch.get_rng_state()
    engine.generate(PROMPTS, 2, greedy)
    assert torch.equal(torch.get_rng_state(), state), f"a greedy {name} call drew from torch's generator"
    assert [c.token_ids for c in engine.generate(PROMPTS, 3, sampled)] == alone


def test_counter_uniforms_are_uniform_and_depend_only_on_key_row_and_position():
    from rlvr.rollout.decoding.sampler import counter_uniforms

    key = torch.tensor([12345])
    rows = torch.arange(100_000)
    u = counter_uniforms(key, rows, 7)
    assert u.dtype == torch.float64 and 0 <= float(u.min()) and float(u.max()) < 1
    counts = torch.histc(u, bins=20, min=0, max=1)
    assert (counts - 5000).abs().max() < 5 * 5000 ** 0.5  # every twentieth within 5 standard errors
    assert abs(float(torch.corrcoef(torch.stack([u[:-1], u[1:]]))[0, 1])) < 0.02  # neighbouring rows unrelated
    later = counter_uniforms(key, rows, 8)
    assert abs(float(torch.corrcoef(torch.stack([u, later]))[0, 1])) < 0.02  # neither are a row's positions
    subset = torch.tensor([5, 77, 99_999])
    assert torch.equal(counter_uniforms(key, subset, torch.tensor([7])), u[subset])  # whatever else is in the batch
    assert not torch.equal(counter_uniforms(torch.tensor([12346]), subset, 7), u[subset])


def test_a_decoder_is_refused_where_it_cannot_run(trained):
    model, _ = trained
    assert "cuda" in static.CudaGraphDecoder().unsupported(model)
    assert probe_decoder(static.CudaGraphDecoder(), model) is not None
    assert probe_decoder(make_decoder("static"), model) is None
    with pytest.raises(ValueError, match="decode must be auto or one of"):
        HFGenerateEngine(model, None, decode="fast")


def test_generate_when_asked_or_when_the_model_does_not_support_the_loop(model_and_tokenizer, monkeypatch):
    model, tok = model_and_tokenizer
    calls = []
    monkeypatch.setattr(kv, "decode", lambda *a, **k: calls.append(1))
    greedy = SamplingParams(temperature=0.0, max_new_tokens=4)
    HFGenerateEngine(model, tok, decode="generate").generate(PROMPTS[:1], 1, greedy)
    monkeypatch.setattr(kv, "supports_own_decoding", lambda m: False)
    monkeypatch.setattr(static, "supports_own_decoding", lambda m: False)
    engine = HFGenerateEngine(model, tok)
    engine.generate(PROMPTS[:1], 1, greedy)
    assert not calls and engine.decoder_name == "generate"
    assert set(engine.choice.rejected) == set(choice_module.CANDIDATES["cpu"])  # each candidate probed, none fits


def test_the_probe_passes_on_the_installed_transformers(model_and_tokenizer):
    """The release this environment has (the pinned one in the main lane, 5.19 in the vLLM lane, the newest in the newest lane)
    drives rlvr's caches as its decoders expect: the engine uses them, without a warning."""
    model, tok = model_and_tokenizer
    for name in OWN:
        assert probe_decoder(make_decoder(name), model) is None
        engine = HFGenerateEngine(model, tok, decode=name)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            engine.generate(PROMPTS[:2], 1, SamplingParams(temperature=0.0, max_new_tokens=4))
        assert engine.decoder_name == name


def _reject_extra_arguments(self, key, value, layer_idx, cache_kwargs=None):
    """An ``update`` that takes only what transformers passed up to 5.23 (5.24 added ``kwargs=``)."""
    raise TypeError("KVBuffers.update() got an unexpected keyword argument 'kwargs'")


@pytest.mark.parametrize("name", OWN)
@pytest.mark.parametrize("breakage", ["cache call changed", "mask ignored"])
def test_a_transformers_the_decoder_does_not_fit_degrades_to_generate_with_one_warning(model_and_tokenizer, monkeypatch, name, breakage):
    """A release that calls the cache differently (a crash) or reads the mask differently (silently
    wrong log-probs) fails the start-up probe: one warning naming the version, then the same samples
    as Hugging Face generate, never a crash mid-run."""
    model, tok = model_and_tokenizer
    if breakage == "cache call changed":
        monkeypatch.setattr(kv.KVBuffers, "update", _reject_extra_arguments)
    else:  # every key visible: left padding leaks into the shorter prompt's attention
        for module in (kv, static):
            monkeypatch.setattr(module, "model_mask", lambda m, allowed: model_mask(m, torch.ones_like(allowed)))
        monkeypatch.setattr("rlvr.rollout.decoding.forward.model_mask", lambda m, allowed: model_mask(m, torch.ones_like(allowed)))
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    engine = HFGenerateEngine(model, tok, decode=name)
    with pytest.warns(RuntimeWarning, match=rf"decode={name}.*transformers {transformers.__version__}.*generating with Hugging Face generate") as caught:
        first = engine.generate(PROMPTS, 1, greedy)
        second = engine.generate(PROMPTS, 1, greedy)
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == 1
    reference = HFGenerateEngine(model, tok, decode="generate").generate(PROMPTS, 1, greedy)
    assert [c.token_ids for c in first] == [c.token_ids for c in second] == [c.token_ids for c in reference]


def test_a_decoder_named_where_it_cannot_run_says_so_and_what_to_name_not_a_bug_to_report(model_and_tokenizer):
    """cuda_graph named on a CPU (a GPU config run on a laptop): generate is used, with one warning naming the reason and the
    way out; the warning for a decoder broken by a transformers release ("Please report it") is for real failures only."""
    model, tok = model_and_tokenizer
    engine = HFGenerateEngine(model, tok, decode="cuda_graph")
    with pytest.warns(RuntimeWarning, match=r"rollout.hf.decode=cuda_graph cannot run here \(.*cuda.*\).*rollout.hf.decode=auto") as caught:
        engine.generate(PROMPTS, 1, SamplingParams(temperature=0.0, max_new_tokens=4))
    assert not [w for w in caught if "report" in str(w.message)] and engine.decoder_name == "generate"

"""The rollout-engine contract, one test suite for every built-in engine (`rlvr.rollout.base.RolloutEngine`):
greedy output equal to Hugging Face ``generate``, sampled log-probs equal to the trainer's, stop
strings, end-of-sequence and chat prompts handled alike, ``n`` samples per prompt, multi-turn
episodes continued on token ids (never re-tokenized), weight sync proven by the probe, and a clear
error for an engine asked to do what it declares it cannot.

``hf-kv``, ``hf-static`` and ``hf-generate`` (the Hugging Face engine on each decoder that runs on a
CPU) run in the main lane, and the decoders that need CUDA (``hf-cuda_graph``, ``hf-kv-cuda``) where a GPU is seen; ``vllm`` and ``vllm_server`` are marked `vllm`
and run in the vLLM lane (scripts/test_vllm.sh). ``vllm_server-hf2`` is the server client against two
``rlvr rollout serve --engine hf`` (rlvr's own engine, calls cut in requests spread over both; main lane). The model is a tiny Llama taught to add in two
seconds (`tests.rlvr.tiny_adder`), saved so that vLLM can load it; float32 everywhere.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util

import pytest
import torch

from envs.episode import EpisodeLimits, MultiTurnEnvironment, StepResult
from envs.types import Problem, Verdict
from rlvr.algos.correction import truncated_logprobs
from rlvr.models.batch import build_token_batch, scatter_completion_values
from rlvr.models.loading import load_model
from rlvr.rollout.base import Completion, EngineCapabilities, EngineCapabilityError, RolloutEngine, SamplingParams
from rlvr.rollout.config import HFEngineConfig, RolloutConfig, VLLMConfig
from rlvr.rollout.engines import ENGINES, EngineSpec, make_engine
from rlvr.rollout.episodes import run_episodes
from rlvr.rollout.engines.hf import HFGenerateEngine
from rlvr.rollout.sync import SyncProbe
from rlvr.rollout.weights import WeightSyncError
from tests.rlvr.rollout_server import rollout_server
from tests.rlvr.tiny_adder import PROMPTS, train_adder

pytestmark = pytest.mark.smoke  # the newest lane's subset (scripts/test_newest.sh)

TOL = 1e-4  # float32 on both sides
VLLM = [pytest.mark.vllm, pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                             reason="vLLM is not installed here: scripts/test_vllm.sh runs these in .venv-vllm")]
CUDA = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: scripts/gpu_check.sh runs these on a GPU")]
ENGINE_CASES = [
    pytest.param("hf-kv"),
    pytest.param("hf-static"),
    pytest.param("hf-generate"),
    pytest.param("hf-cuda_graph", marks=CUDA),
    pytest.param("hf-kv-cuda", marks=CUDA),
    pytest.param("vllm", marks=VLLM),
    pytest.param("vllm_server", marks=VLLM),
    pytest.param("vllm_server-hf2"),
]
CHAT = [{"role": "system", "content": "Add."}, {"role": "user", "content": "Compute 31+5."}]


@pytest.fixture(scope="module")
def adder(tmp_path_factory):
    """The saved adder's path and the trainer's copy of it (model, tokenizer)."""
    path = tmp_path_factory.mktemp("adder") / "m"
    train_adder(path, heads=2, save=True)  # head size 32: vLLM's CPU attention takes 32 and up
    model, tok = load_model(str(path))
    return path, model.eval(), tok


@pytest.fixture(scope="module")
def reference(adder):
    _, model, tok = adder
    return HFGenerateEngine(model, tok, decode="generate")


@pytest.fixture(scope="module", params=ENGINE_CASES)
def engine(request, adder):
    path, model, tok = adder
    name = request.param
    if name.startswith("hf"):
        decode, _, device = name.removeprefix("hf-").partition("-")
        if decode == "cuda_graph":
            device = "cuda"
        if device:
            model = copy.deepcopy(model).to(device)
        yield make_engine(RolloutConfig(hf=HFEngineConfig(decode=decode)), model, tok)
    elif name == "vllm":
        yield make_engine(RolloutConfig(engine="vllm", vllm=VLLMConfig(dtype="float32", max_model_len=256)), model_path=path, seed=0)
    elif name == "vllm_server-hf2":  # rlvr's own engine behind two servers; calls cut in requests of 2 prompts
        with contextlib.ExitStack() as servers:
            urls = [servers.enter_context(rollout_server(path, "hf.decode=kv", engine="hf", device="cpu")) for _ in range(2)]
            engine = make_engine(RolloutConfig(engine="vllm_server", vllm=VLLMConfig(server_urls=urls, prompts_per_request=2)), model, tok)
            yield engine
            engine.close()
    else:
        with rollout_server(path, "vllm.max_model_len=256") as url:
            yield make_engine(RolloutConfig(engine="vllm_server", vllm=VLLMConfig(server_url=url)), model, tok)


def trainer_gap(model, tok, comps: list[Completion], temperature=1.0, top_p=1.0, top_k=0) -> float:
    """Largest |engine - trainer| log-prob over the model's own tokens (loss mask 1), the trainer's
    under the same (truncated) sampling distribution."""
    batch = build_token_batch([c.prompt_ids for c in comps], [c.token_ids for c in comps], tok.pad_token_id,
                              [c.loss_mask for c in comps])
    full = build_token_batch([c.prompt_ids for c in comps], [c.token_ids for c in comps], tok.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=full.input_ids, attention_mask=full.attention_mask).logits[:, :-1]
    trainer = truncated_logprobs(logits, full.input_ids[:, 1:], temperature, top_p, top_k)
    engine = scatter_completion_values([c.logprobs for c in comps], full)
    return float((trainer - engine)[batch.completion_mask.bool()].abs().max())


def view(comps: list[Completion]) -> list[tuple]:
    return [(c.prompt_index, c.prompt_ids, c.token_ids, c.text, c.truncated, c.stop_string) for c in comps]


def test_every_builtin_engine_is_under_contract():
    covered = {p.values[0].split("-")[0] for p in ENGINE_CASES}
    builtin = {s.id for s in ENGINES.specs() if s.source == "builtin"}
    assert builtin <= covered, f"engines without a contract test: {builtin - covered}"


def test_greedy_output_equals_hf_generate_on_text_and_chat_prompts(engine, reference):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    prompts = [*PROMPTS, CHAT]
    ours, theirs = engine.generate(prompts, 1, greedy), reference.generate(prompts, 1, greedy)
    assert view(ours) == view(theirs)
    tok = engine.tokenizer
    assert ours[-1].prompt_ids == tok(tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)).input_ids
    # end-of-sequence: a finished completion keeps its eos token and is not truncated
    assert sum(c.token_ids[-1] == tok.eos_token_id and not c.truncated for c in ours) >= 3
    assert all(len(c.logprobs) == len(c.token_ids) == len(c.char_ends) for c in ours)
    assert all(c.char_ends[-1] == len(c.text) for c in ours if c.token_ids)


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, 0), (0.8, 0.9, 20)])
def test_n_samples_per_prompt_with_the_trainers_logprobs(engine, adder, temperature, top_p, top_k):
    _, model, tok = adder
    sampling = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=24, seed=3)
    comps = engine.generate(PROMPTS, 4, sampling)
    assert [c.prompt_index for c in comps] == [i for i in range(len(PROMPTS)) for _ in range(4)]
    assert all(c.token_ids[-1] == tok.eos_token_id or c.truncated for c in comps)
    assert trainer_gap(model, tok, comps, temperature, top_p, top_k) < TOL
    assert len({tuple(c.token_ids) for c in comps}) > len(PROMPTS)  # a prompt's n samples differ
    again = engine.generate(PROMPTS, 4, sampling)
    assert [c.token_ids for c in again] == [c.token_ids for c in comps]  # a seeded call repeats


def test_stop_strings_end_completions_where_hf_ends_them(engine, reference):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24, stop=("=", "9"))
    ours, theirs = engine.generate(PROMPTS, 1, greedy), reference.generate(PROMPTS, 1, greedy)
    assert view(ours) == view(theirs)
    stopped = [c for c in ours if c.stop_string is not None]
    assert len(stopped) >= 3 and all(c.text.endswith(c.stop_string) and not c.truncated for c in stopped)


class Echo(MultiTurnEnvironment):
    """A model turn ends at ``=``; the observation is a fixed string, so episodes have several turns."""

    stop = ("=",)
    limits = EpisodeLimits(max_turns=3, max_tokens=64)

    def step(self, problem, turns):
        return StepResult(observation=" [seen] ")

    def verify(self, problem, completion):
        return Verdict(0.0, False)


def test_multi_turn_episodes_continue_on_token_ids_as_hf_does(engine, reference, adder):
    _, model, tok = adder
    problems = [Problem(f"p/{i}", p, "0") for i, p in enumerate(PROMPTS[:3])]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=16)
    ours, theirs = run_episodes(engine, Echo(), problems, 1, greedy), run_episodes(reference, Echo(), problems, 1, greedy)
    assert [c.episode.transcript for c in ours] == [c.episode.transcript for c in theirs]
    assert [(c.token_ids, c.loss_mask) for c in ours] == [(c.token_ids, c.loss_mask) for c in theirs]
    observation = tok(" [seen] ", add_special_tokens=False).input_ids
    # model, observation, model... (the adder's greedy text differs a little between CPUs: most, not all, episodes call the tool)
    assert sum(len(c.episode.turns) >= 3 for c in ours) >= 2
    for c in ours:  # observations are appended as their own tokens, masked out, with log-prob 0
        masked = [t for t, m in zip(c.token_ids, c.loss_mask) if not m]
        assert len(masked) == len(observation) * (len(c.episode.turns) // 2)
        assert masked[: len(observation)] == observation[: len(masked)] and len(masked) % len(observation) == 0
        assert all(lp == 0.0 for lp, m in zip(c.logprobs, c.loss_mask) if not m)
    sampled = run_episodes(engine, Echo(), problems, 2, SamplingParams(temperature=1.0, max_new_tokens=16, seed=1))
    assert trainer_gap(model, tok, sampled) < TOL


def test_a_weight_sync_is_proven_by_the_probe(engine, adder):
    _, model, tok = adder
    if not engine.capabilities.own_weights:
        model = engine.model  # the object it generates with (a copy on the GPU for the CUDA cases)
    comps = engine.generate(PROMPTS, 2, SamplingParams(temperature=1.0, max_new_tokens=16, seed=7))
    probe = SyncProbe.from_completions(comps, max_gap=0.05)
    assert probe.check(engine, model).mean_gap < 1e-5
    original = copy.deepcopy(model.state_dict())
    moved = copy.deepcopy(model) if engine.capabilities.own_weights else model  # a shared engine follows the object itself
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    try:
        if engine.capabilities.own_weights:
            with pytest.raises(WeightSyncError):  # not synced yet: caught
                probe.check(engine, moved)
        engine.load_weights(moved)
        assert probe.check(engine, moved).mean_gap < 1e-5
    finally:
        model.load_state_dict(original)
        engine.load_weights(model)
    assert probe.check(engine, model).mean_gap < 1e-5


class SingleTurnHF(RolloutEngine):
    """A third-party engine: the HF engine's generation, declared unable to continue episodes."""

    capabilities = EngineCapabilities(own_weights=False, multi_turn=False)

    def __init__(self, inner: HFGenerateEngine):
        self.inner, self.tokenizer = inner, inner.tokenizer

    def generate_ids(self, prompt_ids, n, sampling):
        return self.inner.generate_ids(prompt_ids, n, sampling)

    def score(self, prompt_ids, completion_ids):
        return self.inner.score(prompt_ids, completion_ids)


def test_a_registered_engine_is_built_by_name_and_refuses_what_it_declares_it_cannot(adder):
    path, model, tok = adder
    ENGINES.register("single_turn_hf", EngineSpec(lambda request: SingleTurnHF(HFGenerateEngine(request.model, request.tokenizer))))
    try:
        engine = make_engine(RolloutConfig(engine="single_turn_hf"), model, tok)
        assert isinstance(engine, SingleTurnHF)
        assert [c.text for c in engine.generate(PROMPTS[:1], 1, SamplingParams(temperature=0.0, max_new_tokens=8))]
        with pytest.raises(EngineCapabilityError, match=r"SingleTurnHF cannot play the multi-turn episodes .* multi_turn=False"):
            run_episodes(engine, Echo(), [Problem("p/0", PROMPTS[0], "0")], 1, SamplingParams(max_new_tokens=8))
        assert engine.asleep is False and engine.sleep() is None and engine.close() is None  # no-op defaults
        with pytest.raises(Exception, match="rollout.hf.decode is a setting of the hf engine"):  # it reads no section
            make_engine(RolloutConfig(engine="single_turn_hf", hf=HFEngineConfig(decode="generate")), model, tok)
    finally:
        ENGINES.unregister("single_turn_hf")

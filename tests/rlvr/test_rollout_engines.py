"""The engine registry and factory, weight transport, and the sync probe on real (tiny) models.

The vLLM engines themselves are tested in tests/rlvr/test_vllm.py, in the vLLM environment."""

import copy
import importlib.util

import pytest
import torch

from rlvr import UserError
from rlvr.algos.correction import truncated_logprobs
from rlvr.config import ConfigError, load_config
from rlvr.models.loading import load_model
from rlvr.models.tiny import TinyModelConfig, build_tiny_model
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.config import HFEngineConfig, RolloutConfig
from rlvr.rollout.engines import ENGINES, make_engine
from rlvr.rollout.engines.hf import HFGenerateEngine
from rlvr.rollout.sync import SETTING, SyncProbe, trainer_logprobs
from rlvr.rollout.engines.vllm_server import _with_last
from rlvr.models.batch import build_token_batch, scatter_completion_values
from rlvr.rollout.weights import WeightSyncError, from_blob, layer_key, named_weights, to_blobs

pytestmark = pytest.mark.smoke  # the newest lane's subset (scripts/test_newest.sh)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny_model(TinyModelConfig(hidden_size=32, layers=2, heads=2, intermediate_size=64, max_positions=64),
                            tmp_path_factory.mktemp("tiny"))
    return path


def test_registry_lists_the_three_engines_and_refuses_others_naming_them(tiny):
    assert {"hf", "vllm", "vllm_server"} <= set(ENGINES.ids())
    cfg = load_config(RolloutConfig, None, ["engine=vllm", "vllm.tensor_parallel_size=2", "probe.max_gap=0.1"])
    assert cfg.engine == "vllm" and cfg.vllm.tensor_parallel_size == 2 and cfg.probe.max_gap == 0.1
    with pytest.raises(UserError, match=r"rollout.engine='sglang' is not a registered engine; registered: hf, vllm, vllm_server"):
        make_engine(load_config(RolloutConfig, None, ["engine=sglang"]), model_path=tiny)
    with pytest.raises(ConfigError, match="vllm.sleep_level"):
        load_config(RolloutConfig, None, ["vllm.sleep_level=3"])


def test_an_engine_setting_given_to_another_engine_is_refused_naming_both(tiny):
    cfg = load_config(RolloutConfig, None, ["vllm.gpu_memory_utilization=0.5"])
    with pytest.raises(UserError, match=r"rollout.vllm.gpu_memory_utilization is a setting of the vllm engine, but rollout.engine='hf'"):
        make_engine(cfg, model_path=tiny)
    cfg = load_config(RolloutConfig, None, ["engine=vllm_server", "hf.decode=generate"])
    with pytest.raises(UserError, match=r"rollout.hf.decode is a setting of the hf engine, but rollout.engine='vllm_server'"):
        make_engine(cfg, model_path=tiny)
    from rlvr.train.config import TrainConfig

    with pytest.raises(ConfigError, match="'rollout.hf_decode' is now 'rollout.hf.decode'"):
        load_config(TrainConfig, None, ["rollout.hf_decode=kv"])


def test_factory_builds_hf_from_a_model_or_a_path(tiny):
    model, tok = load_model(str(tiny))
    engine = make_engine(RolloutConfig(), model, tok)
    assert isinstance(engine, HFGenerateEngine) and engine.model is model
    from_path = make_engine(RolloutConfig(hf=HFEngineConfig(max_batch_sequences=7)), model_path=tiny)
    assert isinstance(from_path, HFGenerateEngine) and from_path.max_batch_sequences == 7
    out = from_path.generate(["12+3="], 2, SamplingParams(temperature=1.0, max_new_tokens=5, seed=0))
    assert [c.prompt_index for c in out] == [0, 0] and all(len(c.logprobs) == len(c.token_ids) for c in out)
    with pytest.raises(UserError, match="model or a model_path"):
        make_engine(RolloutConfig())


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed in this environment")
def test_vllm_engine_without_vllm_says_how_to_get_it(tiny):
    with pytest.raises(UserError, match="setup_vllm_env.sh"):
        make_engine(RolloutConfig(engine="vllm"), model_path=tiny)


def test_hf_logprobs_follow_the_truncated_sampling_distribution(tiny):
    model, tok = load_model(str(tiny))
    engine = make_engine(RolloutConfig(), model, tok)
    comps = engine.generate(["7*8=", "1+1="], 4, SamplingParams(temperature=0.8, top_p=0.7, top_k=20, max_new_tokens=6, seed=1))
    batch = build_token_batch([c.prompt_ids for c in comps], [c.token_ids for c in comps], tok.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
    targets, mask = batch.input_ids[:, 1:], batch.completion_mask.bool()
    rollout = scatter_completion_values([c.logprobs for c in comps], batch)
    truncated = truncated_logprobs(logits, targets, 0.8, 0.7, 20)
    tempered = truncated_logprobs(logits, targets, 0.8)
    assert (rollout - truncated)[mask].abs().max() < 1e-5
    assert (rollout - tempered)[mask].abs().max() > 1e-3  # the truncation matters on this model


def test_named_weights_strips_wrapper_prefixes_and_accepts_three_forms():
    m = torch.nn.Linear(2, 3)
    wrapped = torch.nn.Module()
    wrapped.module = m  # DDP-style prefix
    assert [n for n, _ in named_weights(wrapped)] == ["weight", "bias"]
    assert [n for n, _ in named_weights({"_orig_mod.module.w": torch.zeros(1)})] == ["w"]
    assert [n for n, _ in named_weights(iter([("a", torch.ones(2))]))] == ["a"]


def test_blobs_are_cut_between_layers_only_and_round_trip():
    pairs = [("model.embed_tokens.weight", torch.randn(8, 4)),
             ("model.layers.0.self_attn.q_proj.weight", torch.randn(4, 4)),
             ("model.layers.0.self_attn.k_proj.weight", torch.randn(4, 4)),
             ("model.layers.1.self_attn.q_proj.weight", torch.randn(4, 4)),
             ("model.norm.weight", torch.randn(4))]
    assert layer_key(pairs[1][0]) == "model.layers.0" and layer_key(pairs[0][0]) == "model.embed_tokens.weight"
    blobs = list(to_blobs(pairs, max_bytes=60))  # every tensor is over the limit: one layer per blob
    got = [from_blob(b) for b in blobs]
    assert [sorted(n for n, _ in chunk) for chunk in got] == [
        ["model.embed_tokens.weight"],
        ["model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.q_proj.weight"],  # q and k stay together
        ["model.layers.1.self_attn.q_proj.weight"], ["model.norm.weight"]]
    flat = dict(p for chunk in got for p in chunk)
    assert all(torch.equal(flat[n], t) for n, t in pairs)
    assert len(list(to_blobs(pairs, max_bytes=1 << 20))) == 1
    assert list(_with_last(iter([b"a", b"b"]))) == [(b"a", False), (b"b", True)] and list(_with_last(iter([]))) == []


def _step(model, tok, lr):
    """One real optimizer step on the model's own greedy text: the policy moves."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    ids = tok(["12+34=46", "7*8=56"], return_tensors="pt", padding=True)
    loss = model(**ids, labels=ids.input_ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()


def test_probe_passes_a_shared_model_and_catches_an_engine_that_missed_the_update(tiny):
    model, tok = load_model(str(tiny))
    probe = SyncProbe.from_texts(tok, [("12+34=", "46"), ("7*8=", "56"), ("Compute 3-1.\n", "Answer: 2")], max_gap=0.05)
    shared = make_engine(RolloutConfig(), model, tok)  # generates with the trainer's own object
    first = probe.check(shared, model)
    assert first.mean_gap == 0.0 and first.tokens == sum(len(c) for c in probe.completion_ids) and first.trainer_moved is None

    stale = make_engine(RolloutConfig(), copy.deepcopy(model), tok)  # an engine with its own copy of the weights
    assert probe.check(stale, model).mean_gap == 0.0
    _step(model, tok, lr=0.5)  # a step; the stale engine never receives it
    with pytest.raises(WeightSyncError, match=f"exceeds {SETTING}=0.05"):
        probe.check(stale, model)
    # a small step under a loose threshold: the gap passes, the staleness check does not
    loose = SyncProbe(probe.prompt_ids, probe.completion_ids, max_gap=10.0)
    small = make_engine(RolloutConfig(), copy.deepcopy(model), tok)
    loose.check(small, model)
    _step(model, tok, lr=0.01)
    with pytest.raises(WeightSyncError, match="did not arrive"):
        loose.check(small, model)
    small.model.load_state_dict(model.state_dict())  # the sync arrives
    result = loose.check(small, model)
    assert result.mean_gap == 0.0 and result.trainer_moved > 0 and result.previous_gap > 0
    assert set(result.metrics()) == {"sync/logprob_gap_mean", "sync/logprob_gap_max", "sync/trainer_moved"}


def test_probe_refuses_empty_completions():
    with pytest.raises(ValueError, match="non-empty completion"):
        SyncProbe([[1, 2]], [[]], max_gap=0.1)


def test_old_module_paths_import_the_moved_modules():
    import importlib

    from rlvr.rollout import MOVED

    for old, new in MOVED.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
    from rlvr.rollout.vllm_engine import VLLMEngine  # noqa: F401 - the names import from the old path too

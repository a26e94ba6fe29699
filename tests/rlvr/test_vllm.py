"""The vLLM engines on the real engine (vLLM's CPU build here), against Hugging Face generate and the
trainer's own log-probs. They run in the vLLM environment: scripts/test_vllm.sh.

Tolerance: float32 on both sides; the engine's and the trainer's log-probs of the same tokens agree
to 1e-4 (measured here: about 1e-5 at most, 5e-7 on average)."""

import copy
import importlib.util
import re
import time

import pytest
import torch

import tasks
from rlvr import UserError
from rlvr.algos.correction import truncated_logprobs
from rlvr.eval.runner import EvalSettings, evaluate
from rlvr.models.loading import load_model
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.config import RolloutConfig
from rlvr.rollout.engines import make_engine
from rlvr.rollout.sync import SyncProbe
from rlvr.rollout.weights import WeightSyncError
from rlvr.models.batch import build_token_batch, scatter_completion_values
from tests.rlvr.rollout_server import rollout_server

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not installed in this environment: scripts/test_vllm.sh runs these tests in .venv-vllm"),
]

TOL = 1e-4


def vllm_config(**vllm) -> RolloutConfig:
    cfg = RolloutConfig(engine="vllm")
    cfg.vllm.dtype = "float32"  # the trainer's dtype: exact comparisons
    for key, value in vllm.items():
        setattr(cfg.vllm, key, value)
    return cfg


@pytest.fixture(scope="module")
def task():
    return tasks.make("arithmetic-v1")


@pytest.fixture(scope="module")
def prompts(task):
    return [task.env.format_prompt(p) for p in task.problems("validation")[:48]]


@pytest.fixture(scope="module")
def engine(sft_base):
    return make_engine(vllm_config(), model_path=sft_base, seed=0)


@pytest.fixture
def trainer(sft_base):
    return load_model(str(sft_base))


def logprob_gap(model, tok, comps, temperature=1.0, top_p=1.0, top_k=0) -> float:
    """Largest |engine - trainer| log-prob over the completions' tokens, the trainer's taken under the
    same (truncated) sampling distribution."""
    batch = build_token_batch([c.prompt_ids for c in comps], [c.token_ids for c in comps], tok.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
    trainer = truncated_logprobs(logits, batch.input_ids[:, 1:], temperature, top_p, top_k)
    rollout = scatter_completion_values([c.logprobs for c in comps], batch)
    return float((trainer - rollout)[batch.completion_mask.bool()].abs().max())


def test_greedy_output_is_identical_to_hf_generate(engine, trainer, prompts):
    model, tok = trainer
    hf = make_engine(RolloutConfig(), model, tok)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=64)
    ours, theirs = engine.generate(prompts, 1, greedy), hf.generate(prompts, 1, greedy)
    assert [c.prompt_ids for c in ours] == [c.prompt_ids for c in theirs]
    assert [c.token_ids for c in ours] == [c.token_ids for c in theirs]
    assert [c.text for c in ours] == [c.text for c in theirs] and any("Answer:" in c.text for c in ours)
    assert [c.truncated for c in ours] == [c.truncated for c in theirs]
    assert logprob_gap(model, tok, ours) < TOL


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, 0), (0.7, 1.0, 0), (1.0, 0.9, 0), (0.8, 0.95, 20)])
def test_sampled_logprobs_equal_the_trainers(engine, trainer, prompts, temperature, top_p, top_k):
    model, tok = trainer
    sampling = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=64, seed=3)
    comps = engine.generate(prompts[:12], 4, sampling)
    assert [c.prompt_index for c in comps] == [i for i in range(12) for _ in range(4)]
    assert all(len(c.logprobs) == len(c.token_ids) > 0 for c in comps)
    assert all(c.token_ids[-1] == tok.eos_token_id or c.truncated for c in comps)
    assert logprob_gap(model, tok, comps, temperature, top_p, top_k) < TOL
    if top_p < 1 or top_k:  # the engine reports the truncated distribution, not the full softmax
        assert logprob_gap(model, tok, comps, temperature) > 1e-2
    again = engine.generate(prompts[:12], 4, sampling)
    assert [c.token_ids for c in again] == [c.token_ids for c in comps]  # a seeded call is reproducible
    assert len({tuple(c.token_ids) for c in comps}) > 12  # the n samples of a prompt differ


def test_a_seeded_batch_longer_than_one_prefill_step_is_generated_whole(engine, prompts):
    """More prompt tokens in one seeded call than a scheduler step took (vLLM's CPU build crashed
    with "CPU Generator does not use offset" after a partial prefill of a seeded request, as 128
    chat prompts of SmolLM2 did): prefills are kept whole on CPU, and the call is reproducible."""
    long = [p * 12 for p in prompts[:40]]  # about 40 x 200 tokens: more than the default step budget of 2,048
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8, seed=5)
    comps = engine.generate(long, 2, sampling)
    assert len(comps) == 80 and all(c.token_ids for c in comps)
    assert [c.token_ids for c in engine.generate(long, 2, sampling)] == [c.token_ids for c in comps]


def test_prefix_caching_is_on_and_eval_through_the_factory_matches_hf(engine, trainer, task):
    assert engine.llm.llm_engine.vllm_config.cache_config.enable_prefix_caching
    model, tok = trainer
    settings = EvalSettings(limit=60, max_new_tokens=64)
    ours = evaluate(engine, task, settings, progress=False)
    theirs = evaluate(make_engine(RolloutConfig(), model, tok), task, settings, progress=False)
    assert ours["greedy"]["correct"] == theirs["greedy"]["correct"] and ours["problems"] == 60
    texts = [[c.text for c in row] for row in ours["_greedy_samples"].completions]
    assert texts == [[c.text for c in row] for row in theirs["_greedy_samples"].completions]


def _optimizer_step(model, tok, comps, lr=1e-3):
    """One AdamW step raising the log-likelihood of the given completions: the policy moves."""
    batch = build_token_batch([c.prompt_ids for c in comps], [c.token_ids for c in comps], tok.pad_token_id)
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
    logp = torch.log_softmax(logits.float(), -1).gather(-1, batch.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    loss = -(logp * batch.completion_mask).sum() / batch.completion_mask.sum()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    loss.backward()
    opt.step()
    opt.zero_grad()


def test_after_an_optimizer_step_and_a_sync_the_engine_matches_the_new_weights(engine, trainer, prompts):
    model, tok = trainer
    sampling = SamplingParams(temperature=1.0, max_new_tokens=64, seed=5)
    comps = engine.generate(prompts[:12], 4, sampling)  # also fills the prefix cache with these prompts
    probe = SyncProbe.from_completions(comps, max_gap=0.05, k=6)
    assert probe.check(engine, model).mean_gap < 1e-5
    original = copy.deepcopy(model.state_dict())
    _optimizer_step(model, tok, comps)

    with pytest.raises(WeightSyncError, match="rollout.probe.max_gap"):  # no sync yet: caught
        probe.check(engine, model)
    version = engine.weights_version
    engine.load_weights(model)
    assert engine.weights_version == version + 1
    result = probe.check(engine, model)
    assert result.mean_gap < 1e-5 and result.trainer_moved > 0.05
    after = engine.generate(prompts[:12], 4, sampling)  # cached prefixes must not serve the old weights
    assert logprob_gap(model, tok, after) < TOL
    engine.load_weights(original)  # a state dict works too; back to the base for the other tests
    model.load_state_dict(original)
    assert probe.check(engine, model).mean_gap < 1e-5


def test_an_update_that_misses_parameters_is_refused(engine, trainer):
    model, _ = trainer
    partial = {k: v for k, v in model.state_dict().items() if ".layers.0." not in k}
    with pytest.raises(WeightSyncError, match="without new values.*model.layers.0"):
        engine.load_weights(partial)
    with pytest.raises(WeightSyncError, match="refused the weights"):
        engine.load_weights({"base_model.model.lora_A.weight": torch.zeros(2, 2)})  # e.g. adapter names
    engine.load_weights(model)  # leave it whole


def test_sleep_and_wake_push_the_current_weights(sft_base, trainer, prompts):
    model, tok = trainer
    for level in (1, 2):
        try:
            engine = make_engine(vllm_config(sleep_level=level), model, tok, model_path=sft_base)
        except UserError as e:
            pytest.skip(f"no sleep mode in this vLLM build (CPU): {e}")
        comps = engine.generate(prompts[:4], 2, SamplingParams(max_new_tokens=32, seed=0))
        probe = SyncProbe.from_completions(comps, max_gap=0.05)
        engine.load_weights(model)
        probe.check(engine, model)
        engine.sleep()
        _optimizer_step(model, tok, comps)  # the trainer moves while the engine sleeps
        engine.load_weights(model)  # a sync while asleep wakes the weights first
        engine.wake()  # ... and the wake-up pushes them again
        probe.check(engine, model)
        engine.sleep()
        engine.wake()
        assert logprob_gap(model, tok, engine.generate(prompts[:4], 2, SamplingParams(max_new_tokens=32, seed=1))) < 1e-2
        del engine


@pytest.fixture(scope="module")
def server(sft_base):
    with rollout_server(sft_base) as url:
        yield url


def test_server_mode_generates_and_takes_weight_updates_over_http(server, trainer, prompts):
    model, tok = trainer
    cfg = RolloutConfig(engine="vllm_server")
    cfg.vllm.server_url, cfg.vllm.http_chunk_mb = server, 1  # the 4 MB model travels in several chunks
    client = make_engine(cfg, model, tok)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=64)
    hf = make_engine(RolloutConfig(), model, tok)
    assert [c.text for c in client.generate(prompts[:16], 1, greedy)] == [c.text for c in hf.generate(prompts[:16], 1, greedy)]
    comps = client.generate(prompts[:8], 4, SamplingParams(temperature=0.9, top_p=0.95, max_new_tokens=64, seed=2))
    assert logprob_gap(model, tok, comps, 0.9, 0.95) < TOL

    probe = SyncProbe.from_completions(comps, max_gap=0.05)
    probe.check(client, model)
    _optimizer_step(model, tok, comps)
    with pytest.raises(WeightSyncError):
        probe.check(client, model)  # the server still has the old weights
    client.load_weights(model)
    assert client.weights_version == 1
    assert probe.check(client, model).mean_gap < 1e-5
    after = client.generate(prompts[:8], 4, SamplingParams(temperature=1.0, max_new_tokens=64, seed=4))
    assert logprob_gap(model, tok, after) < TOL

    with pytest.raises(WeightSyncError, match="without new values"):
        client.load_weights({k: v for k, v in model.state_dict().items() if ".layers.1." not in k})
    other = make_engine(cfg, model, tok)  # a second trainer pushes: the first one's count no longer matches
    other.load_weights(model)
    with pytest.raises(WeightSyncError, match="another trainer"):
        client.load_weights(model)


def _train_config(sft_base, tmp_path, *extra: str):
    from rlvr.config import load_config
    from rlvr.train import TrainConfig

    return load_config(TrainConfig, "quickstart", [
        f"output_dir={tmp_path}", "name=run", f"model.name_or_path={sft_base}", "threads=1", "rollout.engine=vllm",
        "rollout.vllm.dtype=float32", "rollout.vllm.max_model_len=256", "rollout.prompts_per_step=16", "optim.warmup_steps=0",
        "log.progress=false", "log.tensorboard=false", "log.plot=false", *extra])


def test_grpo_generating_with_vllm_raises_heldout_accuracy_and_proves_every_sync(sft_base, tmp_path):
    from rlvr.plots import read_metrics
    from rlvr.train import train

    result = train(_train_config(sft_base, tmp_path, "update.steps=15", "eval.every=15", "eval.at_start=true",
                                        "eval.limit=200", "rollout.prompts_per_step=32"))
    assert result.status == "completed"
    rows = read_metrics(result.run_dir / "metrics.jsonl")
    evals = {r["step"]: r["eval/accuracy"] for r in rows if "eval/accuracy" in r}
    assert evals[15] >= evals[0] + 0.05, evals
    gaps = [r["sync/logprob_gap_mean"] for r in rows if "sync/logprob_gap_mean" in r]
    assert len(gaps) == 15 and max(gaps) < TOL  # the probe after every sync: the engine has the trainer's weights
    assert max(r["rollout/logprob_gap"] for r in rows if "rollout/logprob_gap" in r) < TOL


def test_lora_grpo_on_vllm_syncs_the_merged_adapters_and_proves_every_sync(sft_base, tmp_path):
    from rlvr.plots import read_metrics
    from rlvr.train import train

    result = train(_train_config(sft_base, tmp_path, "update.steps=3", "eval.every=0", "eval.at_start=false", "model.lora.r=8",
                                 "optim.lr=1e-3", "log.checkpoint_every=0"))
    assert result.status == "completed"
    rows = read_metrics(result.run_dir / "metrics.jsonl")
    gaps = [r["sync/logprob_gap_mean"] for r in rows if "sync/logprob_gap_mean" in r]
    assert len(gaps) == 3 and max(gaps) < TOL  # the engine generates with base + adapters after every sync
    moved = [r["sync/trainer_moved"] for r in rows if "sync/trainer_moved" in r]
    assert moved and max(moved) > 0  # the adapters did move between syncs (the staleness check had something to catch)
    full = sum(p.numel() * p.element_size() for p in load_model(str(sft_base))[0].parameters())
    sent = [r["sync/bytes"] for r in rows if "sync/bytes" in r]
    assert sent and all(b == full for b in sent)  # merged weights: as large as a full sync
    assert max(r["rollout/logprob_gap"] for r in rows if "rollout/logprob_gap" in r) < TOL


def test_a_vllm_sync_that_does_not_arrive_stops_the_run(sft_base, tmp_path, monkeypatch):
    from rlvr.plots import read_metrics
    from rlvr.rollout.engines.vllm import VLLMEngine
    from rlvr.train import train

    monkeypatch.setattr(VLLMEngine, "load_weights", lambda self, weights: None)  # broken on purpose: the engine keeps its weights
    with pytest.raises(WeightSyncError, match="did not arrive|rollout.probe.max_gap"):
        train(_train_config(sft_base, tmp_path, "update.steps=3", "eval.every=0", "eval.at_start=false"))
    assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [1]


@pytest.fixture(scope="module")
def tool_base(tmp_path_factory):
    """A short tool warm-up (sft_tool_products on 2 layers, 100 steps; about 30 s on one core): every
    demonstration calls the sandboxed tool (guess_frac 0: the config's half that answer directly can
    teach a short warm-up to skip the tool altogether), so episodes have observations. The tool-call
    form is learned first: after 60 steps as after 100, all 24 greedy episodes of the test called the
    tool (the numbers in it are learned much later, and are not needed here)."""
    from rlvr.config import load_config
    from rlvr.train.sft import SFTConfig, sft

    out = tmp_path_factory.mktemp("tool")
    return sft(load_config(SFTConfig, "sft_tool_products", [
        f"output_dir={out}", "name=sft", "tiny.layers=2", "steps=100", "eval.limit=20", "log.progress=false",
        "log.tensorboard=false", "log.plot=false", "threads=1", "task.config.guess_frac=0.0"]))


def test_multi_turn_grpo_trains_on_vllm_with_hf_transcripts_masked_observations_and_proven_syncs(tool_base, tmp_path):
    from rlvr.config import load_config
    from rlvr.plots import read_metrics
    from rlvr.train import TrainConfig, train

    task = tasks.make("tool-products-v1")
    model, tok = load_model(str(tool_base))
    settings = EvalSettings(limit=24, max_new_tokens=64)
    ours = evaluate(make_engine(vllm_config(max_model_len=256), model_path=tool_base, seed=0), task, settings, progress=False)
    theirs = evaluate(make_engine(RolloutConfig(), model, tok), task, settings, progress=False)
    episodes = [c for row in ours["_greedy_samples"].completions for c in row]
    assert [c.episode.transcript for c in episodes] == [c.episode.transcript
                                                       for row in theirs["_greedy_samples"].completions for c in row]
    assert any(c.episode.info["observation_tokens"] > 0 for c in episodes)  # the tool was called and answered

    cfg = load_config(TrainConfig, "tool_products", [
        f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tool_base}", "threads=1", "rollout.engine=vllm",
        "rollout.vllm.dtype=float32", "rollout.vllm.max_model_len=256", "rollout.prompts_per_step=8", "update.steps=3",
        "algo.entropy_coef=0.001",  # a gradient on every step: the short warm-up is rarely right, and a step without one is skipped
        "eval.every=0", "eval.at_start=false", "log.checkpoint_every=0", "log.progress=false", "log.tensorboard=false",
        "log.plot=false"])
    result = train(cfg)
    assert result.status == "completed" and result.steps == 3
    rows = [r for r in read_metrics(result.run_dir / "metrics.jsonl") if "episode/observation_tokens" in r]
    assert sum(r["episode/observation_tokens"] for r in rows) > 0
    # observation tokens are context: had they been scored, the engine's 0.0 log-probs there would differ from the trainer's
    assert max(r["rollout/logprob_gap"] for r in rows) < TOL
    gaps = [r["sync/logprob_gap_mean"] for r in read_metrics(result.run_dir / "metrics.jsonl") if "sync/logprob_gap_mean" in r]
    assert len(gaps) == 3 and max(gaps) < TOL  # the probe after every sync


def test_a_server_killed_mid_run_ends_it_with_an_error_naming_the_engine_and_resumes_on_a_new_server(sft_base, tmp_path):
    import threading

    from rlvr.rollout.base import EngineError
    from rlvr.train import train

    server = rollout_server(sft_base)
    url = server.__enter__()
    metrics = tmp_path / "run" / "metrics.jsonl"

    def kill_after_the_first_step():
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not (metrics.is_file() and '"step": 1' in metrics.read_text()):
            time.sleep(0.2)
        server.proc.kill()

    killer = threading.Thread(target=kill_after_the_first_step, daemon=True)
    killer.start()
    try:
        with pytest.raises(EngineError, match=rf"rollout engine vllm_server at {re.escape(url)} failed on /(generate|score|weights)"):
            train(_train_config(sft_base, tmp_path, "rollout.engine=vllm_server", f"rollout.vllm.server_url={url}",
                                "update.steps=20", "eval.every=0", "eval.at_start=false", "log.checkpoint_every=0"))
    finally:
        killer.join()
        server.__exit__(None, None, None)
    kept = sorted(int(p.name.split("-")[1]) for p in (tmp_path / "run" / "checkpoints").iterdir() if re.fullmatch(r"step-\d+", p.name))
    assert kept, "no checkpoint kept"
    # a new server, and the run continues from the checkpoint it kept (the server is sent the resumed weights)
    with rollout_server(sft_base) as url:
        result = train(_train_config(sft_base, tmp_path, "rollout.engine=vllm_server", f"rollout.vllm.server_url={url}", "resume=true",
                                     f"update.steps={kept[-1] + 1}", "eval.every=0", "eval.at_start=false", "log.checkpoint_every=0"))
    assert result.status == "completed" and result.steps == kept[-1] + 1


def test_asynchronous_training_against_the_server_keeps_the_bound_and_proves_every_version(sft_base, tmp_path):
    """rollout.async with the server as the generation worker: the producer sends each version over
    HTTP before the batch that needs it, the server scores the probe after every load, and no sample
    older than k is trained on; evaluation runs on the trainer's own model meanwhile."""
    from rlvr.plots import read_metrics
    from rlvr.train import train

    k = 2
    with rollout_server(sft_base) as url:
        result = train(_train_config(sft_base, tmp_path, "rollout.engine=vllm_server", f"rollout.vllm.server_url={url}",
                                     f"rollout.async.max_staleness={k}", "update.steps=6", "eval.every=6", "eval.limit=32",
                                     "eval.at_start=false", "log.checkpoint_every=0", "rollout.prompts_per_step=8"))
    assert result.status == "completed"
    rows = read_metrics(result.run_dir / "metrics.jsonl")
    assert [r["async/staleness_max"] for r in rows] == [float(min(k, r["step"] - 1)) for r in rows]
    assert all(r["async/dropped_stale"] == 0 for r in rows)
    gaps = [r["sync/logprob_gap_mean"] for r in rows if "sync/logprob_gap_mean" in r]
    assert len(gaps) >= 2 and max(gaps) < TOL  # the server holds exactly the version the trainer pushed
    assert "eval/accuracy" in rows[-1]

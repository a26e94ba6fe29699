"""Several rollout servers (`rollout.vllm.server_urls`) on real `rlvr rollout serve --engine hf`
processes on 127.0.0.1: requests spread over the servers, every weight push to every server and the
probe on each, a server lost mid-run set aside with its requests re-sent (the samples do not change),
a server that comes back re-synced before it serves, start-up and token errors in one line naming
the server; and end to end, a run on one server, on two, and on two with one killed mid-run end with
the same weights."""

from __future__ import annotations

import re
import time

import pytest
import torch
from safetensors.torch import load_file

from rlvr import UserError
from rlvr.models.loading import load_model
from rlvr.rollout.base import EngineError, SamplingParams
from rlvr.rollout.config import RolloutConfig, VLLMConfig
from rlvr.rollout.engines import make_engine
from rlvr.rollout.sync import SyncProbe
from rlvr.serve.http import bind_listener
from tests.rlvr.rollout_server import rollout_server

PROMPTS = ["Compute 12+30.", "Compute 7+8.", "Compute 45+21.", "Compute 3+99.", "Compute 60+6.", "Compute 11+11."]
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=24, seed=11)
TOKEN = "a-test-token-for-rollouts"


def hf_server(path, **kwargs) -> rollout_server:
    return rollout_server(path, "hf.decode=kv", engine="hf", device="cpu", **kwargs)


def client(urls, model, tok, **vllm):
    return make_engine(RolloutConfig(engine="vllm_server", vllm=VLLMConfig(server_urls=list(urls), prompts_per_request=1, **vllm)),
                       model, tok)


def view(comps):
    return [(c.prompt_index, c.token_ids, c.logprobs) for c in comps]


def free_port() -> int:
    sock = bind_listener("127.0.0.1", 0)
    try:
        return sock.getsockname()[1]
    finally:
        sock.close()


@pytest.fixture(scope="module")
def steady(sft_base):
    """A server that stays up through the module's tests (each pushes its own weights to it)."""
    with hf_server(sft_base) as url:
        yield url


def test_several_servers_share_the_calls_take_every_push_and_a_lost_one_rejoins_with_the_current_weights(sft_base, steady):
    model, tok = load_model(str(sft_base))
    a, b_port = steady, free_port()
    b_server = hf_server(sft_base, port=b_port)
    with b_server as b:
        one, two = client([a], model, tok), client([a, b], model, tok)
        alone = one.generate(PROMPTS, 2, SAMPLING)
        spread = two.generate(PROMPTS, 2, SAMPLING)
        assert view(spread) == view(alone)  # seeds per request, not per server
        assert all(r.pool.stats.requests > 0 for r in two.replicas)  # both servers drew some

        probe = SyncProbe.from_completions(alone, max_gap=0.05)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.01)
        a_version = two.replicas[0].version  # the module's other tests may have pushed to a already
        two.load_weights(model)
        assert [r.version for r in two.replicas] == [a_version + 1, 1]  # the push went to each server
        result = probe.check(two, model)  # ... and the probe proved each
        assert result.mean_gap < 1e-5 and len(two.score_each(probe.prompt_ids, probe.completion_ids)) == 2
        before = view(client([a], model, tok).generate(PROMPTS, 2, SAMPLING))  # a new client of a alone, which holds the update

        b_server.kill()  # lost mid-run: its requests go to a, the samples do not change
        assert view(two.generate(PROMPTS, 2, SAMPLING)) == before
        assert two.metrics() == {"rollout/servers_alive": 1.0}

        with hf_server(sft_base, port=b_port) as b_again:  # back, with the starting weights: re-synced before it serves
            assert b_again == b
            assert view(two.generate(PROMPTS, 2, SAMPLING)) == before and two.replicas[1].alive is False
            two.load_weights(model)
            assert two.metrics() == {"rollout/servers_alive": 2.0} and [r.version for r in two.replicas] == [a_version + 2, 1]
            assert probe.check(two, model).mean_gap < 1e-5
            served = two.replicas[1].pool.stats.requests
            assert view(two.generate(PROMPTS, 2, SAMPLING)) == before
            assert two.replicas[1].pool.stats.requests > served  # it serves again
            lone = client([b], model, tok)
        with pytest.raises(EngineError, match=rf"rollout engine vllm_server at {re.escape(b)} failed on /generate: "
                                              rf"no rollout server is left \({re.escape(b)}: .*unreachable"):
            lone.generate(PROMPTS, 2, SAMPLING)  # the run stops naming the servers (and keeps its checkpoint)


def test_a_restarted_server_answering_with_its_starting_weights_is_set_aside(sft_base, steady):
    """A server that restarts between two requests answers with weights it was not sent: the client
    sees it (the server start and the update count travel with every answer) and never trains on it."""
    model, tok = load_model(str(sft_base))
    port, a = free_port(), steady
    server = hf_server(sft_base, port=port)
    with server as b:
        two = client([a, b], model, tok)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.01)
        two.load_weights(model)
        expected = view(two.generate(PROMPTS, 2, SAMPLING))
    with hf_server(sft_base, port=port):  # restarted before the client noticed it was gone
        assert view(two.generate(PROMPTS, 2, SAMPLING)) == expected
        assert [r.alive for r in two.replicas] == [True, False]
        assert "it restarted" in two.replicas[1].reason or "unreachable" in two.replicas[1].reason


def test_a_server_that_does_not_answer_at_start_is_waited_for_then_one_line_naming_it_before_the_model_loads(tmp_path, capsys):
    from rlvr.config import load_config
    from rlvr.train import TrainConfig, train

    dead = f"http://127.0.0.1:{free_port()}"
    cfg = load_config(TrainConfig, "quickstart", [
        f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tmp_path / 'no-model-here'}", "rollout.engine=vllm_server",
        f"rollout.vllm.server_urls=[{dead}]", "rollout.vllm.server_wait_s=1", "log.progress=false"])
    with pytest.raises(UserError) as caught:
        train(cfg)
    message = str(caught.value)
    assert f"no rollout server answers at {dead} after waiting 1 s (rollout.vllm.server_wait_s" in message and "\n" not in message
    assert "no-model-here" not in message  # the servers were checked before the model
    waits = [line for line in capsys.readouterr().err.splitlines() if "waiting" in line]
    assert len(waits) == 1 and f"waiting up to 1 s (rollout.vllm.server_wait_s) for the rollout server at {dead}" in waits[0]


@pytest.mark.slow
def test_a_server_that_starts_after_the_trainer_is_waited_for_and_used(sft_base, tmp_path):
    """The trainer is started first (as a cluster's jobs start in any order); the server comes up
    once the trainer says it waits for it, and the run generates on it."""
    from tests.cluster.box import Trainers, metrics

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = ["quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={sft_base}", "threads=1", "device=cpu",
            "rollout.engine=vllm_server", f"rollout.vllm.server_urls=[{url}]", "rollout.vllm.server_wait_s=600",
            "rollout.prompts_per_step=4", "rollout.max_new_tokens=16", "update.steps=1", "optim.warmup_steps=0", "eval.every=0",
            "eval.at_start=false", "log.checkpoint_every=0", "log.progress=false", "log.tensorboard=false", "log.plot=false"]
    with Trainers(tmp_path / "trainer.log", *args, processes=1, forked=True) as trainer:
        while f"for the rollout server at {url}" not in trainer.output():
            assert trainer.proc.poll() is None, trainer.output()[-3000:]  # refused instead of waiting
            time.sleep(0.2)
        with hf_server(sft_base, port=port):
            code = trainer.wait(600)
        said = trainer.output()
    assert code == 0 and "completed: 1 steps" in said, said[-3000:]
    assert [row["rollout/servers_alive"] for row in metrics(tmp_path / "run")] == [1.0]


def test_a_server_that_answers_junk_is_refused_at_its_first_answer_naming_it():
    """Something that answers, but not as a rollout server does, is refused at once rather than
    waited for (asked once, not until rollout.vllm.server_wait_s)."""
    import http.server
    import threading

    from rlvr.rollout.engines.vllm_server import check_servers
    from rlvr.rollout.server_health import require_servers

    asked = []

    class Junk(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>not a rollout server</html>")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Junk)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        require_servers([url], wait_s=60, say=pytest.fail)  # it answers: no wait
        with pytest.raises(UserError) as caught:
            check_servers(VLLMConfig(server_urls=[url]), wait_s=60)
    finally:
        server.shutdown()
        server.server_close()
    assert f"{url}/version sent something that is not a JSON object" in str(caught.value) and "\n" not in str(caught.value)
    assert asked == ["/health", "/version"]


def test_a_refused_token_is_one_line_naming_the_server(sft_base, monkeypatch):
    model, tok = load_model(str(sft_base))
    with hf_server(sft_base, token=TOKEN) as url:
        for given in ("a-wrong-token-of-some-length", None):
            if given is None:
                monkeypatch.delenv("RLVR_ROLLOUT_TOKEN", raising=False)
            else:
                monkeypatch.setenv("RLVR_ROLLOUT_TOKEN", given)
            with pytest.raises(UserError) as caught:
                client([url], model, tok)
            assert url in str(caught.value) and "refused the token" in str(caught.value) and "\n" not in str(caught.value)
        monkeypatch.setenv("RLVR_ROLLOUT_TOKEN", TOKEN)
        engine = client([url], model, tok)
        assert len(engine.generate(PROMPTS[:2], 1, SAMPLING)) == 2


def _train(sft_base, tmp_path, name, urls, *extra):
    from rlvr.config import load_config
    from rlvr.train import TrainConfig, train

    cfg = load_config(TrainConfig, "quickstart", [
        f"output_dir={tmp_path}", f"name={name}", f"model.name_or_path={sft_base}", "threads=1", "device=cpu", "rollout.engine=vllm_server",
        f"rollout.vllm.server_urls=[{','.join(urls)}]", "rollout.vllm.prompts_per_request=2", "rollout.prompts_per_step=8",
        "rollout.max_new_tokens=48", "update.steps=3", "optim.warmup_steps=0", "eval.every=0", "eval.at_start=false",
        "log.checkpoint_every=1", "log.progress=false", "log.tensorboard=false", "log.plot=false", *extra])
    return train(cfg)


@pytest.mark.slow
def test_runs_on_one_server_on_two_and_on_two_losing_one_mid_run_end_with_the_same_weights(sft_base, steady, tmp_path, monkeypatch):
    from rlvr.plots import read_metrics
    from rlvr.rollout.engines.vllm_server import VLLMServerEngine

    a, b_server = steady, hf_server(sft_base)
    with b_server as b:
        one = _train(sft_base, tmp_path, "one", [a])
        two = _train(sft_base, tmp_path, "two", [a, b])

        calls, sample_ids = [], VLLMServerEngine.sample_ids

        def kill_b_at_the_second_batch(self, *args):  # step 1 trained, step 2's weights pushed to both: b dies
            calls.append(1)
            if len(calls) == 2:
                b_server.kill()
            return sample_ids(self, *args)

        monkeypatch.setattr(VLLMServerEngine, "sample_ids", kill_b_at_the_second_batch)
        faulted = _train(sft_base, tmp_path, "faulted", [a, b])
    assert one.status == two.status == faulted.status == "completed"
    rows = {name: read_metrics(tmp_path / name / "metrics.jsonl") for name in ("one", "two", "faulted")}
    same = ("reward/mean", "rollout/response_len", "rollout/tokens")
    for key in same:
        assert [r.get(key) for r in rows["one"]] == [r.get(key) for r in rows["two"]] == [r.get(key) for r in rows["faulted"]], key
    assert [r["rollout/servers_alive"] for r in rows["two"]] == [2.0, 2.0, 2.0]
    assert [r["rollout/servers_alive"] for r in rows["faulted"]] == [2.0, 1.0, 1.0]  # b's requests of step 2 went to a
    assert max(r["sync/logprob_gap_mean"] for name in rows for r in rows[name] if "sync/logprob_gap_mean" in r) < 1e-5
    weights = {name: load_file(tmp_path / name / "final" / "model.safetensors") for name in rows}
    assert weights["one"].keys() == weights["two"].keys() == weights["faulted"].keys()
    for key, tensor in weights["one"].items():
        assert torch.equal(tensor, weights["two"][key]) and torch.equal(tensor, weights["faulted"][key]), key
    base = load_file(sft_base / "model.safetensors")
    assert any(not torch.equal(base[k], t) for k, t in weights["one"].items() if k in base)  # the runs did train


@pytest.mark.slow
def test_a_run_whose_last_server_dies_stops_naming_it_and_keeps_its_checkpoint(sft_base, tmp_path, monkeypatch):
    from rlvr.rollout.engines.vllm_server import VLLMServerEngine

    server = hf_server(sft_base)
    with server as url:
        calls, sample_ids = [], VLLMServerEngine.sample_ids

        def kill_at_the_second_batch(self, *args):
            calls.append(1)
            if len(calls) == 2:
                server.kill()
            return sample_ids(self, *args)

        monkeypatch.setattr(VLLMServerEngine, "sample_ids", kill_at_the_second_batch)
        with pytest.raises(EngineError, match=rf"rollout engine vllm_server at {re.escape(url)} failed on /generate: no rollout server is left"):
            _train(sft_base, tmp_path, "run", [url])
    assert (tmp_path / "run" / "checkpoints" / "step-1").is_dir()


@pytest.mark.slow
def test_asynchronous_runs_on_one_server_and_on_two_end_with_the_same_weights_every_version_proven_on_each(sft_base, steady, tmp_path):
    """rollout.async (k = 2) with the servers as the generation side: the producer pushes each version
    to every server and the probe of each version is scored on each server."""
    from rlvr.plots import read_metrics

    with hf_server(sft_base) as b:
        one = _train(sft_base, tmp_path, "one", [steady], "rollout.async.max_staleness=2", "update.steps=4")
        two = _train(sft_base, tmp_path, "two", [steady, b], "rollout.async.max_staleness=2", "update.steps=4")
    assert one.status == two.status == "completed"
    rows = {name: read_metrics(tmp_path / name / "metrics.jsonl") for name in ("one", "two")}
    assert [r["reward/mean"] for r in rows["one"]] == [r["reward/mean"] for r in rows["two"]]
    assert [r["rollout/servers_alive"] for r in rows["two"]] == [2.0] * 4
    gaps = [r["sync/logprob_gap_mean"] for r in rows["two"] if "sync/logprob_gap_mean" in r]
    assert len(gaps) >= 2 and max(gaps) < 1e-5
    weights = {name: load_file(tmp_path / name / "final" / "model.safetensors") for name in rows}
    assert all(torch.equal(t, weights["two"][k]) for k, t in weights["one"].items())


def test_a_server_that_stops_answering_is_set_aside_after_its_timeout_and_the_samples_do_not_change(sft_base, steady):
    import signal

    model, tok = load_model(str(sft_base))
    server = hf_server(sft_base)
    with server as b:
        # a request here (one prompt, 24 tokens, a 4 MB model) takes a fraction of a second: 5 s is waited out only by the stopped server
        two = client([steady, b], model, tok, request_timeout_s=5.0)
        two.load_weights(model)
        expected = view(client([steady], model, tok).generate(PROMPTS, 2, SAMPLING))
        server.proc.send_signal(signal.SIGSTOP)  # alive, connections accepted by the kernel, never answered
        try:
            assert view(two.generate(PROMPTS, 2, SAMPLING)) == expected
            assert [r.alive for r in two.replicas] == [True, False] and "did not answer within 5 s" in two.replicas[1].reason
        finally:
            server.proc.send_signal(signal.SIGCONT)
        two.load_weights(model)  # it answers again: re-synced, serving
        assert two.metrics() == {"rollout/servers_alive": 2.0}
        assert view(two.generate(PROMPTS, 2, SAMPLING)) == expected


def test_the_servers_a_config_names_one_url_or_a_list_never_both():
    from rlvr.rollout.engines.vllm_server import server_urls

    assert server_urls(VLLMConfig(server_url="http://10.0.0.5:8000/")) == ("http://10.0.0.5:8000",)
    assert server_urls(VLLMConfig(server_urls=["http://a:1", "http://b:2", "http://a:1"])) == ("http://a:1", "http://b:2")
    with pytest.raises(UserError, match="server_url and rollout.vllm.server_urls are both set"):
        server_urls(VLLMConfig(server_url="http://a:1", server_urls=["http://b:2"]))
    with pytest.raises(UserError, match=r"rollout.vllm.server_urls must start with http:// or https://, got 'b:2'"):  # when the config is read
        VLLMConfig(server_urls=["http://a:1", "b:2"])

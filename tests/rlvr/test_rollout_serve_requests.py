"""`rlvr rollout serve` checks every request body at its edge: on a real `--engine hf` server on
127.0.0.1, each bad body of a table is a 400 whose one-line message names the field (never the
engine's 500), the server keeps serving good requests after them, the admin's caps (--max-n,
--max-new-tokens, the model's context) hold, and rlvr's client turns a 400 into one clear error
without retrying it."""

from __future__ import annotations

import httpx
import pytest

from rlvr.models.loading import load_model
from rlvr.rollout.base import EngineError, SamplingParams
from rlvr.rollout.config import RolloutConfig, VLLMConfig
from rlvr.rollout.engines import make_engine
from rlvr.rollout.engines.serve_requests import GenerateRequest, RequestError, ScoreRequest, ServeLimits
from tests.rlvr.rollout_server import rollout_server

MAX_NEW, MAX_N = 64, 8  # the server's caps in these tests (--max-new-tokens, --max-n)
GOOD_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 4, "seed": 3, "stop": []}
GOOD_GENERATE = {"prompt_ids": [[1, 40, 41]], "n": 2, "sampling": GOOD_SAMPLING}
GOOD_SCORE = {"prompt_ids": [[1, 40, 41]], "completion_ids": [[42, 43]]}


def generate_with(**changes):
    body = {**GOOD_GENERATE, **changes}
    return {k: v for k, v in body.items() if v is not ...}


def sampling_with(**changes):
    return generate_with(sampling={**GOOD_SAMPLING, **changes})


def score_with(**changes):
    return {**GOOD_SCORE, **changes}


# (route, body, what the message must name); the vocabulary (259) and context (256) are the SFT base's
BAD = [
    ("/generate", generate_with(prompt_ids=[[]]), "prompt_ids[0]"),
    ("/generate", generate_with(prompt_ids=[]), "prompt_ids"),
    ("/generate", generate_with(prompt_ids=[[1, 99999999]]), "prompt_ids[0][1]"),
    ("/generate", generate_with(prompt_ids=[[1, 2], [-5]]), "prompt_ids[1][0]"),
    ("/generate", generate_with(prompt_ids=[[1, 259]]), "prompt_ids[0][1]"),
    ("/generate", generate_with(prompt_ids=[[1, 2.5]]), "prompt_ids[0][1]"),
    ("/generate", generate_with(prompt_ids=[[1, True]]), "prompt_ids[0][1]"),
    ("/generate", generate_with(prompt_ids="1 2 3"), "prompt_ids"),
    ("/generate", generate_with(prompt_ids=[5]), "prompt_ids[0]"),
    ("/generate", generate_with(prompt_ids=...), "prompt_ids"),
    ("/generate", {**generate_with(prompt_ids=[[1] * 250]), "sampling": {**GOOD_SAMPLING, "max_new_tokens": 8}}, "prompt_ids[0]"),  # 258 > 256
    ("/generate", generate_with(n=-1), "n"),
    ("/generate", generate_with(n=0), "n"),
    ("/generate", generate_with(n=100000), "n"),
    ("/generate", generate_with(n="2"), "n"),
    ("/generate", generate_with(n=...), "n"),
    ("/generate", generate_with(sampling=[1.0]), "sampling"),
    ("/generate", generate_with(extra=1), "extra"),
    ("/generate", sampling_with(max_new_tokens=-3), "sampling.max_new_tokens"),
    ("/generate", sampling_with(max_new_tokens=0), "sampling.max_new_tokens"),
    ("/generate", sampling_with(max_new_tokens=100000000), "sampling.max_new_tokens"),
    ("/generate", sampling_with(temperature=-1), "sampling.temperature"),
    ("/generate", sampling_with(temperature="hot"), "sampling.temperature"),
    ("/generate", sampling_with(top_p=0), "sampling.top_p"),
    ("/generate", sampling_with(top_p=1.5), "sampling.top_p"),
    ("/generate", sampling_with(top_k=-1), "sampling.top_k"),
    ("/generate", sampling_with(seed=-1), "sampling.seed"),
    ("/generate", sampling_with(seed=2 ** 70), "sampling.seed"),
    ("/generate", sampling_with(stop="END"), "sampling.stop"),
    ("/generate", sampling_with(stop=[""]), "sampling.stop[0]"),
    ("/generate", sampling_with(temprature=0.5), "sampling.temprature"),
    ("/score", score_with(prompt_ids=[[1, 99999999]]), "prompt_ids[0][1]"),
    ("/score", score_with(completion_ids=[[42, -5]]), "completion_ids[0][1]"),
    ("/score", score_with(completion_ids=[[42, 99999999]]), "completion_ids[0][1]"),
    ("/score", score_with(prompt_ids=[[]]), "prompt_ids[0]"),
    ("/score", score_with(completion_ids=[[42], [43]]), "completion_ids"),
    ("/score", score_with(completion_ids=[[42] * 254]), "completion_ids[0]"),
    ("/score", {"prompt_ids": [[1]]}, "completion_ids"),
]


def test_the_same_bodies_are_refused_by_the_parser_naming_the_field():
    """The table without a server: what the server answers 400 is the parser's `RequestError`."""
    limits = ServeLimits(vocab_size=259, context_length=256, max_new_tokens=MAX_NEW, max_n=MAX_N)
    parse = {"/generate": GenerateRequest.parse, "/score": ScoreRequest.parse}
    for route, body, field in BAD:
        with pytest.raises(RequestError) as caught:
            parse[route](body, limits)
            pytest.fail(f"{route} {body} was accepted")
        message = str(caught.value)
        assert message.startswith(f"{field}:") and "\n" not in message, (route, body, message)
    assert len(GenerateRequest.parse(generate_with(prompt_ids=[[1] * 252]), limits).prompt_ids[0]) == 252  # 252 + 4 fills the context
    request = GenerateRequest.parse({"prompt_ids": [[1, 2]], "n": 1}, limits)
    assert request.sampling == SamplingParams(max_new_tokens=MAX_NEW)  # the default, within the server's cap
    assert GenerateRequest.parse(GOOD_GENERATE, limits).sampling == SamplingParams(top_p=1.0, max_new_tokens=4, seed=3)


@pytest.fixture(scope="module")
def server(sft_base):
    with rollout_server(sft_base, "hf.decode=kv", "--max-new-tokens", str(MAX_NEW), "--max-n", str(MAX_N),
                        engine="hf", device="cpu") as url:
        yield url


def test_bad_bodies_are_400_naming_the_field_and_the_server_keeps_serving(server):
    with httpx.Client(base_url=server, timeout=120) as http:
        for route, body, field in BAD:
            answer = http.post(route, json=body)
            error = answer.json().get("error", "")
            assert answer.status_code == 400 and error.startswith(f"{field}:") and "\n" not in error, (route, body, answer.text)
        generated = http.post("/generate", json=GOOD_GENERATE)
        assert generated.status_code == 200, generated.text
        samples = generated.json()["samples"]
        assert len(samples) == 1 and len(samples[0]) == 2 and all(1 <= len(s["token_ids"]) <= 4 for s in samples[0])
        scored = http.post("/score", json=GOOD_SCORE)
        assert scored.status_code == 200 and len(scored.json()["logprobs"][0]) == 2, scored.text
        greedy = http.post("/generate", json=sampling_with(temperature=0, max_new_tokens=MAX_NEW))  # at the cap: allowed
        assert greedy.status_code == 200, greedy.text
        health = http.get("/health").json()
        assert health["limits"] == {"vocab_size": 259, "context_length": 256, "max_new_tokens": MAX_NEW, "max_n": MAX_N}
        assert health["answered"].get("400") == len(BAD) and "500" not in health["answered"]
        chunk = http.post("/weights/chunk?final=yes", content=b"")
        assert chunk.status_code == 400 and chunk.json()["error"].startswith("final:")


def test_the_client_turns_a_400_into_one_clear_error_without_retrying(sft_base, server):
    model, tok = load_model(str(sft_base))
    engine = make_engine(RolloutConfig(engine="vllm_server", vllm=VLLMConfig(server_urls=[server])), model, tok)
    answered = lambda: httpx.get(f"{server}/health").json()["answered"].get("400", 0)  # noqa: E731
    before = answered()
    with pytest.raises(EngineError) as caught:
        engine.sample_ids([[1, 99999999]], 1, SamplingParams(max_new_tokens=4, seed=1))
    message = str(caught.value)
    assert "/generate" in message and "prompt_ids[0][1]" in message and "vocabulary" in message and "\n" not in message
    assert answered() == before + 1  # refused once: a bad request is not retried
    with pytest.raises(EngineError) as caught:
        engine.sample_ids([[1, 2]], 1, SamplingParams(max_new_tokens=MAX_NEW + 1, seed=1))
    assert "sampling.max_new_tokens" in str(caught.value) and "--max-new-tokens" in str(caught.value)
    assert [r.alive for r in engine.replicas] == [True]  # the request was bad, not the server
    assert len(engine.sample_ids([[1, 2]], 2, SamplingParams(max_new_tokens=4, seed=1))[0]) == 2
    engine.close()

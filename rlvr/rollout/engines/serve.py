"""`rlvr rollout serve`: a rollout engine behind a small HTTP API (rollout.engine=vllm_server).

Two engines answer the same routes: ``--engine vllm`` (the project's `VLLMEngine`, as colocated) and
``--engine hf`` (rlvr's own Hugging Face engine and decoders, `ServedHFEngine`: CPU or GPU, so the
topology runs where vLLM does not). A trainer may use several servers of either kind
(``rollout.vllm.server_urls``).

Why not vLLM's own OpenAI-compatible server: a trainer needs token ids in and out, the sampled
tokens' log-probs, prompt log-probs of given ids (the sync probe) and weight updates. vLLM's
server speaks text and string tokens, and its weight-update routes take only GPU transports
(NCCL, CUDA IPC). This server adds a weight path over HTTP that works anywhere, CPU included; on
GPUs the NCCL routes forward to vLLM's own weight-transfer engine (``--engine vllm`` only).

It runs on rlvr's server stack (`rlvr.serve.http.GuardedServer`: uvicorn, admission control,
graceful drain on SIGTERM). One request at a time reaches the engine (engines are not
thread-safe); the others wait in a bounded queue, past it 503 with ``Retry-After``. With a token
(``--token`` or ``$RLVR_ROLLOUT_TOKEN``) every request but ``GET /health`` needs it; without one the
server listens on loopback only.

Every body is parsed and checked before it reaches the engine (`rlvr.rollout.engines.serve_requests`):
a bad field (a token id outside the vocabulary, an empty prompt, ``temperature < 0``, ``n`` or
``max_new_tokens`` over the server's caps ``--max-n`` / ``--max-new-tokens`` or past the model's
context) is a 400 naming it, the same for either engine.

Routes (JSON bodies and answers; errors are ``{"error": ...}`` with status 400/500). Every answer of
the engine carries ``weights_version`` (updates received) and ``instance`` (one per server start),
so a client can tell a server that restarted and lost its weights:

    GET  /health                         {"model", "engine", "weights_version", "instance", "asleep", "limits"}
    GET  /version   (needs the token)    {"weights_version", "instance"}
    POST /generate  {prompt_ids, n, sampling}        -> {"samples": [[{token_ids, logprobs, truncated}]], ...}
    POST /score     {prompt_ids, completion_ids}      -> {"logprobs": [[...]], ...}
    POST /weights/chunk?final=0|1   (body: safetensors) -> {"weights_version", "instance"}
    POST /weights/nccl/init {init_info} | /weights/nccl/start | /weights/nccl/update {update_info}
         | /weights/nccl/finish                       -> {"weights_version"}   (--engine vllm)
    POST /sleep | /wake                               -> {"asleep"}
"""

from __future__ import annotations

import secrets
import traceback
from dataclasses import asdict, dataclass
from typing import Any, Callable, Protocol

from rlvr import UserError
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.config import RolloutConfig
from rlvr.rollout.engines.serve_requests import (DEFAULT_MAX_N, DEFAULT_MAX_NEW_TOKENS, GenerateRequest, RequestError,
                                                 ScoreRequest, ServeLimits, parse_flag, parse_object)
from rlvr.rollout.engines.token import Sample
from rlvr.rollout.weights import WeightSyncError, from_blob
from rlvr.serve.http import GuardedServer, Guards, HTTPFailure, RawRoute, is_loopback

TOKEN_VARIABLE = "RLVR_ROLLOUT_TOKEN"
"""Where the server (without ``--token``) and the trainer's client read the bearer token."""


class ServedEngine(Protocol):
    """What a served engine offers (`VLLMEngine`, `ServedHFEngine`)."""

    tokenizer: Any
    weights_version: int
    vocab_size: int  # token ids the model takes: 0 .. vocab_size - 1
    context_length: int | None  # longest prompt + completion (None: unknown)

    def sample_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> list[list[Sample]]: ...
    def score(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[list[float]]: ...
    def load_partial(self, pairs: Any) -> set[str]: ...
    def commit_update(self, missing: set[str]) -> None: ...
    def sleep(self) -> None: ...
    def wake(self) -> None: ...

    @property
    def asleep(self) -> bool: ...


@dataclass(frozen=True)
class ServeRequest:
    """What a served engine is built from: the model, the server's ``rollout.*`` settings, its seed and device."""

    model: str
    cfg: RolloutConfig
    seed: int = 0
    device: str = "auto"


def _vllm_engine(request: ServeRequest) -> ServedEngine:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise UserError("`rlvr rollout serve --engine vllm` needs the vllm package: scripts/setup_vllm_env.sh on CPUs, "
                        "pip install -e '.[gpu]' on GPUs; or serve rlvr's own engine with --engine hf")
    from rlvr.rollout.engines.vllm import VLLMEngine

    cfg = request.cfg.vllm
    engine = VLLMEngine(request.model, None, cfg, seed=request.seed, colocated=False, nccl_weight_transfer=cfg.weight_transfer == "nccl")
    bos = engine.tokenizer.bos_token_id if engine.tokenizer.bos_token_id is not None else 0
    engine.sample_ids([[bos]], 1, SamplingParams(temperature=0.0, max_new_tokens=2))  # first call compiles kernels
    return engine


def _hf_engine(request: ServeRequest) -> ServedEngine:
    import torch

    from rlvr.rollout.engines.hf_served import ServedHFEngine

    torch.manual_seed(request.seed)  # calls without a seed continue this generator
    return ServedHFEngine(request.model, request.cfg.hf, device=request.device)


SERVED_ENGINES: dict[str, Callable[[ServeRequest], ServedEngine]] = {"vllm": _vllm_engine, "hf": _hf_engine}
"""``rlvr rollout serve --engine NAME``: how each engine is built."""


class RolloutService:
    """What the routes do, without HTTP (the server lets one request at a time in: engines are not thread-safe)."""

    def __init__(self, engine: ServedEngine, model: str, engine_name: str = "vllm", *,
                 max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, max_n: int = DEFAULT_MAX_N):
        self.engine = engine
        self.limits = ServeLimits(engine.vocab_size, engine.context_length, max_new_tokens=max_new_tokens, max_n=max_n)
        self.model = model
        self.engine_name = engine_name
        self.instance = secrets.token_hex(8)  # tells a restarted server (weights lost) from the one a client knew
        self._pending: set[str] | None = None  # engine parameters no chunk of the current update has covered

    def health(self) -> dict[str, Any]:
        limits = {"vocab_size": self.limits.vocab_size, "context_length": self.limits.context_length,
                  "max_new_tokens": self.limits.max_new_tokens, "max_n": self.limits.max_n}
        return {"model": self.model, "engine": self.engine_name, "asleep": self.engine.asleep, "limits": limits, **self._version()}

    def _version(self) -> dict[str, Any]:
        return {"weights_version": self.engine.weights_version, "instance": self.instance}

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        request = GenerateRequest.parse(body, self.limits)
        samples = self.engine.sample_ids(request.prompt_ids, request.n, request.sampling)
        return {"samples": [[asdict(s) for s in row] for row in samples], **self._version()}

    def score(self, body: dict[str, Any]) -> dict[str, Any]:
        request = ScoreRequest.parse(body, self.limits)
        return {"logprobs": self.engine.score(request.prompt_ids, request.completion_ids), **self._version()}

    def weights_chunk(self, blob: bytes, final: bool) -> dict[str, Any]:
        try:
            missing = self.engine.load_partial(from_blob(blob))
        except Exception:
            self._pending = None  # a failed update ends; the next chunk starts a new one
            raise
        self._pending = missing if self._pending is None else self._pending & missing
        if final:
            pending, self._pending = self._pending, None
            self.engine.commit_update(pending)
        return self._version()

    def nccl(self, step: str, body: dict[str, Any]) -> dict[str, Any]:
        llm = self.engine.llm  # type: ignore[attr-defined]  (VLLMEngine only: the routes exist for --engine vllm)
        if step == "init":
            llm.init_weight_transfer_engine({"init_info": parse_object(body.get("init_info"), "init_info")})
        elif step == "start":
            llm.start_weight_update()
        elif step == "update":
            llm.update_weights({"update_info": parse_object(body.get("update_info"), "update_info")})
        elif step == "finish":
            llm.finish_weight_update()
            self.engine.commit_update(set())  # vLLM's transfer engine checks completeness itself
        else:
            raise KeyError(f"unknown NCCL step {step!r}")
        return self._version()

    def sleep(self) -> dict[str, Any]:
        self.engine.sleep()
        return {"asleep": self.engine.asleep}

    def wake(self) -> dict[str, Any]:
        self.engine.wake()
        return {"asleep": self.engine.asleep}


def _request_errors(handler: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A request the engine cannot take (bad fields, weights that do not fit) is a 400 naming why;
    any other failure is the server's 500 (printed here with its traceback), never a dead server."""

    def call(*args: Any) -> dict[str, Any]:
        try:
            return handler(*args)
        except RequestError as e:  # checked at the edge: its message names the field
            raise HTTPFailure(400, str(e)) from None
        except (WeightSyncError, KeyError, TypeError, ValueError) as e:
            raise HTTPFailure(400, f"{type(e).__name__}: {e}") from None
        except Exception:
            traceback.print_exc()
            raise

    return call


def rollout_routes(service: RolloutService) -> dict[tuple[str, str], Any]:
    """The server's routes (`GuardedServer` form); the NCCL ones only for vLLM."""
    routes: dict[tuple[str, str], Any] = {
        ("GET", "/version"): lambda _: service._version(),  # /health with the token: a client's start-up check
        ("POST", "/generate"): service.generate, ("POST", "/score"): service.score,
        ("POST", "/sleep"): lambda _: service.sleep(), ("POST", "/wake"): lambda _: service.wake(),
        ("POST", "/weights/chunk"): RawRoute(_request_errors(lambda blob, query: service.weights_chunk(blob, parse_flag(query.get("final", "1"), "final")))),
    }
    if service.engine_name == "vllm":
        routes |= {("POST", f"/weights/nccl/{step}"): (lambda body, step=step: service.nccl(step, body))
                   for step in ("init", "start", "update", "finish")}
    return {key: value if isinstance(value, RawRoute) else _request_errors(value) for key, value in routes.items()}


def make_rollout_server(service: RolloutService, cfg: RolloutConfig, *, host: str = "127.0.0.1", port: int = 0,
                        token: str | None = None, max_queued: int = 256) -> GuardedServer:
    """The HTTP server of ``service`` (bound, not yet serving). One request at a time reaches the
    engine; a body may hold one weight chunk of ``rollout.vllm.http_chunk_mb``."""
    guards = Guards(token, max_request_bytes=(cfg.vllm.http_chunk_mb + 1) << 20, read_timeout_s=max(300.0, cfg.vllm.request_timeout_s),
                    request_timeout_s=cfg.vllm.request_timeout_s, max_inflight=1, max_queued=max_queued)
    return GuardedServer(rollout_routes(service), guards, host, port, name="rollout-server", allow_remote=not is_loopback(host),
                         health=service.health)


def serve(model: str, cfg: RolloutConfig, *, engine: str = "vllm", host: str = "127.0.0.1", port: int = 8000, seed: int = 0,
          device: str = "auto", token: str | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
          max_n: int = DEFAULT_MAX_N) -> None:
    """Check the address, start the engine, print the address, serve until SIGTERM/SIGINT (which drain).
    ``max_new_tokens`` / ``max_n``: the most a request may ask (`ServeLimits`)."""
    for flag, value in (("--max-new-tokens", max_new_tokens), ("--max-n", max_n)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{flag} must be an integer >= 1, got {value!r}")
    if engine not in SERVED_ENGINES:
        raise UserError(f"--engine {engine!r}: choose one of {', '.join(SERVED_ENGINES)}")
    if not is_loopback(host) and token is None:
        raise UserError(f"refusing to listen on {host!r} without a token: give --token or set ${TOKEN_VARIABLE}")
    served = SERVED_ENGINES[engine](ServeRequest(model, cfg, seed, device))
    service = RolloutService(served, model, engine, max_new_tokens=max_new_tokens, max_n=max_n)
    try:
        server = make_rollout_server(service, cfg, host=host, port=port, token=token)
    except (ValueError, OSError) as e:
        raise UserError(str(e)) from None
    print(f"rollout server ready on {server.url} (model {model}, engine {engine})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()

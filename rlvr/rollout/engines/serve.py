"""`rlvr rollout serve`: the project's vLLM engine behind a small HTTP API (rollout.engine=vllm_server).

Why not vLLM's own OpenAI-compatible server: a trainer needs token ids in and out, the sampled
tokens' log-probs, prompt log-probs of given ids (the sync probe) and weight updates. vLLM's
server speaks text and string tokens, and its weight-update routes take only GPU transports
(NCCL, CUDA IPC). This server runs the same `VLLMEngine` as the colocated mode and adds a
weight path over HTTP that works anywhere, CPU included; on GPUs the NCCL routes forward to vLLM's
own weight-transfer engine. It trusts its clients: bind it to a private address.

Routes (JSON bodies and answers; errors are ``{"error": ...}`` with status 400/500):

    GET  /health                         {"model", "weights_version", "asleep"}
    POST /generate  {prompt_ids, n, sampling}        -> {"samples": [[{token_ids, logprobs, truncated}]]}
    POST /score     {prompt_ids, completion_ids}      -> {"logprobs": [[...]]}
    POST /weights/chunk?final=0|1   (body: safetensors) -> {"weights_version"}
    POST /weights/nccl/init {init_info} | /weights/nccl/start | /weights/nccl/update {update_info}
         | /weights/nccl/finish                       -> {"weights_version"}
    POST /sleep | /wake                               -> {"asleep"}
"""

from __future__ import annotations

import json
import sys
import traceback
from dataclasses import asdict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from rlvr.rollout.base import SamplingParams
from rlvr.rollout.config import VLLMConfig
from rlvr.rollout.engines.vllm import VLLMEngine
from rlvr.rollout.weights import WeightSyncError, from_blob


class RolloutService:
    """What the routes do, without HTTP (one request at a time: vLLM's offline engine is not thread-safe)."""

    def __init__(self, engine: VLLMEngine, model: str):
        self.engine = engine
        self.model = model
        self._pending: set[str] | None = None  # engine parameters no chunk of the current update has covered

    def health(self) -> dict[str, Any]:
        return {"model": self.model, "weights_version": self.engine.weights_version, "asleep": self.engine.asleep}

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        raw = dict(body.get("sampling", {}))
        sampling = SamplingParams(**{**raw, "stop": tuple(raw.get("stop", ()))})
        samples = self.engine.sample_ids(body["prompt_ids"], int(body["n"]), sampling)
        return {"samples": [[asdict(s) for s in row] for row in samples]}

    def score(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"logprobs": self.engine.score(body["prompt_ids"], body["completion_ids"])}

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
        return {"weights_version": self.engine.weights_version}

    def nccl(self, step: str, body: dict[str, Any]) -> dict[str, Any]:
        llm = self.engine.llm
        if step == "init":
            llm.init_weight_transfer_engine({"init_info": body["init_info"]})
        elif step == "start":
            llm.start_weight_update()
        elif step == "update":
            llm.update_weights({"update_info": body["update_info"]})
        elif step == "finish":
            llm.finish_weight_update()
            self.engine.commit_update(set())  # vLLM's transfer engine checks completeness itself
        else:
            raise KeyError(f"unknown NCCL step {step!r}")
        return {"weights_version": self.engine.weights_version}

    def sleep(self) -> dict[str, Any]:
        self.engine.sleep()
        return {"asleep": self.engine.asleep}

    def wake(self) -> dict[str, Any]:
        self.engine.wake()
        return {"asleep": self.engine.asleep}


def make_handler(service: RolloutService) -> type[BaseHTTPRequestHandler]:
    json_routes: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "/generate": service.generate, "/score": service.score,
        "/sleep": lambda _: service.sleep(), "/wake": lambda _: service.wake(),
        **{f"/weights/nccl/{step}": (lambda body, step=step: service.nccl(step, body)) for step in ("init", "start", "update", "finish")},
    }

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if urlparse(self.path).path == "/health":
                self._answer(HTTPStatus.OK, service.health())
            else:
                self._answer(HTTPStatus.NOT_FOUND, {"error": f"no route GET {self.path}"})

        def do_POST(self) -> None:  # noqa: N802
            url = urlparse(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                if url.path == "/weights/chunk":
                    final = parse_qs(url.query).get("final", ["1"])[0] == "1"
                    result = service.weights_chunk(body, final)
                elif url.path in json_routes:
                    result = json_routes[url.path](json.loads(body or b"{}"))
                else:
                    self._answer(HTTPStatus.NOT_FOUND, {"error": f"no route POST {url.path}"})
                    return
            except (WeightSyncError, KeyError, TypeError, ValueError) as e:  # the request was wrong
                self._answer(HTTPStatus.BAD_REQUEST, {"error": f"{type(e).__name__}: {e}"})
                return
            except Exception as e:  # the engine failed: report it, keep serving
                traceback.print_exc()
                self._answer(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(e).__name__}: {e}"})
                return
            self._answer(HTTPStatus.OK, result)

        def _answer(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # one line per request on stderr
            sys.stderr.write(f"[rollout-server] {self.address_string()} {format % args}\n")

    return Handler


def serve(model: str, cfg: VLLMConfig, host: str = "127.0.0.1", port: int = 8000, seed: int = 0) -> None:
    """Start the engine, warm it up, print the address, serve until interrupted."""
    engine = VLLMEngine(model, None, cfg, seed=seed, colocated=False, nccl_weight_transfer=cfg.weight_transfer == "nccl")
    bos = engine.tokenizer.bos_token_id if engine.tokenizer.bos_token_id is not None else 0
    engine.sample_ids([[bos]], 1, SamplingParams(temperature=0.0, max_new_tokens=2))  # first call compiles kernels
    server = HTTPServer((host, port), make_handler(RolloutService(engine, model)))
    print(f"rollout server ready on http://{host}:{server.server_port} (model {model})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()

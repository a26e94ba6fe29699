"""The trainer's side of server mode (`rollout.engine=vllm_server`): a `RolloutEngine` that
generates through one or several `rlvr rollout serve` (``--engine vllm`` or ``--engine hf``) and
sends them the trainer's weights.

- **Several servers** (``rollout.vllm.server_urls``): a generate call is cut into requests of
  ``rollout.vllm.prompts_per_request`` prompts (0: one request) sent at once, each to the live
  server with the least outstanding work; every weight push goes to every live server, and the
  sync probe scores each (`score_each`). A server that fails (refused, reset, timed out, retried past
  `rlvr.serve.client.RetryPolicy`) or answers with weights it should not have (it restarted) is set
  aside with one line naming it, and its requests are re-sent to the others; the run goes on
  (``rollout/servers_alive``). At the next weight push a server set aside is asked again: one that
  answers gets the current weights before it serves again. When none is left, `EngineError` names
  them (the run stops and keeps its checkpoint).
- **Seeds**: every request carries a seed, a function of the call's seed (the trainer's
  (seed, batch, problems), or the previous one and a count) and the request's place in the call, never
  of which server answers: the samples do not depend on the server count or a failover.
- ``weight_transfer=http``: the weights travel as safetensors chunks in request bodies (any
  machine, CPU included; tested here).
- ``weight_transfer=nccl``: vLLM's NCCL weight-transfer engine broadcasts them from the trainer's
  GPU to the server's GPUs; this client drives it through the server's ``/weights/nccl/*`` routes
  (one server; needs the ``vllm`` package and CUDA in the trainer process; written, not run on this
  CPU-only machine).

Every update is numbered: a server answers with its count, and a count that is not the expected one
from the same server start (another trainer pushed) is a `WeightSyncError`. The token, when the
servers have one, is read from ``$RLVR_ROLLOUT_TOKEN``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Iterator

from transformers import PreTrainedTokenizerBase

from rlvr import UserError
from rlvr.rollout.base import EngineCapabilities, EngineError, SamplingParams
from rlvr.rollout.config import VLLMConfig
from rlvr.rollout.engines.token import Sample, TokenEngine
from rlvr.rollout.weights import Weights, WeightSyncError, named_weights, reiterable, to_blobs
from rlvr.serve.client import RemoteError, RetryPolicy, ServerPool, WrongAnswer, normalize_urls

TOKEN_VARIABLE = "RLVR_ROLLOUT_TOKEN"
SERVER_RETRY = RetryPolicy(attempts=3, backoff_s=0.2, max_backoff_s=2.0, cooldown_s=0.0)
"""Tries on one server before it is set aside and its request goes to another."""


class ServerError(EngineError):
    """The rollout server refused or failed a request; the message is the server's."""


def server_urls(cfg: VLLMConfig) -> tuple[str, ...]:
    """The servers a config names: ``server_urls``, else ``server_url``; one-line errors."""
    if cfg.server_urls and cfg.server_url != VLLMConfig().server_url:
        raise UserError("rollout.vllm.server_url and rollout.vllm.server_urls are both set: list every server in server_urls")
    try:
        if cfg.server_urls:
            return normalize_urls(cfg.server_urls, "rollout.vllm.server_urls")
        return normalize_urls(cfg.server_url, "rollout.vllm.server_url")
    except ValueError as e:
        raise UserError(str(e)) from None


def check_servers(cfg: VLLMConfig, wait_s: float | None = None) -> dict[str, dict[str, Any]]:
    """Wait (up to ``rollout.vllm.server_wait_s``) until every server answers with the token; their
    ``/version`` answers by URL. One that does not answer in that time is a one-line `UserError`
    naming it, and so at once is one that refuses the token or answers something else than JSON
    (the trainer calls this before it loads the model)."""
    urls = server_urls(cfg)
    pool = ServerPool(urls, os.environ.get(TOKEN_VARIABLE) or None, timeout_s=10.0)
    deadline = time.monotonic() + (cfg.server_wait_s if wait_s is None else wait_s)
    try:
        while True:
            try:
                return pool.check("/version")
            except WrongAnswer as e:  # refused the token, or not a rollout server: waiting will not mend it
                hint = f"give the servers' token in ${TOKEN_VARIABLE}" if "refused the token" in str(e) else "is it `rlvr rollout serve`?"
                raise UserError(f"rollout server: {e}; {hint}") from None
            except RemoteError as e:
                if time.monotonic() > deadline:
                    raise UserError(f"no rollout server answers: {e}; start them with `rlvr rollout serve --model MODEL` "
                                    "(--engine hf without vLLM) and list them in rollout.vllm.server_urls") from None
            time.sleep(1.0)
    finally:
        pool.close()


@dataclass
class Replica:
    """One server as the client knows it.

    Attributes:
        url: Its address.
        pool: Its connections and retries (`ServerPool` of one server).
        instance / version: The server start it answered from and the weight updates it holds.
        alive: Serving: it answered and holds the weights the trainer last pushed.
        outstanding: Requests sent to it and not answered yet.
        reason: Why it was set aside.
    """

    url: str
    pool: ServerPool
    instance: str = ""
    version: int = 0
    alive: bool = True
    outstanding: int = 0
    reason: str = ""

    def current(self, answer: dict[str, Any]) -> bool:
        """Whether an answer came from the server start and the weights this client knows."""
        return answer.get("instance") == self.instance and answer.get("weights_version") == self.version


class _ServerLost(Exception):
    """A server failed (transport, time-out, restarted): set it aside, send the request elsewhere."""


class VLLMServerEngine(TokenEngine):
    """Client of one or several `rlvr rollout serve` (``cfg.server_urls``, else ``cfg.server_url``).

    Args:
        cfg: `VLLMConfig` (``server_url(s)``, ``prompts_per_request``, ``weight_transfer``,
            ``http_chunk_mb``, ``nccl_*``, ``tensor_parallel_size`` of the server for the NCCL group
            size, ``request_timeout_s``, ``server_wait_s``).
        tokenizer: The trainer's tokenizer (prompts are tokenized and completions decoded here).
        wait_s: How long to wait for the servers to come up (default ``cfg.server_wait_s``).
        seed: Seeds the calls that come without a seed of their own.
    """

    def __init__(self, cfg: VLLMConfig, tokenizer: PreTrainedTokenizerBase, wait_s: float | None = None, seed: int = 0):
        self.cfg = cfg
        self.urls = server_urls(cfg)
        if cfg.weight_transfer == "nccl" and len(self.urls) > 1:
            raise UserError("rollout.vllm.weight_transfer=nccl drives one server; with several rollout.vllm.server_urls use http")
        self.url = ", ".join(self.urls)
        self.tokenizer = tokenizer
        self.capabilities = EngineCapabilities(own_weights=True, can_sleep=cfg.sleep_level > 0, seeds_every_call=True,
                                               shared=True)
        token = os.environ.get(TOKEN_VARIABLE) or None
        self.replicas = [Replica(u, ServerPool(u, token, cfg.request_timeout_s, SERVER_RETRY)) for u in self.urls]
        answers = check_servers(cfg, wait_s)
        for replica in self.replicas:
            replica.instance, replica.version = answers[replica.url].get("instance", ""), int(answers[replica.url]["weights_version"])
        self.weights_version = self.replicas[0].version  # updates pushed, counted from the first server's
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(max(2, 2 * len(self.replicas)), thread_name_prefix="rollout-client")
        self._seed, self._unseeded_calls = seed, 0  # calls without a seed continue from the last seed given
        self._turn = 0  # ties between servers go round in turn
        self._closed = False
        self._source: Weights | None = None
        self._nccl: Any = None  # vLLM's trainer-side NCCL engine, made at the first sync
        self._asleep = False

    # -- generation ---------------------------------------------------------------------------

    def sample_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> list[list[Sample]]:
        seed = self._call_seed(sampling.seed)
        size = self.cfg.prompts_per_request or max(1, len(prompt_ids))
        starts = range(0, len(prompt_ids), size)
        payloads = [{"prompt_ids": prompt_ids[a: a + size], "n": n,
                     "sampling": asdict(dataclasses.replace(sampling, seed=_request_seed(seed, i, len(starts))))}
                    for i, a in enumerate(starts)]
        answers = self._each(lambda payload: self._send("/generate", payload), payloads)
        return [[Sample(**s) for s in row] for answer in answers for row in answer["samples"]]

    def score(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[list[float]]:
        return self._send("/score", {"prompt_ids": prompt_ids, "completion_ids": completion_ids})["logprobs"]

    def score_each(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> dict[str, list[list[float]]]:
        """`score` on every live server (the sync probe proves each), by URL; a server lost meanwhile is left out."""
        payload = {"prompt_ids": prompt_ids, "completion_ids": completion_ids}

        def one(replica: Replica) -> list[list[float]] | None:
            try:
                return self._send_to(replica, "/score", payload)["logprobs"]
            except _ServerLost as e:
                self._set_aside(replica, str(e))
                return None

        live = self._live("/score")
        rows = self._each(one, live)
        out = {r.url: row for r, row in zip(live, rows) if row is not None}
        if not out:
            self._live("/score")  # raises, naming every server
        return out

    def metrics(self) -> dict[str, float]:
        return {"rollout/servers_alive": float(sum(r.alive for r in self.replicas))}

    def _call_seed(self, seed: int | None) -> int:
        """The call's seed: its own, else one from the last seed given and the calls since (never a server's generator)."""
        with self._lock:
            if seed is not None:
                self._seed, self._unseeded_calls = seed, 0
                return seed
            self._unseeded_calls += 1
            return _derived_seed("call", self._seed, self._unseeded_calls)

    # -- weights ------------------------------------------------------------------------------

    def load_weights(self, model: Weights) -> None:
        """Send the trainer's current weights (module, state dict or pairs) to every server; a server
        set aside that answers again gets them too and serves again."""
        if self.cfg.weight_transfer == "nccl":
            answer = self._send_nccl(model)
            replica = self.replicas[0]
            self._check_version(replica, answer)
        else:
            self._rejoin()
            targets = self._live("/weights/chunk")
            if len(targets) > 1 and not reiterable(model):
                model = list(named_weights(model))  # one-shot pairs, read once for every server
            pushed = self._each(lambda r: self._push(r, model), targets)
            if not any(pushed):
                self._live("/weights/chunk")  # raises, naming every server
        self.weights_version += 1
        self._source = model if reiterable(model) else None

    def pushed(self) -> dict[str, Any]:
        """The servers serving after the last push, with the server start and update count each holds."""
        with self._lock:
            return {"weights_version": self.weights_version,
                    "servers": {r.url: (r.instance, r.version) for r in self.replicas if r.alive}}

    def follow(self, account: dict[str, Any]) -> None:
        """Take the push another process made (`pushed`): the servers it left serving serve here
        too, with the update count they hold now; the others are set aside until its next push."""
        with self._lock:
            self.weights_version = account["weights_version"]
            for replica in self.replicas:
                if replica.url in account["servers"]:
                    (replica.instance, replica.version), replica.alive = account["servers"][replica.url], True
                elif replica.alive:
                    replica.alive, replica.reason = False, "set aside by the process that pushes the weights"

    def _push(self, replica: Replica, model: Weights) -> bool:
        """All weights to one server in chunks; False when the server was lost (set aside)."""
        answer: dict[str, Any] = {}
        try:
            for blob, final in _with_last(to_blobs(named_weights(model), self.cfg.http_chunk_mb << 20)):
                answer = self._request(replica, f"/weights/chunk?final={int(final)}", content=blob, error=WeightSyncError)
            if answer.get("instance") != replica.instance:
                raise _ServerLost(f"{replica.url} restarted during the weight push")
        except _ServerLost as e:
            self._set_aside(replica, str(e))
            return False
        self._check_version(replica, answer)
        return True

    def _check_version(self, replica: Replica, answer: dict[str, Any]) -> None:
        expected = replica.version + 1
        if answer.get("weights_version") != expected:
            raise WeightSyncError(f"the rollout server at {replica.url} reports weight update {answer.get('weights_version')}, "
                                  f"expected {expected}: it restarted or another trainer sent it weights")
        replica.version = expected

    def _rejoin(self) -> None:
        """Ask every server set aside for its health once; one that answers is taken back (it is sent
        the weights being pushed before it serves)."""
        for replica in self.replicas:
            if replica.alive:
                continue
            try:
                answer = replica.pool.check("/version", timeout_s=5.0)[replica.url]
            except RemoteError:
                continue
            with self._lock:
                replica.instance, replica.version, replica.alive = answer.get("instance", ""), int(answer["weights_version"]), True
            _say(f"rollout server {replica.url} answers again: it gets the current weights before it serves")

    def _send_nccl(self, model: Weights) -> dict[str, Any]:
        import torch
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo, NCCLTrainerWeightTransferEngine

        source = _weight_source(model)
        if self._nccl is None:
            if not torch.cuda.is_available():
                raise UserError("rollout.vllm.weight_transfer=nccl needs CUDA in the trainer process; use http on CPUs")
            info = NCCLTrainerInitInfo(self.cfg.nccl_address, self.cfg.nccl_port, 1 + self.cfg.tensor_parallel_size, rank=0)
            self._nccl = NCCLTrainerWeightTransferEngine.trainer_init(info, client=_NCCLRoutes(self), source=source)
        self._nccl.source = source
        self._nccl.send_weights()  # start -> update (concurrent with the broadcast) -> finish
        return self._nccl_post("/version", None, method="GET")

    def _nccl_post(self, path: str, payload: dict[str, Any] | None, *, method: str = "POST",
                   error: type[Exception] = WeightSyncError) -> dict[str, Any]:
        try:
            return self._request(self.replicas[0], path, payload, method=method, error=error)
        except _ServerLost as e:
            raise self._none_left(path, str(e)) from None

    # -- sleep / wake ---------------------------------------------------------------------------

    def sleep(self) -> None:
        """Ask the servers to free their GPU memory (only with ``rollout.vllm.sleep_level`` > 0)."""
        if self.capabilities.can_sleep and not self._asleep:
            self._to_every_server("/sleep")
            self._asleep = True

    def wake(self) -> None:
        """Wake the servers and send the last weights again (their restored weights may be stale)."""
        if not self._asleep:
            return
        self._to_every_server("/wake")
        self._asleep = False
        if self._source is not None:
            self.load_weights(self._source)

    @property
    def asleep(self) -> bool:
        return self._asleep

    def close(self) -> None:
        self._closed = True  # a call still running (e.g. a producer thread's) ends at its next request
        self._threads.shutdown(wait=False)
        for replica in self.replicas:
            replica.pool.close()

    # -- requests -----------------------------------------------------------------------------

    def _each(self, fn: Any, items: list[Any]) -> list[Any]:
        """``fn`` over ``items`` at once (one request per server in flight at a time is the servers' own limit)."""
        if len(items) <= 1:
            return [fn(item) for item in items]
        return list(self._threads.map(fn, items))

    def _to_every_server(self, path: str) -> None:
        """``POST path`` to every live server; one lost on the way is set aside (EngineError when none is left)."""
        def one(replica: Replica) -> bool:
            try:
                self._request(replica, path, {})
                return True
            except _ServerLost as e:
                self._set_aside(replica, str(e))
                return False

        if not any(self._each(one, self._live(path))):
            self._live(path)  # raises, naming every server

    def _live(self, path: str) -> list[Replica]:
        with self._lock:
            live = [r for r in self.replicas if r.alive]
        if not live:
            raise self._none_left(path, "; ".join(f"{r.url}: {r.reason}" for r in self.replicas))
        return live

    def _none_left(self, path: str, reasons: str) -> EngineError:
        return ServerError(f"rollout engine vllm_server at {self.url} failed on {path}: no rollout server is left ({reasons}); "
                           "restart `rlvr rollout serve`, then resume the run with --resume")

    def _send(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """``payload`` to the live server with the least outstanding work; a server lost on the way
        is set aside and the request goes to another (EngineError when none is left)."""
        while True:
            with self._lock:
                live = [r for r in self.replicas if r.alive]
                least = min((r.outstanding for r in live), default=0)
                ties = [r for r in live if r.outstanding == least]
                self._turn += 1
                replica = ties[self._turn % len(ties)] if ties else None
                if replica is not None:
                    replica.outstanding += 1  # counted before the lock is let go, so the next pick sees it
            if replica is None:
                self._live(path)  # raises, naming every server
            try:
                return self._send_to(replica, path, payload)
            except _ServerLost as e:
                self._set_aside(replica, str(e))
            finally:
                with self._lock:
                    replica.outstanding -= 1

    def _send_to(self, replica: Replica, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """``payload`` to ``replica``, whose answer must come from the weights this client sent it."""
        answer = self._request(replica, path, payload)
        if not replica.current(answer):
            raise _ServerLost(f"{replica.url} answered with weights it was not sent (update {answer.get('weights_version')} "
                              f"of server start {answer.get('instance')}, expected {replica.version} of {replica.instance}): it restarted")
        return answer

    def _request(self, replica: Replica, path: str, payload: dict[str, Any] | None = None, *, content: bytes | None = None,
                 method: str = "POST", error: type[Exception] = ServerError) -> dict[str, Any]:
        if self._closed:
            raise ServerError(f"rollout engine vllm_server at {self.url}: {path} after the engine was closed")
        try:
            if content is not None:
                return replica.pool.request(method, path, content=content, content_type="application/octet-stream")
            return replica.pool.request(method, path, payload)
        except RemoteError as e:
            if e.status is None:  # refused, reset, timed out, busy past the retries: the server, not the request
                raise _ServerLost(str(e)) from None
            if e.status == 401:
                raise UserError(f"rollout server: {e}; give the servers' token in ${TOKEN_VARIABLE}") from None
            raise error(f"rollout server {path}: {str(e).split(': ', 1)[-1]}") from None

    def _set_aside(self, replica: Replica, reason: str) -> None:
        with self._lock:
            if not replica.alive:
                return
            replica.alive, replica.reason = False, reason
            left = sum(r.alive for r in self.replicas)
        _say(f"rollout server {replica.url} set aside ({reason}); {left} of {len(self.replicas)} left, its requests go to the others")


def _say(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr, flush=True)


def _derived_seed(*fields: Any) -> int:
    from tasks.base import stable_hash

    return stable_hash(*fields) % (2 ** 31)


def _request_seed(call_seed: int, index: int, requests: int) -> int:
    """The seed of request ``index`` of a call cut into ``requests`` (the call's own when it is whole)."""
    return call_seed if requests == 1 else _derived_seed("request", call_seed, index)


def _with_last(items: Iterator[bytes]) -> Iterator[tuple[bytes, bool]]:
    """Each item with whether it is the last (one item of look-ahead)."""
    prev = next(items, None)
    while prev is not None:
        item = next(items, None)
        yield prev, item is None
        prev = item


class _NCCLRoutes:
    """vLLM's `VLLMWeightSyncClient` surface over this project's server routes."""

    def __init__(self, engine: VLLMServerEngine):
        self.engine = engine

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.engine._nccl_post("/weights/nccl/init", {"init_info": init_info})

    def start_weight_update(self) -> None:
        self.engine._nccl_post("/weights/nccl/start", {})

    def update_weights(self, update_info: Any) -> None:
        self.engine._nccl_post("/weights/nccl/update", {"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.engine._nccl_post("/weights/nccl/finish", {})


def _weight_source(weights: Weights) -> Any:
    """vLLM's `WeightSource` over our weights: a module through vLLM's `ModuleSource` (it gathers
    FSDP-sharded parameters one at a time), anything else as a list of pairs."""
    import torch
    from vllm.distributed.weight_transfer.base import ModuleSource, ParamMeta, WeightSource

    if isinstance(weights, torch.nn.Module):
        return ModuleSource(weights)

    class PairsSource(WeightSource):
        def __init__(self) -> None:
            self.pairs = list(named_weights(weights))

        def metadata(self) -> list[Any]:
            return [ParamMeta(name, t.dtype, tuple(t.shape)) for name, t in self.pairs]

        def __iter__(self) -> Iterator[tuple[str, Any]]:
            return iter(self.pairs)

    return PairsSource()

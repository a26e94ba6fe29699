"""The trainer's side of server mode (`rollout.engine=vllm_server`): a `RolloutEngine` that
generates through `rlvr rollout serve` and sends it the trainer's weights.

- ``weight_transfer=http``: the weights travel as safetensors chunks in request bodies (any
  machine, CPU included; tested here).
- ``weight_transfer=nccl``: vLLM's NCCL weight-transfer engine broadcasts them from the trainer's
  GPU to the server's GPUs; this client drives it through the server's ``/weights/nccl/*`` routes
  (needs the ``vllm`` package and CUDA in the trainer process; written, not run on this CPU-only
  machine).

Every update is numbered: the server answers with its count, and a count that is not the
expected one (the server restarted, or another trainer pushed) is a `WeightSyncError`.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from typing import Any, Iterator

from transformers import PreTrainedTokenizerBase

from rlvr import UserError
from rlvr.rollout.base import EngineCapabilities, EngineError, SamplingParams
from rlvr.rollout.config import VLLMConfig
from rlvr.rollout.engines.token import Sample, TokenEngine
from rlvr.rollout.weights import Weights, WeightSyncError, named_weights, reiterable, to_blobs


class ServerError(EngineError):
    """The rollout server refused or failed a request; the message is the server's."""


class VLLMServerEngine(TokenEngine):
    """Client of `rlvr rollout serve` at ``cfg.server_url``.

    Args:
        cfg: `VLLMConfig` (``server_url``, ``weight_transfer``, ``http_chunk_mb``, ``nccl_*``,
            ``tensor_parallel_size`` of the server for the NCCL group size, ``request_timeout_s``).
        tokenizer: The trainer's tokenizer (prompts are tokenized and completions decoded here).
        wait_s: How long to wait for the server to come up.
    """

    def __init__(self, cfg: VLLMConfig, tokenizer: PreTrainedTokenizerBase, wait_s: float = 120.0):
        self.cfg = cfg
        self.url = cfg.server_url.rstrip("/")
        self.tokenizer = tokenizer
        self.capabilities = EngineCapabilities(own_weights=True, can_sleep=cfg.sleep_level > 0)
        self.weights_version = int(self._wait_ready(wait_s)["weights_version"])
        self._source: Weights | None = None
        self._nccl: Any = None  # vLLM's trainer-side NCCL engine, made at the first sync
        self._asleep = False

    # -- generation ---------------------------------------------------------------------------

    def sample_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> list[list[Sample]]:
        answer = self._post("/generate", {"prompt_ids": prompt_ids, "n": n, "sampling": asdict(sampling)})
        return [[Sample(**s) for s in row] for row in answer["samples"]]

    def score(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[list[float]]:
        return self._post("/score", {"prompt_ids": prompt_ids, "completion_ids": completion_ids})["logprobs"]

    # -- weights ------------------------------------------------------------------------------

    def load_weights(self, model: Weights) -> None:
        """Send the trainer's current weights to the server (module, state dict or pairs)."""
        if self.cfg.weight_transfer == "nccl":
            answer = self._send_nccl(model)
        else:
            answer = {}
            for blob, final in _with_last(to_blobs(named_weights(model), self.cfg.http_chunk_mb << 20)):
                answer = self._post(f"/weights/chunk?final={int(final)}", data=blob, error=WeightSyncError)
        expected = self.weights_version + 1
        if answer.get("weights_version") != expected:
            raise WeightSyncError(f"the rollout server at {self.url} reports weight update {answer.get('weights_version')}, "
                                  f"expected {expected}: it restarted or another trainer sent it weights")
        self.weights_version = expected
        self._source = model if reiterable(model) else None

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
        return self._get("/health")

    # -- sleep / wake ---------------------------------------------------------------------------

    def sleep(self) -> None:
        """Ask the server to free its GPU memory (only with ``rollout.vllm.sleep_level`` > 0)."""
        if self.capabilities.can_sleep and not self._asleep:
            self._post("/sleep", {})
            self._asleep = True

    def wake(self) -> None:
        """Wake the server and send the last weights again (its restored weights may be stale)."""
        if not self._asleep:
            return
        self._post("/wake", {})
        self._asleep = False
        if self._source is not None:
            self.load_weights(self._source)

    @property
    def asleep(self) -> bool:
        return self._asleep

    # -- HTTP ---------------------------------------------------------------------------------

    def _wait_ready(self, wait_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return self._get("/health")
            except (urllib.error.URLError, ConnectionError) as e:
                if time.monotonic() > deadline:
                    raise UserError(f"no rollout server answers at {self.url} ({e}); start one with "
                                    "`rlvr rollout serve --model MODEL` and set rollout.vllm.server_url") from e
                time.sleep(1.0)

    def _get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + path, timeout=self.cfg.request_timeout_s) as r:
            return json.loads(r.read())

    def _post(self, path: str, payload: dict[str, Any] | None = None, *, data: bytes | None = None,
              error: type[Exception] = ServerError) -> dict[str, Any]:
        body = data if data is not None else json.dumps(payload).encode()
        kind = "application/octet-stream" if data is not None else "application/json"
        req = urllib.request.Request(self.url + path, data=body, headers={"Content-Type": kind}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.cfg.request_timeout_s) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("error", str(e))
            except ValueError:
                message = str(e)
            raise error(f"rollout server {path}: {message}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:  # the server is gone or hangs
            reason = getattr(e, "reason", e)
            raise ServerError(f"rollout engine vllm_server at {self.url} failed on {path}: {reason} "
                              "(did the server stop? restart `rlvr rollout serve`, then resume the run with --resume)") from None


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
        self.engine._post("/weights/nccl/init", {"init_info": init_info}, error=WeightSyncError)

    def start_weight_update(self) -> None:
        self.engine._post("/weights/nccl/start", {}, error=WeightSyncError)

    def update_weights(self, update_info: Any) -> None:
        self.engine._post("/weights/nccl/update", {"update_info": update_info}, error=WeightSyncError)

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.engine._post("/weights/nccl/finish", {}, error=WeightSyncError)


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

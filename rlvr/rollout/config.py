"""Settings of the rollout engine and of how groups are sampled (`rollout.*` in a training config)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from rlvr.config import help_field


@dataclass
class VLLMConfig:
    """vLLM engine settings (`rollout.vllm.*`), read when rollout.engine is vllm or vllm_server.

    The engine always reports log-probs of the distribution it sampled from (vLLM's
    ``logprobs_mode=processed_logprobs``: after temperature and top-k/top-p), the distribution
    importance ratios need; `rlvr.algos.correction.truncated_logprobs` gives the trainer's side.
    """

    dtype: str = help_field("auto", "Engine dtype: auto (the checkpoint's), float32, bfloat16, float16")
    max_model_len: int = help_field(0, "Longest prompt + completion in tokens (0 = the model's maximum)", ge=0)
    tensor_parallel_size: int = help_field(
        1, "GPUs per engine. Colocated (engine=vllm): run under torchrun; each group of this many ranks shares one engine", gt=0)
    gpu_memory_utilization: float = help_field(0.3, "Share of each GPU's memory the engine may take (weights + KV cache); the rest is the trainer's", gt=0, le=1)
    kv_cache_gb: int = help_field(1, "KV-cache size in GiB on CPU (VLLM_CPU_KVCACHE_SPACE); unused on GPUs", gt=0)
    prefix_caching: bool = help_field(True, "Reuse the KV cache of shared prompt prefixes (the n samples of a prompt share it); cleared after every weight update")
    enforce_eager: bool = help_field(True, "Skip graph capture and compilation: starts in seconds, decodes slower (set false for long GPU runs)")
    sleep_level: Literal[0, 1, 2] = help_field(
        0, "Free the engine's memory between generations: 0 off, 1 offload weights to CPU and drop the KV cache, "
           "2 drop both; the trainer's weights are pushed again at every wake-up (GPU builds only)")
    server_url: str = help_field("http://127.0.0.1:8000", "engine=vllm_server: address of `rlvr rollout serve` (one server; "
                                                          "several: server_urls)")
    server_urls: list[str] = help_field(
        [], "engine=vllm_server: addresses of several `rlvr rollout serve` (replaces server_url): generation requests go to the "
            "server with the least outstanding work, every weight push goes to every server and the sync probe proves each; a "
            "server that fails mid-run has its requests re-sent to the others (rollout/servers_alive) and gets the current "
            "weights before it serves again. Token: $RLVR_ROLLOUT_TOKEN")
    prompts_per_request: int = help_field(
        0, "engine=vllm_server: cut each generate call into requests of this many prompts, sent to the servers at once "
           "(0 = one request per call). Each request is seeded from the call's seed and its place in the call, so the samples "
           "do not depend on how many servers answer", ge=0)
    server_wait_s: float = help_field(120.0, "engine=vllm_server: how long the trainer waits at start for every server to answer "
                                             "(checked before the model loads)", gt=0)
    weight_transfer: Literal["http", "nccl"] = help_field(
        "http", "engine=vllm_server: how weights reach the server: http (safetensors in request bodies; any machine, CPU too) "
                "or nccl (a broadcast from the trainer's GPU to the server's GPUs)")
    http_chunk_mb: int = help_field(512, "weight_transfer=http: largest request body in MiB (a model is sent in chunks)", gt=0)
    nccl_address: str = help_field("127.0.0.1", "weight_transfer=nccl: address of the trainer machine, as the server reaches it")
    nccl_port: int = help_field(29551, "weight_transfer=nccl: TCP port of the rendezvous on the trainer machine", ge=1, le=65535)
    request_timeout_s: float = help_field(600.0, "engine=vllm_server: timeout of one request in seconds", gt=0, le=86400)

    def __post_init__(self) -> None:
        from rlvr.serve.client import normalize_urls  # the servers' own check (a ValueError), here when the config is read

        normalize_urls(self.server_url, "rollout.vllm.server_url")
        if self.server_urls:
            normalize_urls(self.server_urls, "rollout.vllm.server_urls")


@dataclass
class HFEngineConfig:
    """Settings of the Hugging Face engine (`rollout.hf.*`), read when rollout.engine is hf."""

    decode: Literal["auto", "kv", "static", "cuda_graph", "compiled", "generate", "continuous"] = help_field(
        "auto", "Decoder (rlvr.rollout.decoding): auto (on a GPU the fastest, measured on the run's first prompts: "
                "cuda_graph unless another is 15% faster; on a CPU kv, probed, not timed; the choice is logged), kv (rlvr's compacting loop: "
                "finished rows leave the batch; fast on a CPU), static (fixed shapes, bookkeeping on the device, the host every "
                "sync_every tokens), cuda_graph (static with its step replayed as a CUDA graph; CUDA only), compiled (static "
                "through torch.compile: long start-up), generate (Hugging Face generate) or continuous (transformers' "
                "generate_batch: its scheduler is built on every call; never chosen by auto). rlvr's decoders pass a start-up probe first (else one warning and generate); sharded models "
                "always use generate")
    sync_every: int = help_field(8, "static, cuda_graph, compiled: tokens between two looks of the host at a decoding batch "
                                    "(whether every row finished; stop strings): fewer looks, fewer GPU stalls, up to this many "
                                    "tokens decoded past the end", gt=0)
    max_batch_sequences: int = help_field(256, "Sequences per generate call (memory bound)", gt=0)


ENGINE_SECTIONS = ("hf", "vllm")  # sections of RolloutConfig that belong to one engine (rlvr.rollout.engines.EngineSpec.settings)


@dataclass
class SyncProbeConfig:
    """The check, after every weight sync and wake-up, that the engine generates with the trainer's weights."""

    completions: int = help_field(4, "Fixed probe sequences scored by the engine and by the trainer", gt=0)
    max_gap: float = help_field(
        0.05, "Largest allowed mean |engine - trainer| log-prob over the probe's tokens; above it the run stops "
              "(float32 on both sides measured 5e-7 on CPU; a lower-precision engine needs its gap measured first)", gt=0)


@dataclass
class AsyncConfig:
    """Asynchronous generation (`rollout.async.*`, `rlvr.rollout.asynchronous`): a generation worker in
    its own process (engine hf: rlvr's decoders on a private copy of the weights; vllm_server: the
    rollout server) fills a bounded queue of verified groups while the trainer trains, and takes the
    policy's weights after every training step."""

    max_staleness: int = help_field(
        0, "k: no sample generated by a policy more than k training steps older than the one it trains is trained on. "
           "0: synchronous (generation, then training: every earlier run bit for bit). k >= 1: the generation worker runs up to k "
           "batches ahead of the trainer (batch n is sampled by the policy after step n-1-k; deterministic, so runs and resumes "
           "reproduce); each sample carries the policy version of each token", ge=0)
    partial: bool = help_field(
        False, "Partial rollouts: a generation longer than partial_tokens is cut, queued and continued after the next weight push "
               "(its tokens marked with their versions; the worker runs one batch ahead and a generation spans at most "
               "max_staleness batches, the last one unbounded). Needs max_staleness >= 2")
    partial_tokens: int = help_field(
        0, "partial: tokens a generation may decode per batch before it is cut (0 = rollout.max_new_tokens / max_staleness, rounded up)", ge=0)
    timeout_s: float = help_field(
        600.0, "Longest wait without progress: the trainer waiting for a batch (the run stops naming the generation side as stuck) "
               "or the generation worker waiting for weights (a warning naming the trainer)", gt=0)
    restarts: int = help_field(
        1, "Times a generation worker that dies is started again (its batch is regenerated, deterministically); past them the run "
           "stops naming the worker and keeps its last checkpoint", ge=0)
    worker_cpus: list[int] = help_field(
        [], "CPU cores the generation worker process is pinned to (os.sched_setaffinity; [] = not pinned), among those this process "
            "may use (os.sched_getaffinity); its torch threads = their number. Pin the trainer apart with taskset "
            "(scripts/bench_async.py does both)")

    def __post_init__(self) -> None:
        # settings that cannot work whatever the model: refused while the config is read, before anything loads
        k = self.max_staleness
        if self.partial and k < 2:
            raise ValueError(f"rollout.async.partial=true with rollout.async.max_staleness={k}: a generation continued after one "
                             "weight push is 2 versions old when it is trained; set rollout.async.max_staleness >= 2")
        if k >= 1 and self.worker_cpus:
            allowed = usable_cores()
            outside = [c for c in self.worker_cpus if c not in allowed]
            if outside:
                raise ValueError(f"rollout.async.worker_cpus={list(self.worker_cpus)}: this process may not use core {outside[0]} "
                                 f"(it may use cores {format_cores(allowed)}: its affinity, os.sched_getaffinity, within its cpuset); "
                                 "choose among those")


def usable_cores() -> set[int]:
    """The cores a process started from this one may be pinned to: this process's affinity, and the
    cores it may widen it to. A mask set by ``taskset`` can be widened (the trainer pinned to core 0
    may put its worker on core 1); a container's cpuset cannot. Probed in a throwaway thread (on
    Linux an affinity is a thread's own), so this process keeps its own."""
    if not hasattr(os, "sched_getaffinity"):
        return set(range(os.cpu_count() or 1))
    found = set(os.sched_getaffinity(0))
    others = [c for c in range(os.cpu_count() or 1) if c not in found]

    def probe() -> None:
        for core in others:
            try:
                os.sched_setaffinity(0, {core})
                found.add(core)
            except OSError:  # outside the cpuset
                pass

    if others:
        thread = threading.Thread(target=probe, name="rlvr-core-probe", daemon=True)
        thread.start()
        thread.join()
    return found


def format_cores(cores: set[int]) -> str:
    """``{0, 1, 2, 5}`` as ``0-2, 5``."""
    ranges: list[list[int]] = []
    for c in sorted(cores):
        if ranges and c == ranges[-1][1] + 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


ASYNC_ENGINES = ("hf", "vllm_server")  # engines a generation worker can run: hf in a process of its own, or the rollout server


@dataclass
class RolloutConfig:
    """Generation of the groups."""

    RENAMED: ClassVar[dict[str, str]] = {"hf_decode": "hf.decode", "max_batch_sequences": "hf.max_batch_sequences"}

    engine: str = help_field(
        "hf", "Rollout engine, any registered name: hf (the trainer's Hugging Face model), vllm (vLLM in the training process), "
              "vllm_server (vLLM behind `rlvr rollout serve`, on other GPUs or another machine), or one a package registers "
              "(rlvr.engines entry points); each reads its own section, rollout.hf or rollout.vllm")
    prompts_per_step: int = help_field(32, "Prompts per training step (per process)", gt=0)
    group_size: int = help_field(8, "Completions per prompt (G)", gt=0)
    temperature: float = help_field(1.0, "Sampling temperature", gt=0)
    top_p: float = help_field(1.0, "Nucleus sampling mass", gt=0, le=1)
    top_k: int = help_field(0, "Top-k sampling (0 = off)", ge=0)
    max_new_tokens: int = help_field(128, "Longest completion in tokens", gt=0, le=2**20)
    chunk_prompts: int = help_field(16, "Prompts per generate call; verification of one chunk overlaps generation of the next", gt=0)
    overlap: bool = help_field(False, "Generate the next batch while training on this one (one step off-policy: the batch was sampled by the "
                                      "weights before the last update and the importance ratio is taken against the engine's log-probs). "
                                      "One process; set threads=1 so generation and training each get a core")
    hf: HFEngineConfig = field(default_factory=HFEngineConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    probe: SyncProbeConfig = field(default_factory=SyncProbeConfig)
    async_: AsyncConfig = field(default_factory=AsyncConfig, metadata={"key": "async"})  # `async` is a Python keyword

    def __post_init__(self) -> None:
        # asynchronous settings that contradict the rest of rollout: refused while the config is read, before anything loads
        k = self.async_.max_staleness
        if k < 1:
            return
        where = f"rollout.async.max_staleness={k}"
        if self.overlap:
            raise ValueError(f"{where} and rollout.overlap=true both generate ahead of training: rollout.async replaces overlap "
                             "(max_staleness=1 is its one-step-ahead schedule, in a worker process); drop rollout.overlap")
        if self.engine not in ASYNC_ENGINES:
            raise ValueError(f"{where} with rollout.engine={self.engine}: the generation worker runs {' or '.join(ASYNC_ENGINES)} "
                             "(hf in a process of its own; vllm_server, `rlvr rollout serve` on other GPUs); colocated vllm shares the "
                             "trainer's GPU and process")
        if self.engine == "vllm_server" and self.vllm.weight_transfer != "http":
            raise ValueError(f"{where} with rollout.vllm.weight_transfer={self.vllm.weight_transfer}: the generation side pushes the "
                             "versions it needs over http; set rollout.vllm.weight_transfer=http")

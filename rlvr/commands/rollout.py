"""`rlvr rollout serve`: a rollout server (vLLM, or rlvr's own Hugging Face engine) for trainers with
rollout.engine=vllm_server."""

from __future__ import annotations

import argparse

from rlvr.rollout.engines.serve_requests import DEFAULT_MAX_N, DEFAULT_MAX_NEW_TOKENS  # light: no torch


SERVE_ENGINES = ("vllm", "hf")
"""What `rlvr rollout serve --engine` takes."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rollout", help="rollout engines: serve generation for remote trainers (rollout.engine=vllm_server)")
    s = p.add_subparsers(dest="rollout_command", metavar="ACTION", required=True)
    serve = s.add_parser("serve", help="serve generation, scoring and weight updates over HTTP (vLLM, or rlvr's own engine with --engine hf)",
                         description="Key=value settings are the trainer's rollout.* keys, e.g. vllm.tensor_parallel_size=2 "
                                     "vllm.weight_transfer=nccl vllm.sleep_level=1, or hf.decode=kv for --engine hf "
                                     "(see `rlvr train --show-config`).")
    serve.add_argument("--model", required=True, help="model the engine starts from: a checkpoint directory, a .gguf file, a built-in name (rlvr models list) or a Hugging Face id")
    serve.add_argument("--engine", default="vllm", choices=SERVE_ENGINES,
                       help="vllm (default; needs the vllm package) or hf (rlvr's own decoders on CPU or GPU, same API)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; another address needs a token)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    serve.add_argument("--token", default=None, help="require 'Authorization: Bearer TOKEN' (default $RLVR_ROLLOUT_TOKEN; "
                                                     "without one the server listens on loopback only)")
    serve.add_argument("--threads", type=int, default=0, help="torch CPU threads of the engine (0 = torch's default); several "
                                                               "servers on one machine's CPUs: give each its share (--engine hf)")
    serve.add_argument("--seed", type=int, default=0, help="seed of the engine's sampler (trainers seed every call themselves)")
    serve.add_argument("--device", default="auto", help="auto (default: the GPUs torch sees; tensor parallelism takes the first "
                                                         "vllm.tensor_parallel_size of them), cpu (a CPU build of vLLM, or --engine hf) "
                                                         "or cuda:N (that GPU only)")
    serve.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS,
                       help=f"longest completion a request may ask (default {DEFAULT_MAX_NEW_TOKENS}); prompt + max_new_tokens "
                            "must also fit the model's context; past either, HTTP 400")
    serve.add_argument("--max-n", type=int, default=DEFAULT_MAX_N,
                       help=f"most completions per prompt a request may ask (default {DEFAULT_MAX_N}); past it, HTTP 400")
    serve.add_argument("settings", nargs="*", metavar="KEY=VALUE", help="rollout settings, e.g. vllm.dtype=bfloat16 or hf.decode=kv")
    serve.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    import os

    from rlvr import UserError
    from rlvr.config import load_config
    from rlvr.models.paths import resolve_model
    from rlvr.rollout.config import RolloutConfig
    from rlvr.rollout.engines.serve import TOKEN_VARIABLE, serve

    cfg = load_config(RolloutConfig, None, args.settings)
    from rlvr.eval.settings import MAX_THREADS

    if not 0 <= args.threads <= MAX_THREADS:
        raise UserError(f"--threads must be in 0..{MAX_THREADS}, got {args.threads}")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    device = args.device
    if args.engine == "vllm":
        _choose_gpus(device)
        device = "auto"
    token = args.token or os.environ.get(TOKEN_VARIABLE) or None
    serve(resolve_model(args.model), cfg, engine=args.engine, host=args.host, port=args.port, seed=args.seed, device=device, token=token,
          max_new_tokens=args.max_new_tokens, max_n=args.max_n)
    return 0


def _choose_gpus(device: str) -> None:
    """The device rule for the server (`rlvr.models.device`): ``cuda:N`` becomes CUDA_VISIBLE_DEVICES=N for
    vLLM, set before it (or torch's CUDA) starts in this process; CUDA asked for where torch sees none
    is refused in one line."""
    import os

    from rlvr.models.device import resolve_device

    resolve_device(device, "--device")
    text = device.strip().lower()
    if text.startswith("cuda:"):
        os.environ["CUDA_VISIBLE_DEVICES"] = text.removeprefix("cuda:")

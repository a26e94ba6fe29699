"""`rlvr rollout serve`: a vLLM rollout server for trainers with rollout.engine=vllm_server."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rollout", help="rollout engines: serve vLLM for remote trainers (rollout.engine=vllm_server)")
    s = p.add_subparsers(dest="rollout_command", metavar="ACTION", required=True)
    serve = s.add_parser("serve", help="serve generation, scoring and weight updates over HTTP (needs the vllm package)",
                         description="Key=value settings are the trainer's rollout.* keys, e.g. vllm.tensor_parallel_size=2 "
                                     "vllm.weight_transfer=nccl vllm.sleep_level=1 (see `rlvr train --show-config`).")
    serve.add_argument("--model", required=True, help="model the engine starts from: a checkpoint directory, a .gguf file, a built-in name (rlvr models list) or a Hugging Face id")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; the server trusts its clients)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    serve.add_argument("--seed", type=int, default=0, help="seed of the engine's sampler")
    serve.add_argument("--device", default="auto", help="auto (default: the GPUs torch sees; tensor parallelism takes the first "
                                                         "vllm.tensor_parallel_size of them), cpu (a CPU build of vLLM) or cuda:N (that GPU only)")
    serve.add_argument("settings", nargs="*", metavar="KEY=VALUE", help="rollout settings, e.g. vllm.dtype=bfloat16")
    serve.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    import importlib.util

    from rlvr import UserError
    from rlvr.config import load_config
    from rlvr.rollout.config import RolloutConfig

    cfg = load_config(RolloutConfig, None, args.settings)
    _choose_gpus(args.device)
    if importlib.util.find_spec("vllm") is None:
        raise UserError("`rlvr rollout serve` needs the vllm package: scripts/setup_vllm_env.sh on CPUs, pip install -e '.[gpu]' on GPUs")
    from rlvr.rollout.engines.serve import serve

    from rlvr.models.paths import resolve_model

    serve(resolve_model(args.model), cfg.vllm, host=args.host, port=args.port, seed=args.seed)
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

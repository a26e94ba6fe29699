"""The one device rule for everything that loads a model: training, ``rlvr eval``, ``rlvr pairs build``,
``rlvr rollout serve``, the learned scorers and the benchmarks.

``device`` is ``auto`` (the accelerator when torch sees one, else the CPU), ``cpu``, ``cuda`` (the
current CUDA device) or ``cuda:N``. A setting that cannot be honoured — CUDA asked for where torch
sees none, a device index that does not exist, a model whose weights do not fit in the free GPU
memory — is refused in one line before anything is loaded or written (`resolve_device`,
`check_fits`).

Inference precision (``dtype`` of ``rlvr eval`` and ``rlvr pairs build``): ``auto`` is the
checkpoint's own dtype on CUDA (usually bfloat16; a float32 checkpoint stays float32) and float32
on a CPU (where half precisions are emulated and slower). Training precision is a training setting
(``model.dtype``, ``model.precision``), not this rule's.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import torch

from rlvr import UserError
from rlvr.models.device_spec import parse_device_spec
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BYTES_PER_DTYPE = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
                   "F8_E4M3": 1, "F8_E5M2": 1}
TRAINING_BYTES_PER_PARAMETER = 16
"""Full fine-tuning in float32 with AdamW: weights, gradients and two moment estimates, 4 bytes each."""


def resolve_device(spec: str, what: str = "device") -> torch.device:
    """The device ``spec`` names (module docstring); `UserError` naming ``what`` when it cannot be used."""
    match = parse_device_spec(spec, what)
    text = match.group(0)
    if text == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    if text == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        build = "a CPU build of torch" if torch.version.cuda is None else f"torch built for CUDA {torch.version.cuda}, but no GPU is visible"
        raise UserError(f"{what}={spec}: CUDA is not available here ({build}): use {what}=cpu or {what}=auto")
    count = torch.cuda.device_count()
    index = int(match.group(1)) if match.group(1) is not None else torch.cuda.current_device()
    if index >= count:
        raise UserError(f"{what}={spec}: this machine has {count} CUDA device{'s' if count != 1 else ''} "
                        f"(cuda:0{f' to cuda:{count - 1}' if count > 1 else ''})")
    return torch.device("cuda", index)


def checkpoint_dtype(folder: str | Path) -> str | None:
    """The dtype a Hugging Face checkpoint was saved in (``config.json``: ``dtype`` or the older
    ``torch_dtype``), as a name of `DTYPES`, or None when it does not say."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("dtype") or config.get("torch_dtype")
    return value if value in DTYPES else None


def inference_dtype(dtype: str, device: torch.device, folder: str | Path | None = None) -> str:
    """``dtype`` for inference, with ``auto`` resolved: the checkpoint's own on CUDA (float32 if it
    does not say), float32 on a CPU."""
    if dtype != "auto":
        if dtype not in DTYPES:
            raise UserError(f"dtype={dtype!r}: must be auto or one of {', '.join(DTYPES)}")
        return dtype
    if device.type != "cuda":
        return "float32"
    return (checkpoint_dtype(folder) if folder is not None else None) or "float32"


def parameter_count(folder: str | Path) -> int | None:
    """Parameters of the checkpoint in ``folder``, read from its safetensors headers (no weights
    loaded), or None when it has none."""
    total, found = 0, False
    for path in Path(folder).glob("*.safetensors"):
        try:
            with path.open("rb") as f:
                size = struct.unpack("<Q", f.read(8))[0]
                header = json.loads(f.read(size))
        except (OSError, ValueError, struct.error):
            return None
        for name, entry in header.items():
            if name == "__metadata__" or not isinstance(entry, dict):
                continue
            count = 1
            for dim in entry.get("shape", []):
                count *= int(dim)
            total += count
            found = True
    return total if found else None


def free_memory(device: torch.device) -> tuple[int, int] | None:
    """``(free, total)`` bytes of a CUDA device (None on a CPU)."""
    if device.type != "cuda":
        return None
    return torch.cuda.mem_get_info(device)


def check_fits(folder: str | Path, device: torch.device, dtype: str, *, training: bool = False, what: str = "model") -> str | None:
    """Refuse (`UserError`, one line) a model whose weights in ``dtype`` exceed the free memory of a
    CUDA ``device``. With ``training``, return a warning when full fine-tuning (weights, gradients,
    AdamW state: `TRAINING_BYTES_PER_PARAMETER`) will not fit, naming what to change; None otherwise
    (and always on a CPU, or for a checkpoint whose size cannot be read)."""
    memory = free_memory(device)
    count = parameter_count(folder) if memory is not None else None
    if memory is None or count is None:
        return None
    free, total = memory
    weights = count * DTYPES[dtype].itemsize
    gib = 1 << 30
    if weights > free:
        raise UserError(f"{what} {folder} needs {weights / gib:.1f} GiB for its {count / 1e9:.2f}B parameters in {dtype}, more than "
                        f"the {free / gib:.1f} GiB free on {device} (of {total / gib:.1f} GiB): use a smaller model, dtype=bfloat16, "
                        "or free the GPU")
    if training and count * TRAINING_BYTES_PER_PARAMETER > free:
        return (f"{what} {folder}: full fine-tuning of {count / 1e9:.2f}B parameters needs about "
                f"{count * TRAINING_BYTES_PER_PARAMETER / gib:.1f} GiB (weights, gradients, AdamW state) and {device} has "
                f"{free / gib:.1f} GiB free: expect an out-of-memory error; model.lora.r=16 trains adapters only")
    return None


def describe_device(device: torch.device) -> dict[str, Any]:
    """What a report records about where a model ran."""
    out: dict[str, Any] = {"device": str(device), "torch": torch.__version__}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out |= {"name": props.name, "memory_bytes": props.total_memory, "capability": f"{props.major}.{props.minor}",
                "cuda": torch.version.cuda}
    else:
        out["threads"] = torch.get_num_threads()
    return out


OOM_HINT = ("CUDA ran out of memory: lower update.micro_batch_size (training), rollout.hf.max_batch_sequences or "
            "rollout.chunk_prompts (generation), or rollout.vllm.gpu_memory_utilization (a colocated vLLM engine); "
            "the last checkpoint is kept (resume with --resume)")
"""What to say when CUDA runs out of memory in generation or training."""


def is_out_of_memory(error: BaseException) -> bool:
    return isinstance(error, torch.OutOfMemoryError) or "CUDA out of memory" in str(error)

"""Counting what would stall a GPU, on any device: the operations that make the host wait for the
device (reading a value back, or an operation whose output size depends on the data).

On a GPU, kernels are queued and the host runs ahead; each of these makes it wait until the queue
drains, which for a small model's decode step costs more than the step's arithmetic. They are counted
at two levels, so that a run on the CPU (where none of them stalls anything) measures what the same
code would do on a GPU:

- tensor methods called from Python that hand a value to the host: ``item``, ``tolist``,
  ``__bool__`` (``if tensor:``), ``__float__``, ``__int__``, ``__index__``, ``numpy``, and ``cpu``
  (a device-to-host copy; on a CPU the copy this mode makes stands for it, and values read from
  it afterwards are host values, not counted again);
- operators whose output shape depends on the values: ``nonzero``, ``masked_select``, ``unique``,
  indexing with a boolean mask, ``repeat_interleave`` by a tensor.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from typing import Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

HOST_READS = frozenset({"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy"})
DATA_DEPENDENT = ("nonzero", "masked_select", "unique", "_unique", "_local_scalar_dense")


class _HostReads(TorchFunctionMode):
    def __init__(self, counts: Counter):
        super().__init__()
        self.counts = counts
        self.host: dict[int, torch.Tensor] = {}  # copies made by a counted cpu(), by id (held, so ids stay theirs): reading them is free

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        this = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if name == "cpu" and this is not None and id(this) not in self.host:
            self.counts["cpu"] += 1
            out = func(*args, **kwargs)
            out = out.clone() if out is this else out  # on a CPU cpu() returns the tensor itself
            self.host[id(out)] = out
            return out
        if name in HOST_READS and this is not None and id(this) not in self.host:
            self.counts[name] += 1
        return func(*args, **kwargs)


class _DataDependent(TorchDispatchMode):
    def __init__(self, counts: Counter):
        super().__init__()
        self.counts = counts

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.__name__.split(".")[0]
        if name in DATA_DEPENDENT:
            self.counts[name] += 1
        elif name in ("index", "index_put", "index_put_") and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else []) if i is not None):
            self.counts[f"{name}[bool mask]"] += 1
        elif name == "repeat_interleave" and args and isinstance(args[0], torch.Tensor) and len(args) > 1 and isinstance(args[1], torch.Tensor):
            self.counts[name] += 1
        return func(*args, **kwargs)


@contextmanager
def count_host_syncs() -> Iterator[Counter]:
    """Count, by operation, what would make the host wait for a GPU while the block runs."""
    counts: Counter = Counter()
    with _HostReads(counts), _DataDependent(counts):
        yield counts

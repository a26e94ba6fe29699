"""Decoders: how the Hugging Face engine samples tokens from a causal LM (``rollout.hf.decode``).

- ``kv`` (`rlvr.rollout.decoding.kv`): rlvr's compacting loop, finished rows leave the batch; the
  fastest on a CPU.
- ``static``, ``cuda_graph``, ``compiled`` (`rlvr.rollout.decoding.static`): a static cache with the
  bookkeeping on the device and the host consulted every few tokens; its step replayed as a CUDA
  graph or compiled by ``torch.compile``: the fast ones on a GPU.
- ``generate`` and ``continuous`` (`rlvr.rollout.decoding.generate`): Hugging Face ``generate`` (any
  model, sharded ones included) and transformers' continuous batching.
- ``auto`` (`rlvr.rollout.decoding.choice`): the fastest of the device's candidates, measured on the
  run's own model and shapes.

Every decoder draws from the same tempered, top-k/top-p truncated distribution and returns the
log-prob of each token under it (`rlvr.rollout.decoding.base`); rlvr's own decoders pass a probe on
the model before use (`rlvr.rollout.decoding.probe`).
"""

from rlvr.rollout.decoding.base import DECODERS, Decoded, DecodeRequest, Decoder, decoder_names, make_decoder
from rlvr.rollout.decoding import generate as _generate  # noqa: F401 - registers generate, continuous
from rlvr.rollout.decoding import kv as _kv  # noqa: F401 - registers kv
from rlvr.rollout.decoding import static as _static  # noqa: F401 - registers static, cuda_graph, compiled
from rlvr.rollout.decoding.choice import DecoderChoice, choose_decoder
from rlvr.rollout.decoding.probe import probe_decoder
from rlvr.rollout.decoding.stops import StopStrings

AUTO = "auto"

__all__ = ["AUTO", "DECODERS", "Decoded", "DecodeRequest", "Decoder", "DecoderChoice", "StopStrings", "choose_decoder",
           "decoder_names", "make_decoder", "probe_decoder"]

"""Hugging Face's own decoding as rlvr decoders: ``generate`` (every model, sharded ones included) and
continuous batching (``generate_batch``, where the installed transformers has it).

Log-probs are those of the distribution each token was drawn from: for ``generate``, the raw logits
it returns, tempered and top-k/top-p truncated as its sampler does
(`rlvr.algos.correction.truncated_logprobs`); continuous batching reports them itself (the
log-softmax of the processed scores).
"""

from __future__ import annotations

import torch

from rlvr.algos.correction import truncated_logprobs
from rlvr.rollout.decoding.base import DECODERS, Decoded, DecodeRequest, Decoder
from rlvr.rollout.decoding.forward import model_device, weights_precision
from rlvr.rollout.decoding.stops import StopStrings
from rlvr.rollout.text import first_stop


def _sampling_kwargs(request: DecodeRequest) -> dict:
    if request.greedy:
        return dict(do_sample=False)
    return dict(do_sample=True, temperature=request.temperature, top_p=request.top_p, top_k=request.top_k)  # top_k 0 = off


@DECODERS.register("generate", description="Hugging Face generate (any model; the only one for sharded models)")
class GenerateDecoder(Decoder):
    """``model.generate`` on a left-padded batch.

    Attributes:
        synced: The model is sharded across processes (FSDP): every forward is a collective, so
            each process keeps stepping until all of them have finished (``synced_gpus``).
    """

    name = "generate"

    def __init__(self, synced: bool = False):
        self.synced = synced

    def decode(self, model: torch.nn.Module, request: DecodeRequest) -> Decoded:
        device = model_device(model)
        prompts = request.prompts
        width = max(len(ids) for ids in prompts)
        input_ids = torch.full((len(prompts), width), request.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):  # left padding: generation appends on the right
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids):] = 1
        stops = request.stops.fresh(width) if request.stops is not None else None
        with weights_precision(model):
            result = model.generate(
                input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), **_sampling_kwargs(request),
                max_new_tokens=request.max_new_tokens, pad_token_id=request.pad_id, eos_token_id=list(request.eos_ids) or None,
                stopping_criteria=[stops] if stops else None,
                output_logits=True, return_dict_in_generate=True, synced_gpus=self.synced,
            )
        new_tokens = result.sequences[:, width:]  # [B, steps]
        logits = torch.stack(result.logits, dim=1)  # [B, steps, V], before any processing
        # the distribution each token was drawn from: tempered, then top-k/top-p truncated and renormalised
        t, p, k = (1.0, 1.0, 0) if request.greedy else (request.temperature, request.top_p, request.top_k)
        logprobs = truncated_logprobs(logits, new_tokens, t, p, k)
        steps = new_tokens.shape[1]
        if request.eos_ids:
            is_eos = torch.isin(new_tokens, torch.tensor(list(request.eos_ids), device=new_tokens.device))
            has_eos = is_eos.any(dim=1)
            # length includes the first eos; sequences without one run to the last step
            lengths = torch.where(has_eos, is_eos.int().argmax(dim=1) + 1, torch.full_like(has_eos, steps, dtype=torch.long))
        else:
            has_eos = torch.zeros(len(prompts), dtype=torch.bool, device=new_tokens.device)
            lengths = torch.full((len(prompts),), steps, dtype=torch.long, device=new_tokens.device)
        lengths, ended, stop_strings = lengths.cpu(), has_eos.cpu(), {}
        for row, (n_tok, stop) in (stops.hits.items() if stops is not None else ()):
            if n_tok <= int(lengths[row]):
                lengths[row], ended[row], stop_strings[row] = n_tok, True, stop
        return Decoded(new_tokens.cpu(), logprobs.float().cpu(), lengths, ended, stop_strings)


@DECODERS.register("continuous", description="transformers' continuous batching (generate_batch), where installed")
class ContinuousDecoder(Decoder):
    """``model.generate_batch``: paged attention and transformers' own scheduler; stop strings cut
    the completions afterwards (generation runs on to eos or the limit). Each call builds and stops
    transformers' batching manager (12-20 s per call on a CPU for a two-layer model), so ``auto``
    does not measure it; name it (``rollout.hf.decode=continuous``) where it pays."""

    name = "continuous"
    warms_up = True

    def unsupported(self, model: torch.nn.Module) -> str | None:
        if not hasattr(model, "generate_batch"):
            return "this transformers release has no generate_batch"
        try:
            from transformers.generation.configuration_utils import ContinuousBatchingConfig  # noqa: F401
        except ImportError:
            return "this transformers release has no ContinuousBatchingConfig"
        return None

    def decode(self, model: torch.nn.Module, request: DecodeRequest) -> Decoded:
        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        config = GenerationConfig(**_sampling_kwargs(request), max_new_tokens=request.max_new_tokens, pad_token_id=request.pad_id,
                                  eos_token_id=list(request.eos_ids) or None)
        # from torch's generator: a seeded run stays reproducible; a greedy call draws none (it leaves what a run samples next)
        seed = 0 if request.greedy else int(torch.randint(0, 2**31 - 1, (1,)))
        with weights_precision(model):
            outputs = model.generate_batch([list(p) for p in request.prompts], generation_config=config,
                                           continuous_batching_config=ContinuousBatchingConfig(return_logprobs=True, seed=seed),
                                           progress_bar=False, warmup=False)
        # requests come back keyed by id; the order they were added in is the order of the prompts
        results = list(outputs.values())
        if len(results) != len(request.prompts) or any(r.error for r in results):
            errors = [r.error for r in results if r.error]
            raise RuntimeError(f"generate_batch returned {len(results)} of {len(request.prompts)} completions"
                               + (f" ({errors[0]})" if errors else ""))
        steps = max((len(r.generated_tokens) for r in results), default=0)
        tokens = torch.full((len(results), max(steps, 1)), request.pad_id, dtype=torch.long)
        logprobs = torch.zeros((len(results), max(steps, 1)))
        lengths = torch.zeros(len(results), dtype=torch.long)
        ended = torch.zeros(len(results), dtype=torch.bool)
        stop_strings: dict[int, str] = {}
        ends = set(request.eos_ids)
        for row, r in enumerate(_in_request_order(outputs)):
            ids, lps = list(r.generated_tokens), list(r.logprobs)
            n = next((i + 1 for i, t in enumerate(ids) if t in ends), len(ids))
            ended[row] = n < len(ids) or (bool(ids) and ids[n - 1] in ends)
            if request.stops is not None:
                hit = first_stop(request.stops.tokenizer, ids[:n], request.stops.stops)
                if hit is not None:
                    n, stop_strings[row] = hit
                    ended[row] = True
            tokens[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            logprobs[row, : len(lps)] = torch.tensor(lps, dtype=torch.float32)
            lengths[row] = n
        return Decoded(tokens, logprobs, lengths, ended, stop_strings)


def _in_request_order(outputs: dict) -> list:
    """generate_batch's results in the order of its inputs: ids are ``req_N`` (and ``req_N__child#k``
    for further samples of the same prompt, not used here: rlvr repeats prompts instead)."""
    def key(request_id: str) -> tuple[int, str]:
        head, _, child = request_id.partition("__")
        number = head.rsplit("_", 1)[-1]
        return (int(number) if number.isdigit() else 0, child)

    return [outputs[k] for k in sorted(outputs, key=key)]

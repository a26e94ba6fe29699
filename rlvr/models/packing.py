"""Shared-prefix packing: a micro-batch laid out so that each distinct prompt runs once and almost
no position is padding.

A GRPO batch holds every prompt ``G`` times, and right padding to the longest sequence wastes the
rest. Packed, the sequences that share a prompt become one *unit* — the prompt once, then each
completion — and units are packed into rows of about ``row_tokens`` tokens. A 4-D attention mask
lets a completion token see its unit's prompt and the earlier tokens of its own completion, and
nothing else; position ids restart for every unit and continue from the prompt into each
completion. Every token then sees exactly the context it had in its own padded row, so the
log-probs (and their gradients, which reach the shared prompt from each completion) are the padded
ones up to float rounding; ``source`` maps them back into the padded ``[B, L-1]`` target space the
losses work in.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.models.attention import takes_custom_mask

ROW_TOKENS = 128  # measured on the embedded model (CPU): 128 beat 192 and 256, whose masked attention costs more


@dataclass
class PackedLayout:
    """Where a batch's tokens sit once packed.

    Attributes:
        input_ids: ``[R, T]`` packed tokens (0 on the padding at row ends).
        position_ids: ``[R, T]`` each token's position within its own sequence.
        attention_mask: ``[R, 1, T, T]`` bool, True where the query token (dim 2) may attend to the
            key token (dim 3).
        source: ``[B, L-1]`` for target ``t`` of padded row ``b`` (predicting token ``t+1``), the
            index in the flattened ``[R*T]`` packed positions whose logits predict it (0 on the
            padded row's padding, which the completion mask drops).
    """

    input_ids: Tensor
    position_ids: Tensor
    attention_mask: Tensor
    source: Tensor


def shared_prefix_layout(input_ids: Tensor, lengths: Tensor, prompt_lens: Tensor, row_tokens: int = ROW_TOKENS) -> PackedLayout:
    """Pack right-padded sequences ``input_ids`` ``[B, L]`` (``lengths`` ``[B]`` real tokens, of
    which the first ``prompt_lens`` ``[B]`` are the prompt) into shared-prefix units and rows.

    Sequences whose prompts are the same tokens share one copy of it. A unit that would exceed
    ``row_tokens`` is split (each part gets its own copy of the prompt); rows hold at least the
    longest single sequence. Units are placed first-fit, longest first.
    """
    ids, lens, plens = input_ids.tolist(), lengths.tolist(), prompt_lens.tolist()
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for b, (row, p) in enumerate(zip(ids, plens)):
        by_prompt.setdefault(tuple(row[:p]), []).append(b)
    capacity = max(row_tokens, max(lens, default=1))

    units: list[tuple[int, list[int], int]] = []  # (prompt length, rows, tokens)
    for prompt, rows in by_prompt.items():
        members, size = [], len(prompt)
        for b in rows:
            extra = lens[b] - len(prompt)
            if members and size + extra > capacity:
                units.append((len(prompt), members, size))
                members, size = [], len(prompt)
            members.append(b)
            size += extra
        units.append((len(prompt), members, size))

    bins: list[list] = []  # [tokens used, units]
    for unit in sorted(units, key=lambda u: -u[2]):
        target = next((bn for bn in bins if bn[0] + unit[2] <= capacity), None)
        if target is None:
            target = [0, []]
            bins.append(target)
        target[0] += unit[2]
        target[1].append(unit)

    width = max(bn[0] for bn in bins)
    n_rows = len(bins)
    # filled as flat Python lists and converted once: per-sequence tensor slicing cost 5 ms a call
    size = n_rows * width
    tokens, positions = [0] * size, [0] * size
    unit_of = [-1] * size  # -1: row-end padding
    segment = [-1] * size  # 0: the unit's prompt; k: its k-th completion
    targets = max(input_ids.shape[1] - 1, 1)
    source = [[0] * targets for _ in ids]
    unit_id = 0
    for r, (_, row_units) in enumerate(bins):
        at = r * width
        for p, members, _ in row_units:
            prompt_at = at
            tokens[at: at + p] = ids[members[0]][:p]
            positions[at: at + p] = range(p)
            unit_of[at: at + p] = [unit_id] * p
            segment[at: at + p] = [0] * p
            at += p
            for k, b in enumerate(members, start=1):
                n = lens[b] - p
                tokens[at: at + n] = ids[b][p: lens[b]]
                positions[at: at + n] = range(p, p + n)
                unit_of[at: at + n] = [unit_id] * n
                segment[at: at + n] = [k] * n
                # the logits at token t predict token t+1: prompt tokens, then this completion's
                source[b][: lens[b] - 1] = [*range(prompt_at, prompt_at + p), *range(at, at + n)][: lens[b] - 1]
                at += n
            unit_id += 1
    shape = (n_rows, width)
    tokens_t = torch.tensor(tokens, dtype=input_ids.dtype).view(shape)
    positions_t = torch.tensor(positions, dtype=torch.long).view(shape)
    unit_of_t = torch.tensor(unit_of, dtype=torch.long).view(shape)
    segment_t = torch.tensor(segment, dtype=torch.long).view(shape)

    idx = torch.arange(width)
    causal = idx.unsqueeze(1) >= idx.unsqueeze(0)  # [T(query), T(key)]
    same_unit = unit_of_t.unsqueeze(2) == unit_of_t.unsqueeze(1)
    visible = (segment_t.unsqueeze(1) == 0) | (segment_t.unsqueeze(2) == segment_t.unsqueeze(1))  # the prompt, or the same sequence
    mask = (causal & same_unit & visible) | torch.eye(width, dtype=torch.bool)  # padding sees itself: no empty softmax row
    return PackedLayout(tokens_t, positions_t, mask.unsqueeze(1), torch.tensor(source, dtype=torch.long))


def supports_packing(model: torch.nn.Module) -> bool:
    """Whether ``model`` takes a custom 4-D attention mask and position ids (Hugging Face models on
    the sdpa or eager attention; flash-attention kernels ignore a 4-D mask)."""
    return takes_custom_mask(model)

"""Stop strings while decoding: which rows' generated text now contains one, and after how many tokens.

Only the newest tokens are decoded (a window long enough to hold any stop string, `stop_window`), so
the cost does not grow with the length of the completion. Decoders that look every token pass the
window ending at the newest token; decoders that look every ``k`` tokens (to stay off the host while
decoding on a GPU) pass the last ``k`` tokens and their window, and `StopStrings.scan_span` finds the
exact token that completed the stop string, as a per-token check would have.
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import PreTrainedTokenizerBase, StoppingCriteria

from rlvr.rollout.text import stop_window


class StopStrings(StoppingCriteria):
    """Ends each sequence once its generated text contains a stop string, and records where.

    A stop string found in the window ending at a token is new at that token: had it been complete a
    token earlier, the sequence would have stopped then. Also a Hugging Face ``StoppingCriteria``
    (for ``generate``), which calls it with the prompt and everything generated so far.

    Attributes:
        hits: ``{row: (tokens generated up to and including the stop string, the stop string)}``.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stops: Sequence[str], prompt_width: int = 0):
        if any(not s for s in stops):
            raise ValueError("stop strings must be non-empty")
        self.tokenizer = tokenizer
        self.stops = tuple(stops)
        self.prompt_width = prompt_width
        self.window = stop_window(stops)
        self.hits: dict[int, tuple[int, str]] = {}

    def fresh(self, prompt_width: int = 0) -> StopStrings:
        """The same stop strings with no hits recorded: each decoding call scans with its own."""
        return StopStrings(self.tokenizer, self.stops, prompt_width)

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        steps = input_ids.shape[1] - self.prompt_width
        self.scan(range(input_ids.shape[0]), input_ids[:, max(self.prompt_width, input_ids.shape[1] - self.window):], steps)
        return torch.tensor([row in self.hits for row in range(input_ids.shape[0])], dtype=torch.bool, device=input_ids.device)

    def _found(self, text: str) -> str | None:
        return next((s for s in self.stops if s in text), None)

    def scan(self, rows: Sequence[int], generated: torch.Tensor, steps: int) -> dict[int, str]:
        """Record the ``rows`` whose generated tokens ``generated`` ``[len(rows), steps]`` (or their
        last ``window`` or more) end in a stop string after ``steps`` steps; returns the new hits."""
        tails = self.tokenizer.batch_decode(generated[:, -self.window:].tolist(), skip_special_tokens=True)
        new = {}
        for row, tail in zip(rows, tails):
            if row not in self.hits:
                found = self._found(tail)
                if found is not None:
                    self.hits[row] = (steps, found)
                    new[row] = found
        return new

    def scan_span(self, rows: Sequence[int], tokens: Sequence[Sequence[int]], first: int, limits: Sequence[int]) -> dict[int, tuple[int, str]]:
        """Rows whose stop string was completed by one of the newest tokens, and by which.

        ``tokens[i]`` holds row ``rows[i]``'s generated tokens numbered ``max(1, first - window + 1)``
        through the newest (token ``j`` is the ``j``-th generated); tokens ``first`` and later are new
        since the last look. A row's tokens after ``limits[i]`` (its end of sequence) do not count.
        Records and returns ``{row: (tokens up to and including the stop string, stop)}`` for the
        earliest token that completes one: the windows a check after every token would have decoded,
        decoded in one batch.
        """
        offset = max(0, first - self.window)  # tokens[i][j] is token number offset + j + 1
        windows, owners = [], []
        for row, ids, limit in zip(rows, tokens, limits):
            if row in self.hits:
                continue
            ids = list(ids)
            for end in range(first, min(limit, offset + len(ids)) + 1):
                windows.append(ids[max(0, end - self.window - offset): end - offset])
                owners.append((row, end))
        new: dict[int, tuple[int, str]] = {}
        for (row, end), text in zip(owners, self.tokenizer.batch_decode(windows, skip_special_tokens=True)):
            found = None if row in new else self._found(text)
            if found is not None:  # windows come in token order: the first is the earliest
                self.hits[row] = new[row] = (end, found)
        return new

#!/usr/bin/env python
"""Sampled decoding on a real vocabulary with top-p, the nucleus found two ways in the same process:
by sorting every row's whole vocabulary at every token (`rlvr.algos.correction.sorted_nucleus`: the
definition, what captured and compiled steps use, and what every decoder did before 2026-11-29) and by
`nucleus_keep` (ranks the 64 most likely tokens, more only for the rows they do not cover: the kv
decoder and the trainer's log-probs).

Both decode the same chat prompts (arithmetic-v1 validation problems) with rlvr's kv decoder, the same
model, precision, batch, threads and sampling key, in alternating order, ``--repeats`` times; the
tokens must come out the same (the same kept sets give the same draws). Prints a table; ``--record
NAME`` also writes ``records/NAME.json``.

    python scripts/bench_sampler.py                        # SmolLM2-135M-Instruct (49,152 tokens), 16 prompts x 4, 64 tokens, top-p 0.9
    python scripts/bench_sampler.py --top-p 0.95 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("--model", default="smollm2-135m-instruct", help="a model folder, .gguf file or built-in name")
    p.add_argument("--prompts", type=int, default=16, help="distinct prompts (arithmetic-v1 validation problems)")
    p.add_argument("--n", type=int, default=4, help="samples per prompt")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--record", default=None, metavar="NAME", help="also write records/NAME.json (the figures the docs cite: rlvr.records)")
    args = p.parse_args(argv)
    for name in ("prompts", "n", "max_new_tokens", "repeats", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if not 0 < args.top_p < 1:
        p.error("--top-p must be in (0, 1): 1 truncates nothing, so there is nothing to compare")
    if not 0 < args.temperature < float("inf"):
        p.error("--temperature must be > 0 (and finite)")

    import torch

    import tasks
    from rlvr.algos import correction
    from rlvr.models.loading import load_model
    from rlvr.rollout.decoding.kv import decode

    from rlvr import UserError

    torch.set_num_threads(args.threads)
    task = tasks.make("arithmetic-v1")
    if args.prompts > task.size("validation"):
        p.error(f"--prompts {args.prompts}: arithmetic-v1's validation split has {task.size('validation')} problems")
    try:
        model, tok = load_model(args.model)
    except UserError as e:
        p.error(f"--model {args.model}: {e}")
    model.eval()
    vocab = model.get_output_embeddings().weight.shape[0]
    problems = task.problems("validation", limit=args.prompts)
    chats = [q.prompt if isinstance(q.prompt, list) else [{"role": "user", "content": q.prompt}] for q in problems]
    texts = [tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False) for chat in chats]
    prompts = [tok(text, add_special_tokens=False)["input_ids"] for text in texts for _ in range(args.n)]
    eos = [t for t in {tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")} if isinstance(t, int) and t >= 0]
    ranked_keep = correction.nucleus_keep
    ways = {"sort": correction.sorted_nucleus, "ranked": ranked_keep}

    def run(way: str) -> tuple[float, list[list[int]], int]:
        correction.nucleus_keep = ways[way]
        try:
            torch.manual_seed(0)  # the same sampling key for both ways
            t = time.perf_counter()
            out = decode(model, prompts, max_new_tokens=args.max_new_tokens, eos_id=eos, pad_id=tok.pad_token_id,
                         temperature=args.temperature, top_p=args.top_p)
            seconds = time.perf_counter() - t
        finally:
            correction.nucleus_keep = ranked_keep
        tokens = [out.tokens[i, : int(out.lengths[i])].tolist() for i in range(len(prompts))]
        return seconds, tokens, int(out.lengths.sum())

    times: dict[str, list[float]] = {w: [] for w in ways}
    outputs: dict[str, list[list[int]]] = {}
    generated = 0
    for r in range(args.repeats):
        for way in (ways if r % 2 == 0 else reversed(list(ways))):
            seconds, tokens, generated = run(way)
            times[way].append(seconds)
            outputs.setdefault(way, tokens)
            print(f"repeat {r + 1}: {way} {seconds:.2f} s", file=sys.stderr)
    same = outputs["sort"] == outputs["ranked"]
    sort_s, ranked_s = statistics.median(times["sort"]), statistics.median(times["ranked"])
    rows = len(prompts)
    print(f"\nkv decoder, {args.model} (vocabulary {vocab:,}), {args.prompts} prompts x {args.n}, up to {args.max_new_tokens} new tokens "
          f"({generated:,} generated), temperature {args.temperature}, top-p {args.top_p}, {args.threads} thread(s), median of {args.repeats}\n")
    print("| nucleus | seconds | tokens/s |\n|---|---:|---:|")
    for way, s in (("full sort of the vocabulary", sort_s), ("ranked (nucleus_keep)", ranked_s)):
        print(f"| {way} | {s:.2f} | {generated / s:,.0f} |")
    print(f"\n{sort_s / ranked_s:.2f}x faster; the same tokens: {'yes' if same else 'NO'} ({rows} rows)")
    if args.record:
        from rlvr.records import write_record

        command = "python scripts/bench_sampler.py " + " ".join(sys.argv[1:] if argv is None else argv)
        figures = {"sort_s": sort_s, "ranked_s": ranked_s, "speedup": sort_s / ranked_s, "same_tokens": float(same),
                   "generated_tokens": float(generated), "vocab": float(vocab)}
        print(f"wrote {write_record(args.record, command, figures)}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

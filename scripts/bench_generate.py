#!/usr/bin/env python3
"""Load on the rollout server (``rlvr rollout serve``) over loopback: ``POST /generate`` at 1 to 64 concurrent clients.

For each server (``--server NAME=ENGINE:CHECKOUT``, e.g. ``before=vllm:/path/to/old/checkout``, default
``after=vllm:.``) and each number of concurrent clients (``--clients 1,4,16,64``), every client
thread sends ``POST /generate`` for ``--seconds``: ``--prompts`` arithmetic prompts (the model's
own prompt format, as training renders them) x ``--n`` samples of at most ``--max-new-tokens``
tokens at ``--temperature``, each request with its own seed; client k sends requests k, k + c, ...
of one fixed list, so every server is asked the same. Kinds of client (``--modes``):

- **raw**: a plain keep-alive httpx client, no retry: what the server itself answers (200, 503,
  other statuses, transport failures such as resets or time-outs);
- **fresh**: the same with a new connection per request (as `f698bdd`'s own trainer client,
  urllib, did: a keep-alive client holds a one-connection-at-a-time server for itself);
- **pool**: rlvr's retrying client (`rlvr.serve.client.ServerPool`, as the trainer's
  ``vllm_server`` engine uses it): requests lost past the retries.

Every level starts on an idle server (`load_clients.settle`). Each row: completions/s and
completion tokens/s of the answers that arrived within the window, p50/p99 latency, and the counts
above. An answer is checked (``--n`` samples per prompt, a log-prob per token, at most
``--max-new-tokens``); a 200 that fails the check is counted as wrong.

Parity: every server gets the same model, sampling, requests, thread count (``--threads``:
``OMP_NUM_THREADS``, and ``--threads`` of ``--engine hf``) and rollout settings (``--setting``,
``vllm.*`` ones to vLLM servers, ``hf.*`` ones to hf servers), one server at a time on this
machine. `f698bdd`'s server is vLLM only (no ``--engine``), so a like-for-like before/after runs
both on vLLM; on CPUs that is vLLM's CPU build (``.venv-vllm``, run this script with its Python).
The servers start without a token (the old one has none; the new one then listens on loopback only).

Bounded in count and time: ``--seconds`` per level (a request in flight at the end finishes, up to
``--timeout``), loopback only. Prints a table and writes JSON (``--out``); ``--record NAME`` also
writes ``records/NAME.json``. Compare rows of one invocation (same machine, same load), not across runs.

    .venv-vllm/bin/python scripts/bench_generate.py --model /path/to/sft/final \\
        --server before=vllm:/path/to/old/checkout --server after=vllm:. --server after_hf=hf:.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import load_clients

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ENGINES = ("vllm", "hf")
MODES = ("raw", "fresh", "pool")
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
"""Set for every server unless the caller's environment sets them (vLLM's CPU build: a 1 GiB KV cache)."""


@dataclass(frozen=True)
class ServerSpec:
    """One server to load: its row name, engine and checkout."""

    name: str
    engine: str
    checkout: Path

    @classmethod
    def parse(cls, text: str) -> ServerSpec:
        name, sep, rest = text.partition("=")
        engine, sep2, checkout = rest.partition(":")
        if not (sep and sep2 and checkout):
            raise argparse.ArgumentTypeError(f"--server {text!r}: expected NAME=ENGINE:CHECKOUT, e.g. before=vllm:/path/to/old/checkout")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            raise argparse.ArgumentTypeError(f"--server {text!r}: NAME must be letters, digits, '_' or '-' (it names the record's figures)")
        if engine not in ENGINES:
            raise argparse.ArgumentTypeError(f"--server {text!r}: ENGINE must be one of {', '.join(ENGINES)}")
        path = Path(checkout).resolve()
        if not (path / "rlvr" / "cli.py").is_file():
            raise argparse.ArgumentTypeError(f"--server {text!r}: {path} is not an rlvr checkout (no rlvr/cli.py)")
        return cls(name, engine, path)


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def mode_list(text: str) -> list[str]:
    modes = text.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown mode(s) {', '.join(unknown)}: choose from {', '.join(MODES)}")
    return modes


def positive(kind: type):
    def parse(text: str):
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        return value
    return parse


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the model every server serves: a checkpoint folder or a built-in name")
    ap.add_argument("--server", action="append", type=ServerSpec.parse, default=[], metavar="NAME=ENGINE:CHECKOUT",
                    help="a server to load, in order (repeatable; default after=vllm:this checkout)")
    ap.add_argument("--clients", type=int_list, default="1,4,16,64", help="concurrent clients per level (default 1,4,16,64)")
    ap.add_argument("--seconds", type=positive(float), default=10.0, help="window of each level in seconds (default 10)")
    ap.add_argument("--modes", type=mode_list, default=",".join(MODES), help=f"kinds of client (default {','.join(MODES)})")
    ap.add_argument("--prompts", type=positive(int), default=1, help="prompts per request (default 1)")
    ap.add_argument("--n", type=positive(int), default=4, help="samples per prompt (default 4)")
    ap.add_argument("--max-new-tokens", type=positive(int), default=64, help="longest completion (default 64)")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1)")
    ap.add_argument("--timeout", type=positive(float), default=60.0, help="seconds one request may take (raw, fresh: per read; pool: per try; default 60)")
    ap.add_argument("--threads", type=positive(int), default=1, help="CPU threads of each server's engine (default 1)")
    ap.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                    help="rollout setting for the servers (repeatable; vllm.* to vLLM servers, hf.* to hf servers; "
                         "default vllm.dtype=float32)")
    ap.add_argument("--burst", type=int, default=0, help="also N requests at once on fresh connections, once per server (0: none)")
    ap.add_argument("--out", default="bench_results/generate.json", help="JSON of every row (default bench_results/generate.json)")
    ap.add_argument("--record", default=None, metavar="NAME", help="also write records/NAME.json (the figures the docs cite: rlvr.records)")
    return ap


def server_command(spec: ServerSpec, model: str, threads: int, settings: list[str]) -> list[str]:
    """`rlvr rollout serve` for ``spec``: the old CLI knows no ``--engine`` (vLLM is its only engine), so vLLM is asked by default."""
    mine = [s for s in settings if not s.startswith(tuple(f"{e}." for e in ENGINES if e != spec.engine))]
    cmd = [sys.executable, "-m", "rlvr.cli", "rollout", "serve", "--model", model, "--port", "0"]
    if spec.engine != "vllm":
        cmd += ["--engine", spec.engine, "--threads", str(threads)]
    return cmd + mine


def start(spec: ServerSpec, args: argparse.Namespace, settings: list[str]):
    env = {**SERVER_ENV, **os.environ, "PYTHONPATH": str(spec.checkout), "OMP_NUM_THREADS": str(args.threads), "PYTHONUNBUFFERED": "1"}
    env.pop("RLVR_ROLLOUT_TOKEN", None)
    return load_clients.start_server(server_command(spec, args.model, args.threads, settings), spec.checkout, env)


def request_bodies(model: str, args: argparse.Namespace, count: int = 64) -> list[bytes]:
    """``count`` requests of ``--prompts`` arithmetic prompts each, as the trainer's client sends them (seeded)."""
    from transformers import AutoTokenizer

    import tasks
    from rlvr.models.paths import resolve_model
    from rlvr.rollout.prompts import PromptConfig, resolve_style
    from rlvr.rollout.text import encode_prompt

    path = resolve_model(model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    task = tasks.make("arithmetic-v1")
    style = resolve_style(PromptConfig(), tokenizer, model)
    problems = task.problems("test", limit=count * args.prompts)
    ids = [encode_prompt(tokenizer, style.render(task.env, p)) for p in problems]
    sampling = {"temperature": args.temperature, "top_p": 1.0, "top_k": 0, "max_new_tokens": args.max_new_tokens, "stop": []}
    return [json.dumps({"prompt_ids": ids[i * args.prompts: (i + 1) * args.prompts], "n": args.n,
                        "sampling": {**sampling, "seed": i}}).encode() for i in range(count)]


def judge_for(args: argparse.Namespace):
    """Reads one answer: its completions and tokens, or None when it is not what was asked."""

    def judge(answer: dict) -> dict[str, float] | None:
        rows = answer["samples"]
        if len(rows) != args.prompts or any(len(row) != args.n for row in rows):
            return None
        samples = [s for row in rows for s in row]
        if any(not 0 < len(s["token_ids"]) <= args.max_new_tokens or len(s["logprobs"]) != len(s["token_ids"]) for s in samples):
            return None
        return {"completions": len(samples), "tokens": sum(len(s["token_ids"]) for s in samples)}

    return judge


def level(url: str, mode: str, clients: int, args: argparse.Namespace, bodies: list[bytes]) -> dict:
    judge = judge_for(args)
    if mode == "pool":
        return load_clients.pool_level(url, "/generate", clients, args.seconds, bodies, judge, timeout_s=args.timeout, wrong="wrong")
    return load_clients.raw_level(url, "/generate", clients, args.seconds, bodies, timeout_s=args.timeout, fresh=mode == "fresh", judge=judge)


def describe(row: dict) -> str:
    head = (f"{row['server']:9} {row['client']:5} {row['clients']:3d} clients: {row.get('completions_per_s', 0.0):7.1f} completions/s "
            f"{row.get('tokens_per_s', 0.0):8.1f} tokens/s  p50 {row['p50_ms']:8.1f} ms  p99 {row['p99_ms']:8.1f} ms  ")
    if row["client"] == "pool":
        return head + f"ok {row['ok']} lost {row['lost']} wrong {row['wrong']} retries {row['retries']} {row['lost_reasons'][:1]}"
    return head + str(row["statuses"])


def figures_of(rows: list[dict]) -> dict[str, float]:
    """The record's figures, named ``SERVER_CLIENT_cN_WHAT`` (NaN, no answer at all, left out)."""
    figures: dict[str, float] = {}
    for row in rows:
        prefix = f"{row['server']}_{row['client']}_c{row['clients']}"
        if not row["client"].startswith("burst"):
            figures |= {f"{prefix}_{k}": row.get(k, 0.0) for k in ("completions_per_s", "tokens_per_s", "p50_ms", "p99_ms")}
        if row["client"] == "pool":
            figures |= {f"{prefix}_{k}": row[k] for k in ("ok", "lost", "wrong", "retries")}
        else:
            statuses = row["statuses"]
            figures |= {f"{prefix}_200": statuses.get("200", 0), f"{prefix}_503": statuses.get("503", 0),
                        f"{prefix}_resets": row["transport_failures"], f"{prefix}_answered": row["answered"],
                        f"{prefix}_errors": sum(v for k, v in statuses.items() if k not in ("200", "503") and not k.startswith("transport"))}
    return {k: v for k, v in figures.items() if v == v}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    servers = args.server or [ServerSpec("after", "vllm", ROOT)]
    if len({s.name for s in servers}) != len(servers):
        raise SystemExit("--server: each NAME once (the names tell the rows apart)")
    settings = args.setting or ["vllm.dtype=float32"]
    bodies = request_bodies(args.model, args)
    rows = []
    for spec in servers:
        proc, url = start(spec, args, settings)
        print(f"{spec.name}: {spec.engine} server of {spec.checkout} on {url}", flush=True)
        try:
            load_clients.raw_level(url, "/generate", 1, min(2.0, args.seconds), bodies, timeout_s=args.timeout)  # warm-up
            if args.burst:
                row = {"server": spec.name, "engine": spec.engine, "client": "burst",
                       **load_clients.burst(url, "/generate", args.burst, bodies, timeout_s=args.timeout)}
                rows.append(row)
                print(f"{spec.name:9} burst of {args.burst} fresh connections: {row['statuses']}", flush=True)
            for clients in args.clients:
                for mode in args.modes:
                    load_clients.settle(url, "/generate", bodies[0], timeout_s=args.timeout)
                    row = {"server": spec.name, "engine": spec.engine, "client": mode, **level(url, mode, clients, args, bodies)}
                    rows.append(row)
                    print(describe(row), flush=True)
        finally:
            load_clients.stop_server(proc)
    settings_used = {"model": args.model, "prompts": args.prompts, "n": args.n, "max_new_tokens": args.max_new_tokens,
                     "temperature": args.temperature, "threads": args.threads, "settings": settings, "seconds": args.seconds,
                     "servers": [{"name": s.name, "engine": s.engine, "checkout": str(s.checkout)} for s in servers]}
    load_clients.write_json(args.out, {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                                       **settings_used, "rows": rows})
    if args.record:
        from rlvr.records import write_record

        command = "python scripts/bench_generate.py " + " ".join(sys.argv[1:] if argv is None else argv)
        python = Path(sys.executable)  # vLLM lives in an environment of its own (.venv-vllm): say which ran
        note = (f"run with {python.parent.parent.name}/bin/python; loopback, one machine: clients and servers share its cores; "
                f"{args.prompts} prompt(s) x {args.n} samples per request, "
                f"at most {args.max_new_tokens} new tokens, temperature {args.temperature}, {args.threads} engine thread(s)")
        print(f"wrote {write_record(args.record, command, figures_of(rows), note=note)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Cluster in a box against one process: step time and reward curve (``records/cluster-box.json``, `rlvr.records`).

Runs the 6-step GRPO config of the cluster lane (tests/cluster/test_cluster_in_a_box.py) twice, with
the same global batch (8 prompts x 4 completions a step):

- **cluster**: 2 trainer processes (torchrun, FSDP2, gloo), 2 generation servers (``rlvr rollout
  serve --engine hf``), 2 environment servers (``rlvr envs serve code-v1``, sandboxed), asynchronous
  (``rollout.async.max_staleness=2``), every process on 127.0.0.1;
- **one process**: ``rlvr train code_quickstart`` as a user starts it: generation (hf engine) and
  verification (code-v1's sandbox) in the trainer's process, synchronous.

It records the median of ``time/step`` of each, each training command's wall seconds (start-up included,
the servers already up), and ``reward/mean`` of
every step of each. On a 2-core machine every process of the cluster shares the same two cores:
the figures say what the topology costs there, not what it gains on a cluster.

    python3 scripts/bench_cluster.py                          # on a quiet machine; builds the code warm-up first
    python3 scripts/bench_cluster.py --base runs/code_quickstart/sft/final --into ../main/records
    python3 scripts/bench_cluster.py --steps 2 --into /tmp/records   # a quick check that it runs
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOKEN = "bench-cluster-token-0123456789"
TASK = ["--task", "program-synthesis-v1", "--task-config",
        '{templates: ["x+{0}", "x-{0}", "x*{0}"], x_range: [0, 2], const_max: 999, table_frac: 0.7}']
GLOBAL_PROMPTS = 8


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "RLVR_ENV_TOKEN": TOKEN, **extra}


@contextmanager
def _server(cmd: list[str], ready: str) -> Iterator[str]:
    """A server process; yields the URL its first line matching ``ready`` names; killed on exit."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            line = proc.stdout.readline()
            if (not line and proc.poll() is not None) or time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(cmd[:5])} did not start")
            m = re.search(ready, line)
            if m:
                break
        yield m.group(1)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.stdout.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _common(out: Path, name: str, base: str, steps: int) -> list[str]:
    return ["code_quickstart", f"output_dir={out}", f"name={name}", f"model.name_or_path={base}", "threads=1", "device=cpu",
            "rollout.group_size=4", "rollout.max_new_tokens=32", "rollout.chunk_prompts=4", f"update.steps={steps}",
            "update.micro_batch_size=16", "optim.warmup_steps=0", "eval.every=0", "eval.at_start=false", "log.checkpoint_every=0",
            "log.progress=false", "log.tensorboard=false", "log.plot=false", "overwrite=true"]


def _train(cmd: list[str], log: Path) -> float:
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=3600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed ({code}); its output: {log}")
    return time.perf_counter() - t0


def _rows(run: Path) -> list[dict]:
    return [r for r in (json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()) if "reward/mean" in r]


def _code_base(work: Path) -> str:
    out = work / "code_sft"
    _train([sys.executable, "-m", "rlvr.cli", "sft", "sft_code_quickstart", f"output_dir={out}", "name=base", "threads=1",
            "log.progress=false", "log.tensorboard=false", "log.plot=false", "overwrite=true"], work / "code_sft.log")
    return str(out / "base" / "final")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="", help="the program-synthesis warm-up (default: build it with sft_code_quickstart)")
    ap.add_argument("--steps", type=int, default=6, help="training steps of each run (the record is of 6)")
    ap.add_argument("--into", default=str(ROOT / "records"), help="folder for cluster-box.json (default: this checkout's records/)")
    ap.add_argument("--work", default="", help="folder for the runs (default: a temporary one, removed)")
    ap.add_argument("--note", default="", help="what else ran on the machine, where it was not quiet")
    args = ap.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="rlvr-bench-cluster-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        base = args.base or _code_base(work)
        cli = [sys.executable, "-m", "rlvr.cli"]
        with ExitStack() as stack:
            gens = [stack.enter_context(_server([*cli, "rollout", "serve", "--engine", "hf", "--model", base, "--port", "0", "--device", "cpu",
                                                 "hf.decode=kv"], r"ready on (http://\S+)")) for _ in range(2)]
            envs = [stack.enter_context(_server([*cli, "envs", "serve", "code-v1", "--port", "0", *TASK], r"serving .* on (http://\S+)"))
                    for _ in range(2)]
            torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                        "--master-port", str(_free_port()), "-m", "rlvr.cli", "train"]
            cluster_s = _train([*torchrun, *_common(work, "cluster", base, args.steps), "distributed=fsdp", "rollout.engine=vllm_server",
                                f"rollout.vllm.server_urls=[{','.join(gens)}]", "rollout.vllm.prompts_per_request=2",
                                f"rollout.prompts_per_step={GLOBAL_PROMPTS // 2}", "rollout.async.max_staleness=2", "task.env=remote-v1",
                                f"task.env_kwargs={{url: [{', '.join(envs)}]}}"], work / "cluster.log")
        one_s = _train([*cli, "train", *_common(work, "one", base, args.steps), f"rollout.prompts_per_step={GLOBAL_PROMPTS}"], work / "one.log")
        figures: dict[str, float] = {"steps": args.steps, "global_prompts": GLOBAL_PROMPTS, "cluster_run_s": cluster_s, "one_run_s": one_s}
        for name in ("cluster", "one"):
            rows = _rows(work / name)
            figures[f"{name}_step_s_median"] = statistics.median(r["time/step"] for r in rows)
            for r in rows:
                figures[f"{name}_reward_step{int(r['step'])}"] = r["reward/mean"]
        from rlvr.records import write_record

        path = write_record("cluster-box", "python3 scripts/bench_cluster.py", figures, note=args.note, folder=Path(args.into))
        print(json.dumps(figures, indent=1))
        print(f"wrote {path}")
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

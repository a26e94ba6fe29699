#!/usr/bin/env python
"""rlvr's one GPU acceptance run: 562 s on one H200 (2026-11-30, ``records/gpu-check-h200.json``), offline, on a
model given by argument (default the built-in SmolLM2-135M-Instruct). Run it as ``scripts/gpu_check.sh``;
``--budget SECONDS`` fits it to a lease, ``--record NAME`` writes its figures as ``records/NAME.json``.

Phases, each in its own process, each with a time limit (a phase that fails is reported and the
others still run):

1. ``tests``: the CUDA tests (``pytest -m gpu``: every decoder against ``generate`` and the
   trainer's log-probs in float32 and bfloat16, the chunked head, the LoRA reference, a killed run
   resumed, one step of PRIME, PPO, online and offline DPO) and the engine contract on CUDA.
2. ``recipe``: ``rlvr train smollm2_arithmetic`` on the device, the model's greedy accuracy on the
   first 200 test problems before and after, and ``rlvr compare`` (target: at least +30 points in at
   most 2 minutes of training).
3. ``grpo``: ``scripts/bench_grpo.py`` rlvr beside TRL at parity, in float32 and in bf16 (target:
   rlvr's median step at most 0.5x TRL's).
4. ``rollout``: ``scripts/bench_rollout.py``, every decoder on the device in bfloat16 (target: the
   default decoder at least 2x ``generate``'s tokens/s).

Ends with one table and one JSON file (``OUT/gpu_check.json``). ``--cpu`` runs the same phases on the
CPU in a small mode (a few steps, a few problems; no targets judged), by default on a model built for
it (SmolLM2's tokenizer and chat template on a two-layer Llama of random weights): CI runs it so that
this script and the checks it runs cannot rot.

    scripts/gpu_check.sh                      # on a GPU machine, the built-in SmolLM2
    scripts/gpu_check.sh --model Qwen/Qwen2.5-0.5B-Instruct
    scripts/gpu_check.sh --cpu                # the small CPU mode
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mode:
    """How big each phase is."""

    device: str
    recipe_overrides: tuple[str, ...]
    eval_limit: int
    grpo_args: tuple[str, ...]
    rollout_args: tuple[str, ...]
    judge: bool  # whether the GPU targets mean anything here
    timeouts: dict[str, int] = field(default_factory=dict)


GPU = Mode("auto", (), 200, ("--steps", "6"),
           ("--engines", "hf,hf-cuda_graph,hf-static,hf-kv,hf-generate", "--prompts", "64", "--n", "8", "--max-new-tokens", "64",
            "--dtype", "bfloat16"),
           judge=True, timeouts={"tests": 360, "recipe": 300, "grpo": 330, "rollout": 240})  # measured on an H200: 199, 86, 146, 122 s
CPU = Mode("cpu", ("update.steps=2", "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.chunk_prompts=4",
                   "rollout.max_new_tokens=16", "update.micro_batch_size=8", "eval.every=0", "eval.at_start=false", "verify.workers=0"),
           8, ("--steps", "2", "--profile", "tiny", "--skip", "0"),
           ("--engines", "hf,hf-kv,hf-static,hf-generate", "--prompts", "4", "--n", "2", "--max-new-tokens", "8", "--repeats", "1",
            "--dtype", "float32"),
           # hang guards, not budgets: CI runs this mode at the lowest priority beside its main lane (31-36 min alone on a
           # 2-core CPU without AVX-512, 2026-11-30; 16 on one with it), and a phase started beside it gets almost no CPU until
           # the lane ends: the tests phase, started before the SFT bases, waits out the bases and the whole lane (there it ran
           # out of 1,500 s once, and the recipe out of 900); its guard is CI's own hard limit
           judge=False, timeouts={"tests": 5400, "recipe": 2400, "grpo": 2400, "rollout": 1200})

MIN_PHASE_S = 60  # with --budget, a phase is not started with less than this left

TARGETS = {"decoder_vs_generate": 2.0, "grpo_step_vs_trl": 0.5, "recipe_gain": 0.30, "recipe_train_s": 120.0}


@dataclass
class Phase:
    name: str
    ok: bool = False
    seconds: float = 0.0
    detail: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)


def run(cmd: list[str], log: Path, timeout: int, env: dict[str, str]) -> tuple[int, str]:
    """Run ``cmd`` with output to ``log``; (exit code or 124 on timeout, the output's last lines)."""
    with log.open("w") as f:
        # its own process group, so a phase stopped (or this script interrupted) takes the phase's children with it; not its
        # own session: with the kernel's autogroups (on by default) a new session is scheduled as a peer of the caller's
        # whole session, so a phase of `nice -n 19 gpu_check.sh` (CI's) would take the CPU from the lanes it must yield to
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, preexec_fn=os.setpgrp)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code = 124
            f.write(f"\n[gpu_check] timed out after {timeout} s (stopped: this phase's limit)\n")
        except BaseException:
            _kill_group(proc)
            raise
    tail = log.read_text(errors="replace").strip().splitlines()[-6:]
    return code, "\n".join(tail)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def rlvr(*argv: str) -> list[str]:
    return [sys.executable, "-m", "rlvr.cli", *argv]


def phase_tests(out: Path, model: str, mode: Mode, env: dict[str, str]) -> Phase:
    phase = Phase("tests")
    junit = out / "tests.xml"
    files = ["tests/rlvr/test_gpu.py", "tests/rlvr/test_engine_contract.py"] if mode.judge else ["tests/rlvr/test_gpu.py"]
    test_env = {**env, "RLVR_GPU_CHECK_MODEL": model, **({"RLVR_GPU_CHECK_DEVICE": "cpu"} if not mode.judge else {})}
    code, tail = run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", *files, "-rfs",
                      f"--junitxml={junit}"], out / "tests.log", mode.timeouts["tests"], test_env)
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    if junit.exists():
        suite = ElementTree.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        total, failed = int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        counts = {"passed": total - failed - int(suite.get("skipped", 0)), "failed": failed, "skipped": int(suite.get("skipped", 0))}
    phase.numbers = counts
    phase.ok = code == 0 and counts["failed"] == 0 and counts["passed"] > 0
    phase.detail = f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped" + ("" if phase.ok else f"\n{tail}")
    return phase


def phase_recipe(out: Path, model: str, mode: Mode, env: dict[str, str]) -> Phase:
    phase = Phase("recipe")
    evaluation = ("--task", "arithmetic-v1", "--split", "test", "--limit", str(mode.eval_limit), "--max-new-tokens", "48",
                  "--device", mode.device)
    steps: list[tuple[str, list[str]]] = [
        ("eval-before", rlvr("eval", "--model", model, *evaluation, "--out", str(out / "eval" / "before"))),
        ("train", rlvr("train", "smollm2_arithmetic", f"output_dir={out / 'train'}", f"model.name_or_path={model}",
                       f"device={mode.device}", "overwrite=true", "log.progress=false", *mode.recipe_overrides)),
        ("eval-after", rlvr("eval", "--model", str(out / "train" / "smollm2_arithmetic" / "final"), *evaluation,
                            "--out", str(out / "eval" / "after"))),
        ("compare", rlvr("compare", str(out / "eval" / "before"), str(out / "eval" / "after"), "--labels", "before,after", "--json")),
    ]
    deadline = time.monotonic() + mode.timeouts["recipe"]
    for name, cmd in steps:
        t0 = time.monotonic()
        code, tail = run(cmd, out / f"recipe-{name}.log", max(1, int(deadline - time.monotonic())), env)
        phase.numbers[f"{name}_s"] = round(time.monotonic() - t0, 1)
        if code != 0:
            phase.detail = f"{name} failed ({code}):\n{tail}"
            return phase
    compared = json.loads((out / "recipe-compare.log").read_text())
    diff = compared["differences"][0]
    run_dir = out / "train" / "smollm2_arithmetic"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    resources = json.loads((run_dir / "resources.json").read_text())
    phase.numbers |= {"before": compared["accuracy"]["before"], "after": compared["accuracy"]["after"], "gain": diff["diff"],
                      "gain_ci95": [diff["lo"], diff["hi"]], "problems": compared["problems"],
                      "train_steps_s": round(sum(r.get("time/step", 0.0) for r in rows), 1),
                      "decoder": (resources.get("decoder") or {}).get("name"), "device": resources["device"].get("device")}
    phase.ok = True
    phase.detail = (f"held-out {phase.numbers['before']:.3f} -> {phase.numbers['after']:.3f} ({diff['diff']:+.3f}, 95% CI "
                    f"{diff['lo']:+.3f} to {diff['hi']:+.3f}, {compared['problems']} problems); training {phase.numbers['train_s']:.0f} s "
                    f"wall, {phase.numbers['train_steps_s']:.0f} s in steps; decoder {phase.numbers['decoder']}")
    return phase


def phase_grpo(out: Path, model: str, mode: Mode, env: dict[str, str]) -> Phase:
    phase = Phase("grpo")
    deadline = time.monotonic() + mode.timeouts["grpo"]
    lines = []
    for precision in ("fp32", "bf16"):
        target = out / f"grpo-{precision}"
        code, tail = run([sys.executable, "scripts/bench_grpo.py", "--model", model, "--frameworks", "rlvr,trl", "--precision", precision,
                          "--device", mode.device, "--out", str(target), *mode.grpo_args],
                         out / f"grpo-{precision}.log", max(1, int(deadline - time.monotonic())), env)
        if code != 0:
            phase.detail = "\n".join([*lines, f"{precision} failed ({code}):\n{tail}"])
            return phase
        rows = {r["framework"]: r for r in json.loads((target / "summary.json").read_text())["rows"]}
        if "trl" not in rows:
            phase.detail = "\n".join([*lines, f"{precision}: TRL did not run (pip install -e '.[bench]')"])
            return phase
        ratio = rows["rlvr"]["median_step_s"] / rows["trl"]["median_step_s"]
        phase.numbers[precision] = {"rlvr_step_s": rows["rlvr"]["median_step_s"], "trl_step_s": rows["trl"]["median_step_s"],
                                    "ratio": ratio, "rlvr_heldout": rows["rlvr"]["heldout_after"], "trl_heldout": rows["trl"]["heldout_after"],
                                    "rlvr_gpu_mb": rows["rlvr"].get("peak_gpu_mb"), "trl_gpu_mb": rows["trl"].get("peak_gpu_mb")}
        lines.append(f"{precision}: rlvr {rows['rlvr']['median_step_s']:.2f} s vs TRL {rows['trl']['median_step_s']:.2f} s per step "
                     f"({ratio:.2f}x); held-out {rows['rlvr']['heldout_after']:.3f} / {rows['trl']['heldout_after']:.3f}")
    phase.ok, phase.detail = True, "; ".join(lines)
    return phase


def phase_rollout(out: Path, model: str, mode: Mode, env: dict[str, str]) -> Phase:
    phase = Phase("rollout")
    target = out / "rollout"
    code, tail = run([sys.executable, "scripts/bench_rollout.py", "--model", model, "--device", mode.device, "--out", str(target),
                      *mode.rollout_args], out / "rollout.log", mode.timeouts["rollout"], env)
    if code != 0:
        phase.detail = f"failed ({code}):\n{tail}"
        return phase
    rows = {r["engine"]: r for r in json.loads((target / "summary.json").read_text())["rows"]}
    generate = rows["hf-generate"]["median_tokens_per_s"]
    phase.numbers = {name: {"tokens_per_s": r["median_tokens_per_s"], "vs_generate": r["median_tokens_per_s"] / generate,
                            "decoder": r.get("decoder"), "peak_gpu_mb": r.get("peak_gpu_mb")} for name, r in rows.items()}
    phase.ok = True
    phase.detail = ", ".join(f"{name} ({v['decoder']}) {v['tokens_per_s']:,.0f} tok/s = {v['vs_generate']:.2f}x"
                             for name, v in phase.numbers.items() if name != "hf-generate") + f"; generate {generate:,.0f} tok/s"
    return phase


PHASES: dict[str, Callable[[Path, str, Mode, dict[str, str]], Phase]] = {
    "tests": phase_tests, "recipe": phase_recipe, "grpo": phase_grpo, "rollout": phase_rollout}


def judge(phases: dict[str, Phase]) -> list[tuple[str, str, str, bool | None]]:
    """(target, measured, wanted, met) for each GPU target that was measured."""
    rows: list[tuple[str, str, str, bool | None]] = []
    rollout = phases.get("rollout")
    if rollout and rollout.ok and "hf" in rollout.numbers:
        x = rollout.numbers["hf"]["vs_generate"]
        rows.append(("default decoder vs generate (tokens/s)", f"{x:.2f}x", f">= {TARGETS['decoder_vs_generate']:.0f}x",
                     x >= TARGETS["decoder_vs_generate"]))
    grpo = phases.get("grpo")
    for precision in ("fp32", "bf16"):
        if grpo and precision in grpo.numbers:
            x = grpo.numbers[precision]["ratio"]
            rows.append((f"GRPO step vs TRL ({precision})", f"{x:.2f}x", f"<= {TARGETS['grpo_step_vs_trl']}x", x <= TARGETS["grpo_step_vs_trl"]))
    recipe = phases.get("recipe")
    if recipe and recipe.ok:
        gain, seconds = recipe.numbers["gain"], recipe.numbers["train_s"]
        rows.append(("real-model recipe gain (held-out)", f"{gain:+.3f} in {seconds:.0f} s",
                     f">= +{TARGETS['recipe_gain']:.2f} in <= {TARGETS['recipe_train_s']:.0f} s",
                     gain >= TARGETS["recipe_gain"] and seconds <= TARGETS["recipe_train_s"]))
    return rows


def small_chat_model(out: Path) -> str:
    """A two-layer Llama of random weights with SmolLM2's tokenizer and chat template: every phase's
    code path (chat prompts, a 49k vocabulary, end of turn) at a cost the CPU mode can pay."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from rlvr.models.paths import resolve_model

    folder = out / "cpu-model"
    if (folder / "config.json").is_file():
        return str(folder)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def figures_of(report: dict[str, Any]) -> dict[str, float]:
    """A run's numbers by flat names (``recipe_gain``, ``grpo_bf16_ratio``, ``rollout_hf_tokens_per_s``...), as a
    measurement record holds them: every phase's seconds and numeric results; a phase that did not run has none."""
    figures: dict[str, float] = {"seconds": report["seconds"]}

    def add(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                add(f"{prefix}_{key}".replace("-", "_"), inner)
        elif isinstance(value, (list, tuple)):  # an interval: recipe_gain_ci95_0, _1
            for i, inner in enumerate(value):
                add(f"{prefix}_{i}", inner)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            figures[prefix] = value

    for name, phase in report["phases"].items():
        if phase["numbers"] or phase["ok"]:
            add(name, {"ok": int(phase["ok"]), "seconds": phase["seconds"], **phase["numbers"]})
    return figures


def recorded_command(argv: list[str]) -> str:
    """The command as a record keeps it: without ``--out`` (where the logs went changes no figure, and a record names
    no path of the measuring machine)."""
    import shlex

    kept, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "--out":
            skip = True
        elif not word.startswith("--out="):
            kept.append(word)
    return shlex.join(["scripts/gpu_check.sh", *kept])


def write_gpu_record(name: str, report: dict[str, Any], command: str, note: str = "", folder: Path | None = None,
                     at: tuple[str, bool] | None = None) -> Path:
    """``records/NAME.json`` from a run's report (`figures_of`), its machine the report's GPU and versions."""
    from rlvr.records import write_record

    info = report["machine"]
    on = {k: info[k] for k in ("cpus", "memory_gb", "cpu", "kernels", "python") if k in info}  # the measuring machine's, not this one's
    on |= {"gpu": info.get("gpu") or None, **{k: info.get(k) for k in ("torch", "cuda", "transformers", "trl")}}
    return write_record(name, command, figures_of(report), note=note, on=on, at=at, **({"folder": folder} if folder else {}))


def machine() -> dict[str, Any]:
    import torch

    from rlvr.records import machine as host

    info: dict[str, Any] = {**host(), "torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0]}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info |= {"gpu": props.name, "gpu_memory_gb": round(props.total_memory / 2**30, 1)}
    for package in ("transformers", "accelerate", "peft", "trl", "vllm"):
        try:
            info[package] = __import__(package).__version__
        except Exception:  # noqa: BLE001 - not installed, or broken: say which
            info[package] = None
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        info["commit"] = None
    return info


def main() -> int:
    started = time.monotonic()  # --budget counts from here: start-up and the small model's build included
    # no abbreviations: a record keeps the command without --out, which it must recognise
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("--model", default=None,
                   help="model: a built-in name, a folder, a .gguf file or a hub id (default: SmolLM2-135M-Instruct; with --cpu a tiny "
                        "random model with SmolLM2's tokenizer)")
    p.add_argument("--cpu", action="store_true", help="the small mode on the CPU (what CI runs; no targets judged)")
    p.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {', '.join(PHASES)}")
    p.add_argument("--out", default="bench_results/gpu_check")
    p.add_argument("--record", default=None, metavar="NAME",
                   help="also write the figures as the measurement record records/NAME.json (e.g. gpu-check-h200), which pages cite; "
                        "only after a whole run (every phase started)")
    p.add_argument("--budget", type=int, default=None, metavar="SECONDS",
                   help="the run's time from its start to its last phase: each phase gets at most what is left, a phase with under a "
                        "minute left is not started, and the table is written either way (for a lease of limited length)")
    args = p.parse_args()
    if args.record is not None and not re.fullmatch(r"[\w-]+", args.record):
        p.error(f"--record {args.record!r}: a record's name is letters, digits, '_' and '-'")
    mode = CPU if args.cpu else GPU
    if not args.cpu:
        import torch

        if not torch.cuda.is_available():
            print("no GPU is visible to torch here: run scripts/gpu_check.sh --cpu for the small CPU mode", file=sys.stderr)
            return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.model is None:
        args.model = small_chat_model(out) if args.cpu else "smollm2-135m-instruct"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    measured_at = None
    if args.record:
        from rlvr.records import commit

        measured_at = commit()  # the checkout as the run starts, not as it ends
    phases: dict[str, Phase] = {}
    for name in args.phases.split(","):
        if name not in PHASES:
            print(f"unknown phase {name!r}: choose from {', '.join(PHASES)}", file=sys.stderr)
            return 2
        left = None if args.budget is None else int(args.budget - (time.monotonic() - started))
        if left is not None and left < MIN_PHASE_S:
            phases[name] = Phase(name, detail=f"not run: {left} s of the --budget of {args.budget} s left")
            print(f"[gpu_check] {name}: not run ({left} s of the budget left)", flush=True)
            continue
        print(f"[gpu_check] {name} ...", flush=True)
        t0 = time.monotonic()
        phase_mode = mode if left is None else replace(mode, timeouts={**mode.timeouts, name: min(mode.timeouts[name], left)})
        try:
            phases[name] = PHASES[name](out, args.model, phase_mode, env)
        except Exception as e:  # noqa: BLE001 - a phase whose outputs cannot be read is a failed phase, the others still count
            phases[name] = Phase(name, detail=f"{type(e).__name__}: {e}")
        phases[name].seconds = time.monotonic() - t0
        print(f"[gpu_check] {name}: {'ok' if phases[name].ok else 'FAILED'} in {phases[name].seconds:.0f} s", flush=True)
    targets = judge(phases) if mode.judge else []
    info = machine()
    where = info.get("gpu") or "CPU (small mode: numbers are not the GPU targets)"
    print(f"\nrlvr GPU check on {where}; model {args.model}; rlvr {info['commit']}, torch {info['torch']}, transformers "
          f"{info['transformers']}, TRL {info['trl']}, vLLM {info['vllm'] or 'not installed'}; {time.monotonic() - started:.0f} s\n")
    print(f"| phase | result | seconds | detail |\n|---|---|---:|---|")
    for phase in phases.values():
        print(f"| {phase.name} | {'ok' if phase.ok else 'FAILED'} | {phase.seconds:.0f} | {phase.detail.splitlines()[0] if phase.detail else ''} |")
    if targets:
        print("\n| target | measured | wanted | met |\n|---|---|---|---|")
        for name, measured, wanted, met in targets:
            print(f"| {name} | {measured} | {wanted} | {'yes' if met else 'NO'} |")
    for phase in phases.values():
        if not phase.ok and "\n" in phase.detail:
            print(f"\n{phase.name}:\n{phase.detail}")
    report = {"machine": info, "model": args.model, "mode": "cpu" if args.cpu else "gpu", "seconds": time.monotonic() - started,
              "phases": {n: ph.__dict__ for n, ph in phases.items()},
              "targets": [dict(zip(("target", "measured", "wanted", "met"), t)) for t in targets]}
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2))
    if args.record:
        missing = [n for n in PHASES if n not in phases or phases[n].detail.startswith("not run")]
        if missing:  # a record's figures replace the last ones: only a whole run may
            print(f"\nrecords/{args.record}.json not written: phase(s) {', '.join(missing)} did not run (a record holds a whole run)")
        else:
            print(f"wrote {write_gpu_record(args.record, report, recorded_command(sys.argv[1:]), at=measured_at)}")
    print(f"\nwrote {out / 'gpu_check.json'}; logs in {out}")
    failed = [n for n, ph in phases.items() if not ph.ok]
    missed = [t[0] for t in targets if t[3] is False]
    return 1 if failed or missed else 0


if __name__ == "__main__":
    sys.exit(main())

"""scripts/bench_generate.py (the rollout server under load): what it asks each server and how it
reads the answers, checked without running a load (the figures are the lead's, on a quiet machine)."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, str(SCRIPTS))  # as when run: the script imports its neighbour load_clients
    spec = importlib.util.spec_from_file_location("bench_generate", SCRIPTS / "bench_generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up while it loads)
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)
        sys.path.remove(str(SCRIPTS))


@pytest.mark.parametrize("name", ["bench_generate.py", "bench_serve.py"])
def test_the_load_scripts_start_and_explain_their_flags(name):
    shown = subprocess.run([sys.executable, str(SCRIPTS / name), "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "--record NAME" in shown.stdout and "--clients" in shown.stdout


def test_a_server_is_a_name_an_engine_and_a_checkout(script):
    spec = script.ServerSpec.parse(f"before=vllm:{ROOT}")
    assert (spec.name, spec.engine, spec.checkout) == ("before", "vllm", ROOT)
    for bad, why in [(f"before={ROOT}", "NAME=ENGINE:CHECKOUT"), (f"before=sglang:{ROOT}", "ENGINE must be one of vllm, hf"),
                     (f"be fore=vllm:{ROOT}", "NAME must be"), ("before=vllm:/nonexistent", "not an rlvr checkout")]:
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            script.ServerSpec.parse(bad)


def test_flags_are_checked_before_anything_starts(script, capsys):
    args = script.parser().parse_args(["--model", "m", "--clients", "1,64", "--modes", "raw,pool"])
    assert args.clients == [1, 64] and args.modes == ["raw", "pool"] and args.server == []
    for bad in (["--clients", "0,4"], ["--clients", "four"], ["--modes", "raw,udp"], ["--seconds", "0"], ["--server", "x"]):
        with pytest.raises(SystemExit):
            script.parser().parse_args(["--model", "m", *bad])
    assert "--server 'x': expected NAME=ENGINE:CHECKOUT" in capsys.readouterr().err


def test_the_old_server_is_asked_for_vllm_without_a_flag_it_lacks(script):
    """f698bdd's CLI has no --engine: vLLM is asked by default; each engine gets only its own settings."""
    settings = ["vllm.dtype=float32", "hf.decode=kv", "max_new_tokens=8"]
    vllm = script.server_command(script.ServerSpec("before", "vllm", ROOT), "m", 2, settings)
    hf = script.server_command(script.ServerSpec("after_hf", "hf", ROOT), "m", 2, settings)
    assert "--engine" not in vllm and vllm[-2:] == ["vllm.dtype=float32", "max_new_tokens=8"]
    assert hf[hf.index("--engine") + 1] == "hf" and hf[hf.index("--threads") + 1] == "2"
    assert hf[-2:] == ["hf.decode=kv", "max_new_tokens=8"]


def sample(tokens: int, logprobs: int | None = None) -> dict:
    return {"token_ids": [5] * tokens, "logprobs": [-0.5] * (tokens if logprobs is None else logprobs), "truncated": False}


def test_an_answer_counts_only_when_it_is_what_was_asked(script):
    judge = script.judge_for(argparse.Namespace(prompts=2, n=2, max_new_tokens=8))
    assert judge({"samples": [[sample(3), sample(8)], [sample(1), sample(2)]]}) == {"completions": 4, "tokens": 14}
    assert judge({"samples": [[sample(3), sample(8)]]}) is None  # a prompt missing
    assert judge({"samples": [[sample(3)], [sample(1), sample(2)]]}) is None  # a sample missing
    assert judge({"samples": [[sample(3), sample(9)], [sample(1), sample(2)]]}) is None  # longer than asked
    assert judge({"samples": [[sample(3), sample(0)], [sample(1), sample(2)]]}) is None  # empty
    assert judge({"samples": [[sample(3, 2), sample(8)], [sample(1), sample(2)]]}) is None  # a log-prob missing


def test_figures_name_server_client_level_and_leave_out_levels_without_answers(script):
    raw = {"server": "before", "client": "raw", "clients": 4, "completions_per_s": 20.0, "tokens_per_s": 400.0,
           "p50_ms": 200.0, "p99_ms": float("nan"), "statuses": {"200": 9, "503": 2, "500": 1, "transport:ReadTimeout": 3},
           "answered": 12, "transport_failures": 3}
    pool = {"server": "after", "client": "pool", "clients": 64, "ok": 30, "lost": 0, "wrong": 1, "retries": 5,
            "completions_per_s": 12.0, "tokens_per_s": 240.0, "p50_ms": 900.0, "p99_ms": 1500.0}
    figures = script.figures_of([raw, pool])
    assert figures["before_raw_c4_200"] == 9 and figures["before_raw_c4_503"] == 2 and figures["before_raw_c4_errors"] == 1
    assert figures["before_raw_c4_resets"] == 3 and figures["before_raw_c4_completions_per_s"] == 20.0
    assert "before_raw_c4_p99_ms" not in figures
    assert figures["after_pool_c64_lost"] == 0 and figures["after_pool_c64_wrong"] == 1 and figures["after_pool_c64_p99_ms"] == 1500.0

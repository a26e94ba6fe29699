"""scripts/compare_algos.py: presets compared on any task at a budget the user chooses. The settings
come from the config, the task and the budget (checked before anything runs); a tiny end-to-end
run (slow) trains two presets over two seeds on reasoning-gym's sum chains and reads the results."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("compare_algos", ROOT / "scripts" / "compare_algos.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up while it loads)
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def settings_of(script, *argv: str):
    """The settings `main` would run with."""
    return script.resolve_settings(script.parse_args(list(argv)))


def test_budgets_parse_and_become_config_keys(script):
    assert script.Budget.parse("completions=20480").override == "budget.completions=20480"
    assert script.Budget.parse("steps=40").override == "budget.optimizer_steps=40"
    assert script.Budget.parse("seconds=90.5").override == "budget.seconds=90.5"
    for bad in ("tokens=5", "completions", "steps=-1", "seconds=soon"):
        with pytest.raises(ValueError, match="--budget"):
            script.Budget.parse(bad)
    with pytest.raises(SystemExit):  # the command line says which
        script.parse_args(["--budget", "tokens=5"])
    with pytest.raises(SystemExit):
        script.parse_args(["--presets", "grpo,nosuch"])


def test_settings_follow_the_config_the_task_and_the_budget(script):
    s = settings_of(script, "--budget", "completions=2560")
    assert (s.task, s.task_config, s.prompts, s.group_size) == ("arithmetic-v1", {"direct_frac": 0.5}, 32, 8)
    assert s.max_steps == 10  # a GRPO step generates 32 x 8 completions: 10 steps spend the budget
    s = settings_of(script, "--config", "sum_chain", "--prompts", "8", "--budget", "steps=12")
    assert s.task == "reasoning-gym/sum-chain-v1" and s.prompts == 8 and s.max_steps == 24
    # another task than the config's: the config's task config does not follow it
    s = settings_of(script, "--task", "program-synthesis-v1", "--override", "rollout.group_size=4")
    assert s.task_config == {} and s.group_size == 4 and s.max_steps == 30  # no budget: the config's update.steps
    assert settings_of(script, "--max-steps", "7", "--budget", "seconds=60").max_steps == 7


def test_a_task_without_a_validation_split_is_refused_before_anything_runs(script):
    with pytest.raises(SystemExit, match="humaneval-v1 has no validation split"):
        settings_of(script, "--task", "humaneval-v1")


def test_the_starting_model_comes_from_the_sft_config_for_the_task(script):
    assert script.builtin_sft_configs("reasoning-gym/sum-chain-v1") == ["sft_sum_chain"]
    assert script.builtin_sft_configs("arithmetic-v1") == ["sft_quickstart"]
    assert script.builtin_sft_configs("gsm8k-v1") == []


def test_an_output_folder_of_other_settings_is_refused(script, tmp_path):
    (tmp_path / "settings.json").write_text(json.dumps({"task": "something else"}))
    with pytest.raises(SystemExit, match="holds runs of other settings"):
        script.main(["--output-dir", str(tmp_path), "--presets", "grpo", "--seeds", "0", "--model", str(tmp_path / "m")])


def in_process_after_the_first(script, monkeypatch) -> list[tuple[str, ...]]:
    """The script's first `rlvr` command runs in its own process, as every command does for a user; the
    rest run in this process (`rlvr.cli.main`, output to the same log), sparing a start-up of seconds each.
    Returns the commands run."""
    from rlvr.cli import main as rlvr_main

    subprocess_rlvr, commands = script.rlvr, []

    def rlvr(*argv: str, threads: int, log: Path) -> None:
        commands.append(argv)
        if len(commands) == 1:
            return subprocess_rlvr(*argv, threads=threads, log=log)
        with log.open("w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
            code = rlvr_main(list(argv))
        if code != 0:
            raise SystemExit(f"rlvr {' '.join(argv[:2])} failed (exit {code}); see {log}:\n{log.read_text()[-3000:]}")

    monkeypatch.setattr(script, "rlvr", rlvr)
    return commands


@pytest.mark.slow
def test_two_presets_two_seeds_at_a_completions_budget_on_sum_chains(script, tmp_path, capsys, monkeypatch):
    from rlvr.models.tiny import TinyModelConfig, build_tiny_model

    commands = in_process_after_the_first(script, monkeypatch)

    model = build_tiny_model(TinyModelConfig(hidden_size=32, layers=1, heads=2, intermediate_size=64), tmp_path / "tiny")
    out = tmp_path / "cmp"
    argv = ["--config", "sum_chain", "--model", str(model), "--presets", "grpo,dapo", "--seeds", "0,1", "--budget", "completions=24",
            "--prompts", "4", "--max-new-tokens", "8", "--eval-every", "1", "--eval-limit", "10", "--test-limit", "20",
            "--override", "rollout.group_size=2", "--output-dir", str(out)]
    assert script.main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["budget"] == {"kind": "completions", "amount": 24.0} and results["settings"]["max_steps"] == 3
    by = {r["preset"]: r for r in results["presets"]}
    for preset in ("grpo", "dapo"):
        r = by[preset]
        assert r["seeds"] == 2 and len(r["per_seed"]) == 2 and r["completions"] >= 24  # the step that reaches it finishes
        assert all(curve[0]["step"] == 0 and curve[0]["completions"] == 0 for curve in r["curves"])  # validation before training
    assert by["grpo"]["completions"] == 24 and by["grpo"]["budget_reached"] == 2
    assert by["dapo"]["vs_reference"]["reference"] == "grpo" and len(by["dapo"]["vs_reference"]["per_seed"]) == 2
    assert (out / "compare_algos.png").stat().st_size > 0 and "| grpo |" in (out / "results.md").read_text()
    assert "rlvr compare --arm grpo=" in capsys.readouterr().out
    # every run is reused: nothing trains again
    assert [c[0] for c in commands] == ["train", "eval"] * 4 + ["eval"]  # four runs, each tested; the starting model tested
    before = {p: p.stat().st_mtime for p in out.glob("*-s*/metrics.jsonl")}
    assert script.main(argv) == 0
    assert len(commands) == 9
    assert {p: p.stat().st_mtime for p in out.glob("*-s*/metrics.jsonl")} == before

"""The `rlvr` command as a user runs it: listing, bad input, evaluation reports."""

from __future__ import annotations

import json

import pytest

import tasks
from rlvr.algos.config import PRESETS
from rlvr.cli import main


def test_envs_list_and_check(capsys):
    assert main(["envs", "list"]) == 0
    out = capsys.readouterr().out
    assert "math-v1" in out and "arithmetic-v1" in out
    assert main(["envs", "check", "math-v1", "--task", "arithmetic-v1", "-n", "10"]) == 0
    out = capsys.readouterr().out
    assert "[PASS] gold passes: 10/10 ok" in out and "no train/test leakage" in out


def test_algos_list_prints_every_preset_and_its_settings(capsys):
    assert main(["algos", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == list(PRESETS)
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:] if line and not line.startswith(" ")}
    assert rows["policy_loss.clip_high"][:4] == ["0.2", "0.28", "0.2", "0.0004"]
    col = {name: i for i, name in enumerate(PRESETS)}
    assert rows["dynamic_sampling"][col["dapo"]] == "yes" and rows["prm.enabled"][col["prime"]] == "yes"
    assert rows["prm.beta"][col["prime"]] == "0.05" and rows["prm.enabled"][col["grpo"]] == "no"
    assert rows["critic.enabled"][col["ppo"]] == "yes" and rows["critic.value_clip"][col["ppo"]] == "0.2"
    assert rows["recipe"][col["ppo"]] == "policy_gradient" and rows["policy_loss.name"][col["cispo"]] == "cispo"
    assert main(["algos", "list", "--preset", "gspo"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split() == ["gspo"]


@pytest.mark.parametrize("argv,message", [
    (["algos", "list", "--preset", "ppo2"], "unknown preset ppo2"),
    (["train", "quickstart", "task.id=hendrycks-math-v1", "task.config={}", "task.split=test", "task.heldout=[math500-v1]"],
     "training on hendrycks-math-v1:test would leak into held-out math500-v1:test"),
    (["train", "quickstart", "algo.preset=dapo", "algo.sampling_budget=0"], "algo.sampling_budget"),
    (["train", "quickstart", "optim.lrr=1"], "unknown key 'optim.lrr' (did you mean 'optim.lr'?)"),
    (["train", "quickstart", "algo.kl_coeff=0.1"], "unknown key 'algo.kl_coeff' (did you mean 'algo.kl.coef'?)"),  # an old spelling, mistyped
    (["train", "quickstart", "algo.policy_loss.tauu=1"], "algo.policy_loss.tauu: the clipped policy loss takes no argument 'tauu'"),
    (["train", "quickstart", "update.steps=many"], "'update.steps' must be int"),
    (["train", "no-such-config"], "neither a file nor a built-in config"),
    (["envs", "check", "mth-v1"], "unknown environment 'mth-v1'. Did you mean: math-v1"),
    (["eval", "--model", "/nonexistent/model", "--task", "arithmetic-v1"], "not found"),
    (["eval", "--model", "x", "--task", "arithmetic-v9"], "registered versions of 'arithmetic': arithmetic-v1"),
])
def test_bad_input_gives_a_clear_error_and_exit_code_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a quickstart already run in the checkout leaves runs/quickstart/grpo, which a train would refuse first
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_unknown_environment_in_a_training_config_is_named(tmp_path, capsys):
    code = main(["train", "quickstart", f"output_dir={tmp_path}", "task.env=nope-v1", "model.name_or_path=/nonexistent"])
    assert code == 2
    # the environment is checked before the model (which does not exist) loads
    assert "error: command-line override task.env=nope-v1: task.env: unknown environment 'nope-v1'" in capsys.readouterr().err


def test_a_files_own_error_is_not_blamed_on_an_override_its_message_names(tmp_path, capsys):
    """The split check's hint names `eval.at_start=false`: the override of that key is not what failed (was named)."""
    assert main(["train", "quickstart", "--show-config"]) == 0
    config = tmp_path / "run.yaml"
    config.write_text(capsys.readouterr().out.replace("  split: validation", "  split: nosuch"))
    assert main(["train", str(config), "eval.at_start=false", "--show-config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: eval.split='nosuch': task arithmetic-v1 has no such split") and "eval.at_start=false" in err, err
    assert main(["train", str(config), "eval.split=nosuch2", "--show-config"]) == 2  # an override of the key itself is named
    assert capsys.readouterr().err.startswith("error: command-line override eval.split=nosuch2: eval.split='nosuch2'")


def test_show_config_lists_every_key(capsys):
    assert main(["train", "--show-config"]) == 0
    out = capsys.readouterr().out
    assert "algo.preset" in out and "verify.on_failure" in out


@pytest.mark.slow
def test_eval_writes_reproducible_reports(sft_base, tmp_path, capsys):
    out = tmp_path / "report"
    argv = ["eval", "--model", str(sft_base), "--task", "arithmetic-v1", "--limit", "40", "--n", "4",
            "--max-new-tokens", "64", "--out", str(out), "--seed", "3"]
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["problems"] == 40 and report["split_size"] == 500 and report["split"] == "test"
    assert report["data_checksum"] == tasks.make("arithmetic-v1").checksum("test")
    assert report["settings"]["seed"] == 3 and report["task"]["id"] == "arithmetic-v1"
    s = report["sampled"]
    assert set(s["pass@k"]) == {"1", "2", "4"} and s["pass@k"]["1"] == pytest.approx(s["mean@4"])
    assert s["pass@k"]["1"] <= s["pass@k"]["2"] <= s["pass@k"]["4"]
    assert 0 <= report["greedy"]["accuracy"] <= 1 and report["greedy"]["ci95"][0] <= report["greedy"]["accuracy"]
    assert "| greedy accuracy |" in (out / "report.md").read_text()
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 40
    # the same seed reproduces the same sampled numbers
    assert main(argv) == 0
    assert json.loads((out / "report.json").read_text())["sampled"] == s


@pytest.mark.parametrize("argv,message", [
    (["train", "quickstart", "rollout.prompts_per_step=-4"], "'rollout.prompts_per_step' must be > 0, got -4"),
    (["train", "quickstart", "update.steps=-1"], "'update.steps' must be >= 0, got -1"),
    (["train", "quickstart", "update.micro_batch_size=0"], "'update.micro_batch_size' must be > 0, got 0"),
    (["train", "quickstart", "rollout.max_new_tokens=0"], "'rollout.max_new_tokens' must be > 0, got 0"),
    (["train", "quickstart", "optim.lr=-1"], "'optim.lr' must be > 0, got -1"),
    (["train", "quickstart", "rollout.top_p=1.5"], "'rollout.top_p' must be <= 1, got 1.5"),
    (["train", "quickstart", "algo.critic.lr_scale=0"], "'algo.critic.lr_scale' must be > 0, got 0"),
    (["sft", "sft_quickstart", "batch_size=-2"], "'batch_size' must be > 0, got -2"),
    (["sft", "quickstart"], "configures the policy_gradient recipe, not sft: run it with `rlvr train quickstart`"),
    (["train", "quickstart", "recipe=dpo"], "recipe 'dpo' is unknown"),
])
def test_settings_out_of_range_are_one_line_errors_before_anything_loads(argv, message, capsys):
    # model.name_or_path points nowhere: the setting must be refused before any model is looked up
    assert main([*argv, "model.name_or_path=/nonexistent/model"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "not found" not in err


def test_group_size_one_with_a_group_relative_advantage_is_refused_saying_why(tmp_path, capsys):
    assert main(["train", "quickstart", f"output_dir={tmp_path}", "rollout.group_size=1", "model.name_or_path=/nonexistent/model"]) == 2
    err = capsys.readouterr().err
    assert "rollout.group_size=1 with the grpo advantage" in err and "every advantage is 0" in err and "Traceback" not in err
    assert not (tmp_path / "quickstart" / "grpo" / "config.yaml").exists()  # no run directory left to refuse the corrected rerun


@pytest.mark.parametrize("override, message", [
    ("optim.lr=abc", "error: command-line override optim.lr=abc: 'optim.lr' must be float, got str 'abc'"),
    ("optim.lrr=1", "error: command-line override optim.lrr=1: unknown key 'optim.lrr' (did you mean 'optim.lr'?)"),
    ("=", "error: command-line override '=' must look like key=value (e.g. optim.lr=1e-4)"),
    ("optim.lr=[1", "error: command-line override 'optim.lr=[1': value is not valid YAML (expected ',' or ']', but got '<stream end>'); "
                    "quote it if it is text"),
])
def test_a_bad_override_is_blamed_on_the_command_line_not_the_file(override, message, capsys):
    assert main(["train", "quickstart", override]) == 2
    assert capsys.readouterr().err.strip() == message


def test_resuming_a_run_that_does_not_exist_says_so(tmp_path, capsys):
    assert main(["train", str(tmp_path / "nosuch"), "--resume"]) == 2
    assert capsys.readouterr().err.strip() == f"error: no run directory {tmp_path / 'nosuch'}: resume a run by its directory (runs/NAME, with its config.yaml)"
    assert main(["train", str(tmp_path), "--resume"]) == 2
    assert f"{tmp_path} is not a run directory (it holds no config.yaml)" in capsys.readouterr().err


def test_switching_the_task_drops_the_previous_tasks_config(capsys):
    from rlvr.train import load_run_config

    assert load_run_config("quickstart", []).task.config == {"direct_frac": 0.5}
    cfg = load_run_config("quickstart", ["task.id=gsm8k-v1"])
    assert cfg.task.config == {} and cfg.task.id == "gsm8k-v1"
    assert load_run_config("quickstart", ["task.id=arithmetic-v1"]).task.config == {"direct_frac": 0.5}  # unchanged task keeps it
    kept = load_run_config("quickstart", ["task.id=arithmetic-v1", "task.config={digits: 3}"])
    assert kept.task.config == {"digits": 3}


def test_show_config_takes_overrides_after_the_option_and_train_runs_sft_configs(capsys):
    assert main(["train", "quickstart", "--show-config", "algo.preset=ppo", "update.steps=7"]) == 0
    out = capsys.readouterr().out
    assert "preset: ppo" in out and "steps: 7" in out
    assert main(["train", "sft_quickstart", "--show-config"]) == 0  # the sft recipe's config, through `rlvr train`
    assert "recipe: sft" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:  # argparse's own usage error
        main(["train", "quickstart", "--show-config", "--bogus"])
    assert exited.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["train", "quickstart", "task.id=nosuch-v1"], "unknown task 'nosuch-v1'"),
    (["train", "quickstart", "verify.reward=nope"], "not a reward signal"),
    (["train", "quickstart", "rollout.vllm.gpu_memory_utilization=0.5"], "is a setting of the vllm engine"),
    (["train", "quickstart", "algo.preset=dpo"], "set pairs.path=FILE"),
    (["sft", "sft_quickstart", "eval.split=nosuch"], "eval.split='nosuch'"),
])
def test_show_config_refuses_what_train_would_refuse_and_prints_nothing(argv, message, capsys):
    """`--show-config` runs every check `train` runs before loading a model (not only the per-key
    ones): a config it prints is one `train` accepts."""
    assert main([*argv[:2], "--show-config", *argv[2:]]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("name", ["tasks", "envs", "sandboxes"])
def test_a_module_of_the_users_named_like_an_rlvr_package_is_named_not_imported(name, tmp_path):
    """A ``tasks.py`` in the folder rlvr runs from comes first on ``sys.path`` and would be imported as
    rlvr's ``tasks``: the CLI refuses to start, naming the file, and never runs it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    (tmp_path / f"{name}.py").write_text("raise SystemExit('the user module was imported')\n")
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-m", "rlvr.cli", "envs", "list"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {tmp_path / name}.py hides rlvr's own `{name}` package"), proc.stderr
    assert "rename your module" in lines[0] and "the user module was imported" not in proc.stderr
    (tmp_path / f"{name}.py").rename(tmp_path / f"my_{name}.py")  # named differently: rlvr runs
    proc = subprocess.run([sys.executable, "-m", "rlvr.cli", "envs", "list"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "math-v1" in proc.stdout, proc.stdout + proc.stderr



def test_at_exit_the_command_still_finalizes_its_garbage_and_freezes_the_rest(tmp_path):
    """The exit handler `main` registers finalizes the garbage of the moment, cycles included, then
    freezes what is alive, so that the interpreter's teardown does not walk it again."""
    import subprocess
    import sys

    code = f"""
import atexit, gc
from rlvr.cli import main

def report():  # registered before main's handler, so it runs after it
    open({str(tmp_path / "frozen")!r}, "w").write(str(gc.get_freeze_count()))
atexit.register(report)
assert main(["algos", "list"]) == 0 and main(["envs", "list"]) == 0

class Cycle:
    def __del__(self):
        open({str(tmp_path / "finalized")!r}, "w").close()
c = Cycle(); c.me = c; del c
gc.disable()  # (only the exit handler can find the cycle now)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "finalized").exists()
    assert int((tmp_path / "frozen").read_text()) > 10_000


def test_a_warning_prints_as_one_line_like_an_error_and_names_another_librarys_file():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", "quickstart", "algo.kl.mode=off", "algo.kl.coef=0.1", "--show-config"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "warning: kl.coef=0.1 has no effect with kl.mode=off\n"
    strict = subprocess.run([sys.executable, "-W", "error", "-m", "rlvr.cli", "train", "quickstart", "algo.kl.mode=off", "algo.kl.coef=0.1",
                             "--show-config"], capture_output=True, text=True, timeout=120)
    assert strict.returncode == 2 and strict.stdout == ""
    assert strict.stderr == "error: kl.coef=0.1 has no effect with kl.mode=off (a UserWarning made an error by -W or PYTHONWARNINGS)\n"
    import numpy

    from rlvr.warning_lines import one_line_warning
    line = one_line_warning(FutureWarning(" a is deprecated \n"), FutureWarning, numpy.__file__, 12)
    assert line == "warning: a is deprecated (FutureWarning, numpy/__init__.py:12)\n"
    # a message of several lines (a file name with a newline in it) is one line; a place that is no file is named as Python names it
    assert one_line_warning("rows/two\nlines.jsonl: 2 repeated\n", UserWarning, "<frozen importlib._bootstrap>", 241) == (
        "warning: rows/two lines.jsonl: 2 repeated (UserWarning, <frozen importlib._bootstrap>:241)\n")


@pytest.mark.parametrize("argv,line", [
    (["grpo", "policy_loss.clip_hgh=0.3"], "error: command-line override policy_loss.clip_hgh=0.3: algo.policy_loss.clip_hgh: the clipped policy "
                                          "loss takes no argument 'clip_hgh'"),
    (["grpo", "algo.kl.coef=0.1", "algo.kl.coef=-1"], "error: command-line override algo.kl.coef=-1: 'algo.kl.coef' must be >= 0, got -1.0"),
    (["grpo", "kl.mode=bad"], "error: command-line override kl.mode=bad: 'algo.kl.mode' must be one of"),
    (["grpo", "advantage=nope"], "error: command-line override advantage=nope: algo.advantage 'nope' is not registered"),
    (["ppo2"], "error: rlvr algos show: algo.preset 'ppo2' is unknown; presets: grpo,"),
    (["grpo", "nosuch=1"], "error: command-line override nosuch=1: unknown key 'algo.nosuch' (known keys: preset,"),
    (["grpo", "algo.preset=ppo", "algo.critic.nosuch=1"], "error: command-line override algo.critic.nosuch=1: unknown key 'algo.critic.nosuch'"),
    (["grpo", "kl.coef=[1"], "error: command-line override 'kl.coef=[1': value is not valid YAML"),
    (["grpo", "="], "error: command-line override '=' must look like key=value"),
    (["grpo", "algo=5"], "error: command-line override algo=5: 'algo' must be a mapping, got int 5"),
])
def test_algos_show_names_the_override_it_refuses(argv, line, capsys):
    assert main(["algos", "show", *argv]) == 2
    assert capsys.readouterr().err.startswith(line)


def test_algos_show_without_a_preset_says_only_the_preset_is_required(capsys):
    with pytest.raises(SystemExit):
        main(["algos", "show"])
    assert capsys.readouterr().err.splitlines()[-1] == "rlvr algos show: error: the following arguments are required: preset"

"""The CLI answers help, listings and a bad config without importing torch or transformers (which take
seconds to import): each case runs the real `rlvr` in a fresh interpreter and reads `sys.modules`
when it is done. What is asserted is what got imported, never how long it took."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "accelerate", "peft")

# Runs rlvr's main with argv (argparse's help exits through SystemExit) and reports its exit code and
# which heavy packages it imported.
PROBE = """
import contextlib, io, json, sys
from rlvr.cli import main
err = io.StringIO()
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
    try:
        code = main(sys.argv[1:])
    except SystemExit as e:
        code = e.code
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(%r))
print(json.dumps({"code": code, "heavy": heavy, "stderr": err.getvalue()}))
""" % (HEAVY,)


def run_probe(argv: list[str], tmp_path: Path, code: str = PROBE) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [
    ["--help"], ["train", "--help"], ["sft", "--help"], ["eval", "--help"],
    ["envs", "list"], ["tasks", "list"], ["algos", "list"], ["train", "--show-config"], ["sft", "--show-config"],
])
def test_help_and_listings_import_no_torch(argv, tmp_path):
    out = run_probe(argv, tmp_path)
    assert out["code"] == 0, out["stderr"]
    assert out["heavy"] == [], f"rlvr {' '.join(argv)} imported {out['heavy']}"


@pytest.mark.parametrize("argv,message", [
    (["train", "quickstart", "foo.bar=1"], "unknown key 'foo'"),
    (["train", "quickstart", "optim.lr=abc"], "'optim.lr' must be float"),
    (["train", "quickstart", "update.steps=-5"], "'update.steps' must be >= 0"),
    (["train", "quickstart", "algo.preset=nope"], "command-line override algo.preset=nope: algo.preset 'nope' is unknown"),
    (["train", "quickstart", "recipe=nope"], "command-line override recipe=nope: recipe 'nope' is unknown"),
    (["train", "quickstart", "task={id: nope-v1}"], "command-line override task={id: nope-v1}: task.id: unknown task 'nope-v1'"),
    (["train", "quickstart", "task.heldout=[gsm8k-v1:nosplit]"],
     "command-line override task.heldout=[gsm8k-v1:nosplit]: task.heldout: task 'gsm8k-v1' has no split 'nosplit'"),
    (["train", "quickstart", "algo.policy_loss.clip_hgh=0.2"], "takes no argument 'clip_hgh'"),
    (["train", "quickstart", "algo.kl.mode=bad"], "'algo.kl.mode' must be one of"),
    (["train", "quickstart", "model.lora.r=-1"], "'model.lora.r' must be >= 0"),
    (["train", "quickstart", "rollout.engine=nope"], "not a registered engine"),
    (["train", "quickstart", "rollout.vllm.gpu_memory_utilization=0.5"], "is a setting of the vllm engine"),
    (["train", "quickstart", "verify.reward=nope"], "not a reward signal"),
    (["train", "quickstart", "task.id=nope-v1"], "command-line override task.id=nope-v1: task.id: unknown task 'nope-v1'"),
    (["train", "quickstart", "algo.recipe=bogus"], "command-line override algo.recipe=bogus: algo.recipe cannot be 'bogus': "
                                                   "algo.preset=grpo runs the policy_gradient recipe"),
    (["train", "quickstart", "task.id=inline-task7-v1"], "started from Python with a task object, which must be given again"),
    (["train", "no_such_config"], "neither a file nor a built-in config"),
    (["sft", "sft_quickstart", "steps=-1"], "'steps' must be >= 0"),
    (["sft", "quickstart"], "configures the policy_gradient recipe, not sft"),
    # refused by the recipe's own checks (rlvr.train.config_checks), said before torch as well
    (["train", "quickstart", "device=tpu"], "device='tpu': must be auto, cpu, cuda or cuda:N"),
    (["sft", "sft_quickstart", "device=tpu"], "device='tpu': must be auto, cpu, cuda or cuda:N"),
    (["train", "quickstart", "algo.preset=dpo"], "algo.preset=dpo trains on a pairs file: set pairs.path=FILE"),
    (["train", "quickstart", "algo.preset=online_dpo", "pairs.path=p.jsonl"], "pairs.path is set but algo.preset=online_dpo"),
    (["train", "quickstart", "rollout.group_size=1"], "rollout.group_size=1 with the grpo advantage"),
    (["train", "quickstart", "recipe=preference"], "recipe=preference but algo.preset=grpo runs the policy_gradient recipe"),
    (["train", "quickstart", "eval.every=5", "eval.split=train"], "eval.split equals task.split ('train')"),
    (["train", "quickstart", "eval.every=0", "eval.at_start=true", "eval.split=train"], "eval.split equals task.split ('train')"),
    (["sft", "sft_quickstart", "eval.split=train"],  # SFT evaluates its final model; the override is named (was the bare check)
     "command-line override eval.split=train: eval.split equals task.split ('train')"),
    (["train", "quickstart", "device=tpu"], "command-line override device=tpu: device='tpu'"),
    (["train", "quickstart", "task.config={max_digits: -1}"], "task arithmetic-v1: config {'max_digits': -1} refused: arithmetic: need"),
    (["train", "quickstart", "task.split=nosuch"], "task.split='nosuch': task arithmetic-v1 has no such split"),
    (["train", "quickstart", "task.split=test"], "task.split='test' is a held-out split of arithmetic-v1"),
    (["train", "quickstart", "eval.every=5", "eval.split=nosuch"], "eval.split='nosuch': task arithmetic-v1 has no such split"),
    (["sft", "sft_quickstart", "eval.split=nosuch"], "eval.split='nosuch': task arithmetic-v1 has no such split"),
    (["train", "quickstart", "task.env=nosuch-v1"], "command-line override task.env=nosuch-v1: task.env: unknown environment 'nosuch-v1'"),
    (["train", "quickstart", "task.heldout=[nosuch-v1]"], "command-line override task.heldout=[nosuch-v1]: task.heldout: unknown task 'nosuch-v1'"),
    (["train", "quickstart", "distributed=fsdp", "model.lora.r=8"], "model.lora with distributed=fsdp is not supported"),
    (["train", "quickstart", "model.name_or_path=" + "x" * 100_000], "model.name_or_path: a name of 100000 characters"),
    (["train", "quickstart", "optim.lr=inf"], "command-line override optim.lr=inf: 'optim.lr' must be a finite number"),
    (["train", "quickstart", "optim.lr=.nan"], "'optim.lr' must be a finite number"),
    (["train", "quickstart", "task=arithmetic-v1"], "command-line override task=arithmetic-v1: 'task' must be a mapping, got str"),
])
def test_a_bad_training_config_is_refused_before_torch_is_imported(argv, message, tmp_path):
    out = run_probe(argv, tmp_path)
    assert out["code"] == 2 and message in out["stderr"], out["stderr"]
    assert len(out["stderr"].strip().splitlines()) == 1, out["stderr"]
    assert out["heavy"] == [], f"rlvr {' '.join(argv)} imported {out['heavy']} before refusing the config"


@pytest.mark.parametrize("argv,message", [
    (["--n", "-3"], "--n must be in 0..65536, got -3"),
    (["--split", "nosuch"], "nosuch"),
    (["--task", "nope-v1"], "unknown task 'nope-v1'"),
    (["--task-config", "{max_digit: 2}"], "unknown config key(s) ['max_digit']; known: ['direct_frac', 'max_digits'"),
    (["--task", "gsm8k-v1", "--task-config", "{foo: 1}"], "task gsm8k-v1: unknown config key(s) ['foo']; known: none"),
    (["--task-config", "{max_digits: -1}"], "task arithmetic-v1: config {'max_digits': -1} refused: arithmetic: need"),
    (["--env-kwargs", "{extraction: lenientt}"], "--env-kwargs: environment 'math-v1' refused its settings: extraction must be one of"),
    # bounds training has (a traceback, every verdict an OverflowError, or a hang, before)
    (["--verify-timeout", "1e308"], "--verify-timeout must be > 0 seconds and at most a day (86400)"),
    (["--seed", "99999999999999999999"], "--seed must be in 0..4294967295"),
    (["--seed", "-1"], "--seed must be in 0..4294967295"),
    (["--threads", "99999999999999999999"], "--threads must be in 0..4096"),
    (["--max-new-tokens", "99999999999999999999"], "--max-new-tokens must be in 1..1048576"),
    (["--verify-workers", "99999999999999999999"], "--verify-workers must be in 0..1024"),
    (["--n", "99999999999999999999"], "--n must be in 0..65536"),
    (["--split", "train", "--limit", "99999999999999999999"], "--limit must be in 1..10000000"),
])
def test_a_bad_eval_option_is_refused_before_torch_is_imported(argv, message, tmp_path):
    base = {"--model": "no/such-model", "--task": "arithmetic-v1"}
    given = dict(zip(argv[::2], argv[1::2]))
    out = run_probe(["eval", *[x for k, v in {**base, **given}.items() for x in (k, v)]], tmp_path)
    assert out["code"] == 2 and message in out["stderr"], out["stderr"]
    assert len(out["stderr"].strip().splitlines()) == 1, out["stderr"]
    assert out["heavy"] == [], f"rlvr eval {' '.join(argv)} imported {out['heavy']} before refusing the option"


# config files that cannot be read as a config: each refused in one line naming the file, before torch
BAD_FILES = {
    "binary.yaml": (b"name: \xff\xfe\n", "binary.yaml: not UTF-8 text (byte 6)"),
    "deep.yaml": (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "deep.yaml: nested too deeply to read"),
    "empty.yaml": (b"", "empty.yaml: the file is empty"),
    "repeated.yaml": (b"name: a\noptim: {lr: 1.0e-4}\nname: b\n", "repeated.yaml: key 'name' is given twice (line 3)"),
    "nested-repeat.yaml": (b"optim:\n  lr: 1.0e-4\n  lr: 1.0e-3\n", "nested-repeat.yaml: key 'lr' is given twice (line 3)"),
    "adir": (None, "adir is a directory, not a config file"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_config_file_that_cannot_be_read_is_refused_before_torch_is_imported(name, tmp_path):
    content, message = BAD_FILES[name]
    if content is None:
        (tmp_path / name).mkdir()
    else:
        (tmp_path / name).write_bytes(content)
    out = run_probe(["train", name], tmp_path)
    assert out["code"] == 2 and message in out["stderr"], out["stderr"]
    assert len(out["stderr"].strip().splitlines()) == 1, out["stderr"]
    assert out["heavy"] == [], f"rlvr train {name} imported {out['heavy']} before refusing the file"


def test_a_merge_key_may_be_overridden_without_counting_as_a_repeated_key(tmp_path):
    from rlvr.config import read_config

    (tmp_path / "merge.yaml").write_text("base: &b {lr: 1.0}\noptim:\n  <<: *b\n  lr: 2.0\n")
    assert read_config(tmp_path / "merge.yaml")[0]["optim"] == {"lr": 2.0}


def test_every_subcommands_help_imports_no_torch(tmp_path):
    """Every subcommand and sub-subcommand (found by walking the parser, so a new one is covered)."""
    walk = """
import argparse, contextlib, io, json, sys
from rlvr.cli import build_parser, main
def commands(parser, prefix):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield prefix + [name]
                yield from commands(sub, prefix + [name])
seen = 0
for argv in commands(build_parser(), []):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main([*argv, "--help"])
        except SystemExit:
            seen += 1
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(%r))
print(json.dumps({"code": seen, "heavy": heavy, "stderr": ""}))
""" % (HEAVY,)
    out = run_probe([], tmp_path, walk)
    assert out["code"] >= 15  # every help exited; train, sft, eval, envs and its subcommands...: the walk found them
    assert out["heavy"] == []


def test_each_recipes_registered_config_class_is_the_one_it_runs():
    """`RECIPE_CONFIGS` lets a config be read without importing its recipe: it must name the class
    the recipe itself takes."""
    from rlvr.train.recipes import RECIPE_CONFIGS, RECIPES, config_class

    assert set(RECIPE_CONFIGS.ids()) == set(RECIPES.ids())
    for name in RECIPES.ids():
        assert config_class(name) is RECIPES.get(name).config_class


def test_a_lazy_module_imports_on_first_use_only(tmp_path):
    code = """
import sys
from rlvr.lazy import lazy_module
m = lazy_module("fractions")
sys.modules.pop("fractions", None)
before = "fractions" in sys.modules
value = m.Fraction(1, 3) + m.Fraction(1, 6)
print(before, "fractions" in sys.modules, value)
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["False", "True", "1/2"], proc.stdout + proc.stderr


def test_training_packages_give_their_configs_without_torch_and_the_rest_on_first_use(tmp_path):
    code = """
import sys
from rlvr.train import TrainConfig, load_run_config
from rlvr.train.preference import PreferenceTrainConfig
from rlvr.train.sft_config import SFTConfig
before = "torch" in sys.modules
from rlvr.train import TrainingError
from rlvr.train.preference import PreferenceRecipe
print(before, "torch" in sys.modules, PreferenceRecipe.config_class is PreferenceTrainConfig)
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert proc.stdout.split() == ["False", "True", "True"], proc.stdout + proc.stderr

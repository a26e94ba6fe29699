"""The device rule (`rlvr.models.device`): every command that loads a model runs where ``device`` says
(auto: the accelerator when there is one), refuses in one line what it cannot honour before anything
is written, and reports where it ran. This machine has no GPU: the CUDA branches are checked with
torch's view of the machine replaced where a test says so; scripts/gpu_check.sh runs them for real."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from rlvr import UserError
from rlvr.models import device as device_rule
from rlvr.models.tiny import TinyModelConfig, build_tiny_model
from tests.forked import run_forked

REPO = Path(__file__).resolve().parents[2]
NO_CUDA = not torch.cuda.is_available()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(TinyModelConfig(hidden_size=32, layers=2, heads=2, intermediate_size=64, max_positions=64),
                            tmp_path_factory.mktemp("tiny"))


def _rlvr(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """``rlvr ARGV`` in a process of its own, forked from the fork server (`tests.forked`): its exit status and console."""
    return run_forked(list(argv), {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}, timeout=600, cwd=cwd)


def test_auto_is_the_accelerator_when_there_is_one_else_the_cpu():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert device_rule.resolve_device("auto").type == expected
    assert device_rule.resolve_device(" CPU ").type == "cpu"
    with pytest.raises(UserError, match=r"^device='gpu': must be auto, cpu, cuda or cuda:N$"):
        device_rule.resolve_device("gpu")


@pytest.mark.skipif(not NO_CUDA, reason="checks the refusal where torch sees no GPU")
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_where_there_is_none_is_refused_in_one_line_naming_the_setting(spec):
    with pytest.raises(UserError) as caught:
        device_rule.resolve_device(spec, "model.device")
    message = str(caught.value)
    assert message.startswith(f"model.device={spec}: CUDA is not available here") and "use model.device=cpu" in message
    assert "\n" not in message


def test_a_device_index_that_does_not_exist_is_refused_naming_those_that_do(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a machine with two GPUs, as torch would report it
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert device_rule.resolve_device("cuda:1") == torch.device("cuda", 1)
    assert device_rule.resolve_device("cuda") == torch.device("cuda", 0)
    with pytest.raises(UserError, match=r"^device=cuda:2: this machine has 2 CUDA devices \(cuda:0 to cuda:1\)$"):
        device_rule.resolve_device("cuda:2")


def test_inference_precision_follows_the_checkpoint_on_cuda_and_is_float32_on_a_cpu(tiny, tmp_path):
    bf16 = tmp_path / "bf16"
    bf16.mkdir()
    config = json.loads((Path(tiny) / "config.json").read_text())
    (bf16 / "config.json").write_text(json.dumps({**config, "dtype": "bfloat16"}))
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert device_rule.inference_dtype("auto", cuda, bf16) == "bfloat16"
    assert device_rule.inference_dtype("auto", cpu, bf16) == "float32"
    assert device_rule.inference_dtype("auto", cuda, tmp_path / "nowhere") == "float32"  # the checkpoint does not say
    assert device_rule.inference_dtype("float16", cpu, bf16) == "float16"  # set: kept
    with pytest.raises(UserError, match="dtype='fp8'"):
        device_rule.inference_dtype("fp8", cpu)


def test_parameters_are_counted_from_the_checkpoint_headers_without_loading_it(tiny):
    from rlvr.models.loading import load_model

    model, _ = load_model(str(tiny))
    assert device_rule.parameter_count(tiny) == sum(p.numel() for p in model.parameters())


def test_a_model_larger_than_the_free_gpu_memory_is_refused_before_it_loads(tiny, monkeypatch):
    assert device_rule.check_fits(tiny, torch.device("cpu"), "float32") is None  # a CPU: nothing to check
    count = device_rule.parameter_count(tiny)
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(device_rule, "free_memory", lambda d: (count * 3, 80 << 30))  # room for bf16 weights, not float32
    with pytest.raises(UserError, match=r"needs .* GiB for its .* parameters in float32, more than the .* GiB free on cuda:0"):
        device_rule.check_fits(tiny, gpu, "float32")
    assert device_rule.check_fits(tiny, gpu, "bfloat16") is None
    warning = device_rule.check_fits(tiny, gpu, "bfloat16", training=True)
    assert warning and "AdamW" in warning and "model.lora.r" in warning  # weights fit, full fine-tuning will not


@pytest.mark.skipif(not NO_CUDA, reason="checks the refusal where torch sees no GPU")
def test_training_on_cuda_without_one_stops_before_the_run_directory_exists(tmp_path):
    out = _rlvr("train", "quickstart", "device=cuda", f"output_dir={tmp_path}", "name=r", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["error: device=cuda: CUDA is not available here (a CPU build of torch): use device=cpu or device=auto"]
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(not NO_CUDA, reason="checks the refusal where torch sees no GPU")
@pytest.mark.parametrize("command", [["eval", "--task", "arithmetic-v1", "--limit", "2"],
                                     ["pairs", "build", "--task", "arithmetic-v1", "--prompts", "2", "--out", "p.jsonl"]])
def test_eval_and_pairs_on_cuda_without_one_stop_before_loading(tiny, tmp_path, command):
    out = _rlvr(*command, "--model", str(tiny), "--device", "cuda:1", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.strip().startswith("error: --device=cuda:1: CUDA is not available here")
    assert len(out.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


def test_an_evaluation_reports_where_it_ran_and_the_tasks_budget(tiny, tmp_path):
    from rlvr.eval.runner import EvalSettings, evaluate
    from rlvr.rollout.config import RolloutConfig
    from rlvr.rollout.engines import make_engine
    import tasks

    engine = make_engine(RolloutConfig(), model_path=tiny, device="cpu")
    report = evaluate(engine, tasks.make("arithmetic-v1"), EvalSettings(limit=4, max_new_tokens=4), progress=False)
    ran = report["engine"]
    assert ran["engine"] == "hf" and ran["device"] == "cpu" and ran["dtype"] == "float32" and ran["attention"] in ("sdpa", "eager")
    assert ran["decoder"] == ran["decoder_choice"]["name"] == "kv" and ran["decoder_choice"]["timed"] is False
    assert report["greedy"]["truncated_rate"] > 0.5 and any("cut at max_new_tokens=4" in w for w in report["warnings"])
    assert tasks.make("math500-v1").max_new_tokens == 1024 and tasks.make("gsm8k-v1").max_new_tokens == 512
    assert tasks.make("arithmetic-v1").max_new_tokens == 128


def test_out_of_memory_names_the_settings_to_lower():
    error = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert device_rule.is_out_of_memory(error) and not device_rule.is_out_of_memory(RuntimeError("shape mismatch"))
    for setting in ("update.micro_batch_size", "rollout.hf.max_batch_sequences", "gpu_memory_utilization", "--resume"):
        assert setting in device_rule.OOM_HINT

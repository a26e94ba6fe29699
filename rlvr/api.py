"""rlvr from Python: `train`, `evaluate` and `compare`, with typed results (``rlvr.train(...)``,
``rlvr.evaluate(...)``, ``rlvr.compare(...)``).

The same configs, validation and messages as the CLI, which is a thin layer over these functions:
a bad setting raises `rlvr.UserError` (or a registry/task error, all with a one-line message), a
run that cannot continue raises `rlvr.TrainingError`; nothing calls ``sys.exit``. A task or reward
given as an object (``tasks.from_dataset(...)``, ``envs.from_function(...)``) is registered for the
call and unregistered after it, so two calls in one process (a notebook) leave nothing behind.

    import rlvr
    run = rlvr.train("quickstart", update={"steps": 20}, optim={"lr": 5e-5})
    report = rlvr.evaluate(run.final_model, "arithmetic-v1", limit=200)
    print(rlvr.compare([before, report]).table)
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from rlvr import UserError

if TYPE_CHECKING:
    from rlvr.train.config import RunConfig

_INLINE = itertools.count(1)


@dataclass(frozen=True)
class TrainRun:
    """What `train` returns.

    Attributes:
        run_dir: The run's folder (config, metrics, checkpoints, reports).
        status: ``completed``, or why it stopped (``interrupted``, ...).
        steps: Optimizer steps taken.
        final_model: The trained model's folder (None if the run did not finish).
        metrics: The last value of every metric the run logged (``metrics.jsonl``).
        history: Every logged row, in order (``step`` and the metrics).
        config: The resolved config the run used.
    """

    run_dir: Path
    status: str
    steps: int
    final_model: Path | None
    metrics: dict[str, float]
    history: list[dict[str, Any]]
    config: RunConfig

    @property
    def completed(self) -> bool:
        return self.status == "completed"


@dataclass(frozen=True)
class EvalReport:
    """What `evaluate` returns.

    Attributes:
        report: The report (``report.json``'s content: accuracies, intervals, provenance, warnings).
        json_path, markdown_path: Where it was written.
        accuracy: Greedy accuracy (None without a greedy pass).
        warnings: The report's warnings (cut completions, failed verifications...).
    """

    report: dict[str, Any]
    json_path: Path
    markdown_path: Path
    accuracy: float | None
    warnings: list[str] = field(default_factory=list)

    @property
    def folder(self) -> Path:
        return self.json_path.parent

    @property
    def markdown(self) -> str:
        return self.markdown_path.read_text()


@dataclass(frozen=True)
class Comparison:
    """What `compare` returns: accuracies on the shared problems, paired differences, a table."""

    problems: int
    accuracy: dict[str, float]
    differences: list[Any]
    table: str


# -- settings -------------------------------------------------------------------------------

def overrides_of(settings: Mapping[str, Any] | None = None, overrides: Sequence[str] = ()) -> list[str]:
    """``key=value`` overrides from nested settings (``{"update": {"steps": 2}}`` or ``{"update.steps": 2}``)
    and ``key=value`` strings, in that order; values as YAML."""
    import yaml

    out: list[str] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping) and value and not prefix.endswith(("config", "kwargs")):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            text = yaml.safe_dump(value, default_flow_style=True, width=1 << 20).strip()
            out.append(f"{prefix}={text.removesuffix('...').strip()}")

    for key, value in (settings or {}).items():
        walk(str(key), value)
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise UserError(f"overrides must be 'key=value' strings, got {item!r}")
        out.append(item)
    return out


def _private_copy(obj: Any) -> Any:
    """A copy of the user's task or environment object that a call may change (its id, its
    environment) without changing theirs; a cached environment is dropped (it belongs to the
    original's ``env_id``) and built again on first use."""
    if not hasattr(obj, "__dict__"):
        return copy.copy(obj)
    dup = object.__new__(type(obj))  # not copy.copy: it goes through __getstate__, which refuses a lambda reward (for processes)
    vars(dup).update({k: v for k, v in vars(obj).items() if k != "env"})
    return dup


_INLINE_ID = re.compile(r"inline-(task|reward)\d+-v1")


def check_task_ids(cfg: RunConfig) -> None:
    """Refuse an unknown ``task.id`` / ``task.env`` before anything loads; one that names an object
    given to `train` (an inline id, recorded in the run's config) says to give the object again."""
    import envs
    from tasks import TASKS, hubs

    for setting, key, registry in (("task.id", cfg.task.id, TASKS), ("task.env", getattr(cfg.task, "env", None), envs.ENVS)):
        if key and _INLINE_ID.fullmatch(key) and key not in registry.registered_ids():
            what, keyword = ("task", "task") if setting == "task.id" else ("reward", "env")
            raise UserError(f"{setting}={key}: this run was started from Python with a {what} object, which must be given again: "
                            f"rlvr.train(RUN_DIR, resume=True, {keyword}=...) (it cannot be resumed from the command line)")
    if not hubs.is_hub_id(cfg.task.id):
        from rlvr.train.config_checks import registered

        registered("task.id", TASKS, cfg.task.id)  # an unknown id, refused with the closest registered ones
        if cfg.task.env:
            registered("task.env", envs.ENVS, cfg.task.env)
        if cfg.task.env or cfg.task.env_kwargs:  # a bad environment setting, refused as `rlvr eval --env-kwargs` refuses it
            TASKS.make(cfg.task.id, **cfg.task.config).set_env(cfg.task.env, cfg.task.env_kwargs)


def _register(registry: Any, kind: str, obj: Any) -> str:
    """Register ``obj`` (a task or an environment object) under a fresh id; the id. Each build
    is a private copy: the registry sets its id, a config may replace its environment."""
    key = f"inline-{kind}{next(_INLINE)}-v1"
    registry.register(key, lambda _obj=obj, **_: _private_copy(_obj), override=True)
    return key


@contextlib.contextmanager
def _inline(task: Any = None, env: Any = None) -> Iterator[list[str]]:
    """Overrides naming ``task``/``env`` objects, registered for the duration of the call."""
    import envs
    import tasks

    extra: list[str] = []
    added: list[tuple[Any, str]] = []
    try:
        kinds = (("env", env, "task.env", envs.ENVS, envs.Environment, "reward", "an environment id or an envs.Environment (envs.from_function(fn))"),
                 ("task", task, "task.id", tasks.TASKS, tasks.Task, "task", "a task id or a tasks.Task (tasks.from_dataset(...))"))
        for name, given, key_name, registry, kind, label, expected in kinds:
            if given is None:
                continue
            if isinstance(given, str):
                extra.append(f"{key_name}={given}")
            elif isinstance(given, kind):
                key = _register(registry, label, given)
                added.append((registry, key))
                extra.append(f"{key_name}={key}")
            else:
                raise UserError(f"{name} must be {expected}, got {type(given).__name__}")
        yield extra
    finally:
        for registry, key in added:
            with contextlib.suppress(Exception):
                registry.unregister(key)


# -- train ----------------------------------------------------------------------------------

def load(config: str | os.PathLike = "quickstart", overrides: Sequence[str] = (), **settings: Any) -> RunConfig:
    """The resolved config of a run (what `train` would run), checked as the CLI checks it, without training."""
    from rlvr.train.recipes import load_run_config

    return load_run_config(str(config), overrides_of(settings, overrides))


def train(config: str | os.PathLike = "quickstart", overrides: Sequence[str] = (), *, task: Any = None, env: Any = None,
          resume: bool = False, **settings: Any) -> TrainRun:
    """Train with ``config`` (a built-in name, a YAML file, or a run folder with ``resume=True``).

    Args:
        config: As ``rlvr train CONFIG``.
        overrides: ``key=value`` strings, as on the command line.
        task: A task id or a `tasks.Task` object (e.g. ``tasks.from_dataset(rows, ...)``).
        env: An environment id or object replacing the task's verifier (e.g. ``envs.from_function(fn)``).
        resume: Continue the run in ``config`` (a run folder) from its last checkpoint.
        **settings: Config sections as keywords: ``update={"steps": 20}``, ``model={"name_or_path": path}``
            (``{"update.steps": 20}`` via ``**`` works too).

    Returns: a `TrainRun`. Raises `rlvr.UserError` for a bad config, `rlvr.TrainingError` when
    the run cannot continue (its folder keeps its checkpoint).
    """
    with _inline(task, env) as named:
        cfg = load(config, [*overrides_of(settings, overrides), *named, *(["resume=true"] if resume else [])])
        check_before_loading(cfg)
        if getattr(getattr(cfg, "verify", None), "kind", None) == "process":
            _check_sendable(cfg.task.make().env)
        from rlvr.train.recipes import train as run

        result = run(cfg)
    history = _history(Path(result.run_dir) / "metrics.jsonl")
    last: dict[str, float] = {}
    for row in history:
        last.update({k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    return TrainRun(Path(result.run_dir), result.status, result.steps, result.final_model, last, history, cfg)


def check_before_loading(cfg: RunConfig) -> None:
    """Every refusal of a run config that needs no torch (`rlvr train` says them before importing it):
    another engine's settings, an unknown reward or task, then the recipe's own checks
    (`rlvr.train.config_checks`)."""
    from rlvr.rollout.engines import check_engine_settings
    from rlvr.rollout.reward_signal import reward_signal
    from rlvr.train.config import TrainConfig
    from rlvr.train.config_checks import check_config

    if isinstance(cfg, TrainConfig):
        check_engine_settings(cfg.rollout)
        reward_signal(cfg.verify.reward)
    check_task_ids(cfg)  # an unknown task id, refused with the closest registered ones (or: give the Python object again)
    check_config(cfg)


def _check_sendable(env: Any) -> None:
    """Refuse, before any model loads, an environment that worker processes (``verify.kind=process``)
    cannot receive: a lambda or a closure as the reward function (the steps would fail one by one)."""
    import pickle

    try:
        pickle.dumps(env)
    except Exception as e:  # noqa: BLE001 - whatever pickle raises, the run cannot verify in processes
        raise UserError(f"verify.kind=process: {_first_line(e)}") from None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _history(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            row = json.loads(line)
            if isinstance(row, dict):
                rows.append(row)
    return rows


# -- evaluate -------------------------------------------------------------------------------

def evaluate(model: str | os.PathLike, task: Any, *, split: str = "test", n: int = 0, greedy: bool = True,
             temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int | None = None, seed: int = 0,
             limit: int | None = None, task_config: Mapping[str, Any] | None = None, env: Any = None,
             env_kwargs: Mapping[str, Any] | None = None, verify_workers: int = 1, verify_kind: str = "thread",
             verify_timeout_s: float = 30.0, out: str | os.PathLike | None = None, engine: str = "hf",
             rollout: Sequence[str] = (), device: str = "auto", dtype: str = "auto", threads: int = 0,
             prompt: Any = None, progress: bool = True, options: Mapping[str, Any] | None = None) -> EvalReport:
    """Evaluate ``model`` on ``task``'s ``split`` (greedy, and ``n`` samples for mean@k/pass@k/maj@k), as
    ``rlvr eval``; the report is written to ``out`` (default ``runs/eval/<task>-<split>/<model>``).

    ``task`` is a task id or a `tasks.Task`; ``env`` an environment id or object replacing its verifier.
    Raises `rlvr.UserError` for a bad setting (before the model loads)."""
    import tasks as task_registry
    from rlvr.eval.settings import MAX_THREADS, EvalSettings, InvalidSetting

    from rlvr.commands.eval import OPTION_OF, default_out_dir

    # every check that needs no torch first (rlvr eval refuses a bad option in a second)
    if not 0 <= threads <= MAX_THREADS:
        raise UserError(f"--threads must be in 0..{MAX_THREADS}, got {threads}")
    the_task = _eval_task(task_registry, task, dict(task_config or {}), split, env, dict(env_kwargs or {}))
    tokens = max_new_tokens if max_new_tokens is not None else the_task.max_new_tokens
    try:
        settings = EvalSettings(split=split, greedy=greedy, n=n, temperature=temperature, top_p=top_p, max_new_tokens=tokens,
                                seed=seed, limit=limit, verify_workers=verify_workers, verify_kind=verify_kind,
                                verify_timeout_s=verify_timeout_s, **({"prompt": prompt} if prompt is not None else {}))
    except InvalidSetting as e:
        if e.field == "n" and not greedy and n == 0:
            raise UserError("--no-greedy with --n 0 measures nothing: pass --n K or drop --no-greedy") from None
        raise UserError(f"{OPTION_OF.get(e.field, e.field)} {e.message}") from None
    if verify_kind == "process":
        _check_sendable(the_task.env)
    if the_task.size(split) is None and limit is None:
        raise UserError(f"split {split!r} of {the_task.id} is unbounded: pass --limit N")
    from rlvr.eval.provenance import redact
    from rlvr.eval.runner import evaluate as run_eval, write_report
    from rlvr.models.device import resolve_device
    from rlvr.models.paths import resolve_model

    resolve_device(device, "--device")

    resolve_model(str(model))  # a wrong path is reported now, not after torch has loaded
    folder = Path(out) if out else default_out_dir(str(model), the_task.id, split)
    from rlvr.config import load_config
    from rlvr.rollout.config import RolloutConfig
    from rlvr.rollout.engines import make_engine
    from rlvr.train.common import set_threads

    set_threads(threads)
    rollout_cfg = load_config(RolloutConfig, None, [f"engine={engine}", *rollout])
    the_engine = make_engine(rollout_cfg, model_path=str(model), seed=seed, device=device, dtype=dtype)
    try:
        report = run_eval(the_engine, the_task, settings, model_name=str(model), progress=progress)
    finally:
        with contextlib.suppress(Exception):
            the_engine.close()
    recorded = dict(options) if options is not None else {
        "model": str(model), "task": the_task.id, "split": split, "n": n, "greedy": greedy, "temperature": temperature,
        "top_p": top_p, "max_new_tokens": max_new_tokens, "seed": seed, "limit": limit, "task_config": dict(task_config or {}),
        "env": env if isinstance(env, str) or env is None else type(env).__name__, "env_kwargs": dict(env_kwargs or {}),
        "engine": engine, "device": device, "dtype": dtype}
    report.setdefault("provenance", {})["options"] = redact(recorded)
    json_path, md_path = write_report(report, folder)
    public = json.loads(json_path.read_text())  # the report as written (the in-memory one also holds every sample)
    greedy_section = public.get("greedy") or {}
    accuracy = greedy_section.get("accuracy") if isinstance(greedy_section, dict) else None
    return EvalReport(public, json_path, md_path, accuracy, list(public.get("warnings", [])))


def _eval_task(registry: Any, task: Any, config: dict[str, Any], split: str, env: Any, env_kwargs: dict[str, Any]) -> Any:
    import envs

    if isinstance(task, str):
        from rlvr.train.config_checks import registered
        from tasks import hubs

        if not hubs.is_hub_id(task):
            registered("--task", registry.TASKS, task)  # named as --env is (`Task.set_env`'s names)
        the_task = registry.make(task, **config)
    elif isinstance(task, registry.Task):
        if config:
            raise UserError("task_config applies to a task id; a task object is already configured")
        the_task = _private_copy(task)  # this call's environment must not stick to the user's object
    else:
        raise UserError(f"task must be a task id or a tasks.Task, got {type(task).__name__}")
    the_task.check_split(split)
    if isinstance(env, envs.Environment):
        key = _register(envs.ENVS, "reward", env)
        try:
            the_task.env_id, the_task.env_kwargs = key, {}
            the_task.env  # noqa: B018 - built (and cached) while the id exists
        finally:
            envs.ENVS.unregister(key)
        return the_task
    the_task.set_env(env, env_kwargs, names=("--env", "--env-kwargs"))  # builds it: a bad setting is said before the model loads
    return the_task


# -- compare --------------------------------------------------------------------------------

def compare(reports: Sequence[EvalReport | str | os.PathLike], labels: Sequence[str] | None = None) -> Comparison:
    """Greedy accuracies of evaluations of the same task and split (`EvalReport`s or their folders) on the
    problems they share, with paired 95% intervals of each later one minus each earlier one."""
    from rlvr.eval.compare import GreedyResult, compare as paired, render

    folders = [r.folder if isinstance(r, EvalReport) else Path(r) for r in reports]
    if len(folders) < 2:
        raise UserError("compare needs at least two evaluations")
    names = list(labels) if labels is not None else [None] * len(folders)
    if len(names) != len(folders):
        raise UserError(f"labels names {len(names)} evaluations but {len(folders)} were given")
    results = [GreedyResult.load(folder, label) for folder, label in zip(folders, names)]
    shared, diffs = paired(results)
    accuracy = {r.label: sum(r.passed[k] for k in shared) / len(shared) for r in results}
    return Comparison(len(shared), accuracy, diffs, render(results, shared, diffs))

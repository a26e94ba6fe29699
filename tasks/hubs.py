"""Other hubs' environments as rlvr tasks, by a scheme in the task id. ``tasks.make`` resolves a
``SCHEME:REST`` id here; each scheme names the function that builds its task (one registry, no
branches):

=====================  ==========================================================================
``verifiers:NAME``     a verifiers (v1) taskset: its tasks, scored by its own reward functions
``skyrl-gym:NAME``     a SkyRL-Gym environment on SkyRL dataset rows (``data``: parquet or JSONL)
``nemo-gym:PATH``      a NeMo Gym resources server (``url``) on its JSONL rows, or a NeMo Gym config
``openenv:URL``        an OpenEnv environment server: each problem is a ``reset`` (by seed)
``harbor:DIR``         a Harbor task folder, or a folder of them
``file:PATH``          your own rows: a JSONL/CSV/Parquet file or folder (`tasks.user_data`)
=====================  ==========================================================================

The task config (``task.config`` in training, ``--task-config`` elsewhere) carries each scheme's
settings, and for every scheme ``pass_reward`` (the hub reward that counts as a pass) and ``gold`` (a
template of the gold completion over the problem's answer fields, for ``rlvr envs check``)."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
from pathlib import Path
from typing import Any

import hashlib
import json

from envs.types import Problem
from tasks.base import Task, TaskError, hash_split, stable_hash, unknown_config_keys

SCHEMES: dict[str, str] = {
    "verifiers": "tasks.hubs:verifiers_task",
    "skyrl-gym": "tasks.hubs:skyrl_gym_task",
    "nemo-gym": "tasks.hubs:nemo_gym_task",
    "openenv": "tasks.hubs:openenv_task",
    "harbor": "tasks.hubs:harbor_task",
    "file": "tasks.user_data:file_task",
}


def is_hub_id(id: str) -> bool:
    scheme, sep, _ = id.partition(":")
    return bool(sep) and scheme in SCHEMES


def make(id: str, **config: Any) -> Task:
    scheme, _, rest = id.partition(":")
    if not rest:
        raise TaskError(f"task id {id!r} names no {scheme} environment after the colon")
    module, _, attr = SCHEMES[scheme].partition(":")
    factory = getattr(importlib.import_module(module), attr)
    try:
        task = factory(rest, **config)
    except TypeError as e:  # an unknown config key
        raise unknown_config_keys(factory, config, id, positional=1) or TaskError(f"{id}: bad task config: {e}") from None
    task.id = id
    try:  # the hub's environment exists (an unknown NAME is this one-line error, not a traceback at the first verify)
        task.env
    except (ValueError, ImportError) as e:
        raise TaskError(f"{id}: {str(e).splitlines()[0]}") from None
    return task


class HarborTask(Task):
    """Harbor task folders under one directory; every folder is one problem of ``test`` (Harbor
    tasks are benchmarks: held out). Prompt: ``instruction.md``; verified by ``hubs/harbor-v1``."""

    env_id = "hubs/harbor-v1"
    splits = ("test",)
    heldout_splits = ("test",)

    def __init__(self, root: str, timeout_s: float = 120.0):
        path = Path(root).expanduser()
        if not path.is_dir():
            raise TaskError(f"harbor:{root}: no such folder (give a Harbor task folder, or a folder of them)")
        found = [path] if (path / "instruction.md").is_file() else sorted(p for p in path.iterdir() if (p / "instruction.md").is_file())
        if not found:
            raise TaskError(f"harbor:{root}: no task folder (one with instruction.md) here")
        for folder in found:
            if not (folder / "tests" / "test.sh").is_file():
                raise TaskError(f"harbor:{root}: {folder.name} has no tests/test.sh, which Harbor needs to write the reward")
        self.folders = found
        self.env_kwargs = {"timeout_s": timeout_s}
        self._root = str(path.resolve())

    @property
    def config(self) -> dict[str, Any]:
        return {"root": self._root}

    def size(self, split: str) -> int:
        self.check_split(split)
        return len(self.folders)

    def get(self, split: str, index: int) -> Problem:
        self.check_split(split)
        folder = self.folders[index]
        return Problem(id=f"test/{folder.name}", prompt=(folder / "instruction.md").read_text(),
                       reference={"task_dir": str(folder.resolve())}, metadata={"harbor_task": folder.name})

    def data_sets(self, split: str) -> frozenset[str]:
        return frozenset({f"harbor:{stable_hash(self._root):x}/{split}"})


def harbor_task(rest: str, **config: Any) -> HarborTask:
    return HarborTask(rest, **config)


# -- rows from files (SkyRL-Gym, NeMo Gym) ----------------------------------------------------


def read_rows(path: str | Path, what: str) -> list[dict[str, Any]]:
    """The rows of a JSONL or parquet file; a bad file or line is a `TaskError` naming it."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise TaskError(f"{what}: no such file {path}")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        except Exception as e:
            raise TaskError(f"{what}: {path} is not a readable parquet file: {e}") from None
    else:
        rows = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise TaskError(f"{what}: {path} line {number} is not JSON: {e}") from None
            if not isinstance(row, dict):
                raise TaskError(f"{what}: {path} line {number} is a JSON {type(row).__name__}, not an object")
            rows.append(row)
    if not rows:
        raise TaskError(f"{what}: {path} has no rows")
    return rows


def split_files(data: Any, what: str) -> dict[str, Path]:
    """``{split: file}`` from a task config's ``data``: one path (the ``test`` split) or a mapping."""
    if isinstance(data, (str, Path)):
        data = {"test": data}
    if not isinstance(data, dict) or not data or not all(isinstance(k, str) and isinstance(v, (str, Path)) for k, v in data.items()):
        raise TaskError(f"{what}: data must be a file, or {{split: file}} (e.g. {{train: train.parquet, test: test.parquet}})")
    return {split: Path(path).expanduser().resolve() for split, path in data.items()}


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


VALIDATION_ROWS = 200
"""At most this many training rows (and a tenth of them) become the validation split of an import
whose data has none, chosen by a hash of each row: disjoint from train, the same on every load."""


class RowsTask(Task):
    """Problems from dataset rows, one file per split; ``test`` (and ``validation``) are held out.
    Two splits read from the same file share their data (`Task.data_sets`), so training on one
    while the other is held out is refused. Rows with a train file but no validation file get a
    ``validation`` split carved from the train rows (`VALIDATION_ROWS`), so every built-in config,
    which evaluates on ``validation``, works with them."""

    scheme = ""

    def __init__(self, name: str, files: dict[str, Path]):
        self.name = name
        self.files = files
        self.carved = "train" in files and "validation" not in files
        self.splits = (*files, "validation") if self.carved else tuple(files)
        self.heldout_splits = tuple(s for s in self.splits if s in ("test", "validation"))
        self._rows: dict[str, list[dict[str, Any]]] = {}

    def source(self, split: str) -> Path:
        """The file ``split``'s rows come from (a carved validation split: the train file)."""
        return self.files["train" if split == "validation" and self.carved else split]

    def rows(self, split: str) -> list[dict[str, Any]]:
        self.check_split(split)
        if split not in self._rows:
            if self.carved and split in ("train", "validation"):
                rows = read_rows(self.files["train"], f"{self.scheme}:{self.name} split 'train'")
                size = min(VALIDATION_ROWS, len(rows) // 10) or (1 if len(rows) > 1 else 0)
                order = sorted(range(len(rows)), key=lambda i: stable_hash("validation-from-train", self.scheme, self.name,
                                                                           json.dumps(rows[i], sort_keys=True, default=str)))
                held = set(order[:size])
                self._rows["validation"] = [r for i, r in enumerate(rows) if i in held]
                self._rows["train"] = [r for i, r in enumerate(rows) if i not in held]
            else:
                self._rows[split] = read_rows(self.files[split], f"{self.scheme}:{self.name} split {split!r}")
        return self._rows[split]

    def size(self, split: str) -> int:
        return len(self.rows(split))

    def data_sets(self, split: str) -> frozenset[str]:
        self.check_split(split)
        if self.carved and split == "validation":  # rows of the train file that train does not read
            return frozenset({f"{self.scheme}:{file_digest(self.files['train'])}/validation-slice"})
        return frozenset({f"{self.scheme}:{file_digest(self.files[split])}"})


# -- SkyRL-Gym --------------------------------------------------------------------------------


class SkyRLGymTask(RowsTask):
    """SkyRL dataset rows (``prompt`` as chat messages, ``reward_spec`` / ``reward_model`` with the
    ground truth, ``extra_info``) verified by the SkyRL-Gym environment NAME (``hubs/skyrl-gym-v1``)."""

    scheme = "skyrl-gym"
    env_id = "hubs/skyrl-gym-v1"

    def __init__(self, name: str, data: Any = None, env_config: dict[str, Any] | None = None, imports: list[str] | None = None,
                 pass_reward: float = 1.0, gold: str | None = None):
        if data is None:
            raise TaskError(f"skyrl-gym:{name}: give the dataset rows in the task config, e.g. {{data: {{train: train.parquet, test: test.parquet}}}}")
        super().__init__(name, split_files(data, f"skyrl-gym:{name}"))
        self.env_kwargs = {"env_class": name, "env_config": dict(env_config or {}), "imports": list(imports or []),
                           "pass_reward": pass_reward, "gold": gold}

    @property
    def config(self) -> dict[str, Any]:
        return {"data": {s: str(p) for s, p in self.files.items()}, **{k: v for k, v in self.env_kwargs.items() if k != "env_class"}}

    def get(self, split: str, index: int) -> Problem:
        row = self.rows(split)[index]
        prompt = row.get("prompt")
        if isinstance(prompt, str):
            text = prompt
        elif isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt):
            from envs.hubs.common import text_prompt

            text = text_prompt(prompt)
        else:
            raise TaskError(f"skyrl-gym:{self.name}: row {index} of {self.source(split)} ({split}) has no prompt (chat messages or text)")
        env_class = row.get("env_class")
        if env_class not in (None, self.name):
            raise TaskError(f"skyrl-gym:{self.name}: row {index} of {self.source(split)} ({split}) is for environment {env_class!r}; "
                            f"use task id skyrl-gym:{env_class}")
        return Problem(id=f"{split}/{index}", prompt=text, reference={"row": row}, metadata={"skyrl_env": self.name})


def skyrl_gym_task(rest: str, **config: Any) -> SkyRLGymTask:
    return SkyRLGymTask(rest, **config)


# -- verifiers ----------------------------------------------------------------------------------


class VerifiersTask(Task):
    """The tasks of a verifiers taskset NAME (its ``load()``), verified by ``hubs/verifiers-v1``.

    Splits: ``splits`` maps each split to taskset config overrides (``{train: {dataset_split:
    train}, test: {dataset_split: test}}``); without it the taskset's tasks are split by a hash of
    each prompt, ``test_fraction`` of them held out as ``test`` and ``validation_fraction`` as
    ``validation``. At most ``limit`` tasks are read (an infinite taskset needs it). ``paths``: folders
    to import the taskset's package from when it is not installed (an rlvr export's folder)."""

    env_id = "hubs/verifiers-v1"

    def __init__(self, name: str, taskset: dict[str, Any] | None = None, splits: dict[str, dict[str, Any]] | None = None,
                 test_fraction: float = 0.2, limit: int = 1000, imports: list[str] | None = None, timeout_s: float = 60.0,
                 pass_reward: float = 1.0, gold: str | None = None, validation_fraction: float = 0.1, paths: list[str] | None = None):
        if splits is not None and (not isinstance(splits, dict) or not splits or not all(isinstance(v, dict) for v in splits.values())):
            raise TaskError(f"verifiers:{name}: splits must map each split to taskset config overrides, e.g. {{train: {{}}, test: {{...}}}}")
        if splits and any("task" in v for v in splits.values()):
            raise TaskError(f"verifiers:{name}: the task section is shared by every split: set it under taskset, not splits")
        if not 0 < test_fraction < 1:
            raise TaskError(f"verifiers:{name}: test_fraction must be in (0, 1), got {test_fraction}")
        if not 0 <= validation_fraction < 1 - test_fraction:
            raise TaskError(f"verifiers:{name}: validation_fraction must be in [0, {1 - test_fraction:g}), got {validation_fraction}")
        if limit < 1:
            raise TaskError(f"verifiers:{name}: limit must be >= 1, got {limit}")
        self.name = name
        self.taskset = dict(taskset or {})
        self.split_overrides = splits
        self.test_fraction = test_fraction
        self.validation_fraction = validation_fraction
        self.limit = limit
        self.splits = tuple(splits) if splits else ("train", "test", "validation") if validation_fraction else ("train", "test")
        self.heldout_splits = tuple(s for s in self.splits if s in ("test", "validation"))
        self.env_kwargs = {"taskset": name, "taskset_config": self.taskset, "imports": list(imports or []), "timeout_s": timeout_s,
                           "pass_reward": pass_reward, "gold": gold, "paths": [str(Path(p).expanduser().resolve()) for p in paths or []]}
        self._problems: dict[str, list[Problem]] = {}

    @property
    def config(self) -> dict[str, Any]:
        return {"taskset": self.taskset, "splits": self.split_overrides, "test_fraction": self.test_fraction,
                "validation_fraction": self.validation_fraction, "limit": self.limit,
                **{k: v for k, v in self.env_kwargs.items() if k not in ("taskset", "taskset_config")}}

    def _load(self, overrides: dict[str, Any]) -> list[Problem]:
        from envs.hubs.verifiers import loaded, on_path, task_prompt

        on_path(self.env_kwargs["paths"])
        config = {**self.taskset, **overrides}
        try:
            taskset = loaded(self.name, json.dumps(config, sort_keys=True, default=str), tuple(self.env_kwargs["imports"]))
            tasks = list(itertools.islice(iter(taskset), self.limit))
        except ValueError as e:
            raise TaskError(str(e)) from None
        except Exception as e:  # the taskset's own load() failed
            raise TaskError(f"verifiers:{self.name}: the taskset's load() failed: {type(e).__name__}: {e}".splitlines()[0]) from None
        out = []
        for task in tasks:
            data = task.data
            key = data.id or data.name or (str(data.idx) if data.idx is not None else task.key[:16])
            out.append(Problem(id=str(key), prompt=task_prompt(data), reference={"data": data.model_dump(mode="json", exclude_none=True)},
                               metadata={"verifiers_task": type(task).__name__, "key": task.key}))
        return out

    def _split(self, split: str) -> list[Problem]:
        self.check_split(split)
        if split not in self._problems:
            if self.split_overrides:
                problems = self._load(self.split_overrides[split])
            else:
                everything = self._load({})
                problems = [p for p in everything if hash_split(self.canonical_question(p), self.test_fraction, self.validation_fraction) == split]
            self._problems[split] = [Problem(f"{split}/{p.id}", p.prompt, p.reference, p.metadata) for p in problems]
        return self._problems[split]

    def size(self, split: str) -> int:
        return len(self._split(split))

    def get(self, split: str, index: int) -> Problem:
        return self._split(split)[index]

    def data_sets(self, split: str) -> frozenset[str]:
        self.check_split(split)
        if self.split_overrides:  # splits loaded with the same config are the same data
            config = {**self.taskset, **self.split_overrides[split]}
            return frozenset({f"verifiers:{self.name}:{stable_hash(config):x}"})
        return frozenset({f"verifiers:{self.name}:{stable_hash(self.taskset):x}/{split}"})


def verifiers_task(rest: str, **config: Any) -> VerifiersTask:
    return VerifiersTask(rest, **config)


# -- NeMo Gym -----------------------------------------------------------------------------------


def nemo_gym_datasets(config_path: Path) -> dict[str, Path]:
    """``{dataset name: rows file}`` of a NeMo Gym config's agents (``datasets: [{name, type,
    jsonl_fpath}]``); a relative path is found from the config's folder or the folders above it."""
    import yaml

    what = f"nemo-gym:{config_path}"
    try:
        config = yaml.safe_load(config_path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise TaskError(f"{what}: not a readable NeMo Gym config: {e}".splitlines()[0]) from None
    found: dict[str, Path] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "datasets" and isinstance(value, list):
                    for d in value:
                        if isinstance(d, dict) and d.get("jsonl_fpath"):
                            found[str(d.get("name") or d.get("type") or Path(d["jsonl_fpath"]).stem)] = _locate(config_path, d["jsonl_fpath"], what)
                else:
                    walk(value)

    walk(config)
    if not found:
        raise TaskError(f"{what}: the config names no datasets (an agent's datasets: - jsonl_fpath: ...)")
    return found


def _locate(config_path: Path, rel: str, what: str) -> Path:
    path = Path(rel).expanduser()
    if path.is_absolute():
        return path
    for folder in [config_path.parent, *config_path.parent.parents][:4]:
        if (folder / path).is_file():
            return (folder / path).resolve()
    raise TaskError(f"{what}: dataset {rel} not found next to the config or the folders above it")


class NeMoGymTask(RowsTask):
    """NeMo Gym dataset rows (``responses_create_params.input`` is the prompt) judged by a running
    resources server at ``url`` (``hubs/nemo-gym-v1``). PATH is a NeMo Gym config (its agents'
    datasets become splits by name; ``validation`` and ``test`` are held out) or a rows file (the
    ``test`` split); ``data`` overrides both."""

    scheme = "nemo-gym"
    env_id = "hubs/nemo-gym-v1"

    def __init__(self, path: str, url: str | None = None, token: str | None = None, headers: dict[str, str] | None = None,
                 timeout_s: float = 60.0, data: Any = None, pass_reward: float = 1.0, gold: str | None = None):
        if not url:
            raise TaskError(f"nemo-gym:{path}: give the resources server's address in the task config, e.g. {{url: http://127.0.0.1:8400}}")
        source = Path(path).expanduser()
        if data is not None:
            files = split_files(data, f"nemo-gym:{path}")
        elif source.suffix in (".yaml", ".yml"):
            if not source.is_file():
                raise TaskError(f"nemo-gym:{path}: no such config file")
            files = nemo_gym_datasets(source)
        else:
            files = split_files(str(source), f"nemo-gym:{path}")
        super().__init__(path, files)
        self.env_kwargs = {"url": url, "token": token, "headers": dict(headers or {}), "timeout_s": timeout_s,
                           "pass_reward": pass_reward, "gold": gold}

    @property
    def config(self) -> dict[str, Any]:  # the token is a secret: never recorded in a report
        return {"data": {s: str(p) for s, p in self.files.items()}, **{k: v for k, v in self.env_kwargs.items() if k != "token"}}

    def get(self, split: str, index: int) -> Problem:
        from envs.hubs.common import text_prompt

        row = self.rows(split)[index]
        params = row.get("responses_create_params")
        messages = params.get("input") if isinstance(params, dict) else None
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise TaskError(f"nemo-gym:{self.name}: row {index} of {self.files[split]} has no responses_create_params.input messages")
        if params.get("instructions"):
            messages = [{"role": "system", "content": params["instructions"]}, *messages]
        chat = [{"role": "system" if m.get("role") == "developer" else m.get("role", "user"), "content": m.get("content")} for m in messages]
        return Problem(id=f"{split}/{index}", prompt=text_prompt(chat), reference={"row": row}, metadata={"nemo_gym": self.name})


def nemo_gym_task(rest: str, **config: Any) -> NeMoGymTask:
    return NeMoGymTask(rest, **config)


# -- OpenEnv ------------------------------------------------------------------------------------

TEST_SEED_OFFSET = 1_000_000
"""Seeds of the ``test`` split start here, so no train reset shares a seed with a test one."""


def openenv_schema(url: str, timeout_s: float, headers: dict[str, str]) -> dict[str, Any]:
    import urllib.request

    request = urllib.request.Request(url.rstrip("/") + "/schema", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            schema = json.loads(response.read())
    except Exception as e:
        raise TaskError(f"openenv:{url}: cannot read the server's /schema: {type(e).__name__}: {e}") from None
    if not isinstance(schema, dict) or not isinstance(schema.get("action"), dict):
        raise TaskError(f"openenv:{url}: /schema has no action schema")
    return schema


def _string_fields(schema: dict[str, Any]) -> list[str]:
    return [name for name, spec in (schema.get("properties") or {}).items()
            if name != "metadata" and (spec.get("type") == "string" or {"type": "string"} in spec.get("anyOf", []))]


class OpenEnvTask(Task):
    """Problems from an OpenEnv server: problem ``i`` of a split is the observation of ``reset`` with
    seed ``i`` (``test`` seeds from 1,000,000) and the ``reset`` arguments of the config; the prompt is
    the observation's ``prompt_field``. Verified by ``hubs/openenv-v1`` (a session: the same reset,
    then one step with the completion as ``action_field``). Both fields default to what the server's
    ``/schema`` says (its one required text action field; ``prompt``, else its first text field)."""

    env_id = "hubs/openenv-v1"

    def __init__(self, url: str, size: dict[str, int] | None = None, reset: dict[str, Any] | None = None, action_field: str | None = None,
                 prompt_field: str | None = None, headers: dict[str, str] | None = None, timeout_s: float = 60.0,
                 pass_reward: float = 1.0, gold: str | None = None):
        if not url.startswith(("http://", "https://")):
            raise TaskError(f"openenv:{url}: give the server's http:// or https:// address (openenv:http://127.0.0.1:8000)")
        sizes = size if size is not None else {"train": 256, "test": 64}
        if not isinstance(sizes, dict) or not sizes or not all(isinstance(n, int) and n > 0 for n in sizes.values()):
            raise TaskError(f"openenv:{url}: size must map each split to a number of problems > 0, e.g. {{train: 256, test: 64}}")
        if importlib.util.find_spec("websockets") is None:
            raise TaskError(f"openenv:{url}: OpenEnv sessions run over WebSockets, and the websockets package is not installed: "
                            "pip install 'rlvr[hubs]' (or pip install websockets)")
        self.url = url.rstrip("/")
        self.sizes = dict(sizes)
        self.splits = tuple(sizes)
        self.heldout_splits = tuple(s for s in sizes if s in ("test", "validation"))
        self.reset_kwargs = dict(reset or {})
        schema = openenv_schema(self.url, timeout_s, dict(headers or {}))
        action_fields = _string_fields(schema["action"])
        if action_field is None:
            required = [f for f in action_fields if f in (schema["action"].get("required") or [])]
            if len(required) != 1:
                raise TaskError(f"openenv:{url}: cannot tell which action field takes the model's text (text fields: "
                                f"{', '.join(action_fields) or 'none'}); set action_field in the task config")
            action_field = required[0]
        elif action_field not in action_fields:
            raise TaskError(f"openenv:{url}: the action has no text field {action_field!r} (text fields: {', '.join(action_fields) or 'none'})")
        observation_fields = _string_fields(schema.get("observation") or {}) + ["prompt"]
        self.prompt_field = prompt_field or ("prompt" if "prompt" in (schema.get("observation") or {}).get("properties", {}) else observation_fields[0])
        self.env_kwargs = {"url": self.url, "action_field": action_field, "headers": dict(headers or {}), "timeout_s": timeout_s,
                           "pass_reward": pass_reward, "gold": gold}
        self._cache: dict[tuple[str, int], Problem] = {}

    @property
    def config(self) -> dict[str, Any]:
        return {"size": self.sizes, "reset": self.reset_kwargs, "prompt_field": self.prompt_field,
                **{k: v for k, v in self.env_kwargs.items() if k not in ("url", "headers")}}

    def size(self, split: str) -> int:
        self.check_split(split)
        return self.sizes[split]

    def get(self, split: str, index: int) -> Problem:
        from envs.hubs.common import text_prompt
        from envs.hubs.openenv import OpenEnvSession
        from envs.remote import RemoteError

        self.check_split(split)
        if not 0 <= index < self.sizes[split]:
            raise TaskError(f"openenv:{self.url}: split {split!r} has {self.sizes[split]} problems, no index {index}")
        if (split, index) not in self._cache:
            seed = index + (TEST_SEED_OFFSET if split in self.heldout_splits else 0)
            kwargs = {**self.reset_kwargs, "seed": seed}
            try:
                with OpenEnvSession(self.url, self.env_kwargs["timeout_s"], self.env_kwargs["headers"]) as session:
                    answer = session.reset(**kwargs)
            except RemoteError as e:
                raise TaskError(f"openenv:{self.url}: reset for problem {split}/{index} failed: {e}") from None
            observation = answer.get("observation") or {}
            prompt = observation.get(self.prompt_field)
            if isinstance(prompt, list):
                prompt = text_prompt(prompt)
            if not isinstance(prompt, (str, list)) or not prompt:
                raise TaskError(f"openenv:{self.url}: the reset observation has no text in {self.prompt_field!r} "
                                f"(fields: {', '.join(observation) or 'none'}); set prompt_field in the task config")
            self._cache[(split, index)] = Problem(id=f"{split}/{index}", prompt=prompt, reference={"reset": kwargs, "observation": observation},
                                                  metadata={"openenv": self.url})
        return self._cache[(split, index)]

    def data_sets(self, split: str) -> frozenset[str]:
        self.check_split(split)
        offset = TEST_SEED_OFFSET if split in self.heldout_splits else 0
        return frozenset({f"openenv:{self.url}:{stable_hash(self.reset_kwargs):x}:seeds{offset}+"})


def openenv_task(rest: str, **config: Any) -> OpenEnvTask:
    return OpenEnvTask(rest, **config)


# each factory hands its config on to its class: the keys a misspelled one is listed against
for _factory, _cls in ((harbor_task, HarborTask), (skyrl_gym_task, SkyRLGymTask), (verifiers_task, VerifiersTask),
                       (nemo_gym_task, NeMoGymTask), (openenv_task, OpenEnvTask)):
    _factory.config_of = _cls  # type: ignore[attr-defined]

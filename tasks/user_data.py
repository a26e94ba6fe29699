"""Your own data as a task, without a class: `tasks.from_dataset` in Python, ``task.id=file:PATH``
in a config.

    task = tasks.from_dataset("data/qa.jsonl", question="q", answer="a", id="acme/qa-v1")

The source is a `datasets.Dataset` or `datasets.DatasetDict`, a list of row dicts, or a local
JSONL/JSON/CSV/Parquet file or a folder of them (``datasets`` names a folder's splits by its
file names: ``train.jsonl``, ``test.csv``, ``validation.parquet``, ...). Columns map to a problem:
``question`` (the prompt: text, or chat messages) and ``answer`` (the reference the environment
compares with), each a column name or a function of the row.

**Splits.** The source's own splits are kept. A source without a ``validation`` split gets one
carved from train (``validation_fraction``, default 0.1), and ``test_fraction`` carves a test split
from a source without one (default 0: a source without test has none). Carving goes by a hash of
each row's question (`tasks.base.hash_split`): the splits are disjoint, a row lands in the same
split on every load, and a repeated question stays in one split (case, spacing and a space before
punctuation aside); one question given with different answers is warned about. ``test`` and ``validation`` are
held out: training refuses them, and evaluation during training reads ``validation``, never test.
"""

from __future__ import annotations

import functools
import json
import re
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import envs
from envs.types import Problem
from tasks.base import Task, TaskError, canonical_text, hash_split, stable_hash

Column = str | Callable[[dict[str, Any]], Any]
"""A column name, or a function computing the value from the whole row."""

FORMATS = {".jsonl": "json", ".json": "json", ".gz": "json", ".csv": "csv", ".parquet": "parquet"}
HELDOUT = ("test", "validation")
DEFAULT_VALIDATION_FRACTION = 0.1

_REGISTERED: set[str] = set()  # ids registered by from_dataset: registering one again replaces it


def load_source(source: Any) -> tuple[dict[str, list[dict[str, Any]]], str, str]:
    """``({split: rows}, origin for people, fingerprint)`` of a source (see the module docstring)."""
    import datasets  # heavy: only when data is loaded

    if isinstance(source, datasets.DatasetDict):
        rows = {name: ds.to_list() for name, ds in source.items()}
        return rows, f"a datasets.DatasetDict ({', '.join(source)})", "dsdict:" + ",".join(f"{n}={ds._fingerprint}" for n, ds in source.items())
    if isinstance(source, datasets.Dataset):
        return {"train": source.to_list()}, f"a datasets.Dataset ({source.num_rows} rows)", f"ds:{source._fingerprint}"
    if isinstance(source, (list, tuple)):
        if not all(isinstance(r, dict) for r in source):
            raise TaskError("a list source must hold row dicts")
        rows = [dict(r) for r in source]
        return {"train": rows}, f"a list of {len(rows)} rows", f"rows:{stable_hash(rows):x}"
    if not isinstance(source, (str, Path)):
        raise TaskError(f"cannot read a task from a {type(source).__name__}: give a datasets.Dataset/DatasetDict, a list of rows, "
                        "or the path of a JSONL/CSV/Parquet file or folder")
    path = Path(source).expanduser()
    if path.is_file():
        return {"train": _load_file(path)}, str(path), f"file:{path.resolve()}"
    if path.is_dir():
        return _load_folder(path), f"{path}/", f"dir:{path.resolve()}"
    raise TaskError(f"{source}: no such file or folder")


def _format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise TaskError(f"{path}: unknown data format {path.suffix!r}; use {', '.join(sorted(FORMATS))}")
    return fmt


def _load_file(path: Path) -> list[dict[str, Any]]:
    import datasets

    fmt = _format(path)
    try:
        return datasets.load_dataset(fmt, data_files=str(path), split="train", **_text_columns(fmt, [path])).to_list()
    except Exception as e:
        if fmt == "json":  # datasets refuses a whole file for one bad line: read it line by line to name that line
            from tasks.dataset import LoadReport, _read_json_rows

            report = LoadReport(str(path), file=path)
            rows = _read_json_rows(path, report)
            if report.bad_rows:
                raise TaskError(f"{path}: {len(report.bad_rows)} malformed line(s), first {report.bad_rows[0][0]}: {report.bad_rows[0][1]}") from None
            return rows
        raise TaskError(f"{path}: not a readable {fmt} file: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None


def _load_folder(path: Path) -> dict[str, list[dict[str, Any]]]:
    """A folder's files by split, as `datasets` names them (``train.jsonl``, ``test-00000-of-00001.parquet``, ...)."""
    import datasets

    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FORMATS)
    if not files:
        raise TaskError(f"{path}: no data file (.jsonl, .json, .csv, .parquet) in the folder")
    formats = {_format(p) for p in files}
    if len(formats) > 1:
        raise TaskError(f"{path}: the folder mixes formats ({', '.join(sorted(formats))}); keep one per folder")
    fmt = formats.pop()
    try:
        loaded = datasets.load_dataset(fmt, data_dir=str(path), **_text_columns(fmt, files))
    except Exception as e:
        raise TaskError(f"{path}: datasets could not read the folder: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    return {name: ds.to_list() for name, ds in loaded.items()}


def _text_columns(fmt: str, files: list[Path]) -> dict[str, Any]:
    """`load_dataset` options that keep a CSV's cells as written: every column a string, nothing
    read as missing ("007", "12345678901234567891", "NA" and "None" are answers, not 7.0, a rounded
    float and nothing); an empty cell is an empty string."""
    if fmt != "csv":
        return {}
    import csv

    import datasets

    with files[0].open(newline="", encoding="utf-8-sig") as fh:
        header = next(csv.reader(fh), [])
    if not header:
        return {}
    return {"features": datasets.Features({name: datasets.Value("string") for name in header}), "na_filter": False}


def _value(row: dict[str, Any], column: Column) -> Any:
    return column(row) if callable(column) else row.get(column)


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m and "content" in m for m in value)


class UserDataTask(Task):
    """A task over rows with mapped columns (built by `from_dataset`; ``file:PATH`` ids).

    Args:
        source: See `load_source`.
        question / answer: The prompt and the reference (column names, or functions of the row).
        env: The environment that judges (an id, or an `envs.Environment` such as
            `envs.from_function`'s); default ``math-v1``.
        env_kwargs: Its keyword arguments (with an id).
        solution: A column holding a worked solution (supervised warm-up, ``rlvr sft``).
        id_column: A column of stable row ids (default: the row's position in its split).
        keep: Further columns copied into each problem's metadata.
        rename: ``{source split: split}``, e.g. ``{"dev": "validation"}``.
        validation_fraction: Of train carved into ``validation`` when the source has none
            (default 0.1; 0: none).
        test_fraction: Of train carved into ``test`` when the source has none (default 0).
        max_new_tokens: The completion budget an evaluation gives each answer by default.
        max_bad_fraction: Above this fraction of unusable rows (no question or no answer) in a
            split, loading fails instead of warning.
    """

    def __init__(self, source: Any, *, question: Column = "question", answer: Column = "answer", env: str | envs.Environment = "math-v1",
                 env_kwargs: dict[str, Any] | None = None, solution: Column | None = None, id_column: str | None = None,
                 keep: Sequence[str] = (), rename: dict[str, str] | None = None, validation_fraction: float | None = None,
                 test_fraction: float = 0.0, max_new_tokens: int = 512, max_bad_fraction: float = 0.05):
        raw, self.origin, self._fingerprint = load_source(source)
        for old, new in (rename or {}).items():
            if old not in raw:
                raise TaskError(f"rename: the source has no split {old!r}; its splits: {', '.join(raw)}")
            raw[new] = raw.pop(old)
        self.question, self.answer, self.solution_column, self.id_column, self.keep = question, answer, solution, id_column, tuple(keep)
        self.max_new_tokens, self.max_bad_fraction = max_new_tokens, max_bad_fraction
        self.test_fraction, self.validation_fraction = self._fractions(raw, test_fraction, validation_fraction)
        self._check_columns(raw)
        if isinstance(env, envs.Environment):
            self._env_instance: envs.Environment | None = env
            self.env_id, self.env_kwargs = env.id or f"<{type(env).__name__}>", {}
        else:
            self._env_instance = None
            self.env_id, self.env_kwargs = str(env), dict(env_kwargs or {})
        self.bad_rows: dict[str, list[str]] = {}
        self._problems = self._make_splits(raw)
        self.splits = tuple(self._problems)
        self.heldout_splits = tuple(s for s in self.splits if s in HELDOUT)

    # -- construction ---------------------------------------------------------------------------

    def _fractions(self, raw: dict[str, list], test: float, validation: float | None) -> tuple[float, float]:
        if validation is not None and "validation" in raw:
            raise TaskError("validation_fraction: the source has its own validation split; drop the setting to use it")
        if test and "test" in raw:
            raise TaskError("test_fraction: the source has its own test split; drop the setting to use it")
        validation = 0.0 if "validation" in raw else DEFAULT_VALIDATION_FRACTION if validation is None else validation
        for name, value in (("test_fraction", test), ("validation_fraction", validation)):
            if not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise TaskError(f"{name} must be in [0, 1), got {value!r}")
        if test + validation >= 1:
            raise TaskError(f"test_fraction + validation_fraction must leave rows to train on, got {test} + {validation}")
        if (test or validation) and "train" not in raw:
            raise TaskError(f"the source has no train split to carve test/validation from (its splits: {', '.join(raw)}); "
                            "set validation_fraction=0 or rename one with rename={...: 'train'}")
        return float(test), float(validation)

    def _check_columns(self, raw: dict[str, list[dict[str, Any]]]) -> None:
        columns = {key for rows in raw.values() for row in rows[:1] for key in row}
        for what, column in (("question", self.question), ("answer", self.answer), ("solution", self.solution_column), ("id_column", self.id_column),
                             *(("keep", k) for k in self.keep)):
            if isinstance(column, str) and column not in columns:
                raise TaskError(f"{what}={column!r}: {self.origin} has no such column; its columns: {', '.join(sorted(columns))}")

    def _carve_key(self, row: dict[str, Any]) -> str:
        """The question as the carve hashes it: case, runs of spaces and a space before punctuation
        do not count ("What is 3 plus 4 ?" is "what is 3 plus 4?"), so near-copies share a split."""
        question = _value(row, self.question)
        text = " ".join(str(m.get("content", "")) for m in question) if _is_messages(question) else str(question)
        return re.sub(r"\s+([?.!,;:])", r"\1", canonical_text(text))

    def _warn_conflicting_answers(self, rows: dict[str, list[tuple[str, dict[str, Any]]]]) -> None:
        """Warn when one question (as the carve sees it) comes with different answers: a verifier
        will call one of them wrong whatever the model says."""
        seen: dict[str, tuple[str, str]] = {}
        conflicts: list[str] = []
        for split_rows in rows.values():
            for at, row in split_rows:
                answer = _value(row, self.answer)
                if answer is None or answer == "":
                    continue
                key, text = self._carve_key(row), json.dumps(_jsonable(answer), ensure_ascii=False)
                first = seen.setdefault(key, (at, text))
                if first[1] != text:
                    conflicts.append(f"{first[0]} and {at} ask {key!r} with answers {first[1]} and {text}")
        if conflicts:
            warnings.warn(f"{self.origin}: {len(conflicts)} repeated question(s) with a different answer (first: {conflicts[0]}); "
                          "a verifier will call one of them wrong", RuntimeWarning, stacklevel=4)

    def _make_splits(self, raw: dict[str, list[dict[str, Any]]]) -> dict[str, list[Problem]]:
        rows = {split: [(f"{split} row {i}", r) for i, r in enumerate(split_rows)] for split, split_rows in raw.items()}
        self._warn_conflicting_answers(rows)
        if self.test_fraction or self.validation_fraction:
            train = rows.pop("train")
            carved: dict[str, list] = {"train": [], "test": [], "validation": []}
            for at, row in train:
                carved[hash_split(self._carve_key(row), self.test_fraction, self.validation_fraction)].append((at, row))
            rows["train"] = carved["train"]
            for split, fraction in (("validation", self.validation_fraction), ("test", self.test_fraction)):
                if fraction:
                    if not carved[split]:
                        raise TaskError(f"{self.origin}: {split}_fraction={fraction:g} of {len(train)} train rows carved none; "
                                        f"raise the fraction or give the source a {split} split")
                    rows[split] = carved[split]
        return {split: self._problems_of(split, split_rows) for split, split_rows in rows.items()}

    def _problems_of(self, split: str, rows: list[tuple[str, dict[str, Any]]]) -> list[Problem]:
        problems, bad = [], []
        for at, row in rows:
            question, answer = _value(row, self.question), _value(row, self.answer)
            if not (_is_messages(question) or (isinstance(question, str) and question.strip())):
                bad.append(f"{at}: no question")
                continue
            if answer is None or answer == "":
                bad.append(f"{at}: no answer")
                continue
            metadata = {k: row.get(k) for k in self.keep}
            if self.solution_column is not None:
                metadata["solution"] = _value(row, self.solution_column)
            key = row.get(self.id_column) if self.id_column else len(problems)
            problems.append(Problem(id=f"{split}/{key}", prompt=question, reference=_jsonable(answer), metadata=metadata))
        if bad:
            self.bad_rows[split] = bad
            message = f"{self.origin}: split {split!r}: {len(bad)} of {len(rows)} rows skipped (first: {bad[0]})"
            if len(bad) > self.max_bad_fraction * max(len(rows), 1):
                raise TaskError(message + f" — more than {self.max_bad_fraction:.0%}; fix the data or the column mapping")
            warnings.warn(message, RuntimeWarning, stacklevel=4)
        if not problems:
            raise TaskError(f"{self.origin}: split {split!r} has no rows")
        return problems

    # -- the Task contract ------------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        def shown(column: Any) -> Any:
            return getattr(column, "__qualname__", repr(column)) if callable(column) else column

        return {"source": self.origin, "question": shown(self.question), "answer": shown(self.answer),
                "test_fraction": self.test_fraction, "validation_fraction": self.validation_fraction}

    def size(self, split: str) -> int:
        self.check_split(split)
        return len(self._problems[split])

    def get(self, split: str, index: int) -> Problem:
        self.check_split(split)
        return self._problems[split][index]

    @functools.cached_property
    def env(self) -> envs.Environment:
        if self._env_instance is not None and self.env_id == (self._env_instance.id or f"<{type(self._env_instance).__name__}>"):
            return self._env_instance
        return envs.make(self.env_id, **self.env_kwargs)  # an id, or task.env replaced it

    def data_sets(self, split: str) -> frozenset[str]:
        self.check_split(split)
        return frozenset({f"data:{stable_hash(self._fingerprint):x}/{split}"})

    def data_description(self) -> str:
        carved = [f"{s} {f:g} of train by question hash" for s, f in (("test", self.test_fraction), ("validation", self.validation_fraction)) if f]
        return self.origin + (f" ({'; '.join(carved)})" if carved else "")


def _jsonable(value: Any) -> Any:
    """The reference as JSON data (a `Problem` reference must be): numbers and text as they are."""
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


def from_dataset(source: Any, *, question: Column = "question", answer: Column = "answer", id: str | None = None, **options: Any) -> UserDataTask:
    """A task over ``source`` (see `UserDataTask` for the options: ``env``, ``validation_fraction``,
    ``test_fraction``, ``solution``, ``keep``, ``rename``, ...).

    With ``id`` (versioned, ``name-vN``) it is also registered, so a config names it
    (``task.id=ID``) in this process; registering the same id again from data replaces it.
    """
    import tasks

    task = UserDataTask(source, question=question, answer=answer, **options)
    if id is not None:
        key = str(envs.parse_id(id))
        if key in tasks.TASKS.ids() and key not in _REGISTERED:  # ids() loads the plugins (the built-ins) first
            raise TaskError(f"task {key!r} is already registered (by {tasks.TASKS.spec(key).source}); pick another id for the data")
        tasks.register(key, functools.partial(UserDataTask, source, question=question, answer=answer, **options), override=True,
                       source="python", description=f"rows of {task.origin}")
        _REGISTERED.add(key)
        task.id = key
    return task


def file_task(path: str, **config: Any) -> UserDataTask:
    """The task of a ``file:PATH`` id: ``config`` is `UserDataTask`'s options (``task.config``)."""
    return UserDataTask(path, **config)


file_task.config_of = UserDataTask  # type: ignore[attr-defined]  # its config keys, for the message naming a misspelled one

"""Tasks over static datasets, loaded through Hugging Face `datasets`.

A split's `DataSource` names a Hugging Face dataset id (used when the hub is reachable) and/or a
local file (JSON, JSONL, optionally gzipped, or Parquet). A local file wins when it exists. A
malformed row never sinks the load and is never silently dropped: it is skipped, counted and
reported in the split's `LoadReport` with its file and line; a split with no usable row is an
error that names the file.
"""

from __future__ import annotations

import gzip
import json
import os
import warnings
from abc import abstractmethod
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from envs.types import Problem
from tasks.base import Task, TaskError, stable_hash

DATA_DIR_ENV = "RLVR_DATA_DIR"
"""Environment variable naming a folder that relative local paths are resolved against."""

CHECKOUT_DATA_DIR = Path("..") / "shared" / "data"
"""Where the data folder is looked for beside an rlvr checkout's root when ``$RLVR_DATA_DIR`` is
unset (the layout scripts/test.sh points ``$RLVR_DATA_DIR`` at)."""


def data_dir() -> Path | None:
    """The folder relative local data paths are resolved against: ``$RLVR_DATA_DIR``, else, when
    rlvr runs from a checkout (its root holds pyproject.toml), ``../shared/data`` beside that root
    if it exists; None when neither applies."""
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    root = Path(__file__).resolve().parents[1]
    beside = (root / CHECKOUT_DATA_DIR).resolve()
    return beside if (root / "pyproject.toml").is_file() and beside.is_dir() else None


def _looked_in() -> str:
    """Where relative data paths were looked for, and how to point elsewhere (for error messages)."""
    folder = data_dir()
    if os.environ.get(DATA_DIR_ENV):
        return f"${DATA_DIR_ENV} ({folder}) and the current directory"
    if folder is not None:
        return f"{folder} (the checkout's {CHECKOUT_DATA_DIR}; set ${DATA_DIR_ENV} to use another folder) and the current directory"
    return f"the current directory (${DATA_DIR_ENV} is unset and there is no {CHECKOUT_DATA_DIR} beside the checkout)"


HUB_PROBE_TIMEOUT_S = 3.0
"""How long to wait for a connection to the hub before declaring it unreachable."""


class DataUnavailable(TaskError):
    """A split's data is neither in a local file nor reachable on the hub (offline, no copy here)."""


@dataclass(frozen=True)
class DataSource:
    """Where one split's rows come from.

    Attributes:
        local: A file path; relative paths are resolved against `data_dir()` (``$RLVR_DATA_DIR``,
            else ``../shared/data`` beside a checkout) and then the current directory.
        hf_id: A Hugging Face dataset id, used when no local file is found.
        hf_config: The dataset configuration name, if any.
        hf_split: The split name on the hub.
    """

    local: str | None = None
    hf_id: str | None = None
    hf_config: str | None = None
    hf_split: str = "test"

    def local_path(self) -> Path | None:
        if not self.local:
            return None
        candidates = [Path(self.local).expanduser()]
        folder = data_dir()
        if not candidates[0].is_absolute() and folder is not None:
            candidates.insert(0, folder / self.local)
        return next((p for p in candidates if p.exists()), None)

    def describe(self) -> str:
        return " or ".join(x for x in (self.local and f"file {self.local}", self.hf_id and f"hub {self.hf_id}") if x)


@dataclass
class LoadReport:
    """What loading one split found.

    Attributes:
        origin: The file or hub id the rows came from.
        rows: Rows read.
        bad_rows: ``[(location, reason)]`` for every row skipped, located in the file (``path:line``
            for JSON Lines, else ``origin row N``), not in the split.
        file: The local file the rows came from, if any.
        row_lines: The file line of each loaded row, for JSON Lines files (found on first use).
    """

    origin: str
    rows: int = 0
    bad_rows: list[tuple[str, str]] = field(default_factory=list)
    file: Path | None = None
    row_lines: list[int] | None = None

    def location(self, index: int) -> str:
        """Where loaded row ``index`` (its position among all the rows loaded, before any split
        filter) is in its source: ``path:line`` for a JSON Lines file, else ``origin row N``."""
        if self.row_lines is None and self.file is not None and self.file.suffix != ".parquet":
            text = _read_text(self.file)
            self.row_lines = _record_lines(text) if _is_json_lines(text) else []
        if self.row_lines and index < len(self.row_lines):
            return f"{self.origin}:{self.row_lines[index]}"
        return f"{self.origin} row {index}"

    def summary(self) -> str:
        s = f"{self.rows} rows from {self.origin}"
        if self.bad_rows:
            s += f"; {len(self.bad_rows)} malformed rows skipped (first: {self.bad_rows[0][0]}: {self.bad_rows[0][1]})"
        return s


def _is_json_lines(text: str) -> bool:
    return not text.lstrip().startswith("[")


def _record_lines(text: str) -> list[int]:
    """The line numbers of the non-blank lines of a JSON Lines text: where its records are."""
    return [n for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def _read_text(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read()


def _read_json_rows(path: Path, report: LoadReport) -> list[dict[str, Any]]:
    """Rows of a JSON array or JSONL file, with malformed lines recorded in ``report`` (and the
    line of every good row in ``report.row_lines``)."""
    text = _read_text(path)
    if not _is_json_lines(text):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TaskError(f"{path}: not valid JSON at line {e.lineno} column {e.colno}: {e.msg}") from e
        rows = []
        for i, row in enumerate(data):
            if isinstance(row, dict):
                rows.append(row)
            else:
                report.bad_rows.append((f"{path}[{i}]", f"expected an object, got {type(row).__name__}"))
        return rows
    rows = []
    report.row_lines = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            report.bad_rows.append((f"{path}:{lineno}", f"invalid JSON: {e.msg} at column {e.colno}"))
            continue
        if not isinstance(row, dict):
            report.bad_rows.append((f"{path}:{lineno}", f"expected an object, got {type(row).__name__}"))
            continue
        rows.append(row)
        report.row_lines.append(lineno)
    return rows


def load_rows(source: DataSource) -> tuple[list[dict[str, Any]], LoadReport]:
    """Load a split's raw rows through `datasets` (local file first, then the hub)."""
    import datasets  # heavy: imported only when data is actually loaded

    path = source.local_path()
    if path is not None:
        report = LoadReport(str(path), file=path)
        fmt = "parquet" if path.suffix == ".parquet" else "json"
        try:
            ds = datasets.load_dataset(fmt, data_files=str(path), split="train")
            rows = ds.to_list()
        except Exception:
            if fmt != "json":
                raise
            # datasets refuses a file with any malformed line; read it line by line to find,
            # count and skip the bad rows instead of losing the whole split.
            rows = _read_json_rows(path, report)
        report.rows = len(rows) + len(report.bad_rows)
        return rows, report
    if source.hf_id:
        where = f" (no local file {source.local!r} in {_looked_in()})" if source.local else ""
        fix = f"set ${DATA_DIR_ENV} to a folder that holds {source.local!r}, or " if source.local else ""
        if not _hub_offline() and not hub_reachable():
            # fail now: `datasets` would retry the hub for about 30 s before failing
            raise DataUnavailable(
                f"cannot load {source.hf_id!r}{where}: the Hugging Face hub ({_hub_endpoint()}) cannot be reached; "
                f"{fix}HF_DATASETS_OFFLINE=1 to use a copy in the datasets cache")
        try:
            ds = datasets.load_dataset(source.hf_id, source.hf_config, split=source.hf_split)
        except Exception as e:
            raise DataUnavailable(f"could not load {source.hf_id!r} split {source.hf_split!r} from the Hugging Face hub{where}: "
                                  f"{type(e).__name__}: {e}" + (f"; {fix.removesuffix(', or ')}" if fix else "")) from e
        rows = ds.to_list()
        return rows, LoadReport(f"hf:{source.hf_id}", rows=len(rows))
    raise DataUnavailable(f"data file {source.local!r} not found (looked in {_looked_in()}) and no hub id is set; "
                          f"set ${DATA_DIR_ENV} to the folder that holds it")


def _hub_offline() -> bool:
    """Whether the user put `datasets`/the hub in offline mode (it then reads only its cache, quickly)."""
    return any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def hub_reachable(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the hub opens within ``timeout_s`` (name lookup included, in a
    daemon thread so that a slow resolver cannot hold the caller). Behind a proxy, assumed yes."""
    import socket
    import threading
    from urllib.parse import urlsplit

    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlsplit(_hub_endpoint())
    result: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((url.hostname or "", url.port or (443 if url.scheme == "https" else 80)), timeout=timeout_s).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(result and result[0])


class DatasetTask(Task):
    """A task over static splits. Subclasses set `sources` and implement `row_to_problem`.

    Attributes:
        sources: ``{split: DataSource}``.
        required_fields: Row fields that must be present and not null (`datasets` fills a field
            missing from some rows with null, so absence alone would go unnoticed).
        max_bad_fraction: Above this fraction of malformed rows, loading fails instead of warning.
    """

    sources: dict[str, DataSource] = {}
    required_fields: tuple[str, ...] = ()
    row_errors: tuple[type[Exception], ...] = (KeyError, ValueError, TypeError)
    """Exceptions of `row_to_problem` that mark a row as malformed (anything else is a bug)."""
    max_bad_fraction: float = 0.05
    published_sizes: dict[str, int] = {}
    """Problems per split as this task loads the published data (after carving a validation split and
    leaving out malformed rows): what the task reference shows without loading anything; a test
    loads the data where it is present and checks them."""
    validation_from_train: int = 0
    """A data set without a validation split gets one of this many train problems (0: none): the
    ones whose `validation_rank` is lowest, a hash of the task id and the problem id, so the choice
    is fixed, spread over the file, and independent of row order. Train keeps the rest: the two are
    disjoint, and the test split is untouched."""

    @property
    def splits(self) -> tuple[str, ...]:  # type: ignore[override]
        return (*self.sources, "validation") if self.carves_validation else tuple(self.sources)

    @property
    def carves_validation(self) -> bool:
        """Whether ``validation`` is a slice of the data's train split (`validation_from_train`)."""
        return self.validation_from_train > 0 and "train" in self.sources and "validation" not in self.sources

    def validation_rank(self, problem: Problem) -> int:
        """Order in which train problems are taken for a carved validation split."""
        return stable_hash("validation-from-train", self.id, problem.id)

    @abstractmethod
    def row_to_problem(self, row: dict[str, Any], split: str, index: int) -> Problem:
        """Convert one raw row; raise KeyError/ValueError/TypeError for a malformed row."""

    def keep_row(self, row: dict[str, Any], split: str, source: DataSource) -> bool:
        """Whether a loaded row belongs to ``split`` (for files that hold several splits)."""
        return True

    def usable_train(self, problems: list[Problem]) -> list[Problem]:
        """The data's train problems that training (and a carved validation split) may use: all of
        them, unless a subclass knows some leak into a held-out split."""
        return problems

    def size(self, split: str) -> int:
        return len(self._split(split))

    def data_description(self) -> str:
        """The local files (under ``$RLVR_DATA_DIR``) and hub datasets the splits are read from."""
        files = sorted({s.local for s in self.sources.values() if s.local})
        hub = sorted({s.hf_id for s in self.sources.values() if s.hf_id})
        where = [", ".join(f"`$RLVR_DATA_DIR/{f}`" for f in files)] if files else []
        where += [f"the hub ({', '.join(f'`{h}`' for h in hub)})"] if hub else []
        return ", else ".join(where)

    def get(self, split: str, index: int) -> Problem:
        return self._split(split)[index]

    def load_report(self, split: str) -> LoadReport:
        self._split(split)
        return self._reports["train" if split == "validation" and self.carves_validation else split]

    @cached_property
    def _loaded(self) -> dict[str, list[Problem]]:
        return {}

    @cached_property
    def _reports(self) -> dict[str, LoadReport]:
        return {}

    def _split(self, split: str) -> list[Problem]:
        self.check_split(split)
        if split in self._loaded:
            return self._loaded[split]
        if split in ("train", "validation") and self.carves_validation:
            full = self.usable_train(self._read("train"))
            held = {p.id for p in sorted(full, key=self.validation_rank)[: self.validation_from_train]}
            self._loaded["validation"] = [p for p in full if p.id in held]
            self._loaded["train"] = [p for p in full if p.id not in held]
        elif split == "train":
            self._loaded[split] = self.usable_train(self._read(split))
        else:
            self._loaded[split] = self._read(split)
        return self._loaded[split]

    def _read(self, split: str) -> list[Problem]:
        """The problems of the data's ``split``, its load report kept; malformed rows are counted,
        and fail the load above `max_bad_fraction`."""
        loaded, report = load_rows(self.sources[split])
        # (position among the loaded rows, row): a bad row is reported where it is in the file
        rows = [(at, r) for at, r in enumerate(loaded) if self.keep_row(r, split, self.sources[split])]
        report.rows = len(rows) + len(report.bad_rows)
        problems = []
        for i, (at, row) in enumerate(rows):
            try:
                missing = [f for f in self.required_fields if row.get(f) is None]
                if missing:
                    raise KeyError(f"missing field(s) {', '.join(map(repr, missing))}")
                problem = self.row_to_problem(row, split, i)
                if problem.prompt in (None, "") or problem.reference is None:
                    raise ValueError("empty prompt or reference")
                problems.append(problem)
            except self.row_errors as e:
                report.bad_rows.append((report.location(at), f"{type(e).__name__}: {e}"))
        if not problems:
            raise TaskError(f"{self.id}: split {split!r} has no usable rows ({report.summary()})")
        if report.bad_rows:
            msg = f"{self.id}: split {split!r}: {report.summary()}"
            if len(report.bad_rows) > self.max_bad_fraction * max(report.rows, 1):
                raise TaskError(msg + f" — more than {self.max_bad_fraction:.0%} of rows are malformed; fix the file")
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
        self._reports[split] = report
        return problems

"""Export to SkyRL-Gym: a package that registers the environment with ``skyrl_gym`` and ships its
dataset rows (``rlvr envs export ID --to skyrl-gym --out DIR``).

Written::

    DIR/pyproject.toml
    DIR/NAME/__init__.py      registers NAME with skyrl_gym (entry point rlvr.hubs.skyrl_gym_env:RlvrTextEnv)
    DIR/NAME/data/SPLIT.jsonl the frozen problems, rlvr_export.json their checksums
    DIR/NAME/data/SPLIT.parquet  SkyRL's dataset rows (prompt, env_class, reward_spec, extra_info)

SkyRL's trainer reads the parquet files (``data.train_data=[.../train.parquet]``, and
``data.val_data=[.../test.parquet]`` to evaluate on the held-out split) and builds
``skyrl_gym.make(row["env_class"], extras=row)`` per sample, after ``import NAME``.

A row (`dataset_rows`)::

    {"data_source": TASK, "env_class": NAME,
     "prompt": [{"role": "user", "content": QUESTION + ANSWER FORMAT}],
     "reward_spec": {"method": "rule", "ground_truth": REFERENCE (JSON text unless a string)},
     "extra_info": {"split": SPLIT, "index": I, "rlvr_problem": PROBLEM (JSON text in parquet)}}

The environment judges ``extra_info``'s ``split`` and ``index`` in the exported problems (read only if
they match the checksums the package's code carries), and refuses a row that differs from the one
the export wrote for them (a changed gold, prompt or problem), naming the parquet file.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlvr.hubs import require
from rlvr.hubs.common import ExportRequest, ExportResult, literal, package_pyproject, write

PACKAGE_INIT = '''"""{env} on {task}, exported by rlvr for SkyRL-Gym. Importing this package registers the
environment {name!r} with skyrl_gym; `rows(split)` gives SkyRL's dataset rows. Rewards come from rlvr's
own verifier (install rlvr beside skyrl-gym)."""

import json
from pathlib import Path

import skyrl_gym
from skyrl_gym.envs.registration import registry

NAME = {name!r}
DATA = Path(__file__).parent / "data"
RLVR = {{**{rlvr}, "data": str(DATA)}}

if NAME not in registry:
    skyrl_gym.register(id=NAME, entry_point="rlvr.hubs.skyrl_gym_env:RlvrTextEnv", kwargs={{"rlvr": RLVR}})


def rows(split: str) -> list[dict]:
    """SkyRL's dataset rows of ``split`` (the problems rlvr exported, checked against their checksum)."""
    from rlvr.hubs.skyrl_gym import dataset_rows

    return dataset_rows(DATA, split, NAME, RLVR["checksums"].get(split))
'''


def dataset_rows(folder, split: str, env_class: str, checksum: str | None = None) -> list[dict]:
    """SkyRL rows for the problems exported to ``folder`` (see the module docstring), read only if
    they match the manifest's checksum and ``checksum``."""
    from rlvr.hubs.common import read_split

    folder = Path(folder)
    manifest = json.loads((folder / "rlvr_export.json").read_text())
    env = _env(manifest)
    return [row_for(p, split, index, env_class, manifest.get("task") or manifest["env"], env)
            for index, p in enumerate(read_split(folder, split, checksum))]


def _env(manifest: dict):
    import envs

    return envs.make(manifest["env"], **manifest.get("env_kwargs", {}))


def row_for(problem, split: str, index: int, env_class: str, source: str, env) -> dict:
    """The SkyRL row of ``problem`` (index ``index`` of ``split``)."""
    from rlvr.hubs.session import hub_prompt

    reference = problem.reference if isinstance(problem.reference, str) else json.dumps(problem.reference, sort_keys=True)
    return {"data_source": source, "prompt": hub_prompt(env, problem), "env_class": env_class,
            "reward_spec": {"method": "rule", "ground_truth": reference},
            "extra_info": {"split": split, "index": index, "rlvr_problem": problem.to_dict()}}


def same_row(row: dict, expected: dict) -> bool:
    """Whether dataset row ``row`` (as SkyRL passes it: from parquet the problem is JSON text) says
    what the export wrote; fields SkyRL or the user added are allowed, ``extra_info`` is required."""
    info = dict(row.get("extra_info") or {})
    if isinstance(info.get("rlvr_problem"), str):
        try:
            info["rlvr_problem"] = json.loads(info["rlvr_problem"])
        except ValueError:
            return False
    want = expected["extra_info"]
    # SkyRL's dataset may pass the prompt and env_class beside the extras rather than in them: a field
    # that is there must match (the model is shown the export's own prompt by init either way)
    present = [k for k in ("prompt", "reward_spec", "env_class") if k in row]
    return (all(_plain(row[k]) == _plain(expected[k]) for k in present)
            and all(_plain(info.get(k)) == _plain(v) for k, v in want.items()))


def _plain(value):
    """``value`` without the None fields a parquet round trip adds to structs."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def export(request: ExportRequest) -> ExportResult:
    require("skyrl_gym", "skyrl-gym")
    out, name = request.out, request.name
    package = out / name
    files = request.write_data(package / "data")
    rlvr = {"env": request.env_id, "env_kwargs": request.env_kwargs, "timeout_s": 30.0, "checksums": request.checksums(),
            "heldout": [s for s in request.splits if s in request.heldout]}
    files.append(write(package / "__init__.py", PACKAGE_INIT.format(env=request.env_id, task=request.task.id if request.task else "examples",
                                                                   name=name, rlvr=literal(rlvr))))
    files.append(write(out / "pyproject.toml", package_pyproject(name, "An rlvr environment exported for SkyRL-Gym", ">=3.10", ["rlvr", "skyrl-gym>=0.4"])))
    import pyarrow as pa
    import pyarrow.parquet as pq

    for split in request.splits:
        rows = dataset_rows(package / "data", split, name, request.checksums()[split])
        # one parquet schema for every task: the problem (whose reference varies in shape) as a JSON string
        table = pa.Table.from_pylist([{**r, "extra_info": {**r["extra_info"], "rlvr_problem": json.dumps(r["extra_info"]["rlvr_problem"])}}
                                      for r in rows])
        path = package / "data" / f"{split}.parquet"
        pq.write_table(table, path)
        files.append(path)
    data = (package / "data").resolve()
    heldout = [s for s in request.splits if s in request.heldout and s != request.default_split]
    run = [f"pip install -e {out}",
           f"python -c \"import {name}, skyrl_gym; env = skyrl_gym.make('{name}', extras={name}.rows('{request.default_split}')[0])\"",
           f"SkyRL: data.train_data=['{data}/{request.default_split}.parquet']"
           + (f" data.val_data=['{data}/{heldout[0]}.parquet']   (held out: evaluation only)" if heldout else "")]
    return ExportResult("skyrl-gym", out, files, run)

"""Export to SkyRL-Gym: a package that registers the environment with ``skyrl_gym`` and ships its
dataset rows (``rlvr envs export ID --to skyrl-gym --out DIR``).

Written::

    DIR/pyproject.toml
    DIR/NAME/__init__.py      registers NAME with skyrl_gym (entry point rlvr.hubs.skyrl_gym_env:RlvrTextEnv)
    DIR/NAME/data/SPLIT.jsonl the frozen problems, rlvr_export.json their checksums
    DIR/NAME/data/SPLIT.parquet  SkyRL's dataset rows (prompt, env_class, reward_spec, extra_info)

SkyRL's trainer reads the parquet files (``data.train_data=[.../train.parquet]``) and builds
``skyrl_gym.make(row["env_class"], extras=row)`` per sample, after ``import NAME``.
"""

from __future__ import annotations

import json

from rlvr.hubs import require
from rlvr.hubs.common import ExportRequest, ExportResult, package_pyproject, write

PACKAGE_INIT = '''"""{env} on {task}, exported by rlvr for SkyRL-Gym. Importing this package registers the
environment {name!r} with skyrl_gym; `rows(split)` gives SkyRL's dataset rows. Rewards come from rlvr's
own verifier (install rlvr beside skyrl-gym)."""

import json
from pathlib import Path

import skyrl_gym
from skyrl_gym.envs.registration import registry

NAME = {name!r}
DATA = Path(__file__).parent / "data"
RLVR = {rlvr}

if NAME not in registry:
    skyrl_gym.register(id=NAME, entry_point="rlvr.hubs.skyrl_gym_env:RlvrTextEnv", kwargs={{"rlvr": RLVR}})


def rows(split: str) -> list[dict]:
    """SkyRL's dataset rows of ``split`` (the problems rlvr exported, checked against their checksum)."""
    from rlvr.hubs.skyrl_gym import dataset_rows

    return dataset_rows(DATA, split, NAME)
'''


def dataset_rows(folder, split: str, env_class: str) -> list[dict]:
    """SkyRL rows for the problems exported to ``folder`` (see the module docstring)."""
    from rlvr.hubs.common import read_split

    manifest = json.loads((folder / "rlvr_export.json").read_text())
    out = []
    for index, p in enumerate(read_split(folder, split)):
        prompt = p.prompt if not isinstance(p.prompt, str) else [{"role": "user", "content": p.prompt}]
        out.append({"data_source": manifest.get("task") or manifest["env"], "prompt": prompt, "env_class": env_class,
                    "reward_spec": {"method": "rule", "ground_truth": p.reference if isinstance(p.reference, str) else json.dumps(p.reference)},
                    "extra_info": {"split": split, "index": index, "rlvr_problem": p.to_dict()}})
    return out


def export(request: ExportRequest) -> ExportResult:
    require("skyrl_gym", "skyrl-gym")
    out, name = request.out, request.name
    package = out / name
    files = request.write_data(package / "data")
    rlvr = {"env": request.env_id, "env_kwargs": request.env_kwargs, "timeout_s": 30.0}
    files.append(write(package / "__init__.py", PACKAGE_INIT.format(env=request.env_id, task=request.task.id if request.task else "examples",
                                                                   name=name, rlvr=json.dumps(rlvr))))
    files.append(write(out / "pyproject.toml", package_pyproject(name, "An rlvr environment exported for SkyRL-Gym", ">=3.10", ["rlvr", "skyrl-gym>=0.4"])))
    import pyarrow as pa
    import pyarrow.parquet as pq

    for split in request.splits:
        rows = dataset_rows(package / "data", split, name)
        # one parquet schema for every task: the problem (whose reference varies in shape) as a JSON string
        table = pa.Table.from_pylist([{**r, "extra_info": {**r["extra_info"], "rlvr_problem": json.dumps(r["extra_info"]["rlvr_problem"])}}
                                      for r in rows])
        path = package / "data" / f"{split}.parquet"
        pq.write_table(table, path)
        files.append(path)
    return ExportResult("skyrl-gym", out, files, [f"pip install -e {out}", f"python -c \"import {name}, skyrl_gym; "
                                                  f"env = skyrl_gym.make('{name}', extras={name}.rows('{next(iter(request.splits))}')[0])\""])

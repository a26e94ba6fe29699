"""Export to OpenEnv: an OpenEnv environment package whose server forwards each episode to rlvr's
environment server (``rlvr envs export ID --to openenv --out DIR``).

Written::

    DIR/openenv.yaml              the manifest (spec_version 1, runtime fastapi, app server.app:app)
    DIR/pyproject.toml            depends on openenv-core only (not on rlvr)
    DIR/models.py                 RlvrAction (message), RlvrObservation (prompt, observation, verdict)
    DIR/client.py                 RlvrEnv, an OpenEnv EnvClient (WebSocket sessions)
    DIR/server/app.py             openenv's create_app over RlvrEnvironment: /reset /step /state /ws ...
    DIR/server/rlvr_environment.py  OpenEnv's Environment over server/rlvr_episodes.py
    DIR/server/rlvr_episodes.py   reset picks (split, index): a seed below 1,000,000 a training problem,
                                  from 1,000,000 a held-out one, or split= and index= named; it opens
                                  the episode on rlvr's server (POST /session/start with {split, index,
                                  checksum}: the server holds the problems); step sends the model's
                                  turn (POST /session/act): a tool's output comes back as the
                                  observation (multi-turn), the verdict ends it with rlvr's reward.
                                  The data files are read only if they match the checksums it carries.
    DIR/data/                     the frozen problems, rlvr_export.json their checksums

The OpenEnv server needs ``RLVR_ENV_URL`` (rlvr's environment server, `rlvr envs serve`) and
``RLVR_ENV_TOKEN``; rlvr runs in its own environment, so OpenEnv's package never shares one with
rlvr's pins. A failure of rlvr's server (down, refused, too slow) ends the episode with reward 0 and a
verdict whose status is ``error`` or ``timeout`` and whose reason says what happened.
"""

from __future__ import annotations

from rlvr.hubs.common import ExportRequest, ExportResult, write

TEST_SEED_OFFSET = 1_000_000
"""Seeds from here play the held-out split (as `tasks.hubs.OpenEnvTask` numbers test seeds)."""

MANIFEST = """spec_version: 1
name: {name}
type: space
runtime: fastapi
app: server.app:app
port: 8000
"""

PYPROJECT = """[project]
name = "{dist}"
version = "0.1.0"
description = "{env} on {task}, exported by rlvr as an OpenEnv environment (rewards from rlvr's environment server)"
requires-python = ">=3.10"
dependencies = ["openenv-core>=0.3"]

[project.scripts]
server = "{name}.server.app:main"

[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
packages = ["{name}", "{name}.server"]
package-dir = {{"{name}" = ".", "{name}.server" = "server"}}

[tool.setuptools.package-data]
{name} = ["data/*", "openenv.yaml"]
"""

MODELS = '''"""Action and observation of {env} on {task} (exported by rlvr)."""

from typing import Any, Optional

from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class RlvrAction(Action):
    """The model's turn: its text, as it wrote it."""

    message: str = Field(..., description="The model's turn")


class RlvrObservation(Observation):
    """After reset: the problem's prompt. After a step: a tool's output (the episode goes on) or,
    once the episode is over, rlvr's verdict (reward, passed, status and its reason)."""

    prompt: Any = Field(default="", description="The prompt: text, or chat messages")
    problem_id: str = Field(default="", description="The problem's id in its split")
    split: Optional[str] = Field(default=None, description="The split played (held-out ones are for evaluation)")
    observation: Optional[str] = Field(default=None, description="A tool's output for the next turn")
    verdict: Optional[dict] = Field(default=None, description="rlvr's verdict once the episode is over")
'''

CLIENT = '''"""A client of the exported environment: OpenEnv's EnvClient (a WebSocket session per client)."""

from typing import Dict

from openenv.core import EnvClient
from openenv.core.client_types import StepResult
from openenv.core.env_server.types import State

try:
    from .models import RlvrAction, RlvrObservation
except ImportError:
    from models import RlvrAction, RlvrObservation


class RlvrEnv(EnvClient[RlvrAction, RlvrObservation, State]):
    def _step_payload(self, action: RlvrAction) -> Dict:
        return {"message": action.message}

    def _parse_result(self, payload: Dict) -> StepResult[RlvrObservation]:
        data = payload.get("observation", {})
        observation = RlvrObservation(**{k: v for k, v in data.items() if k in RlvrObservation.model_fields},
                                      done=payload.get("done", False), reward=payload.get("reward"))
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: Dict) -> State:
        return State(**payload)
'''

EPISODES = '''\"\"\"{env} on {task}: the episodes of this export, played on rlvr's environment server
(RLVR_ENV_URL, RLVR_ENV_TOKEN) by split and index; plain Python, no OpenEnv import.

Splits: {splits_doc}.
A reset names its split (``split=...``, with ``index``), or gives a seed: seeds below {offset} play {train_split!r} (training), seeds from {offset} play {heldout_split!r} (held out), as
rlvr's openenv: import numbers them. The data files are read only if they match the checksums below; rlvr's
server judges the problem it holds at that split and index (checked against the export's checksum),
so the reference answer never travels.
\"\"\"

import hashlib
import json
import os
import random
import socket
import urllib.error
import urllib.request
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"
CHECKSUMS = {checksums}
HELDOUT = {heldout}
TRAIN_SPLIT = {train_split!r}
HELDOUT_SPLIT = {heldout_split!r}
TEST_SEED_OFFSET = {offset}
TIMEOUT_S = float(os.environ.get("RLVR_ENV_TIMEOUT", "300"))


class DataChanged(Exception):
    \"\"\"An exported data file no longer matches its checksum.\"\"\"


class RlvrError(Exception):
    def __init__(self, reason, timeout=False):
        super().__init__(reason)
        self.timeout = timeout


_PROBLEMS = {{}}


def problems(split):
    \"\"\"[(problem id, checksum of the problem)] of ``split``, from its file if it matches its checksum.\"\"\"
    if split not in CHECKSUMS:
        raise RlvrError(f"no split {{split!r}}; splits: {{', '.join(CHECKSUMS)}}")
    if split not in _PROBLEMS:
        path = DATA / f"{{split}}.jsonl"
        data = path.read_bytes()
        if "sha256:" + hashlib.sha256(data).hexdigest() != CHECKSUMS[split]:
            raise DataChanged(f"{{path}} does not match its checksum in server/rlvr_episodes.py: the exported data was changed")
        lines = [line + b"\\n" for line in data.split(b"\\n") if line.strip()]
        _PROBLEMS[split] = [(json.loads(line)["id"], "sha256:" + hashlib.sha256(line).hexdigest()) for line in lines]
    return _PROBLEMS[split]


def check_data():
    \"\"\"Every split's file checked (the server refuses to start on changed data).\"\"\"
    for split in CHECKSUMS:
        problems(split)


def choose(seed=None, split=None, index=None):
    \"\"\"(split, index) a reset plays (see the module docstring).\"\"\"
    if split is None:
        if seed is not None and int(seed) >= TEST_SEED_OFFSET:
            split, seed = HELDOUT_SPLIT, int(seed) - TEST_SEED_OFFSET
        else:
            split = TRAIN_SPLIT
        if split is None:
            raise RlvrError("this export has no such split for seeded resets (splits: " + ", ".join(CHECKSUMS)
                            + "): reset(split=..., index=...)")
    items = problems(split)
    if index is None:
        index = int(seed) if seed is not None else random.randrange(len(items))
    return split, int(index) % len(items)


def call(path, body):
    url = os.environ.get("RLVR_ENV_URL", "").rstrip("/")
    if not url:
        raise RlvrError("RLVR_ENV_URL is not set: start rlvr's environment server (rlvr envs serve) and point RLVR_ENV_URL at it")
    headers = {{"Content-Type": "application/json"}}
    if os.environ.get("RLVR_ENV_TOKEN"):
        headers["Authorization"] = "Bearer " + os.environ["RLVR_ENV_TOKEN"]
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as e:
        raise RlvrError(f"{{url}}{{path}} answered HTTP {{e.code}}: {{e.read()[:300].decode('utf-8', 'replace')}}") from None
    except (TimeoutError, socket.timeout):
        raise RlvrError(f"{{url}}{{path}} did not answer within {{TIMEOUT_S:g}} s", timeout=True) from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise RlvrError(f"{{url}}{{path}} failed: {{e}}") from None


def failed(error):
    status = "timeout" if getattr(error, "timeout", False) else "error"
    return {{"reward": 0.0, "passed": False, "status": status, "info": {{"error": str(error)}}}}


class Episodes:
    \"\"\"One client's episodes: ``start`` opens one on rlvr's server, ``act`` sends each model turn.
    Both answer a dict: prompt / observation / verdict, problem_id, split, done, reward.\"\"\"

    def __init__(self):
        self.session = None
        self.problem_id = ""
        self.split = None

    def start(self, seed=None, split=None, index=None):
        self.close()
        try:
            split, index = choose(seed, split, index)
        except RlvrError as e:
            return self._over(failed(e))
        self.split = split
        self.problem_id, checksum = problems(split)[index]
        try:
            opened = call("/session/start", {{"problem": {{"split": split, "index": index, "checksum": checksum}}}})
        except RlvrError as e:
            return self._over(failed(e))
        self.session = opened["session"]
        return {{"prompt": opened["prompt"], "problem_id": self.problem_id, "split": split, "done": False, "reward": 0.0}}

    def act(self, text):
        if self.session is None:
            return self._over(failed(RlvrError("no episode in progress: reset first")))
        try:
            answer = call("/session/act", {{"session": self.session, "text": text}})
        except RlvrError as e:
            self.session = None
            return self._over(failed(e))
        if "verdict" in answer:
            self.session = None
            return self._over(answer["verdict"])
        return {{"observation": answer.get("observation"), "problem_id": self.problem_id, "split": self.split, "done": False, "reward": 0.0}}

    def _over(self, verdict):
        return {{"verdict": verdict, "problem_id": self.problem_id, "split": self.split, "done": True, "reward": float(verdict["reward"])}}

    def close(self):
        if self.session is not None:
            try:
                call("/session/close", {{"session": self.session}})
            except RlvrError:
                pass
            self.session = None
'''

ENVIRONMENT = '''\"\"\"{env} on {task} as an OpenEnv environment (the episodes: server/rlvr_episodes.py).\"\"\"

from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import State

try:
    from ..models import RlvrAction, RlvrObservation
    from .rlvr_episodes import Episodes
except ImportError:
    from models import RlvrAction, RlvrObservation
    from server.rlvr_episodes import Episodes


class RlvrEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self._episodes = Episodes()

    def reset(self, seed=None, episode_id=None, split=None, index=None):
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return RlvrObservation(**self._episodes.start(seed, split, index))

    def step(self, action):
        self._state.step_count += 1
        return RlvrObservation(**self._episodes.act(action.message))

    def close(self):
        self._episodes.close()

    @property
    def state(self):
        return self._state
'''

APP = '''"""The OpenEnv server of {env} on {task}: openenv's FastAPI app (/reset, /step, /state, /schema, /ws)."""

import sys

from openenv.core.env_server.http_server import create_app

try:
    from ..models import RlvrAction, RlvrObservation
    from .rlvr_environment import RlvrEnvironment
    from .rlvr_episodes import DataChanged, check_data
except ImportError:
    from models import RlvrAction, RlvrObservation
    from server.rlvr_environment import RlvrEnvironment
    from server.rlvr_episodes import DataChanged, check_data

try:
    check_data()
except DataChanged as e:
    sys.exit(f"error: {{e}}")

app = create_app(RlvrEnvironment, RlvrAction, RlvrObservation, env_name={name!r}, max_concurrent_envs=64)


def main(host: str = "127.0.0.1", port: int = 8000):
    import uvicorn

    uvicorn.run(app, host=host, port=port)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    main(args.host, args.port)
'''


def export(request: ExportRequest) -> ExportResult:
    out, name = request.out, request.name
    files = request.write_data(out / "data")
    task = request.task.id if request.task else "examples"
    heldout = [s for s in request.splits if s in request.heldout]
    train = next((s for s in request.splits if s not in heldout), None)
    files.append(write(out / "openenv.yaml", MANIFEST.format(name=name)))
    files.append(write(out / "pyproject.toml", PYPROJECT.format(name=name, dist=name.replace("_", "-"), env=request.env_id, task=task)))
    files.append(write(out / "__init__.py", "from .client import RlvrEnv\nfrom .models import RlvrAction, RlvrObservation\n\n"
                                            "__all__ = ['RlvrAction', 'RlvrEnv', 'RlvrObservation']\n"))
    files.append(write(out / "models.py", MODELS.format(env=request.env_id, task=task)))
    files.append(write(out / "client.py", CLIENT))
    files.append(write(out / "server" / "__init__.py", ""))
    files.append(write(out / "server" / "app.py", APP.format(env=request.env_id, task=task, name=name)))
    files.append(write(out / "server" / "rlvr_environment.py", ENVIRONMENT.format(env=request.env_id, task=task)))
    files.append(write(out / "server" / "rlvr_episodes.py", EPISODES.format(
        env=request.env_id, task=task, checksums=repr(request.checksums()), heldout=repr(heldout), train_split=train,
        heldout_split="test" if "test" in heldout else (heldout[0] if heldout else None), offset=TEST_SEED_OFFSET,
        splits_doc=", ".join(f"{s} ({'held out' if s in heldout else 'training'})" for s in request.splits))))
    return ExportResult("openenv", out, files, [
        f"rlvr envs serve {request.env_id}" + (f" --task {request.task.id}" if request.task else "") + " --port 8400   # rlvr's server (prints its token)",
        f"cd {out} && RLVR_ENV_URL=http://127.0.0.1:8400 RLVR_ENV_TOKEN=... python -m server.app --port 8000   # with openenv-core installed",
    ])

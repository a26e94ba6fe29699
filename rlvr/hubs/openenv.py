"""Export to OpenEnv: an OpenEnv environment package whose server forwards each episode to rlvr's
environment server (``rlvr envs export ID --to openenv --out DIR``).

Written::

    DIR/openenv.yaml              the manifest (spec_version 1, runtime fastapi, app server.app:app)
    DIR/pyproject.toml            depends on openenv-core only (not on rlvr)
    DIR/models.py                 RlvrAction (message), RlvrObservation (prompt, observation, verdict)
    DIR/client.py                 RlvrEnv, an OpenEnv EnvClient (WebSocket sessions)
    DIR/server/app.py             openenv's create_app over RlvrEnvironment: /reset /step /state /ws ...
    DIR/server/rlvr_environment.py  reset picks a problem of data/SPLIT.jsonl and opens an episode on
                                  rlvr's server (POST /session/start); step sends the model's turn
                                  (POST /session/act): a tool's output comes back as the observation
                                  (multi-turn), the verdict ends the episode with rlvr's reward
    DIR/data/                     the frozen problems, rlvr_export.json their checksums

The OpenEnv server needs ``RLVR_ENV_URL`` (rlvr's environment server, `rlvr envs serve`) and
``RLVR_ENV_TOKEN``; rlvr runs in its own environment, so OpenEnv's package never shares one with
rlvr's pins. A failure of rlvr's server (down, refused, too slow) ends the episode with reward 0 and a
verdict whose status is ``error`` or ``timeout`` and whose reason says what happened.
"""

from __future__ import annotations

from rlvr.hubs.common import ExportRequest, ExportResult, write

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

ENVIRONMENT = '''"""{env} on {task} as an OpenEnv environment. Every episode is held by rlvr's environment server
(RLVR_ENV_URL, RLVR_ENV_TOKEN): reset opens it, each step sends the model's turn."""

import json
import os
import random
import socket
import urllib.error
import urllib.request
from pathlib import Path
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import State

try:
    from ..models import RlvrAction, RlvrObservation
except ImportError:
    from models import RlvrAction, RlvrObservation

DATA = Path(__file__).resolve().parent.parent / "data"
SPLITS = {splits}
DEFAULT_SPLIT = {default_split!r}
TIMEOUT_S = float(os.environ.get("RLVR_ENV_TIMEOUT", "300"))


def _problems(split):
    if split not in SPLITS:
        raise ValueError(f"no split {{split!r}}; splits: {{', '.join(SPLITS)}}")
    return [json.loads(line) for line in (DATA / f"{{split}}.jsonl").read_text().splitlines() if line.strip()]


class RlvrError(Exception):
    def __init__(self, reason, timeout=False):
        super().__init__(reason)
        self.timeout = timeout


def _call(path, body):
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


class RlvrEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self._session = None
        self._problem = None

    def reset(self, seed=None, episode_id=None, split=None, index=None):
        problems = _problems(split or DEFAULT_SPLIT)
        if index is None:
            index = seed if seed is not None else random.randrange(len(problems))
        problem = problems[int(index) % len(problems)]
        self._close_session()
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self._problem = problem
        try:
            opened = _call("/session/start", {{"problem": problem}})
        except RlvrError as e:
            return self._failed(e, prompt=problem["prompt"])
        self._session = opened["session"]
        return RlvrObservation(prompt=opened["prompt"], problem_id=problem["id"], done=False, reward=0.0)

    def step(self, action):
        self._state.step_count += 1
        if self._session is None:
            return self._failed(RlvrError("no episode in progress: reset first"))
        try:
            answer = _call("/session/act", {{"session": self._session, "text": action.message}})
        except RlvrError as e:
            self._session = None
            return self._failed(e)
        if "verdict" in answer:
            self._session = None
            verdict = answer["verdict"]
            return RlvrObservation(problem_id=self._problem["id"], verdict=verdict, done=True, reward=float(verdict["reward"]))
        return RlvrObservation(problem_id=self._problem["id"], observation=answer.get("observation"), done=False, reward=0.0)

    def _failed(self, error, prompt=""):
        status = "timeout" if error.timeout else "error"
        verdict = {{"reward": 0.0, "passed": False, "status": status, "info": {{"error": str(error)}}}}
        return RlvrObservation(prompt=prompt, problem_id=(self._problem or {{}}).get("id", ""), verdict=verdict, done=True, reward=0.0)

    def _close_session(self):
        if self._session is not None:
            try:
                _call("/session/close", {{"session": self._session}})
            except RlvrError:
                pass
            self._session = None

    def close(self):
        self._close_session()

    @property
    def state(self):
        return self._state
'''

APP = '''"""The OpenEnv server of {env} on {task}: openenv's FastAPI app (/reset, /step, /state, /schema, /ws)."""

from openenv.core.env_server.http_server import create_app

try:
    from ..models import RlvrAction, RlvrObservation
    from .rlvr_environment import RlvrEnvironment
except ImportError:
    from models import RlvrAction, RlvrObservation
    from server.rlvr_environment import RlvrEnvironment

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
    default_split = "test" if "test" in request.splits else next(iter(request.splits))
    files.append(write(out / "openenv.yaml", MANIFEST.format(name=name)))
    files.append(write(out / "pyproject.toml", PYPROJECT.format(name=name, dist=name.replace("_", "-"), env=request.env_id, task=task)))
    files.append(write(out / "__init__.py", "from .client import RlvrEnv\nfrom .models import RlvrAction, RlvrObservation\n\n"
                                            "__all__ = ['RlvrAction', 'RlvrEnv', 'RlvrObservation']\n"))
    files.append(write(out / "models.py", MODELS.format(env=request.env_id, task=task)))
    files.append(write(out / "client.py", CLIENT))
    files.append(write(out / "server" / "__init__.py", ""))
    files.append(write(out / "server" / "app.py", APP.format(env=request.env_id, task=task, name=name)))
    files.append(write(out / "server" / "rlvr_environment.py", ENVIRONMENT.format(
        env=request.env_id, task=task, splits=repr(list(request.splits)), default_split=default_split)))
    return ExportResult("openenv", out, files, [
        f"rlvr envs serve {request.env_id}" + (f" --task {request.task.id}" if request.task else "") + " --port 8400   # rlvr's server (prints its token)",
        f"cd {out} && RLVR_ENV_URL=http://127.0.0.1:8400 RLVR_ENV_TOKEN=... python -m server.app --port 8000   # with openenv-core installed",
    ])

"""rlvr services over HTTP: an environment and its task's problems for remote trainers and hub
exports (`rlvr.serve.env_server`, ``rlvr envs serve``), behind the guards of `rlvr.serve.http`
(bearer token, admission control, request size and time limits, loopback unless told otherwise),
and the pooled, retrying client every rlvr caller uses (`rlvr.serve.client`). The sandbox
(``rlvr sandbox serve``, `sandboxes.server`) and rollout (``rlvr rollout serve``) services run on
the same server.

Names are imported on first use: `envs` and `sandboxes` import the client and server from here
without pulling in the environment server (which imports them)."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "EnvService": "rlvr.serve.env_server", "VerifySettings": "rlvr.serve.env_server", "make_env_server": "rlvr.serve.env_server",
    "GuardedServer": "rlvr.serve.http", "Guards": "rlvr.serve.http", "HTTPFailure": "rlvr.serve.http", "new_token": "rlvr.serve.http",
    "RawRoute": "rlvr.serve.http",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'rlvr.serve' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)

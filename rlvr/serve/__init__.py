"""rlvr services over HTTP: an environment and its task's problems for remote trainers and hub
exports (`rlvr.serve.env_server`, ``rlvr envs serve``), behind the guards of `rlvr.serve.http`
(bearer token, request size and time limits, loopback unless told otherwise). The sandbox has its
own service (``rlvr sandbox serve``, `sandboxes.server`)."""

from rlvr.serve.env_server import EnvService, VerifySettings, make_env_server
from rlvr.serve.http import GuardedServer, Guards, HTTPFailure, new_token

__all__ = ["EnvService", "GuardedServer", "Guards", "HTTPFailure", "VerifySettings", "make_env_server", "new_token"]

"""What one test's exported packages leave in the process (imported modules, skyrl_gym's registry,
the verifiers loaders' caches), forgotten so that the next test's export of the same name is loaded
from its own folder. (A real process imports an exported package once.)"""

from __future__ import annotations

import contextlib
import sys


@contextlib.contextmanager
def fresh_exports():
    _forget_exports()  # an export another test file imported under the same name must not answer for this one's
    yield
    _forget_exports()


def _forget_exports():
    for name in [n for n in sys.modules if n.startswith("rlvr_") or n == "server" or n.startswith("server.")]:
        del sys.modules[name]
    with contextlib.suppress(ImportError):
        from skyrl_gym.envs.registration import registry

        for name in [n for n in registry if n.startswith("rlvr_")]:
            del registry[name]
    with contextlib.suppress(ImportError):
        from envs.hubs import verifiers

        for cached in (verifiers.loaded, verifiers.task_class, verifiers.task_config):
            cached.cache_clear()
    from rlvr.hubs import skyrl_gym_env

    skyrl_gym_env._exported.cache_clear()

"""The rollout side: engines (prompts in, sampled completions with token log-probs out), and what
a training run makes of them: the streaming group sampler (`rlvr.rollout.sampling`), the rewards
(`rlvr.rollout.reward_signal`), a run's groups of verified completions (`rlvr.rollout.groups`)
and those groups as training tensors (`rlvr.rollout.tensors`)."""

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "rlvr.rollout.hf": "rlvr.rollout.engines.hf",
    "rlvr.rollout.server": "rlvr.rollout.engines.serve",
    "rlvr.rollout.token_engine": "rlvr.rollout.engines.token",
    "rlvr.rollout.vllm_engine": "rlvr.rollout.engines.vllm",
    "rlvr.rollout.vllm_client": "rlvr.rollout.engines.vllm_server",
    "rlvr.rollout.kv_decode": "rlvr.rollout.decoding.kv",
}
"""Old module paths (2026-11-26 and before) -> where the code lives now; importing an old one gives
the new module itself."""


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module):
        pass


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())

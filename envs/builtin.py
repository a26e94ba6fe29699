"""Registers the environments that ship with rlvr, through the public API, as any third-party
package would: this module is named by the ``rlvr.envs`` entry point in pyproject.toml.

Entries are lazy ``"module:attribute"`` strings so that listing imports nothing heavy.
"""

import envs


def register_all() -> None:
    envs.register(
        "math-v1", "envs.math.env:MathEnv",
        description="Math final answers: last \\boxed{}/Answer:, exact + symbolic equivalence (1 s bound), step rewards",
    )
    envs.register(
        "code-v1", "envs.code.env:CodeEnv",
        description="Python code run against hidden tests in a sandbox; graded outside it (binary + per-test process reward)",
    )
    envs.register(
        "math-code-v1", "envs.math_code:MathCodeEnv",
        description="Multi-turn: math with a sandboxed Python tool; the answer is graded from the model's own turns only",
    )
    envs.register(
        "reasoning-gym-v1", "envs.reasoning_gym:ReasoningGymEnv",
        description="A reasoning-gym generator's own score_answer on the last <answer> tag or Answer: line (needs rlvr[reasoning-gym])",
    )
    envs.register(
        "remote-v1", "envs.remote:connect",
        description="An environment served over HTTP by `rlvr envs serve` (kwargs url, token); failures are counted verdicts",
    )
    envs.register(
        "hubs/verifiers-v1", "envs.hubs.verifiers:VerifiersEnv",
        description="A verifiers (v1) taskset's own reward functions on the completion (task ids verifiers:NAME; needs rlvr[hubs])",
    )
    envs.register(
        "hubs/skyrl-gym-v1", "envs.hubs.skyrl_gym:SkyRLGymEnv",
        description="A SkyRL-Gym environment's step reward on the completion, built from the problem's dataset row (task ids skyrl-gym:NAME)",
    )
    envs.register(
        "hubs/nemo-gym-v1", "envs.hubs.nemo_gym:NeMoGymEnv",
        description="A NeMo Gym resources server's reward (POST /seed_session, then /verify with the completion as a Responses object; task ids nemo-gym:CONFIG)",
    )
    envs.register(
        "hubs/openenv-v1", "envs.hubs.openenv:OpenEnvEnv",
        description="An OpenEnv server's reward for the completion as one step of a WebSocket session after the problem's reset (task ids openenv:URL)",
    )
    envs.register(
        "hubs/harbor-v1", "envs.hubs.harbor:HarborEnv",
        description="A Harbor task folder: the completion's shell commands run in /app, then the task's tests/test.sh writes the reward (task ids harbor:DIR)",
    )

"""Plugin packages for tests, installed as pip installs them (``pip install --target SITE``): the
package's files and a ``<name>-<version>.dist-info`` folder whose ``entry_points.txt`` and
``RECORD`` `importlib.metadata` reads. Put ``SITE`` on the path (``PYTHONPATH`` of a child process)
and rlvr finds the plugin through its entry points, as it would a real installed one."""

from __future__ import annotations

import textwrap
from pathlib import Path


def install_plugin(site: Path, dist: str, version: str, files: dict[str, str], entry_points: dict[str, dict[str, str]]) -> Path:
    """Write ``files`` (path under ``site`` -> source) and the distribution's metadata into ``site``;
    returns ``site``. ``entry_points``: ``{group: {name: "module:attribute"}}``."""
    for rel, source in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in eps.items()) + "\n" for group, eps in entry_points.items()))
    (info / "top_level.txt").write_text("\n".join(sorted({Path(rel).parts[0] for rel in files})) + "\n")
    record = [*files, *(f"{info.name}/{n}" for n in ("METADATA", "entry_points.txt", "top_level.txt")), f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{r},,\n" for r in record))
    return site


ACME_FILES = {
    "acme_rlvr/__init__.py": """
        def register_envs():
            import envs
            envs.register("acme/sum-v1", "acme_rlvr.env:SumEnv", description="sums (a plugin)")

        def register_tasks():
            import tasks
            tasks.register("acme/sums-v1", "acme_rlvr.sums:SumsTask", description="a + b (a plugin)")
    """,
    "acme_rlvr/env.py": """
        from envs import Environment, Verdict

        class SumEnv(Environment):
            def verify(self, problem, completion):
                ok = completion.strip() == problem.reference
                return Verdict(float(ok), ok, extracted=completion.strip())
    """,
    "acme_rlvr/sums.py": """
        from envs.types import Problem
        from tasks.procedural import ProceduralTask

        class SumsTask(ProceduralTask):
            env_id = "acme/sum-v1"
            split_sizes = {"train": None, "test": 6}
            frozen = {}
            default_config = {"max_value": 50}

            def generate(self, rng, split, index):
                a, b = rng.randint(0, self.config["max_value"]), rng.randint(0, self.config["max_value"])
                return Problem(f"acme/sums/{split}/{index}", f"{a}+{b}=", str(a + b))
    """,
}
"""A plugin distribution ``acme-rlvr``: the environment ``acme/sum-v1`` and the procedural task
``acme/sums-v1`` (whose ``frozen`` checksums start empty)."""


def install_acme(site: Path, version: str = "0.3.1") -> Path:
    return install_plugin(site, "acme-rlvr", version, ACME_FILES,
                          {"rlvr.envs": {"acme": "acme_rlvr:register_envs"}, "rlvr.tasks": {"acme": "acme_rlvr:register_tasks"}})

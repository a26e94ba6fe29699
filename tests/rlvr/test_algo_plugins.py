"""A policy loss with a hyperparameter of its own, and a preset using it, from a separately installed
package (issue 24): registered through the ``rlvr.algos`` entry-point group, configured as
``algo.policy_loss: {name: ..., tau: ...}``, checked against its signature, trained by ``rlvr train``
with no change to rlvr. The plugin is installed as pip installs one (`tests.plugins`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugins import install_plugin

REPO = Path(__file__).resolve().parents[2]

LOSS_PLUGIN = {
    "acme_losses/__init__.py": """
        from pathlib import Path

        import torch

        from rlvr.algos.objective import POLICY_LOSSES
        from rlvr.algos.config import register_preset
        from rlvr.algos.parts import argument_bounds


        @POLICY_LOSSES.register("acme/tempered")
        @argument_bounds(tau={"gt": 0})
        def tempered(inp, clip_high=0.2, tau=1.0):
            '''PPO's surrogate with the upper clip only, scaled by a temperature tau (a test loss).'''
            ratio = inp.ratio
            loss = -torch.minimum(ratio * inp.advantages, ratio.clamp(max=1 + clip_high) * inp.advantages) * tau
            return loss, {"tau": float(tau)}


        register_preset("acme_tempered", Path(__file__).parent / "acme_tempered.yaml")
    """,
    "acme_losses/acme_tempered.yaml": """
        # a preset of the plugin: dapo's sampling with the tempered loss
        extends: dapo
        policy_loss: {name: acme/tempered, tau: 0.5}
    """,
}


@pytest.fixture
def plugin_env(tmp_path) -> dict[str, str]:
    site = install_plugin(tmp_path / "site", "acme-losses", "0.1.0", LOSS_PLUGIN, {"rlvr.algos": {"losses": "acme_losses"}})
    path = os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def rlvr(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlvr.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def test_a_plugins_preset_resolves_its_loss_with_every_argument(plugin_env, tmp_path):
    out = rlvr(plugin_env, "algos", "show", "acme_tempered", "algo.policy_loss.tau=0.25", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    # the preset names another loss than dapo's, so the loss's own defaults apply (clip_high 0.2), the user's tau over the preset's
    assert "name: acme/tempered\n    clip_high: 0.2\n    tau: 0.25" in out.stdout
    listing = rlvr(plugin_env, "algos", "list", cwd=tmp_path)
    assert listing.returncode == 0 and listing.stdout.splitlines()[0].split()[-1] == "acme_tempered"


def test_an_argument_the_plugins_loss_does_not_take_is_named(plugin_env, tmp_path):
    out = rlvr(plugin_env, "algos", "show", "grpo", "algo.policy_loss={name: acme/tempered, tauu: 2}", cwd=tmp_path)
    assert out.returncode != 0
    assert "algo.policy_loss.tauu: the acme/tempered policy loss takes no argument 'tauu' (it takes: clip_high, tau)" in out.stderr
    # and an argument out of the range the plugin declared (argument_bounds), when the config is read
    out = rlvr(plugin_env, "algos", "show", "grpo", "algo.policy_loss={name: acme/tempered, tau: -1}", cwd=tmp_path)
    assert out.returncode != 0
    assert "algo.policy_loss.tau must be > 0, got -1 (the acme/tempered policy loss's range)" in out.stderr, out.stderr


@pytest.mark.slow
def test_a_plugins_loss_with_its_own_hyperparameter_trains_through_rlvr_train(plugin_env, sft_base, tmp_path):
    args = ["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={sft_base}", "algo.preset=acme_tempered",
            "algo.policy_loss.tau=0.25", "update.steps=2", "optim.warmup_steps=0", "rollout.prompts_per_step=8", "rollout.group_size=8",
            "rollout.max_new_tokens=32", "eval.at_start=false", "eval.every=0", "log.checkpoint_every=0", "log.progress=false",
            "log.tensorboard=false", "log.plot=false", "threads=1"]
    out = rlvr(plugin_env, *args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "policy/tau" in r]
    assert trained and all(r["policy/tau"] == 0.25 for r in trained)  # the loss ran with the configured hyperparameter
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "name: acme/tempered" in saved and "tau: 0.25" in saved


@pytest.mark.parametrize("bounds,says", [({"tua": {"gt": 0}}, "it takes no argument 'tua'"), ({"tau": {"min": 0}}, "give a mapping of gt, ge, lt, le"),
                                         ({"tau": {"gt": "0"}}, "give a mapping of gt, ge, lt, le")])
def test_a_misspelt_bound_is_refused_where_the_part_is_defined(bounds, says):
    """Was: a misspelt argument's bound ignored (tau=-1 accepted), a misspelt bound a KeyError at the first config using it."""
    from rlvr.algos.parts import argument_bounds

    with pytest.raises(TypeError, match=says):
        argument_bounds(**bounds)(lambda inp, clip_high=0.2, tau=1.0: None)

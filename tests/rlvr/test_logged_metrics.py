"""The declared table of logged metrics (`rlvr.logged_metrics`) covers every name the code logs.

Three checks, so that a metric added without an entry fails a test:

- every metric-shaped string literal in rlvr's source is declared, and every f-string that builds
  a metric name starts with a declared section;
- the functions that build names from statistics (generation metrics, the policy objective with
  every registered policy loss and mismatch correction, the critic's and the PRM's names, the
  preference statistics, episodes, the sync probe) give declared names only, on real inputs;
- the slow tests that train every preset check every name their runs log (`undeclared`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from envs.episode import End, Episode, ToolCall, Turn
from envs.types import Problem, Status, Verdict
from rlvr.logged_metrics import _EPISODE_ENDS, METRICS, SECTIONS, undeclared
from rlvr.rollout.base import Completion

RLVR = Path(__file__).resolve().parents[2] / "rlvr"
METRIC_SHAPE = re.compile(r"^[a-z_]+/[a-z0-9_]+(/[a-z0-9_]+)?$")
# metric-shaped strings that are not metrics of a run: HTTP content types, a placeholder, and the
# names TRL's trainer logs for rlvr's reward function (`rlvr.interop.trl`, documented on the interop page)
NOT_RUN_METRICS = {"application/json", "n/a", "rlvr/passed", "rlvr/verify_errors", "rlvr/verify_timeouts"}


def _strings(path: Path):
    """(line, literal) of every string constant, and (line, leading text) of every f-string."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value, False
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            yield node.lineno, str(node.values[0].value), True


def undeclared_in_source(paths: list[Path], root: Path) -> list[str]:
    """A line for each metric-shaped literal that is not declared, and each f-string metric section that is not."""
    problems = []
    for path in paths:
        for line, text, formatted in _strings(path):
            where = f"{path.relative_to(root)}:{line}"
            if not formatted and METRIC_SHAPE.match(text) and text not in METRICS and text not in NOT_RUN_METRICS:
                problems.append(f"{where}: {text!r} is not declared in rlvr/logged_metrics.py")
            # f"policy/{k}": the names it builds are checked below; its section must be a declared one
            # (episode_metrics builds "end/<reason>" under its own prefix: checked below as well)
            if formatted and re.fullmatch(r"[a-z_]+/", text) and text[:-1] not in SECTIONS and path.name != "episode_metrics.py":
                problems.append(f"{where}: f-string metric section {text!r} is not declared in rlvr/logged_metrics.py")
    return problems


def test_every_metric_name_in_the_source_is_declared():
    paths = [p for p in sorted(RLVR.rglob("*.py")) if p.name != "logged_metrics.py"]
    problems = undeclared_in_source(paths, RLVR.parent)
    assert not problems, "\n".join(problems)


def test_the_source_check_finds_an_undeclared_name(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('metrics = {"reward/mean": 1.0, "reward/brand_new": 2.0}\nx = f"novel/{k}"\ny = f"policy/{k}"\n')
    problems = undeclared_in_source([src], tmp_path)
    assert sorted(problems) == ["m.py:1: 'reward/brand_new' is not declared in rlvr/logged_metrics.py",
                                "m.py:2: f-string metric section 'novel/' is not declared in rlvr/logged_metrics.py"]
    assert undeclared(["reward/mean", "step", "time", "reward/brand_new"]) == ["reward/brand_new"]


def test_every_entry_says_what_it_is():
    for m in METRICS.values():
        assert METRIC_SHAPE.match(m.name), m.name
        assert m.meaning and m.unit and m.recipes, m.name
        assert set(m.recipes) <= {"sft", "policy_gradient", "preference"}, m.name
    assert set(_EPISODE_ENDS) == {e.value for e in End}, "a new episode end needs its episode/end/<reason> entry"


# -- names built from statistics ----------------------------------------------------------------------

def _completion(tokens: int, text: str = "7", **kw) -> Completion:
    return Completion(0, [1, 2], list(range(3, 3 + tokens)), [-0.5] * tokens, text, **kw)


def test_generation_metrics_are_declared():
    from rlvr.rollout.sampling import Group, SamplingReport
    from rlvr.rollout.tensors import generation_metrics

    problem = Problem("p", "1+6=", "7")
    groups = [Group(problem, [_completion(3), _completion(2, truncated=True)], [Verdict(1.0, True), Verdict(0.0, False, Status.NO_ANSWER)])]
    report = SamplingReport(groups, groups, target=1, budget_prompts=2, budget_exhausted=False, rounds=1, generate_s=0.1, verify_wait_s=0.0)
    names = generation_metrics(report, group_size=2)
    assert "sampling/completions" in names and names["sampling/completions"] == 2
    assert undeclared(names) == []
    empty = SamplingReport([], [], target=1, budget_prompts=2, budget_exhausted=True, rounds=1, generate_s=0.0, verify_wait_s=0.0)
    assert undeclared(generation_metrics(empty, group_size=2)) == []


def test_a_failed_verification_is_left_out_of_the_reward_scores_not_averaged_as_zero():
    from rlvr.rollout.sampling import Group, SamplingReport
    from rlvr.rollout.tensors import generation_metrics

    problem = Problem("p", "1+6=", "7")
    judged = Group(problem, [_completion(2), _completion(2)], [Verdict(1.0, True), Verdict(1.0, True)])
    half = Group(problem, [_completion(2), _completion(2)], [Verdict(1.0, True), Verdict(0.0, False, Status.ERROR)])
    report = SamplingReport([judged], [judged, half], target=1, budget_prompts=2, budget_exhausted=False, rounds=1,
                            generate_s=0.1, verify_wait_s=0.0)
    m = generation_metrics(report, group_size=2)
    # three judged completions, all right; the error is counted, not scored
    assert m["reward/mean"] == 1.0 and m["reward/accuracy"] == 1.0 and m["verify/errors"] == 1.0
    # only the fully judged group counts for the group fractions
    assert m["groups/all_correct_frac"] == 1.0 and m["groups/zero_variance_frac"] == 1.0
    wrong = Group(problem, [_completion(2), _completion(2)], [Verdict(0.0, False), Verdict(1.0, True)])
    m = generation_metrics(SamplingReport([judged], [judged, wrong], target=1, budget_prompts=2, budget_exhausted=False, rounds=1,
                                          generate_s=0.1, verify_wait_s=0.0), group_size=2)
    assert m["reward/mean"] == 0.75 and m["groups/all_correct_frac"] == 0.5 and m["groups/zero_variance_frac"] == 0.5
    failed = Group(problem, [_completion(2), _completion(2)], [Verdict(0.0, False, Status.TIMEOUT)] * 2)
    m = generation_metrics(SamplingReport([], [failed], target=1, budget_prompts=2, budget_exhausted=False, rounds=1,
                                          generate_s=0.1, verify_wait_s=0.0), group_size=2)
    assert "reward/mean" not in m and m["verify/timeouts"] == 2.0


@pytest.mark.parametrize("loss", ["clipped", "pg", "cispo"])
@pytest.mark.parametrize("correction", ["none", "tis", "mis"])
def test_policy_update_metrics_are_declared(loss, correction):
    from rlvr.algos.aggregation import Normalizer
    from rlvr.algos.correction import CORRECTIONS
    from rlvr.algos.objective import ObjectiveInputs, policy_objective
    from rlvr.algos.config import algo_config
    from rlvr.train.policy_gradient import _advantage_metrics, _idle_metrics, _policy_metrics

    torch.manual_seed(0)
    logp, old, ref = (torch.randn(2, 4).clamp(max=-0.1) for _ in range(3))
    mask, adv = torch.ones(2, 4), torch.tensor([[1.0] * 4, [-1.0] * 4])
    algo = algo_config("grpo", policy_loss={"name": loss}, quiet=True)
    corrected = CORRECTIONS.get(correction)(old, logp, mask)
    inputs = ObjectiveInputs(logp, old, adv, mask, Normalizer(sequences=2.0, tokens=8.0, max_len=4.0), ref, torch.rand(2, 4),
                             corrected.weights, keep=corrected.mask)
    _, stats = policy_objective(inputs, algo)
    stats |= {f"mismatch_{k}": v for k, v in corrected.stats.items()} | {"logprob_gap": 0.0}
    stats |= {"loss": 0.0, "grad_norm": 1.0, "lr": 1e-5}  # what `Harness.optimizer_step` adds
    names = _policy_metrics([stats]) | _advantage_metrics(adv, mask) | _idle_metrics(torch.tensor([False, True]), torch.arange(2))
    assert undeclared(names) == []
    assert "policy/kl" in names and "policy/entropy" in names and "mismatch/kl_k1" in names


def test_critic_and_prm_metrics_are_declared():
    from rlvr.train.policy_gradient import _critic_metrics

    values, returns, mask = torch.randn(2, 3), torch.randn(2, 3), torch.ones(2, 3)
    names = _critic_metrics([{"loss": 0.1, "clip_frac": 0.0, "grad_norm": 1.0, "lr": 1e-5}], values, returns, mask)
    assert undeclared(names) == [] and "critic/value_loss" in names
    prm = {f"prm/{k}" for k in ("loss", "accuracy", "grad_norm")} | {"prm/token_reward_mean", "prm/seq_reward_mean", "time/prm"}
    assert undeclared(prm) == []


@pytest.mark.parametrize("paired", [True, False])
def test_preference_metrics_are_declared(paired):
    from rlvr.algos.preference import PREFERENCE_LOSSES, LossParams, SequenceLogps, pair_objective, unpaired_objective
    from rlvr.train.preference.recipe import update_metrics

    class OneProcess:
        def reduce_sum(self, x):
            return x

    seqs = SequenceLogps(torch.tensor([-3.0, -4.0]), torch.tensor([-3.5, -3.5]), torch.tensor([3, 4]))
    params = LossParams(0.1, 0.0, 1.0, 1.0)
    if paired:
        _, stats = pair_objective(seqs, seqs, PREFERENCE_LOSSES.get("sigmoid"), params, False, 2.0)
        batch_stats = tuple(k[:-4] for k in stats)
    else:
        _, stats = unpaired_objective(seqs, torch.tensor([True, False]), 0.0, PREFERENCE_LOSSES.get("kto"), params, False, torch.tensor([2, 1, 1]))
        batch_stats = tuple(k[:-4] for k in stats)
    names = update_metrics([stats | {"loss": 0.5, "grad_norm": 1.0, "lr": 1e-6}], batch_stats, [], OneProcess())
    assert undeclared(names) == [] and len(names) >= 7


def test_episode_and_sync_metrics_are_declared():
    from rlvr.rollout.episode_metrics import episode_metrics
    from rlvr.rollout.sync import ProbeResult

    call = ToolCall("python", "ok", 0.01, output="42", latency_s=0.02)
    episode = Episode(turns=(Turn.model("a"),), end=End.ANSWER, calls=(call,))
    comps = [_completion(3, loss_mask=[1, 0, 1], episode=episode), _completion(2, loss_mask=[1, 1], episode=Episode((Turn.model("b"),), End.MAX_TURNS))]
    verdicts = [Verdict(1.0, True, info={"episode": {"tool_output_correct": True}}), Verdict(0.0, False)]
    names = episode_metrics(comps, verdicts)
    assert undeclared(names) == [] and "episode/tool_output_correct_rate" in names
    assert undeclared(ProbeResult(0.0, 0.0, 8, trainer_moved=0.1).metrics()) == []

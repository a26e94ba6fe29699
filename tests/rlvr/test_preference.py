"""Preference losses (DPO, cDPO, rDPO, IPO, SLiC hinge, KTO with its reference point) against
hand-computed values, their normalisation under micro-batching and across two real processes,
pair selection from verified groups, pairs files validated row by row, and the preference
presets' settings and errors."""

from __future__ import annotations

import json
import math
import os
import random

import pytest
import torch
import torch.distributed as dist

from envs.types import Verdict
from rlvr import UserError
from rlvr.algos.preference import (PREFERENCE_LOSSES, LossParams, SequenceLogps, kto_reference_point, mismatched_partners, pair_objective,
                                   unpaired_objective)
from rlvr.algos.config import PRESETS, resolve_algorithm
from rlvr.cli import main
from rlvr.config import ConfigError
from rlvr.train.pairs import MAX_BAD_FRACTION, group_pairs, read_pairs
from rlvr.train.recipes import load_run_config
from tests.rlvr.gloo import run_in_two_processes


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def _pair(policy_w, ref_w, policy_l, ref_l, tokens_w=(1.0,), tokens_l=(1.0,)):
    t = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    return SequenceLogps(t(policy_w), t(ref_w), t(tokens_w)), SequenceLogps(t(policy_l), t(ref_l), t(tokens_l))


# -- the losses, by hand --------------------------------------------------------------------------

# one pair: chosen log pi = -1 (reference -2), rejected -3 (reference -2): r_w = 1, r_l = -1, h = 2
CHOSEN, REJECTED = _pair([-1.0], [-2.0], [-3.0], [-2.0])


@pytest.mark.parametrize("loss, eps, expected", [
    ("sigmoid", 0.0, softplus(-0.2)),  # -log sigma(beta h) = log(1 + e^-0.2) with beta h = 0.2
    ("sigmoid", 0.1, 0.9 * softplus(-0.2) + 0.1 * softplus(0.2)),  # cDPO: -(1 - eps) log sigma(0.2) - eps log sigma(-0.2)
    ("robust", 0.1, (0.9 * softplus(-0.2) - 0.1 * softplus(0.2)) / 0.8),  # rDPO: [(1 - eps)(-log sigma) + eps log sigma(-.)] / (1 - 2 eps)
    ("ipo", 0.0, (2 - 1 / (2 * 0.1)) ** 2),  # (h - 1/(2 tau))^2 = (2 - 5)^2 = 9
    ("hinge", 0.0, 0.8),  # max(0, 1 - beta h) = 1 - 0.2
])
def test_pair_losses_match_hand_computed_values(loss, eps, expected):
    value, stats = pair_objective(CHOSEN, REJECTED, PREFERENCE_LOSSES.get(loss), LossParams(beta=0.1, label_smoothing=eps), False, 1.0)
    assert value.item() == pytest.approx(expected, abs=1e-6)
    # implicit rewards beta * r: 0.1 and -0.1; the chosen one is higher
    assert stats["reward_chosen_sum"] == pytest.approx(0.1) and stats["reward_rejected_sum"] == pytest.approx(-0.1)
    assert stats["margin_sum"] == pytest.approx(0.2) and stats["reward_accuracy_sum"] == 1.0
    assert stats["logp_chosen_sum"] == -1.0 and stats["logp_rejected_sum"] == -3.0


def test_dpo_gradient_and_the_hinge_that_stops_pushing():
    chosen_logp = torch.tensor([-1.0], requires_grad=True)
    chosen = SequenceLogps(chosen_logp, torch.tensor([-2.0]), torch.ones(1))
    loss, _ = pair_objective(chosen, REJECTED, PREFERENCE_LOSSES.get("sigmoid"), LossParams(beta=0.1), False, 1.0)
    loss.backward()
    # d/d logp_w of -log sigma(beta h) = -beta sigma(-beta h)
    assert chosen_logp.grad.item() == pytest.approx(-0.1 / (1 + math.exp(0.2)), abs=1e-7)
    far_w, far_l = _pair([5.0], [-5.0], [-5.0], [5.0])  # h = 20: beta h = 2 > 1, the hinge is satisfied
    assert pair_objective(far_w, far_l, PREFERENCE_LOSSES.get("hinge"), LossParams(beta=0.1), False, 1.0)[0].item() == 0.0


def test_length_normalisation_divides_each_log_ratio_by_its_tokens():
    chosen, rejected = _pair([-1.0], [-2.0], [-3.0], [-2.0], tokens_w=[2.0], tokens_l=[4.0])
    # r_w = 1/2, r_l = -1/4, h = 3/4
    value, stats = pair_objective(chosen, rejected, PREFERENCE_LOSSES.get("sigmoid"), LossParams(beta=1.0), True, 1.0)
    assert value.item() == pytest.approx(softplus(-0.75), abs=1e-6) and stats["margin_sum"] == pytest.approx(0.75)


def test_pair_statistics_are_whole_batch_means_and_count_ties_as_misses():
    # pairs: r = (1, -1), (0, 0), (-1, 1): accuracy 1/3 (a tie is not a win), margins 2, 0, -2
    chosen, rejected = _pair([-1.0, -2.0, -3.0], [-2.0] * 3, [-3.0, -2.0, -1.0], [-2.0] * 3, [1.0] * 3, [1.0] * 3)
    _, stats = pair_objective(chosen, rejected, PREFERENCE_LOSSES.get("sigmoid"), LossParams(beta=0.5), False, 3.0)
    assert stats["reward_accuracy_sum"] == pytest.approx(1 / 3) and stats["margin_sum"] == pytest.approx(0.0)


def test_kto_loss_with_its_reference_point_and_weights():
    # desirable r = 2.5, undesirable r = -1.5, z_ref = 0.5, beta 0.1, lambda_D 2, lambda_U 1
    seqs = SequenceLogps(torch.tensor([-1.0, -3.5]), torch.tensor([-3.5, -2.0]), torch.ones(2))
    desirable = torch.tensor([True, False])
    p = LossParams(beta=0.1, desirable_weight=2.0, undesirable_weight=1.0)
    sigma = 1 / (1 + math.exp(-0.2))  # both sides: beta (2.5 - 0.5) = beta (0.5 + 1.5) = 0.2
    value, stats = unpaired_objective(seqs, desirable, 0.5, PREFERENCE_LOSSES.get("kto"), p, False, torch.tensor([2.0, 1.0, 1.0]))
    # mean over the batch's two completions of 2 (1 - sigma(0.2)) and 1 (1 - sigma(0.2))
    assert value.item() == pytest.approx((2 * (1 - sigma) + (1 - sigma)) / 2, abs=1e-6)
    assert stats["reward_desirable_sum"] == pytest.approx(0.25) and stats["reward_undesirable_sum"] == pytest.approx(-0.15)
    # the reference point: mean log-ratio of the mismatched pairs, clamped at 0
    assert kto_reference_point(-1.0 + 3.0, 2) == pytest.approx(1.0)
    assert kto_reference_point(-2.0 + 1.0, 2) == 0.0 and kto_reference_point(0.0, 0) == 0.0
    assert not PREFERENCE_LOSSES.get("kto").paired and PREFERENCE_LOSSES.get("ipo").paired


def test_mismatched_partners_never_read_a_completion_after_its_own_prompt():
    keys = ["a", "a", "a", "b", "b", "b", "c", "c", "c"]  # three groups of three
    partner = mismatched_partners(keys)
    assert partner.tolist() == [3, 4, 5, 6, 7, 8, 0, 1, 2]  # the smallest shift that works is 3
    assert all(keys[i] != keys[j] for i, j in enumerate(partner.tolist()))
    assert mismatched_partners(["x", "x"]) is None


# -- normalisation: micro-batches and processes ---------------------------------------------------------

def _data(seed: int, P: int = 8) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"theta": torch.randn(2 * P, generator=g), "ref": torch.randn(2 * P, generator=g) - 5,
            "tokens": torch.randint(1, 9, (2 * P,), generator=g).float(), "desirable": torch.rand(2 * P, generator=g) > 0.5}


def _grad(d: dict[str, torch.Tensor], loss: str, micro_batches: list[torch.Tensor], length_norm: bool = True) -> torch.Tensor:
    """d(loss)/d(theta) with the loss summed over micro-batches of pairs (or of completions for KTO)."""
    theta = d["theta"].clone().requires_grad_()
    fn, p = PREFERENCE_LOSSES.get(loss), LossParams(beta=0.3, label_smoothing=0.1, desirable_weight=1.5)
    rows = torch.cat(micro_batches)
    P = len(theta) // 2
    for mb in micro_batches:
        logp = theta * 2 - 5  # log-probs that move with the parameters
        if fn.paired:
            c, r = mb, mb + P
            value, _ = pair_objective(SequenceLogps(logp[c], d["ref"][c], d["tokens"][c]), SequenceLogps(logp[r], d["ref"][r], d["tokens"][r]),
                                      fn, p, length_norm, float(len(rows)))
        else:
            des = d["desirable"]
            totals = torch.tensor([float(len(rows)), float(des[rows].sum()), float((~des[rows]).sum())])
            value, _ = unpaired_objective(SequenceLogps(logp[mb], d["ref"][mb], d["tokens"][mb]), des[mb], 0.3, fn, p, length_norm, totals)
        value.backward()
    return theta.grad


@pytest.mark.parametrize("loss", ["sigmoid", "robust", "ipo", "hinge", "kto"])
def test_the_gradient_does_not_depend_on_micro_batching(loss):
    d = _data(seed=3)
    rows = 16 if loss == "kto" else 8
    whole = _grad(d, loss, [torch.arange(rows)])
    split = _grad(d, loss, [torch.tensor([5, 0, 7]), torch.tensor([1]), torch.tensor([2, 3, 4, 6]), *([torch.arange(8, 16)] if loss == "kto" else [])])
    assert whole.abs().sum() > 0 and torch.allclose(whole, split, atol=1e-6)


def _in_process(rank: int, world: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    d, gaps = _data(seed=4), []
    for loss in ("sigmoid", "kto"):
        fn, p = PREFERENCE_LOSSES.get(loss), LossParams(beta=0.3, label_smoothing=0.1, desirable_weight=1.5)
        n = 8 if fn.paired else 16
        mine = torch.arange(n).tensor_split(world)[rank]
        des = d["desirable"]
        totals = torch.tensor([float(len(mine)), float(des[mine].sum()), float((~des[mine]).sum())])
        dist.all_reduce(totals)  # the harness sums the objective's totals over processes
        theta = d["theta"].clone().requires_grad_()
        for mb in mine.split(3):  # micro-batches inside the process too
            logp = theta * 2 - 5
            if fn.paired:
                value, _ = pair_objective(SequenceLogps(logp[mb], d["ref"][mb], d["tokens"][mb]),
                                          SequenceLogps(logp[mb + 8], d["ref"][mb + 8], d["tokens"][mb + 8]), fn, p, True, float(totals[0]))
            else:
                value, _ = unpaired_objective(SequenceLogps(logp[mb], d["ref"][mb], d["tokens"][mb]), des[mb], 0.3, fn, p, True, totals)
            (value * world).backward()  # the harness scales by the process count: DDP averages
        grad = theta.grad.clone()
        dist.all_reduce(grad)
        grad /= world  # what DDP does
        gaps.append(float((grad - _grad(d, loss, [torch.arange(n)])).abs().max()))
    if rank == 0:
        queue.put(gaps)
    dist.destroy_process_group()


def test_the_gradient_does_not_depend_on_splitting_over_processes():
    """DPO and KTO, each split over two real (gloo) processes and micro-batches within them."""
    assert max(run_in_two_processes(_in_process)) < 1e-6


# -- pairs from verified groups -----------------------------------------------------------------------

def _verdicts(*outcomes: str) -> list[Verdict]:
    made = {"pass": Verdict(1.0, True), "fail": Verdict(0.0, False), "none": Verdict.no_answer(), "error": Verdict.error("boom")}
    return [made[o] for o in outcomes]


def test_group_pairs_take_passes_over_verified_failures_once_per_text():
    texts = ["A1", "A1", "A2", "B1", "B2", "B3", "X"]
    verdicts = _verdicts("pass", "pass", "pass", "fail", "none", "fail", "error")
    disjoint = group_pairs(texts, verdicts, 5, "disjoint", random.Random(0))
    # two distinct passing texts (the duplicate counts once), three verified-wrong ones; the error is never used
    assert len(disjoint) == 2 and {w for w, _ in disjoint} == {0, 2}
    assert len({l for _, l in disjoint}) == 2 and all(l in (3, 4, 5) for _, l in disjoint)
    every = group_pairs(texts, verdicts, 10, "random", random.Random(0))
    assert sorted(every) == [(w, l) for w in (0, 2) for l in (3, 4, 5)]  # all 2 x 3 combinations, no repeats
    assert len(group_pairs(texts, verdicts, 4, "random", random.Random(1))) == 4
    assert group_pairs(texts, verdicts, 1, "disjoint", random.Random(7)) == group_pairs(texts, verdicts, 1, "disjoint", random.Random(7))
    assert group_pairs(["a", "b"], _verdicts("pass", "pass"), 3, "random", random.Random(0)) == []
    assert group_pairs(["a", "b"], _verdicts("fail", "error"), 3, "random", random.Random(0)) == []


# -- pairs files ----------------------------------------------------------------------------------------

def test_pairs_files_are_validated_row_by_row_and_every_bad_row_is_reported(tmp_path):
    rows = [
        {"prompt": "2+2?", "chosen": "4", "rejected": "5"},  # TRL's standard layout
        {"prompt": [{"role": "user", "content": "2+3?"}], "chosen": [{"role": "assistant", "content": "5"}],
         "rejected": [{"role": "assistant", "content": "6"}]},  # conversational
        "not json {",
        {"prompt": "x", "chosen": "1"},
        {"prompt": "x", "chosen": "1", "rejected": "1"},
        {"prompt": "x", "chosen": "  ", "rejected": "1"},
        {"prompt": 7, "chosen": "1", "rejected": "2"},
        {"prompt": "x", "chosen": [{"role": "user", "content": "1"}], "rejected": "2"},
        ["a", "list"],
        {"chosen": "1", "rejected": "2"},
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows[:5]) + "\n\n" +
                    "\n".join(json.dumps(r) for r in rows[5:]) + "\n")
    read = read_pairs(path)
    assert [(p.prompt, p.chosen, p.rejected) for p in read.pairs] == [("2+2?", "4", "5"), ([{"role": "user", "content": "2+3?"}], "5", "6")]
    assert read.pairs[0].where == f"{path}:1"
    lines = [b.split(": ", 1)[0] for b in read.bad]
    assert lines == [f"{path}:{n}" for n in (3, 4, 5, 7, 8, 9, 10, 11)]  # line 6 is blank: not a row
    reasons = " | ".join(read.bad)
    for expected in ("not valid JSON", "missing 'rejected'", "same text", "'chosen' must be non-empty text", "'prompt' must be non-empty text",
                     "one assistant message", "expected a JSON object", "missing 'prompt'"):
        assert expected in reasons, expected
    assert "2 pairs, 8 rows left out" in read.summary()
    with pytest.raises(UserError, match=f"{path}:3: not valid JSON"):
        read_pairs(path, on_bad_row="error")
    empty = tmp_path / "bad.jsonl"
    empty.write_text("{}\n")
    with pytest.raises(UserError, match=r"has no valid pair; first problem: .*bad.jsonl:1: missing"):
        read_pairs(empty)
    with pytest.raises(UserError, match="not found"):
        read_pairs(tmp_path / "nope.jsonl")


def test_training_refuses_a_pairs_file_with_more_than_5_percent_bad_rows_and_names_a_line_that_is_not_utf8(tmp_path):
    good = json.dumps({"prompt": "2+2?", "chosen": "4", "rejected": "5"})
    path = tmp_path / "pairs.jsonl"
    path.write_bytes("\n".join([good] * 7).encode() + b"\n" + b'{"prompt": "caf\xe9", "chosen": "1", "rejected": "2"}\n' + b"oops\n" * 4)
    read = read_pairs(path)  # inspection lists every bad row
    assert len(read.pairs) == 7 and read.bad[0] == f"{path}:8: not UTF-8 (byte 0xe9 at column 16)"
    with pytest.raises(UserError, match=rf"{path}: 5 of 12 rows are malformed, more than 5%; fix the file \(first: {path}:8: not UTF-8"):
        read_pairs(path, max_bad_fraction=MAX_BAD_FRACTION)
    path.write_bytes("\n".join([good] * 20).encode() + b"\noops\n")  # 1 of 21: under the limit, reported and left out
    assert len(read_pairs(path, max_bad_fraction=MAX_BAD_FRACTION).bad) == 1


# -- presets and configuration --------------------------------------------------------------------------

def test_preference_presets_name_their_recipe_and_settings():
    dpo, online, kto = (resolve_algorithm({"preset": name}) for name in ("dpo", "online_dpo", "kto"))
    assert {dpo.recipe, online.recipe, kto.recipe} == {"preference"} and dpo.advantage is None and dpo.needs_reference
    assert (dpo.preference.loss, dpo.preference.beta, dpo.preference.source, dpo.preference.reference_cache) == ("sigmoid", 0.1, "pairs", True)
    assert online.preference.source == "online" and online.dynamic_sampling and online.group_filter.drop_zero_variance
    assert (kto.preference.loss, kto.preference.desirable_weight, kto.preference.undesirable_weight) == ("kto", 1.0, 1.0)
    ipo = resolve_algorithm({"preset": "dpo", "preference": {"loss": "ipo", "beta": 0.5, "length_norm": True}})
    assert (ipo.preference.loss, ipo.preference.beta, ipo.preference.length_norm) == ("ipo", 0.5, True)
    assert all(PRESETS[p]["recipe"] == "policy_gradient" for p in PRESETS if p not in ("dpo", "online_dpo", "kto"))
    # a setting equal to the preset's is no change (a run directory's resolved config, an old spelling of the default)
    assert resolve_algorithm({"preset": "dpo", "correction": {"kind": "none"}, "entropy_coef": 0.0}) == dpo


@pytest.mark.parametrize("cfg, message", [
    ({"preset": "dpo", "advantage": "grpo"}, "algo.advantage has no effect with algo.preset=dpo"),
    ({"preset": "kto", "kl_coef": 0.1}, "algo.kl_coef has no effect"),
    ({"preset": "kto", "kl": {"coef": 0.1}}, "algo.kl.coef has no effect"),
    ({"preset": "grpo", "preference": {"beta": 0.2}}, "algo.preference.beta is set but algo.preset=grpo runs the policy_gradient recipe"),
    ({"preset": "dpo", "recipe": "policy_gradient"}, "algo.recipe cannot be 'policy_gradient': algo.preset=dpo runs the preference recipe"),
    ({"preset": "grpo", "recipe": "bogus"}, "algo.recipe cannot be 'bogus': algo.preset=grpo runs the policy_gradient recipe"),
    ({"preset": "dpo", "preference": {"loss": "dpoo"}}, "algo.preference.loss 'dpoo' is not registered"),
    ({"preset": "kto", "preference": {"source": "pairs"}}, "learns from single labelled completions"),
    ({"preset": "dpo", "preference": {"loss": "robust", "label_smoothing": 0.5}}, "label_smoothing must be in [0, 0.5)"),
])
def test_preference_settings_errors(cfg, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        resolve_algorithm(cfg)


def test_preference_settings_that_do_nothing_warn():
    with pytest.warns(UserWarning, match="label_smoothing=0.1 has no effect with loss=ipo"):
        resolve_algorithm({"preset": "dpo", "preference": {"loss": "ipo", "label_smoothing": 0.1}})
    with pytest.warns(UserWarning, match="groups that are all right or all wrong give no pair"):
        resolve_algorithm({"preset": "online_dpo", "dynamic_sampling": False})


def test_the_pairs_section_belongs_to_the_preference_recipe(tmp_path):
    cfg = load_run_config("quickstart", ["algo.preset=dpo", "pairs.path=p.jsonl", "pairs.batch_size=16", f"output_dir={tmp_path}"])
    assert type(cfg).__name__ == "PreferenceTrainConfig" and cfg.pairs.path == "p.jsonl" and cfg.pairs.batch_size == 16
    with pytest.raises(ConfigError, match="unknown key 'pairs'"):
        load_run_config("quickstart", ["pairs.path=p.jsonl"])  # grpo has no pairs


@pytest.mark.parametrize("extra, message", [
    ([], "algo.preset=dpo trains on a pairs file: set pairs.path=FILE"),
    (["pairs.path=/nonexistent/pairs.jsonl"], "pairs file /nonexistent/pairs.jsonl not found"),
    (["algo.preset=kto", "pairs.path=x.jsonl"], "pairs.path is set but algo.preset=kto samples its examples online"),
    (["pairs.path=x.jsonl", "pairs.batch_size=0"], "'pairs.batch_size' must be > 0"),
])
def test_preference_runs_refuse_bad_input_before_training(extra, message, tmp_path, capsys):
    argv = ["train", "quickstart", "algo.preset=dpo", f"output_dir={tmp_path}", "name=run", "model.name_or_path=/nonexistent", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("argv, message", [
    (["pairs", "build", "--model", "m", "--task", "arithmetic-v1", "--n", "1", "--out", "x.jsonl"], "--n must be >= 2"),
    (["pairs", "build", "--model", "m", "--task", "arithmetic-v1", "--temperature", "0", "--out", "x.jsonl"], "--temperature must be > 0"),
    (["pairs", "build", "--model", "m", "--task", "arithmetic-v1", "--split", "test", "--out", "x.jsonl"], "split 'test' is held out"),
    (["pairs", "check", "/nonexistent/pairs.jsonl"], "not found"),
    (["pairs", "build", "--model", "m", "--task", "tool-products-v1", "--out", "x.jsonl"], "algo.preset=online_dpo"),  # text pairs cannot mask tool output
])
def test_pairs_commands_refuse_bad_input(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_pairs_check_reverifies_both_sides(tmp_path, capsys):
    path = tmp_path / "pairs.jsonl"
    rows = [{"prompt": "Compute 2+2.\n", "chosen": "Answer: 4", "rejected": "Answer: 5", "problem_id": "a", "reference": "4"},
            {"prompt": "Compute 2+3.\n", "chosen": "Answer: 6", "rejected": "Answer: 5", "problem_id": "b", "reference": "5"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["pairs", "check", str(path), "--task", "arithmetic-v1"]) == 1
    out = capsys.readouterr().out
    assert "1/2 chosen pass, 1/2 rejected fail" in out and f"{path}:2: chosen fails, rejected passes" in out
    path.write_text(json.dumps(rows[0]) + "\n")
    assert main(["pairs", "check", str(path), "--task", "arithmetic-v1"]) == 0

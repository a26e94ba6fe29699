"""Every metric a training run logs to ``metrics.jsonl`` (and to its trackers, `rlvr.trackers`): name, meaning, unit and
which recipes log it, declared once here.

The code that produces a metric (the harness, the recipes, the rollout side, the learned scorers)
keeps its own names; this table documents them, ``docs/reference/metrics.md`` is generated from it
(``scripts/gen_config_reference.py``), and the tests check the code's names against it, so a new
metric without an entry here fails them. Values are per training step unless the meaning says
otherwise; a metric that only some runs produce says when under ``when``.

A part from another package (a policy loss, a mismatch correction) may return statistics of its own:
they are logged as ``policy/NAME`` and ``mismatch/NAME`` and are documented by that package.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL = ("sft", "policy_gradient", "preference")
SAMPLING = ("policy_gradient", "preference")
PG = ("policy_gradient",)
PREFERENCE = ("preference",)
ONLINE_PREFERENCE = "preference: online presets (online_dpo, kto) only"


@dataclass(frozen=True)
class Metric:
    """One logged metric.

    Attributes:
        name: The logged name, ``section/name``.
        unit: What a value is measured in.
        recipes: The recipes (`rlvr.train.recipes`) that log it.
        meaning: What it measures.
        when: The runs that log it, when not every run of those recipes does.
    """

    name: str
    unit: str
    recipes: tuple[str, ...]
    meaning: str
    when: str = ""


def _m(name: str, unit: str, recipes: tuple[str, ...], meaning: str, when: str = "") -> Metric:
    return Metric(name, unit, recipes, meaning, when)


_EPISODE_ENDS = {
    "answer": "the model ended a turn without calling a tool",
    "max_turns": "it called a tool in its last allowed turn",
    "max_tokens": "the episode's token budget ran out",
    "truncated": "one model turn hit the per-turn token limit",
    "tool_time": "it called a tool after the episode's tool-time budget was spent",
    "step_error": "the environment's step function raised",
    "step_timeout": "the environment's step function did not return in time",
}
_EPISODES = "multi-turn environments (episodes)"
_ASYNC = "asynchronous training (rollout.async.max_staleness >= 1)"

METRIC_LIST: tuple[Metric, ...] = (
    # -- every run: the harness ---------------------------------------------------------------------
    _m("time/step", "seconds", ALL, "Wall time of the step: generation, verification and update (evaluation and checkpoints not included)"),
    _m("spent/completions", "completions", ALL, "Completions generated for training since the run started, summed over processes "
       "(what `budget.completions` limits; 0 for SFT and offline DPO)"),
    _m("spent/optimizer_steps", "optimizer steps", ALL, "The policy's optimizer steps since the run started (what `budget.optimizer_steps` limits)"),
    _m("spent/seconds", "seconds", ALL, "Sum of `time/step` since the run started (what `budget.seconds` limits)"),
    _m("optim/lr", "learning rate", ALL, "The policy's learning rate after the step's last optimizer step"),
    _m("optim/grad_norm", "L2 norm", ALL, "Global norm of the policy's gradient before clipping, mean over the step's optimizer steps",
       "optim.max_grad_norm > 0"),
    _m("data/position", "items", ALL, "Position in the training stream after the step: prompts drawn (online recipes), pairs read "
       "(offline DPO) or demonstrations read (SFT), over all processes"),
    _m("eval/accuracy", "fraction", ALL, "Greedy accuracy on `eval.split` (the first `eval.limit` problems) with the current weights",
       "evaluation steps: `eval.every`, `eval.at_start`, and the end of SFT"),
    _m("eval/no_answer_rate", "fraction", SAMPLING, "Share of greedy evaluation answers from which no answer could be extracted",
       "evaluation steps"),
    # -- SFT ----------------------------------------------------------------------------------------
    _m("sft/loss", "nats per token", ("sft",), "Next-token cross-entropy on the demonstrations' completion tokens (observations excluded)"),
    _m("time/elapsed", "seconds", ("sft",), "Wall time since the SFT run (this process) started"),
    # -- what the policy generated (every sampled group, kept or not) -------------------------------
    _m("reward/mean", "reward", SAMPLING, "Mean training reward of the completions generated in the step that were judged (a verifier error or timeout is counted in verify/*, not scored; absent when none was judged)", ONLINE_PREFERENCE),
    _m("reward/std", "reward", SAMPLING, "Standard deviation of those rewards", ONLINE_PREFERENCE),
    _m("reward/accuracy", "fraction", SAMPLING, "Share of the judged completions the verifier passed", ONLINE_PREFERENCE),
    _m("groups/zero_variance_frac", "fraction", SAMPLING, "Share of generated groups, every completion judged, whose rewards are all equal (no group-relative signal)",
       ONLINE_PREFERENCE),
    _m("groups/all_correct_frac", "fraction", SAMPLING, "Share of generated groups, every completion judged, in which every completion passed", ONLINE_PREFERENCE),
    _m("rollout/response_len", "tokens", SAMPLING, "Mean completion length", ONLINE_PREFERENCE),
    _m("rollout/truncated_frac", "fraction", SAMPLING, "Share of completions cut at `rollout.max_new_tokens`", ONLINE_PREFERENCE),
    _m("rollout/empty_frac", "fraction", SAMPLING, "Share of completions that are empty or whitespace", ONLINE_PREFERENCE),
    _m("rollout/tokens", "tokens", SAMPLING, "Prompt and completion tokens of every generated sequence (this process)", ONLINE_PREFERENCE),
    _m("rollout/staleness", "optimizer steps", SAMPLING, "Optimizer steps the policy took after the weights that sampled the batch "
       "(0 on-policy, 1 with `rollout.overlap`)", ONLINE_PREFERENCE),
    _m("rollout/over_context", "completions", SAMPLING, "Completions whose prompt plus completion ran past the model's context length",
       "engines that know the model's context length"),
    _m("rollout/servers_alive", "servers", SAMPLING, "Rollout servers serving at the end of the batch (`rollout.vllm.server_urls`; "
       "a server that failed is set aside until it answers again and has the current weights)", "rollout.engine=vllm_server"),
    _m("verify/no_answer_frac", "fraction", SAMPLING, "Share of verdicts with status no_answer (nothing extractable)", ONLINE_PREFERENCE),
    _m("verify/errors", "verdicts", SAMPLING, "Verifications that raised (status error)", ONLINE_PREFERENCE),
    _m("verify/timeouts", "verdicts", SAMPLING, "Verifications over `verify.timeout_s` (status timeout)", ONLINE_PREFERENCE),
    _m("verify/steps_per_completion", "steps", SAMPLING, "Process-reward steps per verdict (0 for outcome-only verifiers)", ONLINE_PREFERENCE),
    _m("sampling/prompts", "prompts", SAMPLING, "Prompts generated in the step, one group each (this process)", ONLINE_PREFERENCE),
    _m("sampling/completions", "completions", SAMPLING, "Completions generated in the step (this process); an episode counts once",
       ONLINE_PREFERENCE),
    _m("sampling/extra_prompts", "prompts", SAMPLING, "Prompts generated beyond `rollout.prompts_per_step` to refill the batch "
       "(dynamic sampling, an accuracy band)", ONLINE_PREFERENCE),
    _m("sampling/kept_groups", "groups", SAMPLING, "Groups the group filter kept for the batch", ONLINE_PREFERENCE),
    _m("sampling/yield", "fraction", SAMPLING, "Kept groups per generated group", ONLINE_PREFERENCE),
    _m("sampling/rounds", "calls", SAMPLING, "Generate calls the step made", ONLINE_PREFERENCE),
    _m("sampling/budget_prompts", "prompts", SAMPLING, "Most prompts the step was allowed to generate (`algo.sampling_budget` x prompts per step)",
       ONLINE_PREFERENCE),
    _m("sampling/budget_exhausted", "0 or 1", SAMPLING, "1 when the sampling budget ran out before the batch was full", ONLINE_PREFERENCE),
    _m("time/generate", "seconds", SAMPLING, "Time generating completions", ONLINE_PREFERENCE),
    _m("time/verify_wait", "seconds", SAMPLING, "Time waiting for verdicts after generation finished (verification overlaps generation)",
       ONLINE_PREFERENCE),
    _m("train/skipped", "0 or 1", SAMPLING, "1 when the step took no update: every verification failed, no group was kept, or (policy "
       "gradient) every advantage was 0", "skipped steps"),
    _m("train/skipped_no_group", "0 or 1", SAMPLING, "1 when the step was skipped because no process kept a group", "skipped steps"),
    # -- weight sync of an engine that holds its own copy (vLLM) -----------------------------------
    _m("sync/load_s", "seconds", SAMPLING, "Time loading the policy's weights into the engine (and waking it)", "engines with their own weights"),
    _m("sync/bytes", "bytes", SAMPLING, "Size of the weights sent to the engine", "engines with their own weights, steps that sent weights"),
    _m("sync/logprob_gap_mean", "nats", SAMPLING, "Mean |engine - trainer| log-prob over the fixed probe after the sync "
       "(above `rollout.probe.max_gap` the run stops)", "engines with their own weights"),
    _m("sync/logprob_gap_max", "nats", SAMPLING, "Largest |engine - trainer| log-prob over the probe", "engines with their own weights"),
    _m("sync/trainer_moved", "nats", SAMPLING, "Mean |trainer now - trainer at the previous check| log-prob over the probe: proof that "
       "the compared weights changed", "engines with their own weights, after the first check"),
    # -- the policy-gradient batch and update -------------------------------------------------------
    _m("batch/groups", "groups", SAMPLING, "Groups the step trains on"),
    _m("batch/reward_mean", "reward", PG, "Mean reward of the trained groups (after filtering)"),
    _m("batch/zero_variance_frac", "fraction", PG, "Share of trained groups whose rewards are all equal (0 with dynamic sampling)"),
    _m("batch/masked_truncated", "completions", PG, "Truncated completions left out of the loss", "`algo.mask_truncated`"),
    _m("verify/dropped", "completions", PG, "Completions left out of the update because their verification failed "
       "(`verify.on_failure=drop`)"),
    _m("throughput/tokens_per_s", "tokens per second", PG, "`rollout/tokens` divided by the step's wall time"),
    _m("reward/overlong_penalty", "reward", PG, "Mean soft overlong penalty added to the rewards (DAPO)", "`algo.overlong_buffer_frac` > 0"),
    _m("reward/kl_penalty", "reward", PG, "KL penalty taken from the rewards, summed over tokens, per sequence", "`algo.kl.mode=reward`"),
    _m("advantage/mean", "advantage", PG, "Mean token advantage over the loss tokens"),
    _m("advantage/std", "advantage", PG, "Standard deviation of the token advantages"),
    _m("advantage/abs_mean", "advantage", PG, "Mean absolute token advantage"),
    _m("train/skipped_no_signal", "0 or 1", PG, "1 when the update was skipped because it would have a zero gradient (every advantage 0)",
       "skipped steps"),
    _m("train/policy_updated", "0 or 1", PG, "1 when the policy took optimizer steps (0 during the critic's warm-up)"),
    _m("train/idle_rows_frac", "fraction", PG, "Share of trained sequences with zero loss and gradient, not forwarded by the update",
       "no KL in the loss and no entropy bonus"),
    _m("loss/total", "loss", SAMPLING, "The minimised loss (policy surrogate, KL and entropy terms; a preference loss), mean over the "
       "step's optimizer steps"),
    _m("loss/policy", "loss", PG, "The aggregated policy surrogate alone"),
    _m("policy/kl", "nats per token", PG, "KL(policy || reference) per token with `algo.kl.estimator`", "a reference model is loaded"),
    _m("policy/entropy", "nats per token", PG, "Entropy of the policy's next-token distribution, token mean"),
    _m("policy/clip_frac_low", "fraction", PG, "Share of tokens whose ratio is below 1 - clip_low with a negative advantage (the clipped branch is active)",
       "clipped policy losses"),
    _m("policy/clip_frac_high", "fraction", PG, "Share of tokens whose ratio is above 1 + clip_high with a positive advantage", "clipped policy losses"),
    _m("policy/clip_frac", "fraction", PG, "`policy/clip_frac_low` + `policy/clip_frac_high`", "clipped policy losses"),
    _m("policy/ratio_mean", "ratio", PG, "Mean importance ratio pi / pi_old over the loss tokens", "policy losses with a ratio"),
    _m("policy/ratio_min", "ratio", PG, "Smallest importance ratio", "policy losses with a ratio"),
    _m("policy/ratio_max", "ratio", PG, "Largest importance ratio", "policy losses with a ratio"),
    _m("policy/reference_refreshed", "0 or 1", SAMPLING, "1 when the reference took the policy's weights after the step", "`algo.ref_update_every`"),
    _m("rollout/logprob_gap", "nats", PG, "Mean |trainer - engine| log-prob of the sampled tokens, same weights (the rollout/trainer mismatch)",
       "on-policy single-step updates, or several optimizer steps per batch"),
    _m("mismatch/kl_k1", "nats per token", PG, "KL(engine || trainer) on the sampled tokens, k1 estimator"),
    _m("mismatch/kl_k3", "nats per token", PG, "The same with the k3 estimator (non-negative, lower variance)"),
    _m("mismatch/ratio_mean", "ratio", PG, "Mean trainer / engine probability ratio of the sampled tokens (at `algo.correction.level`)"),
    _m("mismatch/ratio_min", "ratio", PG, "Smallest trainer / engine ratio"),
    _m("mismatch/ratio_max", "ratio", PG, "Largest trainer / engine ratio"),
    _m("mismatch/corrected_frac", "fraction", PG, "Share of tokens whose weight the correction truncated (tis)"),
    _m("mismatch/masked_frac", "fraction", PG, "Share of tokens the correction rejected (mis)"),
    _m("time/train", "seconds", SAMPLING, "Time in the update (reference scoring, advantages, optimizer steps)"),
    # -- PRIME's implicit PRM -----------------------------------------------------------------------
    _m("prm/loss", "nats", PG, "The implicit PRM's cross-entropy against the outcome labels, before its update", "PRIME (`algo.prm.enabled`)"),
    _m("prm/accuracy", "fraction", PG, "The PRM's outcome prediction accuracy on labels it had not seen", "PRIME"),
    _m("prm/grad_norm", "L2 norm", PG, "Gradient norm of the PRM's update", "PRIME"),
    _m("prm/token_reward_mean", "reward", PG, "Mean implicit process reward per token", "PRIME"),
    _m("prm/seq_reward_mean", "reward", PG, "Mean implicit process reward summed over a sequence", "PRIME"),
    _m("time/prm", "seconds", PG, "Time scoring and updating the PRM", "PRIME"),
    # -- PPO's critic -------------------------------------------------------------------------------
    _m("critic/value_loss", "squared return", PG, "The critic's (clipped) value loss, mean over its optimizer steps", "PPO (`algo.critic.enabled`)"),
    _m("critic/clip_frac", "fraction", PG, "Share of tokens where value clipping was active", "PPO"),
    _m("critic/grad_norm", "L2 norm", PG, "Gradient norm of the critic's updates", "PPO"),
    _m("critic/lr", "learning rate", PG, "The critic's learning rate", "PPO"),
    _m("critic/explained_variance", "fraction", PG, "1 - Var(returns - values) / Var(returns) before the update (1: perfect, 0: no better than a constant)",
       "PPO"),
    _m("critic/value_mean", "return", PG, "Mean value over the loss tokens", "PPO"),
    _m("critic/return_mean", "return", PG, "Mean lambda-return", "PPO"),
    _m("critic/return_std", "return", PG, "Standard deviation of the lambda-returns", "PPO"),
    _m("critic/value_error", "return", PG, "Mean |value - return|", "PPO"),
    # -- preference learning ------------------------------------------------------------------------
    _m("batch/pairs", "pairs", PREFERENCE, "Pairs the step trains on", "paired losses (dpo, ipo, online_dpo)"),
    _m("batch/groups_with_pairs", "groups", PREFERENCE, "Kept groups that gave at least one pair", "online_dpo"),
    _m("batch/desirable", "completions", PREFERENCE, "Completions labelled desirable (passed)", "kto"),
    _m("batch/undesirable", "completions", PREFERENCE, "Completions labelled undesirable", "kto"),
    _m("data/epoch", "epochs", PREFERENCE, "Passes over the pairs file so far", "offline pairs (dpo)"),
    _m("preference/reward_accuracy", "fraction", PREFERENCE, "Share of pairs whose chosen implicit reward exceeds the rejected one", "paired losses"),
    _m("preference/reward_chosen", "reward", PREFERENCE, "Mean implicit reward beta * (log pi - log pi_ref) of the chosen completions", "paired losses"),
    _m("preference/reward_rejected", "reward", PREFERENCE, "Mean implicit reward of the rejected completions", "paired losses"),
    _m("preference/margin", "reward", PREFERENCE, "Mean chosen minus rejected implicit reward", "paired losses"),
    _m("preference/logp_chosen", "nats", PREFERENCE, "Mean log-probability of the chosen completions under the policy", "paired losses"),
    _m("preference/logp_rejected", "nats", PREFERENCE, "Mean log-probability of the rejected completions", "paired losses"),
    _m("preference/reward_desirable", "reward", PREFERENCE, "Mean implicit reward of the desirable completions", "kto"),
    _m("preference/reward_undesirable", "reward", PREFERENCE, "Mean implicit reward of the undesirable completions", "kto"),
    _m("preference/logp_desirable", "nats", PREFERENCE, "Mean log-probability of the desirable completions", "kto"),
    _m("preference/logp_undesirable", "nats", PREFERENCE, "Mean log-probability of the undesirable completions", "kto"),
    _m("preference/kl_ref_point", "nats", PREFERENCE, "KTO's reference point z_ref, mean over the step's minibatches", "kto"),
    # -- multi-turn episodes ------------------------------------------------------------------------
    _m("episode/episodes", "episodes", SAMPLING, "Episodes generated in the step", _EPISODES),
    _m("episode/turns", "turns", SAMPLING, "Model turns per episode", _EPISODES),
    _m("episode/tool_calls", "calls", SAMPLING, "Tool calls per episode", _EPISODES),
    _m("episode/tool_use_rate", "fraction", SAMPLING, "Share of episodes with at least one tool call", _EPISODES),
    _m("episode/tool_error_rate", "fraction", SAMPLING, "Share of tool calls that failed (not timeouts)", _EPISODES),
    _m("episode/tool_timeout_rate", "fraction", SAMPLING, "Share of tool calls that timed out", _EPISODES),
    _m("episode/tool_s_per_call", "seconds", SAMPLING, "Seconds a tool program ran in the sandbox, per call", _EPISODES),
    _m("episode/tool_latency_s_per_call", "seconds", SAMPLING, "Seconds from a call to its result (waiting for a sandbox worker included)", _EPISODES),
    _m("episode/tool_s", "seconds", SAMPLING, "Seconds tool programs ran in the step, in all", _EPISODES),
    _m("episode/observation_tokens", "tokens", SAMPLING, "Observation (tool output) tokens per episode: context, not trained on", _EPISODES),
    _m("episode/model_tokens", "tokens", SAMPLING, "Tokens the model wrote per episode", _EPISODES),
    _m("episode/observation_token_frac", "fraction", SAMPLING, "Observation tokens among all tokens after the prompt", _EPISODES),
    _m("episode/step_failures", "episodes", SAMPLING, "Episodes whose environment step raised or hung", _EPISODES),
    *(_m(f"episode/end/{reason}", "fraction", SAMPLING, f"Share of episodes that ended because {why}", _EPISODES)
      for reason, why in _EPISODE_ENDS.items()),
    _m("episode/accuracy_with_tool", "fraction", SAMPLING, "Accuracy of the episodes that called a tool", _EPISODES),
    _m("episode/accuracy_without_tool", "fraction", SAMPLING, "Accuracy of the episodes that did not", _EPISODES),
    _m("episode/tool_output_correct_rate", "fraction", SAMPLING, "Share of episodes in which a tool call printed the gold answer",
       "environments that report it (tool-products-v1)"),
    # -- asynchronous training (rollout.async.max_staleness >= 1) -------------------------------------
    _m("async/round", "batches", SAMPLING, "The generation round (batch number) the step trains on", _ASYNC),
    _m("async/version", "policy versions", SAMPLING, "The policy version that sampled the step's batch (versions count training steps)", _ASYNC),
    _m("async/queue_depth", "batches", SAMPLING, "Finished batches waiting in the queue when the trainer took this one (0 to the lag; depends on timing, unlike the samples)", _ASYNC),
    _m("async/trainer_wait_s", "seconds", SAMPLING, "Time the trainer waited for the batch", _ASYNC),
    _m("async/trainer_idle_frac", "fraction", SAMPLING, "Share of the time since the previous batch the trainer spent waiting for this one", _ASYNC),
    _m("async/generator_idle_frac", "fraction", SAMPLING, "Share of the batch's generation round the generator spent waiting for weights", _ASYNC),
    _m("async/samples_per_s", "completions/second", SAMPLING, "Completions kept for training per second of the trainer's time", _ASYNC),
    _m("async/generated_per_s", "completions/second", SAMPLING, "Completions generated per second of the generator's busy time", _ASYNC),
    _m("async/worker_restarts", "restarts", SAMPLING, "Times the generation worker was restarted so far", _ASYNC),
    _m("async/parked_groups", "groups", SAMPLING, "Groups cut at the token budget and waiting to be continued", "partial rollouts"),
    _m("async/dropped_stale", "completions", SAMPLING, "Completions dropped because a token was more than max_staleness versions old", _ASYNC),
    _m("async/staleness_mean", "policy versions", SAMPLING, "Mean staleness of the trained samples (versions between sampler and trainer)", _ASYNC),
    _m("async/staleness_max", "policy versions", SAMPLING, "Largest staleness among the trained samples", _ASYNC),
    _m("async/token_staleness_mean", "policy versions", SAMPLING, "Mean staleness over the trained tokens (partial rollouts mix versions)", _ASYNC),
    _m("async/mixed_version_frac", "fraction", SAMPLING, "Share of trained samples whose tokens come from more than one version", "partial rollouts"),
)

FAMILIES: dict[str, Metric] = {
    "async/staleness_hist/": _m("async/staleness_hist/<s>", "completions", SAMPLING,
                                "Trained samples that are s policy versions stale (a histogram, one name per s)", "asynchronous training"),
}
"""Metrics named by a prefix and a value (``async/staleness_hist/2``), documented once per prefix."""

METRICS: dict[str, Metric] = {m.name: m for m in METRIC_LIST}
SECTIONS: frozenset[str] = frozenset(name.split("/")[0] for name in METRICS)


def undeclared(names) -> list[str]:
    """The names among ``names`` that have no entry in `METRICS` (``step`` and ``time``, the row's own fields, excepted)."""
    return sorted({n for n in names if n not in METRICS and n not in ("step", "time") and not n.startswith(tuple(FAMILIES))})


__all__ = ["FAMILIES", "METRICS", "METRIC_LIST", "Metric", "SECTIONS", "undeclared"]

"""The rollout side: engines (prompts in, sampled completions with token log-probs out), and what
a training run makes of them: the streaming group sampler (`rlvr.rollout.sampling`), the rewards
(`rlvr.rollout.reward_signal`), a run's groups of verified completions (`rlvr.rollout.groups`)
and those groups as training tensors (`rlvr.rollout.tensors`)."""

"""Rollout engines: prompts in, sampled completions with token log-probs out."""

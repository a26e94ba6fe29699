"""rlvr's environments and tasks in other frameworks.

- `rlvr.interop.trl`: an environment as a ``reward_funcs`` callable for TRL's GRPO/RLOO trainers,
  and a task split as the ``datasets.Dataset`` they train on.
- `rlvr.interop.verl`: a task split as verl's parquet rows (``rlvr tasks export``) and
  ``compute_score``, the custom reward function verl loads from this file.
- reasoning-gym's generators come the other way, as rlvr tasks: `tasks.reasoning_gym`.

Both reward functions verify through `envs.pool.VerifierPool` (`rlvr.interop.scoring`): bounded
per item, in parallel, and every error or timeout counted and reported, never a silent 0.
"""

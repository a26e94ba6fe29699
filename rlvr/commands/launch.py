"""`rlvr launch slurm CONFIG ...`: an sbatch script for training, generation and environment nodes;
`rlvr launch node PLAN`: what each node of that job runs (its role from SLURM's variables)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("launch", help="write a cluster job (SLURM) that trains with generation and environment servers on their own nodes")
    s = p.add_subparsers(dest="launch_command", metavar="ACTION", required=True)
    sl = s.add_parser("slurm", help="write an sbatch script and its plan for CONFIG",
                      description="Writes DIR/plan.json and DIR/job.sbatch: torchrun on the training nodes, `rlvr rollout serve` "
                                  "on the generation nodes, `rlvr envs serve` on the environment nodes, addresses and tokens wired "
                                  "through the config. Submit with `sbatch DIR/job.sbatch`. See docs: Scaling.")
    sl.add_argument("config", help="training config: a YAML file or a built-in name")
    sl.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="training config overrides")
    sl.add_argument("--train-nodes", type=int, default=1, help="nodes that train (default 1)")
    sl.add_argument("--gpus-per-node", type=int, default=1, help="training processes per training node, one per GPU (default 1)")
    sl.add_argument("--generation-nodes", type=int, default=0, help="nodes serving generation (default 0: the trainer generates)")
    sl.add_argument("--env-nodes", type=int, default=0, help="nodes serving the environment (default 0: the trainer verifies)")
    sl.add_argument("--engine", default="vllm", help="the generation servers' engine (`rlvr rollout serve --engine`; default vllm)")
    sl.add_argument("--cpu", action="store_true", help="a CPU cluster: ask SLURM for no GPUs (training processes per node are then CPU processes)")
    sl.add_argument("--model", default=None, help="what the generation servers start from (default: the config's model)")
    sl.add_argument("--env", default=None, help="environment the environment nodes serve (default: the config's task's)")
    sl.add_argument("--task", default=None, help="task whose problems they hold (default: the config's)")
    sl.add_argument("--out", default="slurm", help="folder for plan.json and job.sbatch (default ./slurm)")
    sl.add_argument("--job-name", default="rlvr")
    sl.add_argument("--time", default=None, help="SLURM time limit (e.g. 24:00:00)")
    sl.add_argument("--partition", default=None, help="SLURM partition")
    sl.add_argument("--rendezvous-port", type=int, default=29500)
    sl.add_argument("--generation-port", type=int, default=8000)
    sl.add_argument("--env-port", type=int, default=8400)
    sl.set_defaults(func=write_slurm)
    node = s.add_parser("node", help="run this node's part of a job written by `rlvr launch slurm` (inside the job)")
    node.add_argument("plan", help="the plan.json `rlvr launch slurm` wrote")
    node.add_argument("--print", action="store_true", help="print this node's role and command instead of running it")
    node.set_defaults(func=run_node)


def write_slurm(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rlvr import UserError
    from rlvr.launch.slurm import ClusterPlan, check_training_config, env_server_plan, sbatch_script
    from rlvr.train.recipes import load_run_config

    try:
        plan = ClusterPlan(args.config, list(args.overrides), args.train_nodes, args.gpus_per_node, args.generation_nodes,
                           args.env_nodes, env=args.env, task=args.task, model=args.model, engine=args.engine, gpus=not args.cpu,
                           rendezvous_port=args.rendezvous_port, generation_port=args.generation_port, env_port=args.env_port)
    except ValueError as e:
        raise UserError(str(e)) from None
    load_run_config(plan.config, plan.overrides)  # a config error is said now, not on the cluster
    if plan.env_nodes:
        try:
            plan = env_server_plan(plan)
        except ValueError as e:
            raise UserError(str(e)) from None
    check_training_config(plan)  # with the overrides the training nodes add
    out = Path(args.out)
    plan_path = (out / "plan.json").resolve()
    try:
        text = sbatch_script(plan, plan_path, job_name=args.job_name, time_limit=args.time, partition=args.partition)
    except ValueError as e:
        raise UserError(str(e)) from None
    out.mkdir(parents=True, exist_ok=True)
    plan.save(plan_path)
    script = out / "job.sbatch"
    script.write_text(text)
    script.chmod(0o755)
    print(f"wrote {script} and {plan_path}: {plan.nodes} node(s) ({plan.train_nodes} train x {plan.gpus_per_node}, "
          f"{plan.generation_nodes} generation, {plan.env_nodes} environment)\nsubmit it with: sbatch {script}")
    return 0


def run_node(args: argparse.Namespace) -> int:
    import os
    import shlex

    from rlvr import UserError
    from rlvr.launch.slurm import ClusterPlan, node_command, node_role, server_urls, token_checks, wait_for_servers

    try:
        plan = ClusterPlan.load(args.plan)
        role = node_role(plan)
    except ValueError as e:
        raise UserError(str(e)) from None
    command = node_command(plan, role)
    if args.print:
        print(f"{role.role} node {role.index} ({role.host}): {shlex.join(command)}")
        return 0
    print(f"[rlvr launch] {role.role} node {role.index} on {role.host}: {shlex.join(command)}", flush=True)
    if role.role == "train":
        generation, environments = server_urls(plan, role.hosts)
        try:
            wait_for_servers(generation + environments, plan.wait_s, token_checks(generation, environments))
        except ValueError as e:
            raise UserError(str(e)) from None
    os.execv(command[0], command)  # the node's process becomes the command: SIGTERM from SLURM reaches it
    return 0  # not reached

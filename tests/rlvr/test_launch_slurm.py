"""`rlvr launch slurm`: SLURM's host lists, each node's role from SLURM's variables, the sbatch script,
and the node commands run for real on one machine (each "node" a loopback address of its own, the
variables set as SLURM sets them)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from rlvr.launch.slurm import ClusterPlan, expand_hostlist, node_command, node_role, sbatch_script, server_urls

ROOT = Path(__file__).resolve().parents[2]


def test_slurm_host_lists_expand_as_slurm_does():
    assert expand_hostlist("node[01-03,07],gpu5") == ["node01", "node02", "node03", "node07", "gpu5"]
    assert expand_hostlist("a[1-2]-b[8-9]") == ["a1-b8", "a1-b9", "a2-b8", "a2-b9"]
    assert expand_hostlist("127.0.0.[1-3]") == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert expand_hostlist("x[009-011]") == ["x009", "x010", "x011"]
    for bad in ("node[1-3", "node]1", "node[a-b]", ""):
        with pytest.raises(ValueError):
            expand_hostlist(bad)


def test_each_node_finds_its_role_in_the_job_node_list():
    plan = ClusterPlan("quickstart", train_nodes=2, generation_nodes=1, env_nodes=2, env="math-v1", task="arithmetic-v1", model="m")
    slurm = {"SLURM_JOB_NODELIST": "n[1-5]", "SLURM_JOB_ID": "7"}
    roles = [node_role(plan, {**slurm, "SLURMD_NODENAME": f"n{i}"}) for i in range(1, 6)]
    assert [(r.role, r.index) for r in roles] == [("train", 0), ("train", 1), ("generation", 0), ("env", 0), ("env", 1)]
    assert server_urls(plan, roles[0].hosts) == (["http://n3:8000"], ["http://n4:8400", "http://n5:8400"])
    train = node_command(plan, roles[1])
    assert train[train.index("--node-rank") + 1] == "1" and "n1:29500" in train and "--nnodes" in train
    assert "rollout.engine=vllm_server" in train and 'rollout.vllm.server_urls=["http://n3:8000"]' in train
    assert "task.env=remote-v1" in train and 'task.env_kwargs={"url": ["http://n4:8400", "http://n5:8400"]}' in train
    env = node_command(plan, roles[4])
    assert env[env.index("serve") - 1:env.index("serve") + 1] == ["envs", "serve"] and "--allow-remote" in env
    assert env[env.index("--host") + 1] == "n5"
    with pytest.raises(ValueError, match="3 nodes .* needs 5"):
        node_role(plan, {"SLURM_JOB_NODELIST": "n[1-3]", "SLURMD_NODENAME": "n1"})
    with pytest.raises(ValueError, match="not in the job's node list"):
        node_role(plan, {**slurm, "SLURMD_NODENAME": "elsewhere"})
    with pytest.raises(ValueError, match="SLURM_JOB_NODELIST is not set"):
        node_role(plan, {})


def test_the_sbatch_script_starts_servers_then_training_then_drains_the_servers(tmp_path):
    plan = ClusterPlan("quickstart", train_nodes=2, gpus_per_node=8, generation_nodes=2, env_nodes=1, env="math-v1",
                       task="arithmetic-v1", model="m")
    script = sbatch_script(plan, tmp_path / "plan.json", time_limit="1:00:00")
    lines = script.splitlines()
    assert "#SBATCH --nodes=5" in lines and "#SBATCH --gpus-per-node=8" in lines and "#SBATCH --time=1:00:00" in lines
    servers = next(i for i, x in enumerate(lines) if x.startswith("srun --nodes=3") and "--relative=2" in x and x.endswith("&"))
    training = next(i for i, x in enumerate(lines) if x.startswith("srun --nodes=2") and "--relative=0" in x)
    drain = next(i for i, x in enumerate(lines) if x.startswith("kill -TERM $servers"))
    assert servers < training < drain
    cpu = sbatch_script(ClusterPlan("quickstart", gpus=False), tmp_path / "plan.json")
    assert "--gpus-per-node" not in cpu and "servers=$!" not in cpu
    result = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert result.returncode == 0, result.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_node_commands_run_a_cluster_on_one_machine(sft_base, tmp_path):
    """`rlvr launch slurm` for 1 training node and 2 environment nodes, each node's `rlvr launch node`
    run here with SLURM's variables: the servers come up on their own addresses, training waits for
    them, verifies through both, finishes; SIGTERM drains the servers."""
    env_port, rdzv_port = free_port(), free_port()
    out = tmp_path / "job"
    overrides = [f"model.name_or_path={sft_base}", f"output_dir={tmp_path / 'runs'}", "name=cluster", "update.steps=2",
                 "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=24", "rollout.chunk_prompts=4",
                 "eval.every=0", "eval.at_start=false", "log.tensorboard=false", "log.progress=false", "threads=1",
                 "update.micro_batch_size=16"]
    run = subprocess.run([sys.executable, "-m", "rlvr.cli", "launch", "slurm", "quickstart", *overrides, "--train-nodes", "1",
                          "--gpus-per-node", "1", "--env-nodes", "2", "--cpu", "--env-port", str(env_port),
                          "--rendezvous-port", str(rdzv_port), "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "sbatch" in run.stdout and (out / "job.sbatch").is_file()
    slurm = {**os.environ, "SLURM_JOB_NODELIST": "127.0.0.[1-3]", "SLURM_JOB_ID": "4242", "RLVR_ENV_TOKEN": "cluster-token-0123456789",
             "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    node = [sys.executable, "-m", "rlvr.cli", "launch", "node", str(out / "plan.json")]
    servers = [subprocess.Popen(node, cwd=tmp_path, env={**slurm, "SLURMD_NODENAME": f"127.0.0.{i}"}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for i in (2, 3)]
    try:
        train = subprocess.run(node, cwd=tmp_path, env={**slurm, "SLURMD_NODENAME": "127.0.0.1"}, capture_output=True, text=True,
                               timeout=900)
        assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
        assert "train node 0 on 127.0.0.1" in train.stdout and "torch.distributed.run" in train.stdout
        run_dir = tmp_path / "runs" / "cluster"
        assert (run_dir / "final").is_dir()
        config = (run_dir / "config.yaml").read_text()
        assert "remote-v1" in config and f"127.0.0.2:{env_port}" in config and f"127.0.0.3:{env_port}" in config
        answered = [httpx.get(f"http://127.0.0.{i}:{env_port}/health", timeout=10).json()["answered"] for i in (2, 3)]
        assert all(a.get("200", 0) >= 1 for a in answered), answered  # both servers verified
        for proc in servers:
            proc.send_signal(signal.SIGTERM)
        assert [proc.wait(60) for proc in servers] == [0, 0]
    finally:
        for proc in servers:
            proc.kill()
            proc.wait()


def test_the_users_env_kwargs_and_task_config_reach_the_env_servers_and_not_the_trainer():
    from rlvr.launch.slurm import env_server_plan

    plan = env_server_plan(ClusterPlan("quickstart", ["task.env=math-v1", "task.env_kwargs={extraction: lenient}",
                                                      "task.config={max_digits: 3}"], env_nodes=2))
    assert (plan.env, plan.task) == ("math-v1", "arithmetic-v1")
    slurm = {"SLURM_JOB_NODELIST": "n[1-3]", "SLURMD_NODENAME": "n3"}
    env = node_command(plan, node_role(plan, slurm))
    assert json.loads(env[env.index("--env-kwargs") + 1]) == {"extraction": "lenient"}
    assert json.loads(env[env.index("--task-config") + 1]) == {"max_digits": 3}
    train = node_command(plan, node_role(plan, {**slurm, "SLURMD_NODENAME": "n1"}))
    from rlvr.train.recipes import load_run_config

    cfg = load_run_config("quickstart", train[train.index("quickstart") + 1:])
    assert cfg.task.env == "remote-v1" and cfg.task.env_kwargs == {"url": ["http://n2:8400", "http://n3:8400"]}
    with pytest.raises(ValueError, match="task.env is math-v1"):
        env_server_plan(ClusterPlan("quickstart", ["task.env=math-v1"], env_nodes=1, env="code-v1"))


def test_host_lists_refuse_reversed_ranges_repeats_and_runaway_expansions():
    for bad, why in (("n[4-1]", "bad range"), ("n[1-3],n2", "appears twice"), ("n[1-200000]", "more than"),
                     ("a[1-1000]-b[1-1000]", "more than")):
        with pytest.raises(ValueError, match=why):
            expand_hostlist(bad)
    assert len(expand_hostlist("n[1-100000]")) == 100_000


def test_the_launcher_refuses_bad_input_when_writing_not_on_the_cluster(tmp_path):
    from rlvr.launch.slurm import check_training_config

    with pytest.raises(ValueError, match="unknown engine"):
        ClusterPlan("quickstart", engine="vlm")
    with pytest.raises(ValueError, match="nope-v1"):
        ClusterPlan("quickstart", env="nope-v1", env_nodes=1)
    for name, value in (("job_name", "x\nrm -rf ~"), ("partition", "gpu;reboot"), ("partition", "a b")):
        with pytest.raises(ValueError, match="only letters"):
            sbatch_script(ClusterPlan("quickstart", gpus=False), tmp_path / "plan.json", **{name: value})
    from rlvr import UserError

    # the config loads alone; with the overrides a training node adds for generation servers it does not
    check_training_config(ClusterPlan("quickstart", env_nodes=1, env="math-v1", task="arithmetic-v1", generation_nodes=1, model="m"))
    with pytest.raises(UserError, match="unknown key 'rollout'"):
        check_training_config(ClusterPlan("sft_quickstart", generation_nodes=1, model="m"))

"""A cluster job for SLURM: training nodes (torchrun), generation nodes (``rlvr rollout serve``) and
environment nodes (``rlvr envs serve``) in one allocation, wired through the training config.

``rlvr launch slurm CONFIG ...`` writes two files: ``PLAN.json`` (a `ClusterPlan`: the counts,
ports, the config and its overrides) and an sbatch script that runs ``rlvr launch node PLAN.json``
once on every node of the allocation. Each node finds its role from SLURM's variables alone
(`node_role`): its own name (``SLURMD_NODENAME``) in the job's node list (``SLURM_JOB_NODELIST``,
SLURM's compact host-list syntax, expanded by `expand_hostlist`), the first ``train_nodes`` train,
the next ``generation_nodes`` generate, the last ``env_nodes`` verify. So the same command runs a
node on a cluster and on one machine (the tests give each "node" its own loopback address).

The servers listen on their node's address with a token (``RLVR_ENV_TOKEN``,
``RLVR_ROLLOUT_TOKEN``: made by the script unless set). A training node waits until every server
answers ``/health``, then runs torchrun with a c10d rendezvous on the first training node, the
config's overrides pointing ``rollout.vllm.server_urls`` and the task's environment (``remote-v1``)
at the servers. When training ends the script stops the servers with SIGTERM (they drain).

Why not Ray: every role here is one command on one node with addresses known from the allocation,
so SLURM's own ``srun`` places them; Ray would add a second scheduler inside the first and a
runtime every node must run, for placement SLURM already did.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Role = Literal["train", "generation", "env"]


@dataclass(frozen=True)
class ClusterPlan:
    """Everything a node needs to find and start its part.

    Attributes:
        config: The training config (a built-in name or a YAML path).
        overrides: ``key=value`` overrides of the training config.
        train_nodes: Nodes that train (torchrun, ``gpus_per_node`` processes each).
        gpus_per_node: Training processes per training node (one per GPU; on CPUs, processes).
        generation_nodes: Nodes serving generation (``rlvr rollout serve``); 0 = generation in the trainer.
        env_nodes: Nodes serving the environment (``rlvr envs serve``); 0 = verification in the trainer.
        env: The environment the servers serve (default: the config's ``task.env``, else the task's own).
        task: The task whose problems they hold (default: the config's task).
        env_kwargs: The servers' environment keyword arguments (default: the config's ``task.env_kwargs``).
        task_config: Their task's config (default: the config's ``task.config``).
        model: What the generation servers start from (default: the config's model).
        engine: The generation servers' engine (``rlvr rollout serve --engine``).
        gpus: Whether the nodes have GPUs to ask SLURM for (``--gpus-per-node``); False on a CPU cluster.
        rendezvous_port, generation_port, env_port: Ports (the same on every node of a role).
        python: The Python that runs rlvr on the nodes (the one that wrote the plan).
        wait_s: How long a training node waits for the servers.
        serve_args: Extra arguments per role (``{"env": [...], "generation": [...]}``).
    """

    config: str
    overrides: list[str] = field(default_factory=list)
    train_nodes: int = 1
    gpus_per_node: int = 1
    generation_nodes: int = 0
    env_nodes: int = 0
    env: str | None = None
    task: str | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    task_config: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    engine: str = "vllm"
    gpus: bool = True
    rendezvous_port: int = 29500
    generation_port: int = 8000
    env_port: int = 8400
    python: str = sys.executable
    wait_s: float = 900.0
    serve_args: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from rlvr.commands.rollout import SERVE_ENGINES

        if self.engine not in SERVE_ENGINES:
            raise ValueError(f"unknown engine {self.engine!r} for the generation servers; engines: {', '.join(SERVE_ENGINES)}")
        if self.env is not None:
            import envs

            try:
                envs.ENVS.spec(self.env)  # an unknown environment is said now, not on the cluster
            except LookupError as e:
                raise ValueError(str(e).strip("'\"")) from None
        for name, low in (("train_nodes", 1), ("gpus_per_node", 1), ("generation_nodes", 0), ("env_nodes", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        for name in ("rendezvous_port", "generation_port", "env_port"):
            if not 0 < getattr(self, name) < 65536:
                raise ValueError(f"{name} must be a port number, got {getattr(self, name)!r}")

    @property
    def nodes(self) -> int:
        return self.train_nodes + self.generation_nodes + self.env_nodes

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> ClusterPlan:
        try:
            data = json.loads(Path(path).read_text())
            return cls(**data)
        except (OSError, ValueError, TypeError) as e:
            raise ValueError(f"{path}: not a cluster plan written by `rlvr launch slurm` ({e})") from None


# -- SLURM's host lists -----------------------------------------------------------------------

_GROUP = re.compile(r"\[([^\]]*)\]")

MAX_HOSTS = 100_000
SHUTDOWN_TIMEOUT_S = 600  # torchrun's wait, after forwarding a SIGTERM, before it SIGKILLs a rank: time to finish the step and checkpoint
"""The most hosts a host list may expand to (a typo such as ``n[1-99999999]`` is refused, not expanded)."""


def expand_hostlist(text: str) -> list[str]:
    """SLURM's compact host list (``node[01-03,07],gpu5``, ``a[1-2]-b[3-4]``) as host names, in order."""
    hosts: list[str] = []
    for item in _split_top_level(text.strip()):
        if item:
            hosts += _expand_one(item, MAX_HOSTS - len(hosts))
    if not hosts:
        raise ValueError(f"empty SLURM host list {text!r}")
    seen: set[str] = set()
    for h in hosts:
        if h in seen:
            raise ValueError(f"host {h!r} appears twice in SLURM host list {text!r}")
        seen.add(h)
    return hosts


def _split_top_level(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if depth < 0:
            raise ValueError(f"unbalanced ']' in SLURM host list {text!r}")
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '[' in SLURM host list {text!r}")
    return items + [text[start:]]


def _expand_one(item: str, room: int = MAX_HOSTS) -> list[str]:
    """``item``'s hosts; a ValueError past ``room`` of them (counted before anything is expanded)."""
    found = _GROUP.search(item)
    if not found:
        return [item]
    head, tail = item[:found.start()], item[found.end():]
    ranges = []
    for part in found.group(1).split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)):
            raise ValueError(f"bad range {part!r} in SLURM host list item {item!r}")
        ranges.append((lo, int(lo), int(hi or lo)))
    count = sum(b - a + 1 for _, a, b in ranges)
    if count > room:
        raise ValueError(f"SLURM host list item {item!r} expands to more than {MAX_HOSTS:,} hosts")
    rests = _expand_one(tail, room // count)
    if count * len(rests) > room:
        raise ValueError(f"SLURM host list item {item!r} expands to more than {MAX_HOSTS:,} hosts")
    return [head + str(n).zfill(len(lo)) + rest for lo, a, b in ranges for n in range(a, b + 1) for rest in rests]


# -- a node's part ----------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeRole:
    """What one node of the allocation does: its role, its index within the role, every host."""

    role: Role
    index: int
    host: str
    hosts: list[str]


def node_role(plan: ClusterPlan, environ: dict[str, str] | None = None) -> NodeRole:
    """This node's role from SLURM's variables (``SLURM_JOB_NODELIST``, ``SLURMD_NODENAME``)."""
    environ = dict(os.environ if environ is None else environ)
    listed = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not listed:
        raise ValueError("SLURM_JOB_NODELIST is not set: `rlvr launch node` runs inside a SLURM job (the sbatch script)")
    hosts = expand_hostlist(listed)
    if len(hosts) < plan.nodes:
        raise ValueError(f"the job has {len(hosts)} nodes ({listed}) but the plan needs {plan.nodes} "
                         f"({plan.train_nodes} train + {plan.generation_nodes} generation + {plan.env_nodes} env)")
    me = environ.get("SLURMD_NODENAME")
    if not me:
        raise ValueError("SLURMD_NODENAME is not set: cannot tell which node this is")
    if me not in hosts:
        raise ValueError(f"this node ({me}) is not in the job's node list ({listed})")
    i = hosts.index(me)
    if i < plan.train_nodes:
        return NodeRole("train", i, me, hosts)
    if i < plan.train_nodes + plan.generation_nodes:
        return NodeRole("generation", i - plan.train_nodes, me, hosts)
    if i < plan.nodes:
        return NodeRole("env", i - plan.train_nodes - plan.generation_nodes, me, hosts)
    raise ValueError(f"this node ({me}) is beyond the plan's {plan.nodes} nodes: nothing to do")


def server_urls(plan: ClusterPlan, hosts: list[str]) -> tuple[list[str], list[str]]:
    """(generation URLs, environment URLs) of the plan's servers on ``hosts``."""
    t, g = plan.train_nodes, plan.generation_nodes
    return ([f"http://{h}:{plan.generation_port}" for h in hosts[t:t + g]],
            [f"http://{h}:{plan.env_port}" for h in hosts[t + g:t + g + plan.env_nodes]])


def node_command(plan: ClusterPlan, role: NodeRole) -> list[str]:
    """The command this node runs (argv)."""
    rlvr = [plan.python, "-m", "rlvr.cli"]
    allow = [] if _is_loopback(role.host) else ["--allow-remote"]
    if role.role == "env":
        env, task = _env_and_task(plan)
        settings = []
        if plan.env_kwargs:
            settings += ["--env-kwargs", json.dumps(plan.env_kwargs)]
        if plan.task_config:
            settings += ["--task-config", json.dumps(plan.task_config)]
        return [*rlvr, "envs", "serve", env, "--task", task, *settings, "--host", role.host, "--port", str(plan.env_port), *allow,
                *plan.serve_args.get("env", [])]
    if role.role == "generation":
        model = plan.model or _config_value(plan, "model.name_or_path")
        return [*rlvr, "rollout", "serve", "--engine", plan.engine, "--model", str(model), "--host", role.host,
                "--port", str(plan.generation_port), *allow, *plan.serve_args.get("generation", [])]
    overrides = training_overrides(plan, role.hosts)
    head = role.hosts[0]
    return [plan.python, "-m", "torch.distributed.run", "--nnodes", str(plan.train_nodes), "--node-rank", str(role.index),
            "--nproc-per-node", str(plan.gpus_per_node), "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{head}:{plan.rendezvous_port}", "--rdzv-id", os.environ.get("SLURM_JOB_ID", "rlvr"),
            "-m", "rlvr.cli", "train", plan.config, *overrides]


def training_overrides(plan: ClusterPlan, hosts: list[str]) -> list[str]:
    """The training config's overrides on a training node: the user's, then the servers' addresses."""
    generation, environments = server_urls(plan, hosts)
    overrides = list(plan.overrides)
    if generation:
        overrides += ["rollout.engine=vllm_server", f"rollout.vllm.server_urls={json.dumps(generation)}"]
    if environments:
        overrides += ["task.env=remote-v1", f"task.env_kwargs={json.dumps({'url': environments})}"]
    return overrides


def check_training_config(plan: ClusterPlan) -> None:
    """Load the config as a training node will (with the servers' overrides, on stand-in hosts): a
    config error is said when the job is written, not on the cluster."""
    from rlvr.train.recipes import load_run_config

    load_run_config(plan.config, training_overrides(plan, [f"node{i}" for i in range(plan.nodes)]))


def _is_loopback(host: str) -> bool:
    from rlvr.serve.http import is_loopback

    return is_loopback(host)


def _config_value(plan: ClusterPlan, key: str) -> Any:
    from rlvr.train.recipes import load_run_config

    cfg = load_run_config(plan.config, plan.overrides)
    value: Any = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def env_server_plan(plan: ClusterPlan) -> ClusterPlan:
    """``plan`` with what its environment servers serve resolved from the config: the environment
    (``--env``, else the config's ``task.env``, else the task's own), the task, and the user's
    ``task.env_kwargs`` and ``task.config`` (so the servers score as the config says; the trainer
    then sees only remote-v1's own kwargs, the servers' URLs)."""
    from dataclasses import replace

    from rlvr.train.recipes import load_run_config

    task_cfg = load_run_config(plan.config, plan.overrides).task
    if plan.env and task_cfg.env and task_cfg.env != plan.env:
        raise ValueError(f"--env {plan.env} but the config's task.env is {task_cfg.env}: the servers serve one environment; "
                         "give one of them")
    env, task = _env_and_task(plan)
    return replace(plan, env=env, task=task, env_kwargs=dict(plan.env_kwargs or task_cfg.env_kwargs),
                   task_config=dict(plan.task_config or (task_cfg.config if task == task_cfg.id else {})))


def _env_and_task(plan: ClusterPlan) -> tuple[str, str]:
    if plan.env and plan.task:
        return plan.env, plan.task
    task_id = plan.task or _config_value(plan, "task.id")
    env = plan.env or _config_value(plan, "task.env")
    if not env:
        import tasks

        env = tasks.make(task_id).env_id
    return env, task_id


def wait_for_servers(urls: list[str], wait_s: float, tokens: dict[str, tuple[str, str | None]]) -> None:
    """Return once every server answers ``GET /health``; a ValueError naming the silent ones after ``wait_s``.
    Then each server in ``tokens`` (URL → (path, token)) is asked ``GET path`` with its token, so a wrong
    token is one line now rather than a failed request in the middle of training."""
    import time

    import httpx

    deadline = time.monotonic() + wait_s
    pending = list(urls)
    while pending:
        still = []
        for url in pending:
            try:
                ok = httpx.get(url + "/health", timeout=5, trust_env=False).status_code == 200
            except httpx.HTTPError:
                ok = False
            if not ok:
                still.append(url)
        pending = still
        if pending:
            if time.monotonic() > deadline:
                raise ValueError(f"servers not answering after {wait_s:g} s: {', '.join(pending)}")
            time.sleep(1.0)
    refused = []
    for url, (path, token) in tokens.items():
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            status = httpx.get(url + path, headers=headers, timeout=30, trust_env=False).status_code
        except httpx.HTTPError as e:
            refused.append(f"{url}{path} failed ({type(e).__name__})")
            continue
        if status in (401, 403):
            refused.append(f"{url} refused the token (HTTP {status})")
        elif status != 200:
            refused.append(f"{url}{path} answered HTTP {status}")
    if refused:
        raise ValueError(f"servers up but not usable: {'; '.join(refused)}: check RLVR_ENV_TOKEN / RLVR_ROLLOUT_TOKEN")


def token_checks(generation: list[str], environments: list[str], environ: dict[str, str] | None = None) -> dict[str, tuple[str, str | None]]:
    """What `wait_for_servers` asks each server with its token: ``/version`` of a generation server
    (``$RLVR_ROLLOUT_TOKEN``), ``/info`` of an environment server (``$RLVR_ENV_TOKEN``)."""
    environ = os.environ if environ is None else environ
    return {**{u: ("/version", environ.get("RLVR_ROLLOUT_TOKEN")) for u in generation},
            **{u: ("/info", environ.get("RLVR_ENV_TOKEN")) for u in environments}}


# -- the sbatch script ------------------------------------------------------------------------

_SBATCH_VALUE = re.compile(r"[A-Za-z0-9._,:+@%=/-]+")


def sbatch_script(plan: ClusterPlan, plan_path: Path, *, job_name: str = "rlvr", time_limit: str | None = None,
                  partition: str | None = None, extra_sbatch: list[str] = ()) -> str:
    """The batch script: every node runs ``rlvr launch node PLAN`` (servers first, in the background).
    A job name, time or partition with a newline or a shell character is refused (it would end the
    ``#SBATCH`` line and run as a command)."""
    for name, value in (("--job-name", job_name), ("--time", time_limit), ("--partition", partition)):
        if value is not None and not _SBATCH_VALUE.fullmatch(value):
            raise ValueError(f"{name} {value!r}: only letters, digits and . _ , : + @ % = / - are allowed")
    servers = plan.generation_nodes + plan.env_nodes
    node = f"{shlex.quote(plan.python)} -m rlvr.cli launch node {shlex.quote(str(plan_path))}"
    lines = ["#!/usr/bin/env bash", f"#SBATCH --job-name={job_name}", f"#SBATCH --nodes={plan.nodes}",
             "#SBATCH --ntasks-per-node=1", f"#SBATCH --output={job_name}-%j.out"]
    if plan.gpus:
        lines.append(f"#SBATCH --gpus-per-node={plan.gpus_per_node}")
    if time_limit:
        lines.append(f"#SBATCH --time={time_limit}")
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    lines += [f"#SBATCH {x}" for x in extra_sbatch]
    lines += [
        f"# Written by `rlvr launch slurm` for {plan_path.name}: {plan.train_nodes} training node(s) x {plan.gpus_per_node} "
        f"process(es), {plan.generation_nodes} generation, {plan.env_nodes} environment node(s).",
        "# Every node runs the same command and finds its role in SLURM_JOB_NODELIST (see rlvr/launch/slurm.py).",
        "set -uo pipefail",
        "token() { " + shlex.quote(plan.python) + " -c 'import secrets; print(secrets.token_urlsafe(24))'; }",
        'export RLVR_ENV_TOKEN=${RLVR_ENV_TOKEN:-$(token)}',
        'export RLVR_ROLLOUT_TOKEN=${RLVR_ROLLOUT_TOKEN:-$(token)}',
    ]
    if servers:
        lines += [
            f"# the servers: the last {servers} node(s), in the background",
            f"srun --nodes={servers} --ntasks={servers} --ntasks-per-node=1 --relative={plan.train_nodes} {node} &",
            "servers=$!",
        ]
    lines += [
        f"# training: the first {plan.train_nodes} node(s) (each waits for the servers, then runs torchrun)",
        f"srun --nodes={plan.train_nodes} --ntasks={plan.train_nodes} --ntasks-per-node=1 --relative=0 {node}",
        "status=$?",
    ]
    if servers:
        lines += ["kill -TERM $servers 2>/dev/null  # the servers drain: requests in flight finish", "wait $servers"]
    lines += ["exit $status", ""]
    return "\n".join(lines)

"""Export to NeMo Gym: dataset rows and a config for a resources server that is rlvr's environment
server in its NeMo Gym dialect (``rlvr envs export ID --to nemo-gym --out DIR``; `rlvr.serve.nemo_gym`).

Written::

    DIR/data/SPLIT.jsonl          NeMo Gym rows: responses_create_params (the prompt and its answer
                                  format as input messages), rlvr_problem ({split, index, checksum}:
                                  the problem rlvr's server holds and judges), agent_ref
    DIR/configs/NAME.yaml         the resources server and a simple agent over the datasets
    DIR/serve.sh                  starts the resources server: rlvr envs serve ... --dialect nemo-gym
    DIR/rlvr_data/                the frozen problems, rlvr_export.json their checksums

NeMo Gym (Python >= 3.13) cannot be installed beside rlvr here; its agents, and verifiers' own
NeMo Gym taskset, call the server with the rows as NeMo Gym prescribes (``/seed_session``, then
``/verify`` with the model's response). The model only sees ``responses_create_params``; the
other fields of a row go to the resources server alone.
"""

from __future__ import annotations

import json
import shlex

from rlvr.hubs.common import ExportRequest, ExportResult, write
from rlvr.hubs.session import hub_prompt

CONFIG = """# NeMo Gym config for {env} on {task}, exported by rlvr. The resources server is rlvr's environment
# server in its NeMo Gym dialect: start it with serve.sh (it needs the bearer token in
# RLVR_ENV_TOKEN; every request must carry 'Authorization: Bearer TOKEN').
{name}_resources_server:
  resources_servers:
    {name}:
      entrypoint: serve.sh
      host: 127.0.0.1
      port: {port}
      domain: {domain}
      verified: false
      description: {env} on {task}, judged by rlvr's verifier
{name}_simple_agent:
  responses_api_agents:
    simple_agent:
      entrypoint: app.py
      resources_server:
        type: resources_servers
        name: {name}_resources_server
      model_server:
        type: responses_api_models
        name: policy_model
      datasets:
{datasets}"""

SERVE = """#!/bin/bash
# The resources server of this export: rlvr's environment server in its NeMo Gym dialect.
# Needs rlvr installed and the bearer token in RLVR_ENV_TOKEN (clients send 'Authorization: Bearer TOKEN').
exec rlvr envs serve {args} --dialect nemo-gym --port "${{PORT:-{port}}}" "$@"
"""

DEFAULT_PORT = 8400


def row(problem, split: str, index: int, prompt, agent: str) -> dict:
    """A NeMo Gym dataset row for ``problem`` (index ``index`` of ``split``) whose prompt the model
    sees is ``prompt``. The row names the problem by split, index and checksum: rlvr's server judges
    the one it holds (refusing it if it is not the exported one), so no answer travels in the row."""
    from tasks import problems_checksum

    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    return {"responses_create_params": {"input": [{"role": m["role"], "content": m["content"], "type": "message"} for m in messages]},
            "rlvr_problem": {"split": split, "index": index, "checksum": problems_checksum([problem])},
            "agent_ref": {"type": "responses_api_agents", "name": agent}}


def export(request: ExportRequest) -> ExportResult:
    out, name = request.out, request.name
    files = request.write_data(out / "rlvr_data")
    agent = f"{name}_simple_agent"
    heldout = request.manifest()["splits"]
    datasets = []
    for split, problems in request.splits.items():
        rows = [row(p, split, i, hub_prompt(request.env, p), agent) for i, p in enumerate(problems)]
        files.append(write(out / "data" / f"{split}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)))
        kind = "validation" if heldout[split]["heldout"] else "train"
        datasets.append(f"      - name: {split}\n        type: {kind}\n        jsonl_fpath: data/{split}.jsonl\n")
    domain = "coding" if "code" in request.env_id else "math"
    files.append(write(out / "configs" / f"{name}.yaml", CONFIG.format(env=request.env_id, task=request.task.id if request.task else "examples",
                                                                      name=name, port=DEFAULT_PORT, domain=domain, datasets="".join(datasets))))
    args = [request.env_id]
    if request.task is not None:
        args += ["--task", request.task.id, "--task-config", json.dumps(request.task.config)]
    if request.env_kwargs:
        args += ["--env-kwargs", json.dumps(request.env_kwargs)]
    serve = write(out / "serve.sh", SERVE.format(args=" ".join(shlex.quote(a) for a in args), port=DEFAULT_PORT))
    serve.chmod(0o755)
    files.append(serve)
    return ExportResult("nemo-gym", out, files, [f"RLVR_ENV_TOKEN=... {out}/serve.sh      # the resources server on port {DEFAULT_PORT}",
                                                 f"rlvr eval --task nemo-gym:{out}/configs/{name}.yaml --task-config '{{url: http://127.0.0.1:{DEFAULT_PORT}}}' ..."])

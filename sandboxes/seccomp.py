"""The seccomp filter every sandboxed job runs under, assembled as classic BPF bytes.

Policy (a deny list on top of namespaces, an unprivileged uid and rlimits, which do the rest):
- no sockets: ``socket``, ``connect``, ``bind``, ``listen``, ``accept*`` fail with EPERM
  (``socketpair`` stays: it reaches nothing outside the process tree, and asyncio needs it);
- no ptrace or cross-process memory access;
- no new namespaces (``unshare``, ``setns``, namespace flags to ``clone``), no mounts;
- no kernel-facing administration (modules, kexec, reboot, swap, clock, bpf, perf, keyrings,
  io_uring, userfaultfd, file handles);
- no System V IPC objects or POSIX message queues (they would outlive a job);
- a foreign architecture or the x32 ABI kills the process (they would bypass the table).
``clone3`` answers ENOSYS, so the C library falls back to ``clone``, whose flags BPF can see.

The filter is built here, on the trusted side, and handed to the sandbox supervisor as bytes; the
supervisor loads it with ``prctl(PR_SET_SECCOMP)`` in each job just before the job's code runs.
Syscall numbers are checked against libseccomp's tables by the test suite (through pyseccomp).
"""

from __future__ import annotations

import errno
import platform
import struct

# Names of the syscalls that fail with EPERM.
DENIED: tuple[str, ...] = (
    # network
    "socket", "connect", "bind", "listen", "accept", "accept4",
    # other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # namespaces and mounts
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount",
    "move_mount", "open_tree", "fspick", "mount_setattr",
    # the kernel and the machine
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "syslog", "quotactl", "sethostname", "setdomainname", "iopl", "ioperm", "bpf",
    "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "open_by_handle_at", "name_to_handle_at",
    "lookup_dcookie", "fanotify_init", "personality", "vhangup", "uselib", "nfsservctl",
    # System V IPC and POSIX message queues outlive processes: state that could pass between
    # jobs of one worker (jobs share the worker's IPC namespace)
    "shmget", "semget", "msgget", "mq_open",
)

# Syscall numbers by architecture; a name missing from a table does not exist there.
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "socket": 41, "connect": 42, "accept": 43, "bind": 49, "listen": 50, "accept4": 288,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_getfd": 438,
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "move_mount": 429, "open_tree": 428, "fspick": 433,
        "mount_setattr": 442, "init_module": 175, "finit_module": 313, "delete_module": 176,
        "kexec_load": 246, "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168,
        "acct": 163, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
        "syslog": 103, "quotactl": 179, "sethostname": 170, "setdomainname": 171, "iopl": 172,
        "ioperm": 173, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 250, "add_key": 248,
        "request_key": 249, "open_by_handle_at": 304, "name_to_handle_at": 303, "lookup_dcookie": 212,
        "fanotify_init": 300, "personality": 135, "vhangup": 153, "uselib": 134, "nfsservctl": 180,
        "shmget": 29, "semget": 64, "msgget": 68, "mq_open": 240,
        "clone": 56, "clone3": 435,
    },
    "aarch64": {
        "socket": 198, "connect": 203, "accept": 202, "bind": 200, "listen": 201, "accept4": 242,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "pidfd_getfd": 438,
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "move_mount": 429, "open_tree": 428, "fspick": 433,
        "mount_setattr": 442, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "kexec_load": 104, "kexec_file_load": 294, "reboot": 142, "swapon": 224, "swapoff": 225,
        "acct": 89, "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
        "syslog": 116, "quotactl": 60, "sethostname": 161, "setdomainname": 162, "bpf": 280,
        "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "keyctl": 219, "add_key": 217, "request_key": 218,
        "open_by_handle_at": 265, "name_to_handle_at": 264, "lookup_dcookie": 18, "fanotify_init": 262,
        "personality": 92, "vhangup": 58, "nfsservctl": 42,
        "shmget": 194, "semget": 190, "msgget": 186, "mq_open": 180,
        "clone": 220, "clone3": 435,
    },
}

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000

# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080

# classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h)
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
RET_KILL_PROCESS = 0x80000000
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
# offsets into struct seccomp_data
_OFF_NR, _OFF_ARCH, _OFF_ARG0_LO = 0, 4, 16


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def machine_arch() -> str:
    """The kernel architecture name used as a key of `SYSCALLS` (``platform.machine()``)."""
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


def supported(arch: str | None = None) -> bool:
    return (arch or machine_arch()) in SYSCALLS


def build_filter(arch: str | None = None) -> bytes:
    """The filter program for ``arch`` (default: this machine) as packed ``struct sock_filter``s.

    Raises ValueError for an architecture without a syscall table.
    """
    arch = arch or machine_arch()
    if arch not in SYSCALLS:
        raise ValueError(f"no seccomp syscall table for architecture {arch!r}; supported: {sorted(SYSCALLS)}")
    table = SYSCALLS[arch]
    eperm = RET_ERRNO | errno.EPERM
    prog = [
        _insn(_LD_W_ABS, 0, 0, _OFF_ARCH),
        _insn(_JEQ_K, 1, 0, AUDIT_ARCH[arch]),
        _insn(_RET_K, 0, 0, RET_KILL_PROCESS),
        _insn(_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if arch == "x86_64":  # x32 syscalls use other numbers: refuse them outright
        prog += [_insn(_JGE_K, 0, 1, X32_SYSCALL_BIT), _insn(_RET_K, 0, 0, RET_KILL_PROCESS)]
    for name in DENIED:
        if name in table:
            prog += [_insn(_JEQ_K, 0, 1, table[name]), _insn(_RET_K, 0, 0, eperm)]
    # clone3 passes its flags in memory BPF cannot read: make libc fall back to clone
    prog += [_insn(_JEQ_K, 0, 1, table["clone3"]), _insn(_RET_K, 0, 0, RET_ERRNO | errno.ENOSYS)]
    # clone with namespace flags: EPERM (flags are the low word of argument 0 on both arches)
    prog += [
        _insn(_JEQ_K, 0, 3, table["clone"]),
        _insn(_LD_W_ABS, 0, 0, _OFF_ARG0_LO),
        _insn(_JSET_K, 0, 1, CLONE_NAMESPACE_FLAGS),
        _insn(_RET_K, 0, 0, eperm),
        _insn(_RET_K, 0, 0, RET_ALLOW),
    ]
    return b"".join(prog)

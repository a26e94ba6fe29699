"""The adversarial programs: each tries to harm or read the host, or to outlive its job.

Templates use ``{name}`` placeholders filled by `Bait.fmt` (token, ports, paths, the victim pid).
Every program runs with `LIMITS`. Containment is judged on the host by `Bait.breaches`; `expect`
adds what the sandbox must *report* for that program (e.g. a fork bomb must not end ``ok``
with a clean exit), as a function of the execution dict returning a problem or None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

LIMITS = {"wall_s": 4.0, "cpu_s": 4.0, "memory_mb": 256, "processes": 32, "disk_mb": 32, "inodes": 2000, "output_bytes": 65536}


def status_in(*statuses: str) -> Callable[[dict], str | None]:
    def check(ex: dict) -> str | None:
        return None if ex["status"] in statuses else f"status {ex['status']!r} (exit {ex['exit_code']}), expected one of {statuses}"
    return check


def output_says(marker: bytes) -> Callable[[dict], str | None]:
    """For probes that report on sandbox state: the probe printed ``marker`` (its own verdict)."""
    def check(ex: dict) -> str | None:
        return None if marker in ex["stdout"] else f"probe output lacks {marker!r}: {ex['stdout'][:300]!r} {ex['stderr'][-300:]!r}"
    return check


def completed(ex: dict) -> str | None:
    return None if ex["status"] != "error" else f"sandbox error: {ex['info']}"


@dataclass(frozen=True)
class Attack:
    name: str
    code: str
    expect: Callable[[dict], str | None] = completed
    stdin: str = ""


TRY = "def attempt(label, fn):\n    try:\n        print(label, 'OK', repr(fn())[:200])\n    except BaseException as e:\n        print(label, 'FAILED', type(e).__name__)\n"

ATTACKS: list[Attack] = [
    # -- secrets ---------------------------------------------------------------------------
    Attack("read_secret_files", TRY + "for p in {secret_paths}:\n    attempt(p, lambda: open(p).read())\n"),
    Attack("read_environment", "import os\nprint(dict(os.environ))\nprint(os.environ.get({env_name}))\n"),
    Attack("read_proc_environ", TRY + "import os\nfor pid in os.listdir('/proc'):\n    if pid.isdigit():\n        attempt(pid, lambda: open(f'/proc/{pid}/environ','rb').read())\n"
           "attempt('host', lambda: open('/proc/{host_pid}/environ','rb').read())\n"),
    Attack("walk_filesystem", "import os\nfor root, dirs, files in os.walk('/'):\n    if root.startswith(('/proc', '/sys', '/usr')):\n        dirs[:] = []\n        continue\n"
           "    for f in files:\n        try:\n            print(root, f, open(os.path.join(root, f), errors='replace').read(200))\n        except Exception:\n            pass\n"),
    Attack("symlink_escape", TRY + "import os\nos.symlink('/root', 'r')\nattempt('via link', lambda: os.listdir('r'))\nfor p in {secret_paths}:\n    attempt(p, lambda: open('r/' + os.path.basename(p)).read())\n"),
    # -- writing outside -------------------------------------------------------------------
    Attack("write_outside", TRY + "for p in {write_targets}:\n    attempt(p, lambda: open(p, 'w').write('pwned'))\n"),
    Attack("write_via_proc_root", TRY + "for p in {write_targets}:\n    attempt(p, lambda: open('/proc/1/root' + p, 'w').write('pwned'))\n"),
    Attack("write_proc_sys", TRY + "attempt('sysrq', lambda: open('/proc/sysrq-trigger','w').write('s'))\nattempt('hostname', lambda: open('/proc/sys/kernel/hostname','w').write('pwned'))\n"),
    # -- network ---------------------------------------------------------------------------
    Attack("tcp_connect", TRY + "import socket\nattempt('tcp', lambda: socket.create_connection(('127.0.0.1', {tcp_port}), timeout=1).sendall(b'x'))\n"),
    Attack("udp_send", TRY + "import socket\nattempt('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {udp_port})))\n"),
    Attack("dns_lookup", TRY + "import socket\nattempt('getaddrinfo', lambda: socket.getaddrinfo('rlvr-{token}.example', 80))\n"
           "attempt('raw dns', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'\\x12\\x34' + b'\\x00' * 10, ('127.0.0.1', 53)))\n"),
    Attack("unix_socket", TRY + "import socket\ndef c():\n    s = socket.socket(socket.AF_UNIX)\n    s.connect({unix_path})\n    s.sendall(b'x')\nattempt('unix', c)\n"),
    Attack("abstract_unix_socket", TRY + "import socket\ndef c():\n    s = socket.socket(socket.AF_UNIX)\n    s.connect('\\0rlvr-' + {token})\nattempt('abstract', c)\n"),
    Attack("raw_socket_via_ctypes", TRY + "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nattempt('socket()', lambda: (libc.socket(2, 1, 0), ctypes.get_errno()))\n"
           "attempt('syscall socket', lambda: (libc.syscall(41, 2, 1, 0), ctypes.get_errno()))\n"),
    # -- other processes -------------------------------------------------------------------
    Attack("kill_host_process", TRY + "import os, signal\nattempt('victim', lambda: os.kill({victim_pid}, signal.SIGKILL))\nattempt('host', lambda: os.kill({host_pid}, signal.SIGKILL))\n"),
    Attack("kill_everything", TRY + "import os, signal\nattempt('kill -1', lambda: os.kill(-1, signal.SIGKILL))\nfor pid in range(1, 400):\n    try:\n        os.kill(pid, signal.SIGKILL)\n    except Exception:\n        pass\n"),
    Attack("ptrace_attach", TRY + "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nfor pid in (1, os.getppid(), {host_pid}):\n"
           "    attempt(pid, lambda: (libc.ptrace(16, pid, 0, 0), ctypes.get_errno()))\n"),
    Attack("process_vm_readv", TRY + "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nattempt('vm_readv', lambda: (libc.process_vm_readv(1, 0, 0, 0, 0, 0), ctypes.get_errno()))\n"),
    # -- privileges and kernel interfaces ----------------------------------------------------
    Attack("ctypes_unshare_user", TRY + "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nattempt('unshare', lambda: (libc.unshare(0x10000000), ctypes.get_errno()))\n"
           "attempt('uid', os.getuid)\nfor p in {secret_paths}:\n    attempt(p, lambda: open(p).read())\n"),
    Attack("ctypes_mount", TRY + "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nattempt('mount', lambda: (libc.mount(b'/dev/vda', b'/tmp', b'ext4', 0, None), ctypes.get_errno()))\n"
           "attempt('proc', lambda: (libc.mount(b'proc', b'/tmp', b'proc', 0, None), ctypes.get_errno()))\n"),
    Attack("setuid_root", TRY + "import os\nattempt('setuid', lambda: os.setuid(0))\nattempt('setresuid', lambda: os.setresuid(0, 0, 0))\nfor p in {secret_paths}:\n    attempt(p, lambda: open(p).read())\n"),
    Attack("raise_rlimits", TRY + "import resource\nfor r in (resource.RLIMIT_AS, resource.RLIMIT_NPROC, resource.RLIMIT_CPU, resource.RLIMIT_FSIZE):\n"
           "    attempt(r, lambda: resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)))\nx = bytearray(1 << 30)\nprint(len(x))\n",
           status_in("memory", "killed")),
    Attack("devices", TRY + "for d in ('/dev/mem', '/dev/kmem', '/dev/vda', '/dev/sda', '/dev/kmsg', '/dev/port'):\n    attempt(d, lambda: open(d, 'rb').read(16))\n"),
    Attack("kernel_keyring_and_bpf", TRY + "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nattempt('bpf', lambda: (libc.syscall(321, 0, 0, 0), ctypes.get_errno()))\n"
           "attempt('keyctl', lambda: (libc.syscall(250, 0, 0, 0), ctypes.get_errno()))\nattempt('io_uring', lambda: (libc.syscall(425, 1, 0), ctypes.get_errno()))\n"),
    # -- resource bombs ----------------------------------------------------------------------
    Attack("fork_bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", status_in("timeout", "killed", "memory", "ok")),
    Attack("thread_bomb", "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(100,), daemon=True).start()\n", status_in("timeout", "memory", "ok", "killed")),
    Attack("memory_bomb", "x = []\nwhile True:\n    x.append(bytearray(16 << 20))\n", status_in("memory", "killed")),
    Attack("memory_bomb_children", "import os\nfor _ in range(8):\n    if os.fork() == 0:\n        x = []\n        while True:\n            x.append(bytearray(16 << 20))\nos.wait()\nimport time\ntime.sleep(10)\n",
           status_in("memory", "killed", "timeout", "ok")),
    Attack("disk_bomb", "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))\n", status_in("ok", "killed")),
    Attack("inode_bomb", "import os\ni = 0\nwhile True:\n    open(f'f{i}', 'w').close()\n    i += 1\n", status_in("ok", "timeout")),
    Attack("huge_output", "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", lambda ex: None if ex["status"] == "output_limit" and len(ex["stdout"]) <= LIMITS["output_bytes"] else f"status {ex['status']}, {len(ex['stdout'])} bytes"),
    Attack("binary_output", "import os, sys\nsys.stdout.buffer.write(bytes(range(256)) * 16)\n", lambda ex: None if ex["stdout"] == bytes(range(256)) * 16 else "binary output was altered"),
    Attack("infinite_loop", "while True:\n    pass\n", status_in("timeout")),
    Attack("sleep_forever", "import time\ntime.sleep(1000)\n", status_in("timeout")),
    Attack("ignore_sigterm", "import signal, time\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.01)\n", status_in("timeout")),
    # -- outliving the job -------------------------------------------------------------------
    Attack("double_fork_daemon", "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        for _ in range(600):\n            time.sleep(0.1)\n    os._exit(0)\nprint('parent exits')\n"),
    Attack("setsid_background", "import os, subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\nprint('spawned')\n"),
    Attack("daemon_ignoring_signals", "import os, signal, time\nif os.fork() == 0:\n    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):\n        signal.signal(s, signal.SIG_IGN)\n    os.setsid()\n    while True:\n        time.sleep(0.1)\nprint('left a daemon')\n"),
]

# A two-step probe: the first job leaves state behind, the second (a fresh job on the same backend)
# reports whether it can see any of it.
LEAVE_STATE = ("import ctypes, os, subprocess, sys\n"
               "open('/tmp/marker-' + {token}, 'w').write('x')\nopen('marker-' + {token}, 'w').write('x')\n"
               "for d in ('/dev/shm', '/run', '/etc', '/'):\n    try:\n        open(d + '/marker-' + {token}, 'w').write('x')\n    except OSError:\n        pass\n"
               "libc = ctypes.CDLL(None)\nprint('shm', libc.shmget(0x52564c52, 4096, 0o1666))\n"
               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n")
SEE_STATE = ("import ctypes, os\n"
             "seen = [p for p in ('/tmp/marker-' + {token}, 'marker-' + {token}, '/dev/shm/marker-' + {token}, '/run/marker-' + {token},\n"
             "                    '/etc/marker-' + {token}, '/marker-' + {token}) if os.path.exists(p)]\n"
             "libc = ctypes.CDLL(None)\nif libc.shmget(0x52564c52, 0, 0) != -1:\n    seen.append('sysv shm')\n"
             "procs = [p for p in os.listdir('/proc') if p.isdigit() and open(f'/proc/{p}/cmdline','rb').read().find(b'sleep(60)') >= 0]\n"
             "if procs:\n    seen.append(f'processes {procs}')\nprint('CLEAN' if not seen else f'LEFTOVER {seen}')\n")

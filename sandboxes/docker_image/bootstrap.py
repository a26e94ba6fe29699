"""Runs one job inside a warm Docker container (started by `docker exec` per job).

Reads one message from stdin: a 4-byte big-endian length and a JSON header ``{"limits", "files"}``
followed by the code and the files as raw bytes (sizes in the header). Empties the scratch
directory (the previous job's files), writes the new files, sets rlimits and ``exec``s
``python3 main.py``; the rest of stdin is the program's stdin. Standard library only.
"""

import json
import os
import resource
import shutil
import struct
import sys

SCRATCH = "/tmp/job"


def read_exact(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            raise EOFError("job message truncated")
        data += chunk
    return data


def main():
    (hlen,) = struct.unpack(">I", read_exact(4))
    header = json.loads(read_exact(hlen))
    blobs = [read_exact(n) for n in header["sizes"]]
    code, files = blobs[0], dict(zip(header["files"], blobs[1:]))
    for entry in os.listdir("/tmp"):  # nothing of the previous job survives into this one
        path = os.path.join("/tmp", entry)
        shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
    os.makedirs(SCRATCH)
    for name, content in {**files, "main.py": code}.items():
        path = os.path.join(SCRATCH, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)
    os.chdir(SCRATCH)
    lim = header["limits"]
    cpu = max(1, int(-(-lim["cpu_s"] // 1)))
    with open("/proc/self/statm") as f:
        base = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    for which, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (base + (lim["memory_mb"] << 20),) * 2),
                         (resource.RLIMIT_FSIZE, ((lim["file_size_mb"] << 20),) * 2), (resource.RLIMIT_NOFILE, (lim["open_files"],) * 2),
                         (resource.RLIMIT_CORE, (0, 0))):
        resource.setrlimit(which, value)
    os.execv(sys.executable, [sys.executable, "-s", "-S", os.path.join(SCRATCH, "main.py")])


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:
        os.write(2, f"sandbox: bootstrap failed: {type(e).__name__}: {e}\n".encode())
        os._exit(120)

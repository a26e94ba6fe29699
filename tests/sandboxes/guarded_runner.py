"""Runs sandbox jobs for the adversarial tests, in a process the test has put under an outer guard.

Protocol (JSON lines): the first line on stdin is ``{"backend": name, "options": {...}}``; each
further line is a job ``{"code", "stdin", "limits"}``; each answer line is the execution with
stdout/stderr base64-encoded. The test process checks the host; this process only runs jobs.
"""

import base64
import json
import sys

import sandboxes


def main() -> None:
    config = json.loads(sys.stdin.readline())
    backend = sandboxes.make_backend(config["backend"], **config.get("options", {}))
    print(json.dumps({"ready": True, "info": {k: str(v) for k, v in backend.info().items()}}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        ex = backend.run(sandboxes.Job.make(job["code"], stdin=job.get("stdin"), limits=job.get("limits")))
        out = ex.to_dict()
        out["stdout"] = base64.b64encode(ex.stdout).decode()
        out["stderr"] = base64.b64encode(ex.stderr).decode()
        print(json.dumps(out), flush=True)
    backend.close()


if __name__ == "__main__":
    main()

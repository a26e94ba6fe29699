import sys
from pathlib import Path

# the sandbox test harness (a real Docker engine for the docker backend), shared with tests/sandboxes
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sandboxes"))

from docker_engine import docker_options  # noqa: E402,F401  (a session fixture)

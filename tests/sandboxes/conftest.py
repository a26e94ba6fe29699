import sys
from pathlib import Path

# the harness modules beside the tests (pytest runs with --import-mode=importlib)
sys.path.insert(0, str(Path(__file__).parent))


from docker_engine import docker_options  # noqa: E402,F401  (session fixture: a real Docker engine)

"""The built-in algorithm presets: one YAML file per preset in this folder (``NAME.yaml``, ``extends:``
another). The code that reads them and the algorithm config itself live in `rlvr.algos.config`;
their names are importable from here too, as they were before that module existed."""

from rlvr.algos.config import *  # noqa: F401,F403 - the names of earlier versions
from rlvr.algos.config import __all__  # noqa: F401

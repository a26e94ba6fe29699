"""Tools a model calls during a multi-turn episode (see `envs.episode`).

`python` (`PythonTool`): fenced ```python blocks run in a sandbox; the output comes back as an
```output block.
"""

from envs.tools.python import CALL_END, PythonTool, blank_calls, find_call, render_output

__all__ = ["CALL_END", "PythonTool", "blank_calls", "find_call", "render_output"]

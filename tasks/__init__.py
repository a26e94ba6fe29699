"""Task suites: where problems come from, their splits, and the environment that verifies them.

    import tasks
    task = tasks.make("arithmetic-v1")
    test = task.problems("test")
    verdict = task.env.verify(test[0], "Answer: 42")

Your own rows (a `datasets.Dataset`, a JSONL/CSV/Parquet file or folder) become a task with
`tasks.from_dataset`, or ``task.id=file:PATH`` in a config (`tasks.user_data`).

Third-party packages register tasks through the ``rlvr.tasks`` entry-point group.
"""

from envs.registry import Registry, RegistryError
from tasks.base import Task, TaskError, assert_disjoint, canonical_text, hash_split, problems_checksum, stable_hash, unknown_config_keys
from tasks.user_data import from_dataset

TASKS: Registry[Task] = Registry("task", entry_point_group="rlvr.tasks")
"""Every registered task, by versioned id."""


def register(id: str, entry_point=None, **options):
    """Register a task class or factory (or a lazy ``"module:attribute"`` string) under ``id``."""
    return TASKS.register(id, entry_point, **options)


def make(id: str, **config) -> Task:
    """Build the task registered under ``id`` with ``config`` overriding its defaults."""
    from tasks import hubs

    if hubs.is_hub_id(id):  # another hub's environment: harbor:DIR (see tasks.hubs)
        return hubs.make(id, **config)
    try:
        task = TASKS.make(id, **config)
    except TypeError:  # a misspelled key: say which keys the task takes
        error = unknown_config_keys(TASKS.spec(id).load(), config, f"task {id}") if config else None
        if error is None:
            raise
        raise error from None
    except TaskError:  # already says what is wrong
        raise
    except ValueError as e:  # a task refusing a config value (max_digits=-1): the user's setting, said in one line
        if not config:
            raise
        raise TaskError(f"task {id}: config {config} refused: {e}") from None
    if not isinstance(task, Task):
        raise RegistryError(f"task {id!r} built a {type(task).__name__}, not a tasks.Task")
    return task


__all__ = ["TASKS", "from_dataset", "hash_split", "Task", "TaskError", "assert_disjoint", "canonical_text", "make", "problems_checksum", "register", "stable_hash"]

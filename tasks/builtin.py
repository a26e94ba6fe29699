"""Registers the tasks that ship with rlvr (named by the ``rlvr.tasks`` entry point)."""

import tasks


def register_all() -> None:
    tasks.register(
        "arithmetic-v1", "tasks.arithmetic:ArithmeticTask",
        description="Procedural multi-digit +, -, * with a worked scratchpad (embedded quickstart task)",
    )
    tasks.register(
        "humaneval-v1", "tasks.code_datasets:HumanEvalTask",
        description="HumanEval (test split; tests converted to hidden input/output pairs), graded in a sandbox",
    )
    tasks.register(
        "mbpp-v1", "tasks.code_datasets:MbppTask",
        description="MBPP with official splits (test = task ids 11-510), hidden input/output tests in a sandbox",
    )
    tasks.register(
        "program-synthesis-v1", "tasks.program_synthesis:ProgramSynthesisTask",
        description="Procedural one-expression integer functions from examples (small enough for the embedded CPU model)",
    )

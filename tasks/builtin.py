"""Registers the tasks that ship with rlvr (named by the ``rlvr.tasks`` entry point)."""

import tasks


def register_all() -> None:
    tasks.register(
        "arithmetic-v1", "tasks.arithmetic:ArithmeticTask",
        description="Procedural multi-digit +, -, * with a worked scratchpad (embedded quickstart task)",
    )
    for id, attr, description in (
        ("gsm8k-v1", "GSM8K", "GSM8K grade-school math word problems (train 7,473 / test 1,319)"),
        ("hendrycks-math-v1", "HendrycksMath", "MATH competition problems (train 7,500 / test 5,000 / test_rest: test minus MATH-500)"),
        ("math500-v1", "Math500", "MATH-500 held-out subset of MATH test (500)"),
        ("aime24-v1", "AIME24", "AIME 2024 I+II (30, held out)"),
        ("aime25-v1", "AIME25", "AIME 2025 I+II (30, held out)"),
        ("amc23-v1", "AMC23", "AMC 12 2023 A+B (40, held out)"),
    ):
        tasks.register(id, f"tasks.math_datasets:{attr}", description=description)
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
    tasks.register(
        "tool-products-v1", "tasks.tool_products:ToolProductsTask",
        description="Multi-turn: products of two 4-digit numbers, one Python tool call away (embedded tool-use task)",
    )
    tasks.register(
        "reasoning-gym-v1", "tasks.reasoning_gym:ReasoningGymTask",
        description="Any reasoning-gym generator (task.config.dataset, default number_sorting), hash-seeded disjoint splits, its own scorer (needs rlvr[reasoning-gym])",
    )
    tasks.register(
        "reasoning-gym/sum-chain-v1", "tasks.reasoning_gym:SumChainTask",
        description="reasoning-gym basic_arithmetic as + and - chains (Calculate 7 + 2 - 5.) with running-total demonstrations, math-v1, frozen test",
    )

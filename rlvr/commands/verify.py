"""`rlvr verify --gold G --response R`: run the math checker on one pair and show why it decided.

Prints the verdict, the extracted answer, both normalised forms, the evidence that decided it and
the process-reward steps, so a surprising reward can be debugged without writing code; ``--explain``
adds which extraction rule decided and why an answer was refused (``hedged``, ``not_literal``,
``restated``). It judges
as ``math-v1`` rewards by default: a numeric gold needs a numeric literal (``--allow-expressions``
judges as the MATH tasks do), and with ``--question`` a restatement of the question never passes.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check one response against a gold answer with the math checker and explain the verdict")
    p.add_argument("--gold", required=True, help="the gold answer, e.g. '\\frac{1}{2}'")
    p.add_argument("--response", required=True, help="the model's response text, or '-' to read it from standard input")
    p.add_argument("--extraction", choices=("strict", "lenient"), default="strict",
                   help="strict (default): only a box, an answer marker or a bare one-line answer that parses counts; "
                        "lenient: otherwise the value stated by the last sentence that states one")
    p.add_argument("--lenient", action="store_true", help="shorthand for --extraction lenient")
    p.add_argument("--allow-expressions", action="store_true",
                   help="accept any expression equal to a numeric gold ('2^{10}' for 1024), as the MATH and MATH-500 tasks do; "
                        "default: a numeric gold needs a numeric literal (544, -3.5, 3/4, \\frac{3}{4}, 1.5e3, 1,000), as "
                        "math-v1 and the arithmetic, GSM8K, AIME and AMC tasks require, so 'Answer: 68*8' fails for 544")
    p.add_argument("--question", default=None,
                   help="the question the response answers: an answer restating one of its expressions ('68*8' for "
                        "'Compute 68*8.') never passes, and lenient extraction does not take a restated expression or "
                        "operand as the answer (math-v1 always reads the problem's question)")
    p.add_argument("--truncated", action="store_true",
                   help="the response was cut at its token budget: lenient extraction then credits only an answer marked "
                        "(\\boxed{}, 'The answer is', 'Answer:', '####') before the cut, as it does for a response ending mid-sentence")
    p.add_argument("--rel-tol", type=float, default=None, help="opt-in relative tolerance for numeric answers (default: exact)")
    p.add_argument("--timeout", type=float, default=1.0, help="time budget of the check in seconds (default 1)")
    p.add_argument("--explain", action="store_true",
                   help="also print which extraction rule decided (the box, marker or sentence read, the value it commits "
                        "to, remarks set aside, sentences passed over) and why an answer was refused (hedged, not a "
                        "numeric literal, restates the question)")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import math

    import rlvr
    from envs.math import check, warmup

    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        raise rlvr.UserError(f"--timeout must be > 0 seconds and finite, got {args.timeout}")
    response = args.response
    if response == "-":
        data = sys.stdin.buffer.read()
        try:
            response = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise rlvr.UserError(f"--response -: standard input is not UTF-8 text (byte {e.start}: {data[e.start:e.start + 1]!r})") from None
    if args.rel_tol is not None and not 0 <= args.rel_tol < 1:
        raise rlvr.UserError(f"--rel-tol must be in [0, 1), got {args.rel_tol}")
    warmup()  # a one-off check should not spend its budget starting sympy
    extraction = "lenient" if args.lenient else args.extraction
    verdict = check(response, args.gold, extraction=extraction, rel_tol=args.rel_tol, timeout_s=args.timeout,
                    numeric_literal=not args.allow_expressions, question=args.question, truncated=args.truncated)
    if args.json:
        print(json.dumps(verdict.to_dict(), indent=2, ensure_ascii=False))
        return 0 if verdict.passed else 1
    info = verdict.info
    print(f"verdict:    {'PASS' if verdict.passed else 'FAIL'} (reward {verdict.reward:g}, status {verdict.status.value})")
    print(f"extracted:  {verdict.extracted!r}" + (f" via {info['method']}" if "method" in info else ""))
    print(f"normalised: {info.get('pred', '-')}  vs gold  {info.get('gold', '-')}")
    if args.explain:
        print(f"mode:       {extraction}" + ("" if args.question else " (no --question: restatements of a question cannot be recognised)"))
        print(f"rule:       {info.get('rule', '-')}")
        if "cut" in info:
            print(f"cut:        {info['cut']}: only an answer marked before the cut counts")
        if "span" in info:
            a, b = info["span"]
            print(f"read from:  characters {a}-{b}: {response[max(0, a - 30): a]!r} >> {response[a: b]!r} << {response[b: b + 30]!r}")
        if "spelled" in info:
            print(f"in words:   {info['spelled']!r} read as {verdict.extracted!r} (the gold is a number)")
        if "reason" in info:
            print(f"refused:    {info['reason']}")
    if info.get("decided_by"):
        print(f"decided by: {', '.join(info['decided_by'])}")
    for key in ("rejected", "parse_error", "error", "undecided"):
        if key in info:
            print(f"{key}: {info[key]}")
    if verdict.steps:
        print(f"steps ({sum(s.reward for s in verdict.steps):g}/{len(verdict.steps)} correct):")
        for s in verdict.steps:
            print(f"  [{'ok' if s.reward else 'WRONG'}] {s.label!r} at {s.start}-{s.end}")
    print(f"time:       {info.get('check_s', 0) * 1000:.2f} ms")
    return 0 if verdict.passed else 1

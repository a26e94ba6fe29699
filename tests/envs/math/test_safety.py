"""Model text is never executed: injection attempts are inert text, and the parent process never
even imports sympy (symbolic work happens in worker processes that receive trees, not text)."""

import subprocess
import sys
from pathlib import Path

import pytest

from envs.math import check
from envs.math.symbolic import decode

ROOT = Path(__file__).resolve().parents[3]


def _attempts(marker: Path) -> list[str]:
    m = str(marker)
    return [
        f"\\boxed{{__import__('os').system('touch {m}')}}",
        f"\\boxed{{eval(\"__import__('os').system('touch {m}')\")}}",
        f"\\boxed{{exec(\"open('{m}','w')\")}}",
        f"The answer is $__import__('os').system('touch {m}')$",
        f"Answer: (lambda: __import__('os').system('touch {m}'))()",
        f"\\boxed{{\\immediate\\write18{{touch {m}}}}}",
        f"\\boxed{{\\input{{{m}}}}}",
        f"\\boxed{{x}} \\boxed{{__builtins__.open('{m}', 'w')}}",
        f"\\boxed{{Symbol('x').__class__.__init__.__globals__['os'].system('touch {m}')}}",
        "\\boxed{{}.__class__.__base__.__subclasses__()}",
    ]


@pytest.mark.parametrize("gold", ["0", "x", "\\frac{1}{2}", "__import__('os').system('touch /tmp/never')"])
def test_injection_attempts_execute_nothing(tmp_path, gold):
    marker = tmp_path / "pwned"
    for attempt in _attempts(marker):
        v = check(attempt, gold, timeout_s=5)
        assert not marker.exists(), attempt
        assert v.status.value in ("ok", "error") and v.reward in (0.0, 1.0)


def test_parent_process_never_imports_sympy(tmp_path):
    code = (
        "import sys\n"
        "from envs.math import check, warmup\n"
        "warmup()\n"
        "assert check('\\\\boxed{\\\\sin^2 x+\\\\cos^2 x}', '1', timeout_s=30).passed\n"
        "assert check('\\\\boxed{\\\\log_2 8}', '3', timeout_s=30).passed\n"
        f"check(\"\\\\boxed{{__import__('os').system('touch {tmp_path / 'p'}')}}\", '1')\n"
        "assert 'sympy' not in sys.modules, 'sympy imported in the caller'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    assert not (tmp_path / "p").exists()


def test_worker_protocol_accepts_only_trees():
    with pytest.raises(ValueError):
        decode(["python", "__import__('os')"])


def test_checker_source_has_no_eval_or_sympify_of_text():
    import re

    forbidden = re.compile(r"(?<![\w.])(?:eval|exec|compile)\s*\(|(?:sympify|parse_expr|parse_latex|latex2sympy)\s*\(")
    for path in (ROOT / "envs" / "math").glob("*.py"):
        hits = [line for line in path.read_text().splitlines() if forbidden.search(line)]
        assert not hits, (path.name, hits)


def test_pathological_inputs_are_answered_not_hung():
    cases = [
        ("\\boxed{9^{9^{9^9}}}", "1", False),
        ("\\boxed{9^{9^{9^9}}}", "9^{9^{9^9}}", True),
        ("\\boxed{" + "(" * 5000 + "1" + ")" * 5000 + "}", "1", True),  # redundant grouping
        ("\\boxed{" + "(" * 5000 + "1" + ")" * 5000 + "}", "2", False),
        ("\\boxed{" + "\\frac{1}{" * 200 + "2" + "}" * 200 + "}", "2", True),  # deep, parsed innermost first
        ("\\boxed{" + "\\frac{1}{" * 201 + "2" + "}" * 201 + "}", "2", False),
        ("\\boxed{" + "1+" * 3000 + "1}", "3001", True),
        ("\\boxed{" + "1+" * 6000 + "1}", "6001", False),  # longer than the parser accepts (MAX_ANSWER_CHARS)
        ("x" * 1_000_000 + "\\boxed{3}", "3", True),
        ("\\boxed{2^{2^{2^{2^{2^{2}}}}}}", "2", False),
        ("\\boxed{(10^{100})!}", "1", False),
        ("\\boxed{x^{10^{9}}}", "x", False),
        ("\\boxed{" + "\\sqrt{" * 50 + "2" + "}" * 50 + "}", "2", False),
    ]
    for response, gold, expected in cases:
        v = check(response, gold, timeout_s=1.0)
        assert v.passed == expected, (response[:60], v.info)
        assert v.status.value in ("ok", "timeout")

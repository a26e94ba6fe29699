import json

from rlvr.cli import main


def test_verify_prints_verdict_extracted_and_normalised_forms(capsys):
    code = main(["verify", "--gold", "\\frac{\\sqrt2}{2}", "--response", "so $\\sqrt{8}/4 = \\frac{2\\sqrt2}{4}$, \\boxed{\\frac{1}{\\sqrt2}}"])
    out = capsys.readouterr().out
    assert code == 0
    assert "PASS" in out and "extracted:  '\\\\frac{1}{\\\\sqrt2}' via boxed" in out
    assert "normalised:" in out and "(1/2)*sqrt(2)" in out and "steps (1/1 correct)" in out


def test_verify_fails_with_exit_code_1_and_json_output(capsys):
    assert main(["verify", "--gold", "3", "--response", "Answer: 4", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is False and data["extracted"] == "4" and data["status"] == "ok"


def test_verify_rejects_bad_arguments_without_traceback(capsys):
    assert main(["verify", "--gold", "3", "--response", "x", "--timeout", "0"]) == 2
    assert "--timeout must be > 0" in capsys.readouterr().err


def test_verify_extraction_mode_is_selectable(capsys):
    prose = "We add both parts.\nAltogether there are 82 stamps."
    assert main(["verify", "--gold", "82", "--response", prose]) == 1  # strict: no explicit answer
    assert "no_answer" in capsys.readouterr().out
    assert main(["verify", "--gold", "82", "--response", prose, "--extraction", "lenient"]) == 0
    assert "via sentence" in capsys.readouterr().out
    assert main(["verify", "--gold", "82", "--response", prose, "--lenient"]) == 0

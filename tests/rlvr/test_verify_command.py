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


# -- issue 20: rewards a real model cannot game -------------------------------------------------


def _verdict(capsys, *args: str) -> dict:
    code = main(["verify", *args, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == (0 if data["passed"] else 1)
    return data


def test_the_question_s_own_expression_never_passes_by_default(capsys):
    for gold, response in [("544", "Answer: 68*8"), ("544", "68*8"), ("18", "\\boxed{(16-3-4)*2}")]:
        data = _verdict(capsys, "--gold", gold, "--response", response)
        assert data["passed"] is False and data["status"] == "ok" and "numeric literal" in data["info"]["rejected"], (response, data)
    assert _verdict(capsys, "--gold", "544", "--response", "Answer: 544")["passed"]
    assert _verdict(capsys, "--gold", "544", "--response", "Answer: 68*8 = 544")["passed"]  # the value stated
    assert _verdict(capsys, "--gold", "0.75", "--response", "\\boxed{\\frac{3}{4}}")["passed"]


def test_lenient_extraction_does_not_take_a_restated_question(capsys):
    data = _verdict(capsys, "--extraction", "lenient", "--gold", "22", "--response", "The answer to 75-53 is unknown to me.")
    assert data["passed"] is False and data["status"] == "no_answer" and data["extracted"] is None
    data = _verdict(capsys, "--extraction", "lenient", "--gold", "47", "--question", "Compute 47*1.",
                    "--response", "The product of 47 and 1 is unknown.")
    assert data["passed"] is False and data["status"] == "no_answer"
    assert _verdict(capsys, "--extraction", "lenient", "--gold", "22", "--response", "So 75-53 = 22.")["passed"]


def test_a_bare_sentence_is_no_answer_in_strict_mode(capsys):
    data = _verdict(capsys, "--gold", "85", "--response", "The sum of 47 and 38 is 85.")
    assert data["status"] == "no_answer" and data["passed"] is False and data["info"]["parse_error"]


def test_expressions_are_allowed_on_request_but_never_the_question_s_own(capsys):
    assert _verdict(capsys, "--gold", "1024", "--response", "\\boxed{2^{10}}", "--allow-expressions")["passed"]
    assert not _verdict(capsys, "--gold", "1024", "--response", "\\boxed{2^{10}}")["passed"]
    data = _verdict(capsys, "--gold", "544", "--response", "Answer: 68*8", "--allow-expressions", "--question", "Compute 68*8.")
    assert data["passed"] is False and "restates the question" in data["info"]["rejected"]
    main(["verify", "--gold", "544", "--response", "Answer: 68*8"])
    assert "rejected: not a numeric literal" in capsys.readouterr().out


def test_help_documents_the_answer_form_options(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["verify", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--allow-expressions" in out and "numeric literal" in out and "--question" in out


# -- commitment: hedges, remarks, number words, and why a verdict ---------------------------------


def test_explain_prints_the_rule_that_decided_and_why_an_answer_was_refused(capsys):
    assert main(["verify", "--gold", "12", "--response", "Answer: $12 or $15", "--explain"]) == 1
    out = capsys.readouterr().out
    assert "rule:       marker answer: values offered as alternatives" in out
    assert "refused:    hedged" in out and "offers 2 candidate values (12 / 15)" in out
    response = "We add 70 and 12, which results in 82. This is the sum of 70 and 12."
    assert main(["verify", "--lenient", "--gold", "82", "--question", "Compute 70+12.", "--response", response, "--explain"]) == 0
    out = capsys.readouterr().out
    assert "the value after 'results in'" in out and "passed over: restates operands" in out and ">> '82' <<" in out
    assert main(["verify", "--gold", "0", "--response", "The answer is zero.", "--explain"]) == 0
    assert "in words:   'zero' read as '0'" in capsys.readouterr().out


def test_hedged_answers_fail_with_reason_hedged_in_json(capsys):
    data = _verdict(capsys, "--gold", "12", "--response", "The answer is either 12 or 15.")
    assert data["passed"] is False and data["info"]["reason"] == "hedged" and data["extracted"] == "12, 15"
    assert _verdict(capsys, "--gold", "306", "--response", "Answer: 306 (I multiplied 34 by 9).")["passed"]

"""Huge and deeply nested products of powers, decided exactly without computing them."""

import pytest

from envs.math import check, powers
from envs.math.parser import parse_answer


@pytest.mark.parametrize("a,b,expected", [
    ("3^{3^{3^3}}", "3^{7625597484987}", True), ("27^{3^{26}}", "3^{3^{27}}", True), ("3^{3^{3^3}}", "3^{7625597484986}", False),
    ("10^{10^{8}}", "10^{100000000}", True), ("10^{10^{8}}", "10^{100000001}", False), ("10^{10^{8}}", "100^{5\\cdot 10^{7}}", True),
    ("9^{9^{9^9}}", "3^{2\\cdot 9^{9^9}}", True), ("9^{9^{9^9}}", "3^{9^{9^9}}", False), ("9^{9^{9^9}}", "1", False),
    ("2^{2^{2^{2^{2^{2}}}}}", "4^{2^{65535}}", True), ("2^{2^{2^{2^{2^{2}}}}}", "4^{2^{65534}}", False),
    ("\\sqrt{\\sqrt{\\sqrt{2}}}", "2^{1/8}", True), ("\\sqrt{\\sqrt{\\sqrt{2}}}", "2^{1/4}", False), ("\\sqrt2\\sqrt3", "\\sqrt6", True),
    ("\\sqrt[3]{\\sqrt{7}}", "7^{1/6}", True), ("\\sqrt{2\\sqrt{2}}", "2^{3/4}", True), ("(-8)^{1/3}", "-2", True),
    ("(-2)^{10^{20}}", "2^{10^{20}}", True), ("(-2)^{10^{20}+1}", "-2^{10^{20}+1}", True), ("(-2)^{10^{20}+1}", "2^{10^{20}+1}", False),
    ("\\frac{1}{2^{10^9}}", "2^{-10^9}", True), ("1267650600228229401496703205376", "2^{100}", True),
])
def test_canonical_power_forms_decide_equality(a, b, expected):
    assert powers.equal(parse_answer(a), parse_answer(b)) is expected


@pytest.mark.parametrize("a,b", [
    ("2^{100}+1", "2^{100}"),   # a sum has no power-product form
    ("\\sqrt{-4}", "2i"),       # even root of a negative: left to exact arithmetic
    ("x^{10}", "x^{10}"),       # variables are not constants
    ("18446744073709551629^{2}", "3"),  # a literal above 2^64 that is not a perfect power is not factored
])
def test_outside_the_form_is_undecided_not_guessed(a, b):
    assert powers.equal(parse_answer(a), parse_answer(b)) is None


def test_factorisation_of_word_sized_integers():
    assert powers._factor(10**20 + 1) == {73: 1, 137: 1, 1676321: 1, 5964848081: 1}
    assert powers._factor(3 * 18446744073709551557) == {3: 1, 18446744073709551557: 1}
    assert powers._factor(1000000007**5) == {1000000007: 5}  # a perfect power above 2^64


@pytest.mark.parametrize("response,gold,expected", [
    ("\\boxed{3^{3^{3^3}}}", "3^{7625597484987}", True),
    ("\\boxed{10^{10^{10}}}", "10^{10000000000}", True),
    ("\\boxed{10^{10^{10}}}", "10^{1000000000}", False),
    ("\\boxed{" + "\\sqrt{" * 60 + "2" + "}" * 60 + "}", "2^{1/1152921504606846976}", True),
    ("\\boxed{" + "\\sqrt{" * 60 + "2" + "}" * 60 + "}", "2^{1/576460752303423488}", False),
    ("\\boxed{" + "1+\\frac{1}{" * 50 + "1" + "}" * 50 + "}", "\\frac{32951280099}{20365011074}", True),
    ("\\boxed{" + "1+\\frac{1}{" * 50 + "1" + "}" * 50 + "}", "\\frac{20365011074}{12586269025}", False),
    ("\\boxed{" + "-" * 4000 + "8}", "8", True), ("\\boxed{" + "-" * 4001 + "8}", "8", False),
    ("\\boxed{" + "-(" * 600 + "4" + ")" * 600 + "}", "4", True),
])
def test_giant_and_deep_answers_are_decided_within_the_budget(response, gold, expected):
    v = check(response, gold, timeout_s=1.0)
    assert v.status.value == "ok" and v.passed == expected, v.info

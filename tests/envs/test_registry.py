import pytest

import envs
from envs.registry import Registry, RegistryError, parse_id
from envs.types import Problem, Verdict


class Echo(envs.Environment):
    """Passes when the completion equals the reference."""

    def verify(self, problem, completion):
        ok = completion.strip() == problem.reference
        return Verdict(float(ok), ok)


def test_parse_id():
    assert str(parse_id("acme/sudoku-v2")) == "acme/sudoku-v2"
    p = parse_id("math-v1")
    assert (p.namespace, p.name, p.version) == (None, "math", 1)
    assert parse_id("acme/x").version is None
    with pytest.raises(RegistryError, match="malformed"):
        parse_id("a b")


def test_register_make_and_resolve_latest_version():
    reg = Registry("environment")
    reg.register("acme/echo-v1", Echo)
    reg.register("acme/echo-v2", Echo, kwargs={})
    assert reg.spec("acme/echo").id == "acme/echo-v2"
    env = reg.make("acme/echo-v1")
    assert isinstance(env, Echo) and env.id == "acme/echo-v1"
    assert reg.spec("acme/echo-v1").description == "Passes when the completion equals the reference."


def test_decorator_and_lazy_string_entry_point():
    reg = Registry("environment")

    @reg.register("echo-v1")
    class Local(Echo):
        pass

    reg.register("math-v9", "envs.math.env:MathEnv", description="lazy")
    assert reg.spec("math-v9").entry_point == "envs.math.env:MathEnv"  # not imported until make
    assert type(reg.make("math-v9")).__name__ == "MathEnv"
    assert reg.make("echo-v1").__class__ is Local


def test_errors_name_versions_and_close_matches():
    reg = Registry("environment")
    reg.register("acme/echo-v1", Echo)
    with pytest.raises(RegistryError, match=r"registered versions of 'acme/echo': acme/echo-v1"):
        reg.spec("acme/echo-v3")
    with pytest.raises(RegistryError, match=r"Did you mean: acme/echo-v1"):
        reg.spec("acme/ecoh-v1")
    with pytest.raises(RegistryError, match="has no version"):
        reg.register("nover", Echo)
    with pytest.raises(RegistryError, match="already registered"):
        reg.register("acme/echo-v1", Echo)
    reg.register("acme/echo-v1", Echo, override=True)


def test_bad_lazy_entry_point_is_reported():
    reg = Registry("environment")
    reg.register("broken-v1", "no_such_module_xyz:Thing")
    with pytest.raises(RegistryError, match="cannot load entry point"):
        reg.make("broken-v1")


def test_builtin_envs_come_from_the_entry_point_group():
    spec = envs.ENVS.spec("math-v1")
    assert spec.source == "rlvr"  # registered by the installed distribution, like a plugin
    assert isinstance(envs.make("math"), envs.Environment)


def test_unversioned_registry_for_functions():
    reg = Registry("advantage estimator", versioned=False)
    reg.register("grpo", lambda x: x + 1)
    assert reg.get("grpo")(1) == 2
    with pytest.raises(RegistryError, match="not versioned"):
        reg.register("grpo-v1", lambda x: x)


def test_problem_roundtrip():
    p = Problem("a/1", "q", "42", {"k": 1})
    assert Problem.from_dict(p.to_dict()) == p

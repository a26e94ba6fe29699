from dataclasses import dataclass, field

import pytest

from rlvr.config import ConfigError, describe, help_field, load_config
from rlvr.train import TrainConfig
from rlvr.train.sft import SFTConfig


@dataclass
class Inner:
    lr: float = help_field(1e-3, "learning rate")
    names: list[str] = help_field(["a"], "names")


@dataclass
class Outer:
    steps: int = help_field(10, "steps")
    mode: str | None = help_field(None, "mode")
    inner: Inner = field(default_factory=Inner)


def test_yaml_file_and_dotted_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("steps: 5\ninner:\n  lr: 2.0e-3\n")
    cfg = load_config(Outer, path, ["inner.lr=1e-4", "inner.names=[x, y]", "mode=fast"])
    assert cfg.steps == 5 and cfg.inner.lr == 1e-4 and cfg.inner.names == ["x", "y"] and cfg.mode == "fast"
    assert Outer().inner.names is not Outer().inner.names  # mutable defaults are not shared


def test_unknown_key_is_named_with_a_suggestion(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'inner.lrr' \(did you mean 'inner.lr'\?\)"):
        load_config(Outer, None, ["inner.lrr=1"])
    path = tmp_path / "bad.yaml"
    path.write_text("stepz: 3\n")
    with pytest.raises(ConfigError, match=rf"{path}: unknown key 'stepz'"):
        load_config(Outer, path)


def test_type_errors_name_the_key():
    with pytest.raises(ConfigError, match="'steps' must be int, got str 'many'"):
        load_config(Outer, None, ["steps=many"])
    with pytest.raises(ConfigError, match="'inner.names' must be a list"):
        load_config(Outer, None, ["inner.names=3"])
    with pytest.raises(ConfigError, match="must look like key=value"):
        load_config(Outer, None, ["steps"])


def test_malformed_yaml_names_the_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("steps: [1, 2\n")
    with pytest.raises(ConfigError, match="broken.yaml: not valid YAML"):
        load_config(Outer, path)
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(Outer, path)


def test_builtin_configs_load_by_name_and_unknown_names_list_builtins():
    cfg = load_config(TrainConfig, "quickstart")
    assert cfg.algo.preset == "grpo" and cfg.task.id == "arithmetic-v1"
    assert load_config(SFTConfig, "sft_quickstart").model.name_or_path == "tiny"
    code = load_config(TrainConfig, "code_quickstart")  # the RL stage trains on the SFT stage's items
    assert code.task.make().env_id == "code-v1" and code.task.config == load_config(SFTConfig, "sft_code_quickstart").task.config
    with pytest.raises(ConfigError, match="built-ins: .*quickstart"):
        load_config(TrainConfig, "no-such-config")


def test_literal_fields_are_checked():
    with pytest.raises(ConfigError, match="'verify.on_failure' must be one of 'drop', 'zero'"):
        load_config(TrainConfig, None, ["verify.on_failure=ignore"])


def test_every_train_field_is_documented():
    rows = describe(TrainConfig)
    undocumented = [k for k, _, h in rows if not h]
    assert not undocumented, undocumented
    assert any(k == "optim.lr" for k, _, _ in rows)

import re
from dataclasses import dataclass, field

import pytest

from rlvr.config import ConfigError, describe, help_field, load_config, shown
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


def test_a_number_yaml_reads_as_a_string_is_a_number_in_a_parts_arguments():
    """``1e-8`` is a string to YAML 1.1 (it wants ``1.0e-8``): a part's argument takes it as the number, as other keys do."""
    cfg = load_config(TrainConfig, "quickstart", ["algo.advantage.eps=1e-8", "algo.correction={name: tis, cap: 2e0}"])
    assert cfg.algo.advantage["eps"] == 1e-8 and cfg.algo.correction["cap"] == 2.0


@pytest.mark.parametrize("config,override,message", [
    ("quickstart", "seed=99999999999999999999", "'seed' must be <= 4294967295"),  # was torch's overflow traceback
    ("quickstart", "seed=-1", "'seed' must be >= 0"),
    ("quickstart", "optim.betas=[1.5,-2]", "optim.betas must be two numbers in [0, 1)"),  # was AdamW's traceback
    ("quickstart", "optim.betas=[0.9]", "optim.betas must be two numbers in [0, 1)"),
    ("quickstart", "rollout.max_new_tokens=99999999999999999999", "'rollout.max_new_tokens' must be <= 1048576"),  # a C++ frame dump
    ("quickstart", "verify.timeout_s=1e308", "'verify.timeout_s' must be <= 86400"),  # every verdict an OverflowError
    ("quickstart", "optim.lr=1e308", "'optim.lr' must be <= 1"),  # was accepted: the first step made every weight inf
    ("quickstart", "rollout.async.partial=true", "set rollout.async.max_staleness >= 2"),  # a check across keys: still the override's
    ("sft_quickstart", "tiny.heads=3", "tiny.hidden_size (128) must be a multiple of tiny.heads (3)"),  # a transformers traceback
    ("sft_quickstart", "tiny.hidden_size=-5", "'tiny.hidden_size' must be > 0"),
    # settings read only by the vLLM engines and the sync probe: refused when the config is read, not when the engine starts
    ("quickstart", "rollout.vllm.gpu_memory_utilization=1.5", "'rollout.vllm.gpu_memory_utilization' must be <= 1"),
    ("quickstart", "rollout.vllm.tensor_parallel_size=0", "'rollout.vllm.tensor_parallel_size' must be > 0"),
    ("quickstart", "rollout.vllm.max_model_len=-5", "'rollout.vllm.max_model_len' must be >= 0"),
    ("quickstart", "rollout.vllm.nccl_port=99999", "'rollout.vllm.nccl_port' must be <= 65535"),
    ("quickstart", "rollout.vllm.request_timeout_s=1e308", "'rollout.vllm.request_timeout_s' must be <= 86400"),
    ("quickstart", "rollout.vllm.http_chunk_mb=0", "'rollout.vllm.http_chunk_mb' must be > 0"),
    ("quickstart", "rollout.vllm.kv_cache_gb=-1", "'rollout.vllm.kv_cache_gb' must be > 0"),
    ("quickstart", "rollout.probe.completions=-2", "'rollout.probe.completions' must be > 0"),  # was a slice from the end
    ("quickstart", "rollout.probe.max_gap=-1", "'rollout.probe.max_gap' must be > 0"),
    # a run directory that is output_dir itself, its parent or elsewhere: overwrite=true deleted another run's folder with it
    ("quickstart", "name=", "name must name a folder below output_dir"),
    ("quickstart", "name=..", "name must name a folder below output_dir"),
    ("quickstart", "name=../../elsewhere", "'.' or '..' parts; got '../../elsewhere'"),
    ("quickstart", "name=/abs/run", "not absolute"),
    ("sft_quickstart", "name=a/./b", "name must name a folder below output_dir"),
    # a part's arguments: a number where the function takes one (was a traceback from the config's own check, or the
    # update's), and the built-in corrections' ranges (refused at the first update, after generation, before)
    ("quickstart", "algo.policy_loss.clip_low=abc", "algo.policy_loss.clip_low must be a finite number (or null), got 'abc'"),
    ("quickstart", "algo.policy_loss.dual_clip=[2]", "algo.policy_loss.dual_clip must be a finite number (or null), got [2]"),
    ("quickstart", "algo.policy_loss.clip_high=.nan", "algo.policy_loss.clip_high must be a finite number"),
    ("quickstart", "algo.advantage.eps=abc", "algo.advantage.eps must be a finite number, got 'abc'"),
    ("quickstart", "algo.correction={name: tis, cap: -5}", "algo.correction.cap must be > 0"),
    ("quickstart", "algo.correction={name: tis, cap: abc}", "algo.correction.cap must be a finite number"),
    ("quickstart", "algo.correction={name: mis, low: 5, high: 1}", "needs 0 <= low < high, got [5, 1]"),
    ("quickstart", "algo.correction={name: tis, level: nosuch}", "algo.correction.level must be one of token, sequence, geometric"),
    # a part's declared ranges (rlvr.algos.parts.argument_bounds; were accepted, then nan or a reversed clip in the update)
    ("quickstart", "algo.policy_loss.clip_high=-5", "algo.policy_loss.clip_high must be >= 0, got -5 (the clipped policy loss's range)"),
    ("quickstart", "algo.policy_loss.clip_low=1.5", "algo.policy_loss.clip_low must be <= 1, got 1.5"),
    ("quickstart", "algo.policy_loss.dual_clip=0.5", "algo.policy_loss.dual_clip must be > 1, got 0.5"),
    ("quickstart", "algo.advantage.eps=0", "algo.advantage.eps must be > 0, got 0 (the grpo advantage estimator's range)"),
    ("quickstart", "algo.advantage={name: gae, gamma: 2}", "algo.advantage.gamma must be <= 1, got 2"),
    ("quickstart", "algo.advantage={name: gae, lam: -0.1}", "algo.advantage.lam must be >= 0, got -0.1"),
    ("quickstart", "algo.advantage={name: grpo_process, outcome_weight: -1}", "algo.advantage.outcome_weight must be >= 0, got -1"),
    ("quickstart", "algo.correction={name: mis, reweight: maybe}", "algo.correction.reweight must be true or false, got 'maybe'"),
    ("quickstart", "rollout.vllm.server_url=abc", "rollout.vllm.server_url must start with http:// or https://, got 'abc'"),  # was refused only at start-up
    ("quickstart", "rollout.vllm.server_urls=[http://a:1, ftp://b]", "must start with http:// or https://, got 'ftp://b'"),
    ("quickstart", "algo.sampling_budget=0.5", "'algo.sampling_budget' must be >= 1"),
    ("quickstart", "rollout.vllm.server_url=http://h:abc", "'http://h:abc' is not an http(s) address"),  # was http.client's traceback
    ("quickstart", "rollout.vllm.server_url=http://[::1", "'http://[::1' is not an http(s) address"),
    ("quickstart", "rollout.vllm.server_url=http://u:secret@[::1", "'http://***@[::1' is not an http(s) address"),  # no password said
    ("quickstart", "rollout.vllm.server_url=http://h:", "'http://h:' is not an http(s) address"),  # an empty port
    ("quickstart", "name=" + "x" * 300, "name: a folder name of at most 255 bytes"),  # was an OSError traceback
])
def test_out_of_range_settings_are_refused_in_one_line_naming_the_override(config, override, message):
    cls = SFTConfig if config.startswith("sft") else TrainConfig
    with pytest.raises(ConfigError) as refused:
        load_config(cls, config, ["log.progress=false", override])
    text = str(refused.value)
    assert text.startswith(f"command-line override {shown(override)}: ") and message in text and "\n" not in text, text


def test_a_server_url_scheme_is_read_in_any_case():
    """A URL's scheme is case-insensitive (HTTP://h is http://h: was refused as not starting with http://)."""
    from rlvr.rollout.engines.vllm_server import server_urls

    cfg = load_config(TrainConfig, "quickstart", ["rollout.vllm.server_urls=[HTTP://a:1, Https://b:2/]"])
    assert server_urls(cfg.rollout.vllm) == ("http://a:1", "https://b:2")


@pytest.mark.parametrize("override,key,value", [
    ("name=-", "name", "-"), ("name=2026-11-30", "name", "2026-11-30"), ("name=123", "name", "123"), ("name=run-1", "name", "run-1"),
    ("name=0042", "name", "0042"),  # (YAML 1.1: the number 34)
    ("name=run #1", "name", "run #1"), ("name=@home", "name", "@home"), ("name='quoted x'", "name", "quoted x"),
    ("prompt.system=-", "prompt.system", "-"), ("prompt.system=null", "prompt.system", None),
    ("prompt.instruction=Give the result as Answer: <n>", "prompt.instruction", "Give the result as Answer: <n>"),
])
def test_a_text_setting_takes_an_override_as_written(override, key, value):
    """`name=-` was refused as "must be str, got list", `name=2026-11-30` as a date, `name=0042` became 34, a `#` started a
    comment that cut the text short, `@` was a YAML error: YAML's reading, not the user's. `null` is still none where
    a setting may be none; a quoted value is unquoted."""
    cfg = load_config(TrainConfig, "quickstart", [override])
    section, _, leaf = key.rpartition(".")
    assert getattr(getattr(cfg, section) if section else cfg, leaf) == value


@pytest.mark.parametrize("line,shown", [("name: 0042", "int 34"), ("name: 2026-11-30", "date datetime.date(2026, 11, 30)"),
                                        ("name: yes", "bool True"), ("model: {name_or_path: 7}", "int 7")])
def test_text_that_yaml_reads_as_a_number_date_or_bool_in_a_file_is_refused_saying_to_quote_it(tmp_path, line, shown):
    """Read as text, `name: 0042` would be the folder 34: what YAML read cannot give back what was written."""
    path = tmp_path / "run.yaml"
    path.write_text(line + "\n")
    with pytest.raises(ConfigError) as refused:
        load_config(TrainConfig, path, [])
    assert f"must be text, got {shown}" in str(refused.value) and "quote it" in str(refused.value), refused.value


def test_a_password_in_an_override_is_never_shown():
    for override in ("rollout.vllm.server_url=http://u:s3cr3t@h:1", "rollout.vllm.server_urls=[http://u:s3cr3t@a:1]",
                     "rollout.vllm.server_url=[http://u:s3cr3t@h:1"):
        with pytest.raises(ConfigError) as refused:
            load_config(TrainConfig, "quickstart", [override])
        assert "s3cr3t" not in str(refused.value) and "***@" in str(refused.value), refused.value


def test_a_key_given_twice_is_blamed_for_the_value_in_effect():
    with pytest.raises(ConfigError) as refused:
        load_config(TrainConfig, "quickstart", ["name=..", "name=a/../b"])
    assert str(refused.value).startswith("command-line override name=a/../b: ") and "got 'a/../b'" in str(refused.value)


@pytest.mark.parametrize("overrides, name, arguments", [
    (["algo.policy_loss=cispo", "algo.policy_loss.clip_high=5"], "cispo", {"clip_high": 5}),
    (["algo.advantage=reinforce_pp", "algo.advantage.eps=0.01"], "reinforce_pp", {"eps": 0.01}),
])
def test_a_part_chosen_by_name_keeps_it_when_an_argument_is_set(overrides, name, arguments):
    """`algo.advantage=NAME algo.advantage.ARG=V` is the part NAME with ARG (the name was dropped: the preset's part
    took the argument); an argument NAME does not take is refused, naming it."""
    section = overrides[0].partition("=")[0].split(".")[1]
    part = getattr(load_config(TrainConfig, "quickstart", overrides).algo, section)
    assert part.name == name and all(part.params[k] == v for k, v in arguments.items())
    with pytest.raises(ConfigError, match="the rloo advantage estimator takes no argument 'eps'"):
        load_config(TrainConfig, "quickstart", ["algo.advantage=rloo", "algo.advantage.eps=0.01"])


def test_a_new_preset_over_a_runs_resolved_config_trains_that_preset_keeping_what_the_run_changed(tmp_path):
    """A run's config.yaml spells out its preset's resolved settings; `rlvr train RUN/config.yaml algo.preset=X` reads X's
    own settings (it ran GRPO's under X's name), keeping what the run set apart from its preset and every override, and
    dropping what X's recipe does not read (the policy-gradient run's settings for a preference preset)."""
    import yaml

    from rlvr.algos.config import preset_names, preset_settings
    from rlvr.config import to_dict

    changed = ["algo.entropy_coef=0.01", "algo.advantage=grpo_process", "algo.policy_loss.clip_high=0.3"]
    run = load_config(TrainConfig, "quickstart", changed)  # a run that changed settings of GRPO's, one a part another preset sets too
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(to_dict(run)))
    for preset in preset_names():
        extra = ["pairs.path=pairs.jsonl"] if preset == "dpo" else []  # (trains on a pairs file)
        kept = [] if preset_settings(preset).get("recipe") == "preference" else changed
        try:
            fresh = load_config(TrainConfig, "quickstart", [f"algo.preset={preset}", *kept, *extra]).algo
        except ConfigError as refused:  # (ppo with grpo_process's advantage: no critic) what the built-in refuses, the run's config refuses alike
            with pytest.raises(ConfigError, match=re.escape(str(refused).split(": ", 1)[1])):
                load_config(TrainConfig, str(config), [f"algo.preset={preset}", *extra])
            continue
        assert to_dict(load_config(TrainConfig, str(config), [f"algo.preset={preset}", *extra]).algo) == to_dict(fresh), preset
    switched = load_config(TrainConfig, str(config), ["algo.preset=grpo_process", "algo.policy_loss.clip_high=0.25"]).algo
    assert switched.advantage.params["outcome_step"] is True  # grpo_process's own setting, not the function's default the file restates
    assert switched.entropy_coef == 0.01 and switched.policy_loss.params["clip_high"] == 0.25
    assert to_dict(load_config(TrainConfig, str(config), ["algo.preset=grpo"]).algo) == to_dict(run.algo)  # the same preset: as it was
    # a section a person wrote, which spells out some settings only, is read as written: each of them is theirs
    mine = tmp_path / "mine.yaml"
    for algo in ("{kl: {mode: loss, coef: 0.04}}", "{kl_mode: loss, kl_coef: 0.04}", "{preset: grpo, kl: {mode: loss, coef: 0.04}}"):
        mine.write_text(f"algo: {algo}\n")
        written = load_config(TrainConfig, str(mine), ["algo.preset=dapo"]).algo
        assert (written.kl.mode, written.kl.coef) == ("loss", 0.04), algo


@pytest.mark.parametrize("algo, message", [
    ("{preset: kto, recipe: policy_gradient}", "algo.recipe cannot be 'policy_gradient'"),
    ("{preset: grpo, preference: {beta: 0.3}}", "algo.preference.beta is set but algo.preset=grpo"),
    ("{preset: kto, entropy_coef: 0.1}", "algo.entropy_coef has no effect with algo.preset=kto"),
    ("{policy_loss: {clip_low: -1}}", "algo.policy_loss.clip_low must be >= 0"),
    ("{preset: nosuch}", "algo.preset 'nosuch' is unknown"),
    ("{advantage: nosuch}", "algo.advantage 'nosuch' is not registered"),
])
def test_an_algorithm_a_file_sets_wrong_is_refused_naming_the_file(tmp_path, algo, message):
    """The algorithm's own checks (its recipe, family, part registries and ranges) name the file, as every other key's do;
    the same setting given on the command line names the override instead."""
    from rlvr.train.recipes import load_run_config

    config = tmp_path / "mine.yaml"
    config.write_text(f"algo: {algo}\n")
    with pytest.raises(ConfigError) as refused:
        load_run_config(str(config), [])
    assert str(refused.value).startswith(f"{config}: {message}")
    with pytest.raises(ConfigError) as refused:
        load_run_config("quickstart", [f"algo={algo}"])
    assert str(refused.value).startswith(f"command-line override algo={algo}: ") and message in str(refused.value)


def test_a_null_algo_recipe_is_the_presets_and_another_is_refused():
    assert load_config(TrainConfig, "quickstart", ["algo.preset=kto", "algo={recipe: null, preset: kto}"]).algo.recipe == "preference"
    with pytest.raises(ConfigError, match=r"algo.recipe cannot be 'policy_gradient': algo.preset=kto runs the preference recipe"):
        load_config(TrainConfig, "quickstart", ["algo.preset=kto", "algo.recipe=policy_gradient"])


@pytest.mark.parametrize("entry, pair", [
    ("math500-v1", ("math500-v1", "test")),
    ("gsm8k-v1:validation", ("gsm8k-v1", "validation")),
    ("file:rows/qa.jsonl", ("file:rows/qa.jsonl", "test")),  # a file's or hub's id holds a colon of its own
    ("file:rows/qa.jsonl:validation", ("file:rows/qa.jsonl", "validation")),
    ("verifiers:reverse_text", ("verifiers:reverse_text", "test")),
])
def test_a_heldout_entry_is_an_id_and_a_split(entry, pair):
    from rlvr.train.config import TaskConfig

    assert TaskConfig(heldout=[entry]).heldout_pairs() == [pair]

"""LoRA (`model.lora.*`, `rlvr.models.lora`) with real peft adapters on real models: the reference
is the base under the adapters, bit for bit; the rollout engine generates with the live adapters;
every recipe trains only the adapters, checkpoints them, and exports them merged; bad settings
are refused naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rlvr import UserError
from rlvr.config import ConfigError, load_config
from rlvr.models.batch import build_token_batch, trainer_logprobs
from rlvr.models.loading import load_model
from rlvr.models.lora import LoraSettings, MergedWeights, adapters_of, apply_lora, base_view, parameter_counts
from rlvr.models.tiny import TinyModelConfig, build_tiny_model
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.engines.hf import HFGenerateEngine
from rlvr.train import TrainConfig, train
from rlvr.train.recipes import load_run_config
from rlvr.models.scoring import frozen_logprobs

QUICK = ("update.steps=2", "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.chunk_prompts=4", "rollout.max_new_tokens=40",
         "eval.every=0", "eval.at_start=false", "log.tensorboard=false", "log.plot=false", "update.micro_batch_size=8",
         "optim.warmup_steps=0")  # (the quickstart's warm-up starts at lr 0: a 2-step run would barely move)
LLAMA_TARGETS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return build_tiny_model(TinyModelConfig(hidden_size=64, layers=2, heads=2, intermediate_size=128), tmp_path_factory.mktemp("tiny") / "m")


def _perturb_adapters(model: torch.nn.Module, seed: int = 0) -> None:
    """Move every adapter away from its zero start, as training would (B starts at 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.add_(0.05 * torch.randn(p.shape, generator=g))


def test_lora_is_off_by_default_and_bad_values_name_the_key():
    cfg = load_config(TrainConfig, "quickstart", [])
    assert cfg.model.lora.r == 0 and not cfg.model.lora.enabled
    cfg = load_config(TrainConfig, "quickstart", ["model.lora.r=16", "model.lora.target_modules=[q_proj,v_proj]"])
    assert cfg.model.lora.enabled and cfg.model.lora.target_modules == ["q_proj", "v_proj"]
    with pytest.raises(ConfigError, match=r"model\.lora\.r"):
        load_config(TrainConfig, "quickstart", ["model.lora.r=-1"])
    with pytest.raises(ConfigError, match=r"model\.lora\.rnk"):
        load_config(TrainConfig, "quickstart", ["model.lora.rnk=4"])


def test_default_targets_are_the_attention_and_mlp_projections(tiny_dir):
    model, _ = load_model(str(tiny_dir))
    total = sum(p.numel() for p in model.parameters())
    apply_lora(model, LoraSettings(r=4))
    adapted = {name.split(".")[-1] for name, m in model.named_modules() if hasattr(m, "lora_A")}
    assert adapted == LLAMA_TARGETS
    counts = parameter_counts(model)
    assert counts["frozen_parameters"] == total  # the base, frozen; only adapters train
    assert counts["trainable_parameters"] == sum(p.numel() for n, p in model.named_parameters() if "lora_" in n) > 0


@pytest.mark.parametrize("modules_to_save", [[], ["norm"]])
def test_merged_weights_for_an_engine_are_the_merged_model_under_its_plain_names(tiny_dir, modules_to_save):
    import copy

    plain, _ = load_model(str(tiny_dir))
    model = apply_lora(copy.deepcopy(plain), LoraSettings(r=4, modules_to_save=modules_to_save))
    _perturb_adapters(model)
    if modules_to_save:
        with torch.no_grad():
            model.model.norm.modules_to_save["default"].weight.add_(0.01)
    merged = MergedWeights(model)
    expected = copy.deepcopy(adapters_of(model)).merge_and_unload().state_dict()
    assert set(merged) == {name for name, _ in plain.named_parameters()}  # what a vLLM engine started from the base holds
    for name in merged:
        assert torch.equal(merged[name], expected[name]), name
    changed = {name for name in merged if not torch.equal(merged[name], dict(plain.named_parameters())[name])}
    assert {n.rsplit(".", 2)[-2] for n in changed} == LLAMA_TARGETS | ({"norm"} if modules_to_save else set())
    # live: a later update of the adapters is what the next read returns
    _perturb_adapters(model, seed=1)
    layer = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged[layer], expected[layer])


def test_target_modules_that_match_nothing_name_the_modules_that_exist(tiny_dir):
    model, _ = load_model(str(tiny_dir))
    with pytest.raises(UserError, match=r"model\.lora\.target_modules=\['c_attn'\] match no module.*down_proj, gate_proj, k_proj, lm_head"):
        apply_lora(model, LoraSettings(r=4, target_modules=["c_attn"]))


@pytest.mark.smoke
def test_the_reference_is_the_base_under_the_adapters_bit_for_bit(tiny_dir):
    """The policy with adapters disabled scores exactly as a separately loaded base (float32), plain and packed."""
    policy, tok = load_model(str(tiny_dir))
    apply_lora(policy, LoraSettings(r=8, dropout=0.1))  # dropout: the view must run in eval mode
    _perturb_adapters(policy)
    policy.train()
    base, _ = load_model(str(tiny_dir))
    base.eval()
    prompts = [[5, 6, 7, 8], [9, 10, 11, 12]]
    batch = build_token_batch(prompts, [[20, 21, 22], [23, 24]], tok.pad_token_id)
    micros = [(torch.arange(2), True)]
    for pack in (False, True):
        ref = frozen_logprobs(base_view(policy), batch, micros, torch.device("cpu"), pack=pack)
        assert torch.equal(ref, frozen_logprobs(base, batch, micros, torch.device("cpu"), pack=pack))
        adapted = frozen_logprobs(policy, batch, micros, torch.device("cpu"), pack=pack)
        assert not torch.equal(ref, adapted)  # the adapters do change the policy
    assert policy.training and all(p.requires_grad for n, p in policy.named_parameters() if "lora_" in n)


@pytest.mark.smoke
def test_the_hf_engine_generates_with_the_live_adapters(tiny_dir):
    policy, tok = load_model(str(tiny_dir))
    apply_lora(policy, LoraSettings(r=8))
    engine = HFGenerateEngine(policy, tok)
    prompts, greedy = [[5, 6, 7, 8], [9, 10, 11]], SamplingParams(temperature=0.0, max_new_tokens=8)
    before = engine.generate_ids(prompts, 1, greedy)
    _perturb_adapters(policy, seed=1)  # an update of the adapters, in place
    after = engine.generate_ids(prompts, 1, greedy)
    assert [c.token_ids for c in before] != [c.token_ids for c in after]
    for c in after:  # what the engine sampled is what the adapted policy scores
        trainer = trainer_logprobs(policy, [c.prompt_ids], [c.token_ids], tok.pad_token_id)[0]
        assert c.logprobs == pytest.approx(trainer, abs=1e-4)


def _resources(run: Path) -> dict:
    return json.loads((run / "resources.json").read_text())


@pytest.mark.slow
def test_lora_grpo_trains_only_adapters_with_the_reference_for_free_and_exports_merged(sft_base, tmp_path, rl_overrides):
    cfg = load_run_config("quickstart", rl_overrides(tmp_path, sft_base, "model.lora.r=8", "model.lora.merge_on_save=true", "optim.lr=1e-3", *QUICK))
    assert cfg.algo.preset == "grpo"  # k3 KL to the reference in the loss
    result = train(cfg)
    assert result.status == "completed"
    run = result.run_dir
    resources = _resources(run)
    assert resources["models_in_memory"] == 1  # no second copy for the reference
    policy = resources["models"][0]
    assert policy["role"] == "policy" and 0 < policy["trainable_parameters"] < policy["frozen_parameters"]
    adapters = load_file(run / "checkpoints" / "step-2" / "policy" / "adapter_model.safetensors")
    assert all("lora_" in k for k in adapters) and sum(v.numel() for v in adapters.values()) == policy["trainable_parameters"]
    # AdamW's two moments and a step count per adapter tensor: nothing for the frozen base
    assert resources["optimizer_state_bytes"]["policy"] == 4 * (2 * policy["trainable_parameters"] + len(adapters))
    assert not list((run / "checkpoints" / "step-2" / "policy").glob("model*.safetensors"))  # not the base
    optimizer = torch.load(run / "checkpoints" / "step-2" / "policy" / "optimizer.pt", weights_only=False)["optimizer"]
    assert sum(len(g["params"]) for g in optimizer["param_groups"]) == len(adapters)  # the optimizer holds only the adapters
    # the adapters moved from their start (B = 0)
    assert any(bool(v.abs().sum() > 0) for k, v in adapters.items() if "lora_B" in k)

    # final/: the adapters (which rlvr loads merged), final/merged/: a plain Hugging Face model
    final = result.final_model
    assert (final / "adapter_config.json").is_file() and (final / "merged" / "config.json").is_file()
    adapted, tok = load_model(str(sft_base))
    from rlvr.models.lora import load_adapters

    load_adapters(adapted, final).eval()
    merged = AutoModelForCausalLM.from_pretrained(final / "merged").eval()
    via_rlvr, _ = load_model(str(final))
    ids = torch.tensor([tok("12+34=").input_ids])
    with torch.no_grad():
        want = adapted(input_ids=ids).logits
        assert torch.allclose(merged(input_ids=ids).logits, want, atol=1e-4, rtol=0)  # merging rounds W + s·BA once
        assert torch.allclose(via_rlvr.eval()(input_ids=ids).logits, want, atol=1e-4, rtol=0)
        base, _ = load_model(str(sft_base))
        assert not torch.allclose(base.eval()(input_ids=ids).logits, want, atol=1e-2, rtol=0)  # and trained away from the base
    # `rlvr eval` takes the adapter folder, and a run folder points at it
    from rlvr.cli import main

    assert main(["eval", "--model", str(final), "--task", "arithmetic-v1", "--limit", "4", "--max-new-tokens", "16", "--out", str(tmp_path / "ev")]) == 0
    assert json.loads((tmp_path / "ev" / "report.json").read_text())["model"] == str(final)
    from rlvr.rollout.config import RolloutConfig
    from rlvr.rollout.engines import make_engine

    with pytest.raises(UserError, match=r"holds LoRA adapters, which rollout\.engine=vllm cannot load.*final/merged"):
        make_engine(RolloutConfig(engine="vllm"), model_path=final)
    with pytest.raises(UserError, match=r"is a run folder.*pass .*final"):
        from rlvr.models.paths import resolve_model

        resolve_model(str(run))


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["sft", "grpo+overlap", "ppo", "prime", "kto", "online_dpo", "dpo"])
def test_every_recipe_trains_adapters(preset, sft_base, tmp_path, rl_overrides, request):
    lora = ["model.lora.r=4", "optim.lr=1e-3", "log.checkpoint_every=0"]
    if preset == "sft":
        args = [f"output_dir={tmp_path}", "name=run", f"model.name_or_path={sft_base}", "steps=2", "batch_size=8", "micro_batch_size=8",
                "eval.limit=4", "eval.max_new_tokens=8", "threads=1", "log.progress=false", "log.tensorboard=false", "log.plot=false", *lora]
        cfg = load_run_config("sft_quickstart", args)
    else:
        extra = {"dpo": [f"pairs.path={request.getfixturevalue('verified_pairs')}", "pairs.batch_size=8"],
                 "grpo+overlap": ["rollout.overlap=true"]}.get(preset, [])  # generation on a private copy of policy + adapters
        cfg = load_run_config("quickstart", rl_overrides(tmp_path, sft_base, f"algo.preset={preset.split('+')[0]}", *QUICK, *lora, *extra))
    result = train(cfg)
    assert result.status == "completed"
    resources = _resources(result.run_dir)
    policy = next(m for m in resources["models"] if m["role"] == "policy")
    assert 0 < policy["trainable_parameters"] < policy["frozen_parameters"]
    saved = load_file(result.final_model / "adapter_model.safetensors")
    assert sum(v.numel() for v in saved.values()) == policy["trainable_parameters"]
    assert any(bool(v.abs().sum() > 0) for k, v in saved.items() if "lora_B" in k)  # trained away from B = 0
    roles = [m["role"] for m in resources["models"]]
    assert "reference" not in roles  # where a recipe needs one, it is the base under the adapters
    if preset == "ppo":  # the critic stays a full model of its own (documented)
        assert "critic" in roles and resources["optimizer_state_bytes"]["critic"] > resources["optimizer_state_bytes"]["policy"]


@pytest.mark.slow
def test_lora_settings_that_cannot_work_are_refused_naming_the_key(sft_base, tmp_path, rl_overrides):
    args = rl_overrides(tmp_path, sft_base, "update.steps=1", "rollout.prompts_per_step=2", "rollout.group_size=2", *QUICK[3:])
    full = train(load_config(TrainConfig, "quickstart", args))  # a full fine-tuning run with a checkpoint
    counts = {m["role"]: (m["trainable_parameters"], m["frozen_parameters"]) for m in _resources(full.run_dir)["models"]}
    assert counts["reference"] == (0, counts["policy"][0]) and counts["policy"][1] == 0  # its reference copy: all frozen
    with pytest.raises(UserError, match=r"holds a full model but this config has model\.lora\.r=8"):
        train(load_config(TrainConfig, "quickstart", [*args, "resume=true", "update.steps=2", "model.lora.r=8"]))
    lora = rl_overrides(tmp_path, sft_base, "name=lora", "model.lora.r=8", "update.steps=1", "rollout.prompts_per_step=2",
                        "rollout.group_size=2", *QUICK[3:])
    train(load_config(TrainConfig, "quickstart", lora))
    with pytest.raises(UserError, match=r"holds LoRA adapters but this config has model\.lora\.r=0"):
        train(load_config(TrainConfig, "quickstart", [*lora, "resume=true", "update.steps=2", "model.lora.r=0"]))
    with pytest.raises(UserError, match=r"model\.lora with distributed=fsdp is not supported"):
        train(load_config(TrainConfig, "quickstart", [*lora, "name=fsdp", "distributed=fsdp"]))
    with pytest.raises(UserError, match=r"algo\.ref_update_every"):
        train(load_config(TrainConfig, "quickstart", [*lora, "name=refresh", "algo.ref_update_every=1"]))


def test_lora_on_the_real_model_reference_and_merged_export(smollm2_dir, tmp_path):
    """SmolLM2: the default adapters are the attention and MLP projections, the reference is the base
    bit for bit, and the merged export loads in plain transformers with the adapted logits."""
    policy, tok = load_model(str(smollm2_dir))
    apply_lora(policy, LoraSettings(r=8))
    assert {name.split(".")[-1] for name, m in policy.named_modules() if hasattr(m, "lora_A")} == LLAMA_TARGETS
    _perturb_adapters(policy)
    base, _ = load_model(str(smollm2_dir))
    chat = tok.apply_chat_template([{"role": "user", "content": "What is 12+34?"}], add_generation_prompt=True, tokenize=False)
    ids = tok(chat, add_special_tokens=False).input_ids
    batch = build_token_batch([ids], [tok(" 46").input_ids], tok.pad_token_id)
    micros = [(torch.arange(1), True)]
    ref = frozen_logprobs(base_view(policy), batch, micros, torch.device("cpu"))
    assert torch.equal(ref, frozen_logprobs(base.eval(), batch, micros, torch.device("cpu")))
    assert not torch.equal(ref, frozen_logprobs(policy, batch, micros, torch.device("cpu")))
    from rlvr.models.lora import save_merged

    save_merged(policy, tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    x = torch.tensor([ids])
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=x).logits, policy.eval()(input_ids=x).logits, atol=1e-3, rtol=0)


@pytest.mark.slow
def test_lora_grpo_runs_in_two_ddp_processes(sft_base, tmp_path, rl_overrides):
    """Two gloo processes (DDP, torchrun): the run completes with the reference as each process's
    base under its adapters (one model in memory), and rank 0 saves trained adapters."""
    from tests.rlvr.gloo import train_in_two_processes

    args = rl_overrides(tmp_path, sft_base, "model.lora.r=4", "optim.lr=1e-3", *QUICK, "log.checkpoint_every=0")
    train_in_two_processes("quickstart", *args, steps=2)
    saved = load_file(tmp_path / "run" / "final" / "adapter_model.safetensors")
    assert any(bool(v.abs().sum() > 0) for k, v in saved.items() if "lora_B" in k)
    assert _resources(tmp_path / "run")["models_in_memory"] == 1


def test_a_merged_export_of_a_quantised_base_is_refused_with_the_reason(tiny_dir):
    from rlvr.models.lora import check_mergeable

    model, _ = load_model(str(tiny_dir))
    check_mergeable(model, str(tiny_dir))  # a float base merges
    # what transformers records on a model it loaded quantised (no quantisation backend runs on this machine)
    model.config.quantization_config = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    with pytest.raises(UserError, match=r"model\.lora\.merge_on_save with a quantised base .*bitsandbytes.*round their update away"):
        check_mergeable(model, str(tiny_dir))


def test_adding_saving_and_loading_adapters_warns_nothing_the_user_cannot_act_on(tiny_dir, tmp_path):
    """peft reads transformers' deprecated `is_gradient_checkpointing` (a FutureWarning in every LoRA run's log with
    transformers 5): nothing a user can change, so rlvr's calls into peft keep it out of the log."""
    import warnings

    from rlvr.models.lora import load_adapters, merged_from_folder

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = apply_lora(load_model(str(tiny_dir))[0], LoraSettings(r=4))
        adapters_of(model).save_pretrained(str(tmp_path / "adapters"))
        load_adapters(load_model(str(tiny_dir))[0], tmp_path / "adapters")
        merged_from_folder(load_model(str(tiny_dir))[0], tmp_path / "adapters")
    assert not [str(w.message) for w in caught if "is_gradient_checkpointing" in str(w.message)]

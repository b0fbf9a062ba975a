"""llmgym's environments, registered with Gymnasium on ``import llmgym``.

:func:`register_envs` is llmgym's own ``llmgym.envs`` entry point: the
built-in environments arrive the same way a third-party plugin's do. Each
environment lives in a module or subpackage of its own; add its id here.

Ids follow the naming rule of ``docs/authoring.md``: the version counts revisions of
one environment (``-v1`` would change ``-v0``'s rewards, observations or rules and
replace it); a variant, another way to play the same game, gets a name of its own
(``WordleCompact`` beside ``Wordle``) and starts at ``-v0``. A renamed id stays for one
release as a deprecated alias (:func:`~llmgym.registry.register_alias`).

An environment's one-line description is written once, as its class's ``description``:
``llmgym list`` reads it there (:func:`~llmgym.registry.describe`). Only an id whose class
serves many ids (the adapters') gives ``register`` a description of its own.
"""

from llmgym.registry import register, register_alias

__all__ = ["register_envs", "BUILTIN_ENVS"]

#: Each built-in environment's id and entry point; its description is its class's.
BUILTIN_ENVS: dict[str, str] = {
    "llmgym/Wordle-v0": "llmgym.envs.wordle.env:WordleEnv",
    "llmgym/WordleCompact-v0": "llmgym.envs.wordle.compact:CompactWordleEnv",
    "llmgym/WordleCompact-v1": "llmgym.envs.wordle.compact:CompactWordleEnvV1",
    "llmgym/MathTools-v0": "llmgym.envs.math_tools.env:MathToolsEnv",
    "llmgym/Multiply-v0": "llmgym.envs.multiply:MultiplyEnv",
    "llmgym/CodeTests-v0": "llmgym.envs.code_tests.env:CodeTestsEnv",
    "llmgym/WikiSearch-v0": "llmgym.envs.wiki_search.env:WikiSearchEnv",
    "llmgym/EmailQA-v0": "llmgym.envs.email_qa.env:EmailQAEnv",
    "llmgym/TicTacToe-v0": "llmgym.envs.multiagent.versus:TicTacToeVsBot",
    "llmgym/ConnectFour-v0": "llmgym.envs.multiagent.versus:ConnectFourVsBot",
    "llmgym/Negotiation-v0": "llmgym.envs.multiagent.versus:NegotiationVsBot",
    "llmgym/PrisonersDilemma-v0": "llmgym.envs.multiagent.versus:PrisonersDilemmaVsBot",
    "llmgym/RuleDiscovery-v0": "llmgym.envs.rule_discovery:RuleDiscoveryEnv",
    "llmgym/MentalMath-v0": "llmgym.envs.mental_math:MentalMathEnv",
}


def register_envs() -> None:
    """Register every built-in environment under the ``llmgym/`` namespace."""
    for env_id, entry_point in BUILTIN_ENVS.items():
        register(env_id, entry_point)
    register_alias("llmgym/Wordle-v1", "llmgym/WordleCompact-v0")  # the name it was added under; one release
    from llmgym.envs.adapters import register_adapter_envs  # reasoning-gym / TextArena ids, only when installed
    from llmgym.envs.multiagent import register_openspiel_envs  # llmgym/os-* ids, only when OpenSpiel is installed

    register_adapter_envs()
    register_openspiel_envs()

"""llmgym's environments, registered with Gymnasium on ``import llmgym``.

:func:`register_envs` is llmgym's own ``llmgym.envs`` entry point: the
built-in environments arrive the same way a third-party plugin's do. Each
environment lives in a module or subpackage of its own; add its id here.

Ids follow the naming rule of ``docs/authoring.md``: the version counts revisions of
one environment (``-v1`` would change ``-v0``'s rewards, observations or rules and
replace it); a variant, another way to play the same game, gets a name of its own
(``WordleCompact`` beside ``Wordle``) and starts at ``-v0``. A renamed id stays for one
release as a deprecated alias (:func:`~llmgym.registry.register_alias`).
"""

from llmgym.registry import register, register_alias

__all__ = ["register_envs"]


def register_envs() -> None:
    """Register every built-in environment under the ``llmgym/`` namespace."""
    register(
        "llmgym/Wordle-v0",
        "llmgym.envs.wordle.env:WordleEnv",
        description="Guess a five-letter word in six tries from green/yellow/grey feedback.",
    )
    register(
        "llmgym/WordleCompact-v0",
        "llmgym.envs.wordle.compact:CompactWordleEnv",
        description="Wordle in plain words with a running summary of the feedback: sized for small models.",
    )
    register(
        "llmgym/WordleCompact-v1",
        "llmgym.envs.wordle.compact:CompactWordleEnvV1",
        description="WordleCompact with turn rewards for guesses that fit the feedback and a charge for repeats.",
    )
    register_alias("llmgym/Wordle-v1", "llmgym/WordleCompact-v0")  # the name it was added under; one release
    register(
        "llmgym/MathTools-v0",
        "llmgym.envs.math_tools.env:MathToolsEnv",
        description="Multi-step word problems with calculator and Python (sandbox) tools; answers checked with sympy.",
    )
    register(
        "llmgym/Multiply-v0",
        "llmgym.envs.multiply:MultiplyEnv",
        description="Multiply a 3-digit by a 2-digit number with a <calc> tool, then <answer>: two short turns.",
    )
    register(
        "llmgym/CodeTests-v0",
        "llmgym.envs.code_tests.env:CodeTestsEnv",
        description="Write a function from a spec; graded by hidden tests in a fresh sandbox.",
    )
    register(
        "llmgym/WikiSearch-v0",
        "llmgym.envs.wiki_search.env:WikiSearchEnv",
        description="Multi-hop questions over a generated wiki of fictional entities; BM25 search and read tools.",
    )
    register(
        "llmgym/EmailQA-v0",
        "llmgym.envs.email_qa.env:EmailQAEnv",
        description=(
            "ART-E: answer questions about a generated SQLite/FTS5 inbox; wrong answers cost more than 'I don't know'."
        ),
    )
    register(
        "llmgym/TicTacToe-v0",
        "llmgym.envs.multiagent.versus:TicTacToeVsBot",
        description="Tic-tac-toe as X against a perfect minimax opponent.",
    )
    register(
        "llmgym/ConnectFour-v0",
        "llmgym.envs.multiagent.versus:ConnectFourVsBot",
        description="Connect Four as X against a depth-6 negamax opponent.",
    )
    register(
        "llmgym/Negotiation-v0",
        "llmgym.envs.multiagent.versus:NegotiationVsBot",
        description="Split items with private values against a scripted haggler; deal or no deal.",
    )
    register(
        "llmgym/PrisonersDilemma-v0",
        "llmgym.envs.multiagent.versus:PrisonersDilemmaVsBot",
        description="Iterated prisoner's dilemma with messages against tit-for-tat.",
    )
    register(
        "llmgym/RuleDiscovery-v0",
        "llmgym.envs.rule_discovery:RuleDiscoveryEnv",
        description="Grid world with hidden per-seed rules; explore with move/interact/look to reach the goal.",
    )
    register(
        "llmgym/MentalMath-v0",
        "llmgym.envs.mental_math:MentalMathEnv",
        description="Answer a one-operation arithmetic question (single digits by default) with just the number.",
    )
    from llmgym.envs.adapters import register_adapter_envs  # reasoning-gym / TextArena ids, only when installed

    register_adapter_envs()

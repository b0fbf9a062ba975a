"""A CleanRL-style single file: learn Wordle openings with REINFORCE on the plain Gymnasium API.

Everything an llmgym env needs is ``gymnasium.make_vec`` / ``reset`` / ``step``:
observations and actions are strings. The policy here is hand-written and
tiny so the loop stays readable top to bottom: a softmax over a few opening
words (learned with REINFORCE and a running baseline), then every later guess
is the most letter-frequent word still consistent with the feedback it read
in the observation text. Bad openers (``fuzzy``, ``jazzy``) reveal little and
cost guesses; the learned distribution moves onto the good ones. Runs in
seconds on a CPU.

Run: ``python examples/cleanrl_style_wordle.py --episodes 200``
"""

from __future__ import annotations

import argparse
import re
import time
from collections import Counter
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

import llmgym  # noqa: F401  (registers llmgym/Wordle-v0)
from llmgym.envs.wordle.env import load_words, score_guess


@dataclass
class Args:
    env_id: str = "llmgym/Wordle-v0"
    """the environment id"""
    num_envs: int = 8
    """parallel games (a Gymnasium vector env)"""
    episodes: int = 200
    """games to play in total"""
    openers: tuple[str, ...] = ("crane", "slate", "pious", "fuzzy", "jazzy")
    """the opening words the policy chooses among"""
    learning_rate: float = 0.5
    """REINFORCE step size on the opener logits"""
    seed: int = 0
    """seed of the environments and the policy"""


FEEDBACK = re.compile(r"^([A-Z]{5}) ([GYx]) ([GYx]) ([GYx]) ([GYx]) ([GYx])$", re.MULTILINE)
ANSWERS = load_words()[0]


def consistent_guess(pool: list[str]) -> str:
    """The most letter-frequent word of the pool of answers still consistent with the feedback."""
    counts = Counter(letter for word in pool for letter in set(word))
    return max(pool, key=lambda w: (sum(counts[c] for c in set(w)), w))


def main(args: Args) -> dict[str, float]:
    rng = np.random.default_rng(args.seed)
    envs = gym.make_vec(
        args.env_id,
        num_envs=args.num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},  # no action is thrown away
    )
    logits = np.zeros(len(args.openers))
    baseline = 0.0
    pools: list[list[str] | None] = [None] * args.num_envs  # answers still possible; None: a new game
    opener = [0] * args.num_envs
    returns = np.zeros(args.num_envs)
    finished: list[float] = []
    obs, _ = envs.reset(seed=args.seed)
    start = time.perf_counter()

    while len(finished) < args.episodes:
        actions = []
        for i in range(args.num_envs):
            for match in FEEDBACK.finditer(obs[i]):  # read the feedback in the observation text
                guess, feedback = match.group(1).lower(), "".join(match.groups()[1:])
                pools[i] = [w for w in (pools[i] or ANSWERS) if score_guess(guess, w) == feedback] or list(ANSWERS)
            if pools[i] is None:  # a new game: sample the opener from the policy
                probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
                opener[i] = int(rng.choice(len(probs), p=probs))
                actions.append(args.openers[opener[i]])
            else:
                actions.append(consistent_guess(pools[i]))
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        returns += rewards
        for i in np.flatnonzero(terminated | truncated):
            # REINFORCE: grad of log softmax(opener) = onehot - probs, scaled by the advantage
            probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
            advantage = returns[i] - baseline
            logits += args.learning_rate * advantage * (np.eye(len(logits))[opener[i]] - probs)
            baseline = 0.9 * baseline + 0.1 * returns[i]
            finished.append(float(returns[i]))
            returns[i], pools[i] = 0.0, None  # SAME_STEP: obs[i] is already the next game's first observation
    envs.close()

    probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    quarter = max(len(finished) // 4, 1)
    summary = {
        "episodes": float(len(finished)),
        "seconds": time.perf_counter() - start,
        "first_quarter_return": float(np.mean(finished[:quarter])),
        "last_quarter_return": float(np.mean(finished[-quarter:])),
        **{f"p_{word}": float(p) for word, p in zip(args.openers, probs)},
    }
    for key, value in summary.items():
        print(f"{key:>22}: {value:.3f}")
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Args()
    parser.add_argument("--episodes", type=int, default=defaults.episodes)
    parser.add_argument("--num-envs", type=int, default=defaults.num_envs)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    cli = parser.parse_args()
    main(Args(episodes=cli.episodes, num_envs=cli.num_envs, seed=cli.seed))

"""``llmgym/RuleDiscovery-v0``: a grid world whose rules are hidden and must be found by playing.

Holds :class:`RuleDiscoveryEnv` (documented in Gymnasium's sections), :data:`LEVELS`
(difficulty settings), :class:`OraclePlayer` (a scripted player that knows the rules:
the strong reference) and :func:`play_human` (play in the terminal; ``llmgym play
llmgym/RuleDiscovery-v0`` works too).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Literal

from llmgym.env import LLMEnv
from llmgym.rubric import Reward, Rubric, TurnContext
from llmgym.tools import ToolError, tool

__all__ = ["RuleDiscoveryEnv", "LEVELS", "OraclePlayer", "play_human", "DIRECTIONS"]

#: Direction name -> (row step, column step).
DIRECTIONS: dict[str, tuple[int, int]] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_SYMBOLS = "#%&*+=~$^ox"
_ITEMS = ("coin", "key", "switch", "goal", "decoy")  # things the agent may stand on

#: Difficulty -> settings: grid size, wall density, object counts, goal conditions, scrambled controls, view.
LEVELS: dict[str, dict[str, Any]] = {
    "easy": dict(
        size=5,
        walls=0.12,
        coins=2,
        hazards=0,
        blocks=0,
        decoys=1,
        conditions=("none", "coins"),
        collect=("step",),
        scramble=False,
        window=None,
        reveal_goal=True,
        max_turns=30,
    ),
    "medium": dict(
        size=7,
        walls=0.16,
        coins=3,
        hazards=2,
        blocks=1,
        decoys=1,
        conditions=("coins", "key", "switch"),
        collect=("step", "interact"),
        scramble=False,
        window=2,
        reveal_goal=False,
        max_turns=50,
    ),
    "hard": dict(
        size=9,
        walls=0.2,
        coins=3,
        hazards=3,
        blocks=2,
        decoys=2,
        conditions=("coins", "key", "switch"),
        collect=("step", "interact"),
        scramble=True,
        window=2,
        reveal_goal=False,
        max_turns=80,
    ),
}


class RuleDiscoveryEnv(LLMEnv):
    """Find the hidden rules of a small grid world and reach its goal.

    ## Description

    In the spirit of ARC-AGI-3: the agent (``@``) sees a small grid of symbols
    and is told only that it must reach the goal. What each symbol does is drawn
    per seed from a family of rules and never stated: which symbol blocks, which
    scores, which hurts, which can be pushed, which is the key, the switch, the
    goal; whether coins are collected by stepping on them or by ``interact``;
    what the goal needs before it works (nothing, every coin, the key, the
    switch); and, at ``hard``, which direction each ``move`` really goes.

    ## Action Space

    ``Text``: tool calls ``move(direction)``, ``interact()`` (the cell underfoot and
    the four next to it), ``look()`` (the whole map), or a reply whose last line is
    ``up``, ``move left``, ``interact`` or ``look``.

    ## Observation Space

    ``Text``: the grid (at ``medium`` and ``hard`` moves show only the 5x5 window
    around the agent) and what the action did.

    ## Rewards

    Components in ``info["reward_components"]``:

    | name | weight | when | value |
    |---|---|---|---|
    | ``progress`` | 1.0 | turn | 0.1 per coin, key or switch; 0.01 per new cell (at most 0.2 an episode) |
    | ``hazard`` | -0.1 | turn | 1 when the move stepped on a hazard (back to start) |
    | ``invalid`` | -0.05 | turn | 1 when the turn carried out no action (a failed call, prose without a command) |
    | ``goal`` | 1.0 | end | 1 when the goal was reached with its condition met |
    | ``speed`` | 0.5 | end | when the goal was reached: 1 - (turn - 1) / max_turns |

    How it could be gamed, and why that does not pay: writing that the goal was
    reached is not a tool call (``invalid``); wandering to harvest exploration
    reward is capped at 0.2; ``look`` and ``interact`` spam earn nothing; coins
    and items pay once. Everything but ``goal`` + ``speed`` together is worth
    well under the 1.0 for reaching the goal. ``tests/envs/test_rule_discovery.py``
    checks that such policies score below the oracle.

    ## Starting State

    A world of the level drawn with ``self.np_random`` (regenerated until every
    target is reachable); ``reset(options={"difficulty": "hard"})`` changes the level
    for one episode.

    ## Episode End

    - Terminated: the goal was reached with its condition met.
    - Truncated: ``max_turns`` turns (the level's by default) or the token budget ran out.

    ## Arguments

    Args:
        difficulty: ``"easy"``, ``"medium"`` or ``"hard"`` (see :data:`LEVELS`).
        max_turns: turn budget, at least 1 (default ``None``: the level's).
        max_tool_calls: tool calls carried out per turn (default 1: one action, then
            the agent sees where it landed).
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    Raises:
        ValueError: an unknown ``difficulty``, or ``max_turns < 1``.

    ## Version History

    - v0: initial release.
    """

    description = (
        "Grid world with hidden, per-seed rules (what blocks, scores, moves, the goal); "
        "explore with move/interact/look."
    )
    system_prompt = (
        "You are @ in a small grid world. Each symbol does something, but nobody tells you what: find out by playing. "
        "Your task is to reach the goal. Tools: move (direction up, down, left or right), interact (with the cell you "
        "stand on and the four next to you) and look (the whole map). '.' is empty floor."
    )

    def __init__(
        self, difficulty: str = "medium", max_turns: int | None = None, max_tool_calls: int = 1, **kwargs: Any
    ):
        if not isinstance(difficulty, str) or difficulty not in LEVELS:  # a list or dict is unhashable: TypeError
            raise ValueError(f"difficulty must be one of {', '.join(LEVELS)}, got {difficulty!r}")
        self.difficulty = difficulty
        self.fixed_max_turns = max_turns
        super().__init__(max_turns=self._turn_budget(difficulty), max_tool_calls=max_tool_calls, **kwargs)
        self.level = LEVELS[difficulty]
        self.grid: list[list[str]] = []
        self.events: dict[int, dict[str, float]] = {}
        self.text_actions: set[int] = set()  # turns whose plain-text command was carried out

    # -- the world -------------------------------------------------------------------

    def setup(self, options: dict[str, Any] | None) -> str:
        difficulty = (options or {}).get("difficulty", self.difficulty)
        if not isinstance(difficulty, str) or difficulty not in LEVELS:
            raise ValueError(f"options['difficulty'] must be one of {', '.join(LEVELS)}, got {difficulty!r}")
        self.level = LEVELS[difficulty]
        self.max_turns = self._turn_budget(difficulty)
        rng = self.np_random
        roles = ["wall", "coin", "hazard", "block", "key", "switch", "goal", "decoy"]
        glyphs = rng.permutation(list(_SYMBOLS))[: len(roles)]
        self.symbols = dict(zip(roles, (str(g) for g in glyphs)))
        self.condition = str(rng.choice(self.level["conditions"]))
        self.collect = str(rng.choice(self.level["collect"]))
        names = list(DIRECTIONS)
        order = [names[i] for i in rng.permutation(4)] if self.level["scramble"] else names
        self.controls = {name: DIRECTIONS[actual] for name, actual in zip(names, order)}
        for _ in range(1000):
            if self._build_world():
                break
        else:  # pragma: no cover - the densities above make this practically impossible
            raise RuntimeError("could not build a solvable world; lower the wall density")
        self.has_key = self.switch_on = self.reached_goal = False
        self.coins_collected = 0
        self.visited = {self.position}
        self.events = {}
        self.text_actions: set[int] = set()
        hint = f" The goal is {self.symbols['goal']}." if self.level["reveal_goal"] else ""
        return f"Difficulty: {difficulty}.{hint}\n{self._map(full=True)}"

    def _turn_budget(self, difficulty: str) -> int:
        return self.fixed_max_turns if self.fixed_max_turns is not None else LEVELS[difficulty]["max_turns"]

    def _build_world(self) -> bool:
        rng, size, level = self.np_random, self.level["size"], self.level
        self.grid = [["wall" if rng.random() < level["walls"] else "floor" for _ in range(size)] for _ in range(size)]
        free = [(r, c) for r in range(size) for c in range(size) if self.grid[r][c] == "floor"]
        wanted = ["goal"] + ["coin"] * level["coins"] + ["hazard"] * level["hazards"] + ["block"] * level["blocks"]
        wanted += ["decoy"] * level["decoys"] + (["key"] if self.condition == "key" else [])
        wanted += ["switch"] if self.condition == "switch" else []
        if len(free) < len(wanted) + 1:
            return False
        picks = rng.choice(len(free), size=len(wanted) + 1, replace=False)
        self.position = self.start = free[int(picks[0])]
        for role, index in zip(wanted, picks[1:]):
            r, c = free[int(index)]
            self.grid[r][c] = role
        reachable = self._reachable(self.start)
        targets = [
            (r, c) for r in range(size) for c in range(size) if self.grid[r][c] in ("goal", "coin", "key", "switch")
        ]
        self.coins_total = sum(row.count("coin") for row in self.grid)
        return all(t in reachable for t in targets)

    def _passable(self, cell: tuple[int, int]) -> bool:
        r, c = cell
        size = len(self.grid)
        return 0 <= r < size and 0 <= c < size and self.grid[r][c] not in ("wall", "block", "hazard")

    def _reachable(self, start: tuple[int, int]) -> dict[tuple[int, int], tuple[int, int] | None]:
        """Cells reachable without pushing or stepping on hazards, each with the cell it was reached from."""
        came_from: dict[tuple[int, int], tuple[int, int] | None] = {start: None}
        queue = deque([start])
        while queue:
            r, c = queue.popleft()
            for dr, dc in DIRECTIONS.values():
                nxt = (r + dr, c + dc)
                if nxt not in came_from and self._passable(nxt):
                    came_from[nxt] = (r, c)
                    queue.append(nxt)
        return came_from

    def _map(self, full: bool) -> str:
        size = len(self.grid)
        window = None if full else self.level["window"]
        r0, c0 = self.position
        lines = []
        for r in range(size):
            if window is not None and abs(r - r0) > window:
                continue
            row = []
            for c in range(size):
                if window is not None and abs(c - c0) > window:
                    continue
                role = self.grid[r][c]
                row.append("@" if (r, c) == self.position else "." if role == "floor" else self.symbols[role])
            lines.append(" ".join(row))
        under = self.grid[r0][c0]
        status = f"You stand on {self.symbols[under]!r}." if under != "floor" else "You stand on empty floor."
        held = " You hold something." if self.has_key else ""
        title = "Map:" if window is None else "Around you:"
        return f"{title}\n" + "\n".join(lines) + f"\n{status}{held} Score: {self.coins_collected}."

    def _event(self, name: str, value: float = 1.0) -> None:
        turn = len(self.turn_contexts) + 1
        bucket = self.events.setdefault(turn, {})
        bucket[name] = bucket.get(name, 0.0) + value

    # -- tools -----------------------------------------------------------------------

    @tool
    def move(self, direction: Literal["up", "down", "left", "right"]) -> str:
        """Try to move one cell.

        Args:
            direction: up, down, left or right.
        """
        if self.reached_goal:
            raise ToolError("the goal is already reached")
        dr, dc = self.controls[direction]
        r, c = self.position
        target = (r + dr, c + dc)
        size = len(self.grid)
        if not (0 <= target[0] < size and 0 <= target[1] < size) or self.grid[target[0]][target[1]] == "wall":
            return f"You tried to move {direction} but something stops you.\n{self._map(full=False)}"
        role = self.grid[target[0]][target[1]]
        note = f"You moved {direction}."
        if role == "block":
            beyond = (target[0] + dr, target[1] + dc)
            if not (0 <= beyond[0] < size and 0 <= beyond[1] < size) or self.grid[beyond[0]][beyond[1]] != "floor":
                return f"You push against something that does not move.\n{self._map(full=False)}"
            self.grid[beyond[0]][beyond[1]], self.grid[target[0]][target[1]] = "block", "floor"
            note = f"You moved {direction}, pushing something ahead of you."
        if role == "hazard":
            self.position = self.start
            self._event("hazard")
            return f"Ouch! You are thrown back to where you started.\n{self._map(full=False)}"
        self.position = target
        if target not in self.visited:
            self.visited.add(target)
            self._event("explore")
        if role == "coin" and self.collect == "step":
            self._take_coin(target)
            note += " You collected something: score +1."
        elif role == "goal":
            if self._goal_open():
                self.reached_goal = True
                return f"{note} You reached the goal!"
            note += " Nothing happens."
        return f"{note}\n{self._map(full=False)}"

    @tool
    def interact(self) -> str:
        """Interact with the cell you stand on and the four cells next to you."""
        if self.reached_goal:
            raise ToolError("the goal is already reached")
        r, c = self.position
        size = len(self.grid)
        notes = []
        for dr, dc in [(0, 0), *DIRECTIONS.values()]:
            cell = (r + dr, c + dc)
            if not (0 <= cell[0] < size and 0 <= cell[1] < size):
                continue
            role = self.grid[cell[0]][cell[1]]
            if role == "coin" and self.collect == "interact":
                self._take_coin(cell)
                notes.append("You collected something: score +1.")
            elif role == "key":
                self.grid[cell[0]][cell[1]] = "floor"
                self.has_key = True
                self._event("item")
                notes.append("You picked something up.")
            elif role == "switch" and not self.switch_on:
                self.switch_on = True
                self._event("item")
                notes.append("Click! Something changed somewhere.")
        return ("\n".join(notes) or "Nothing happens.") + f"\n{self._map(full=False)}"

    @tool
    def look(self) -> str:
        """Show the whole map."""
        return self._map(full=True)

    def _take_coin(self, cell: tuple[int, int]) -> None:
        self.grid[cell[0]][cell[1]] = "floor"
        self.coins_collected += 1
        self._event("item")

    def _goal_open(self) -> bool:
        return {
            "none": True,
            "coins": self.coins_collected == self.coins_total,
            "key": self.has_key,
            "switch": self.switch_on,
        }[self.condition]

    # -- episode -------------------------------------------------------------------

    def on_text(self, text: str) -> str:
        """Plain-text commands work too: a last line of ``up``, ``move left``, ``interact`` or ``look``."""
        lines = [line for line in text.strip().splitlines() if line.strip()]
        command = lines[-1].strip().strip(".!`*\"'").lower() if lines else ""
        command = command.removeprefix("move").strip()
        if command in DIRECTIONS:
            result = self.move.call({"direction": command})
        elif command in ("interact", "look"):
            result = self.tools[command].call({})
        else:
            return (
                "No action found, so nothing happened. Reply with up, down, left, right, interact or look, or call "
                '<tool_call>{"name": "move", "arguments": {"direction": "up"}}</tool_call>.'
            )
        if result.ok:
            self.text_actions.add(len(self.turn_contexts) + 1)
        return result.content

    def is_done(self) -> bool:
        return self.reached_goal

    def build_rubric(self) -> Rubric:
        return Rubric(
            [
                Reward(self._progress, name="progress"),
                Reward(lambda ctx: self.events.get(ctx.turn, {}).get("hazard", 0.0), weight=-0.1, name="hazard"),
                Reward(self._invalid, weight=-0.05, name="invalid"),
                Reward(lambda ctx: 1.0 if self.reached_goal else 0.0, when="end", name="goal"),
                Reward(self._speed, weight=0.5, when="end", name="speed"),
            ]
        )

    def _progress(self, ctx: TurnContext) -> float:
        events = self.events.get(ctx.turn, {})
        explored_before = sum(self.events.get(t, {}).get("explore", 0.0) for t in range(1, ctx.turn))
        explore = min(events.get("explore", 0.0), max(0.0, 20 - explored_before))
        return 0.1 * events.get("item", 0.0) + 0.01 * explore

    def _invalid(self, ctx: TurnContext) -> float:
        acted = ctx.turn in self.text_actions or any(result.ok for _, result in ctx.tool_results)
        return 0.0 if acted else 1.0

    def _speed(self, ctx: TurnContext) -> float:
        return 1.0 - (ctx.turn - 1) / self.max_turns if self.reached_goal else 0.0


class OraclePlayer:
    """A player that knows the hidden rules and walks the shortest safe path to each target, then the goal.

    The strong reference: what perfect rule discovery could earn. It reads the
    env's hidden state, so it is a yardstick, not a fair agent.
    """

    name = "oracle"

    def act(self, env: RuleDiscoveryEnv) -> str:
        game = env.unwrapped
        targets = self._targets(game)
        paths = game._reachable(game.position)
        if game.position in targets:
            return '<tool_call>{"name": "interact", "arguments": {}}</tool_call>'
        goal = min((t for t in targets if t in paths), key=lambda t: _path_length(paths, t), default=None)
        if goal is None:
            return '<tool_call>{"name": "look", "arguments": {}}</tool_call>'
        step = goal
        while paths[step] != game.position:
            step = paths[step]
        delta = (step[0] - game.position[0], step[1] - game.position[1])
        name = next(n for n, d in game.controls.items() if d == delta)
        return f'<tool_call>{{"name": "move", "arguments": {{"direction": "{name}"}}}}</tool_call>'

    @staticmethod
    def _targets(game: RuleDiscoveryEnv) -> list[tuple[int, int]]:
        size = len(game.grid)
        cells = {role: [(r, c) for r in range(size) for c in range(size) if game.grid[r][c] == role] for role in _ITEMS}
        if game.condition == "key" and not game.has_key:
            return cells["key"]
        if game.condition == "switch" and not game.switch_on:
            return cells["switch"]
        if cells["coin"] and (game.condition == "coins" or game.collect == "step"):
            return cells["coin"]  # coins pay on the way even when the goal does not need them
        return [cell for cell in cells["goal"] if cell != game.position] or cells["goal"]


def _path_length(paths: dict[tuple[int, int], tuple[int, int] | None], cell: tuple[int, int]) -> int:
    length = 0
    while paths[cell] is not None:
        cell, length = paths[cell], length + 1
    return length


def play_human(difficulty: str = "medium", seed: int | None = None) -> float:
    """Play in the terminal: type ``up``/``down``/``left``/``right``, ``interact``, ``look`` (or a tool call).

    Returns:
        The episode's total reward (compare it with an agent's on the same seed).
    """
    env = RuleDiscoveryEnv(difficulty=difficulty)
    observation, _ = env.reset(seed=seed)
    print(env.system_prompt + "\n\n" + observation)
    total, done = 0.0, False
    while not done:
        typed = input("> ")
        observation, reward, terminated, truncated, _ = env.step(typed)
        total += reward
        done = terminated or truncated
        print(f"{observation}\n(reward {reward:+.2f}, total {total:+.2f})")
    print("Goal reached!" if env.reached_goal else "Out of turns.")
    return total

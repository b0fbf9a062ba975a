"""llmgym: Gymnasium for LLM agents.

``import llmgym`` registers every llmgym environment (``llmgym/Wordle-v0``...)
and those of installed plugins with Gymnasium, so ``gymnasium.make`` finds them.

Example:
    >>> import gymnasium as gym, llmgym
    >>> env = gym.make("llmgym/Wordle-v0")
    >>> obs, info = env.reset(seed=0)
    >>> sorted(info)
    ['messages', 'reward_components', 'tools', 'turn']
"""

from llmgym import _moved
from llmgym.env import LLMEnv
from llmgym.episode import Episode, JSONLWriter, load_jsonl, save_jsonl
from llmgym.messages import Message, ToolCall
from llmgym.parsing import ParsedAction, parse_action
from llmgym.registry import list_envs, load_plugins, register
from llmgym.rollout import arollout, rollout, summarize
from llmgym.rubric import Reward, Rubric, TurnContext
from llmgym.spaces import Text
from llmgym.tools import Tool, ToolError, ToolResult, tool
from llmgym.vector import make_vec

__version__ = "0.2.0"

__all__ = [
    "LLMEnv",
    "Episode",
    "JSONLWriter",
    "load_jsonl",
    "save_jsonl",
    "Message",
    "ToolCall",
    "ParsedAction",
    "parse_action",
    "list_envs",
    "load_plugins",
    "register",
    "rollout",
    "arollout",
    "summarize",
    "Reward",
    "Rubric",
    "TurnContext",
    "Text",
    "Tool",
    "ToolError",
    "ToolResult",
    "tool",
    "make_vec",
]

_moved.install()  # old module names keep working for a release (llmgym/_moved.py)
load_plugins()

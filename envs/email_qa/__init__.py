"""``llmgym/EmailQA-v0``: questions about a generated SQLite/FTS5 inbox, the ART-E task (see :mod:`.env`)."""

from llmgym.envs.email_qa.env import EmailQAEnv, answer_is_right, is_abstention
from llmgym.envs.email_qa.inbox import Inbox, InboxQuestion, generate_inbox, make_question
from llmgym.envs.email_qa.solver import EmailQASolver

__all__ = [
    "EmailQAEnv",
    "EmailQASolver",
    "Inbox",
    "InboxQuestion",
    "generate_inbox",
    "make_question",
    "answer_is_right",
    "is_abstention",
]

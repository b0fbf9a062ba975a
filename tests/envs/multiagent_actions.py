"""Actions shared by the multi-agent game tests."""

import json

FLOOD = "<tool_call>x</tool_call>" * 341  # each malformed block is listed back in the error: 22k characters


def native_call(name, **arguments):
    """An assistant message that makes one native (OpenAI ``tool_calls``) call."""
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}

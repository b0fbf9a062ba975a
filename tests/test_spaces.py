"""llmgym.spaces: the ``Text`` space refuses flattening with a pointer to the wrappers, and compares its charset."""

from __future__ import annotations

import gymnasium as gym
import pytest

from llmgym import Text


@pytest.mark.parametrize("function", [gym.spaces.flatten, gym.spaces.unflatten])
def test_text_refuses_flattening_with_a_pointer_to_the_wrappers(function):
    with pytest.raises(ValueError, match="TextEmbeddingObservation"):
        function(Text(20), "—dash")


def test_text_refuses_flatdim_and_flatten_space_also_inside_a_dict():
    space = gym.spaces.Dict(text=Text(20))
    assert not space.is_np_flattenable
    with pytest.raises(ValueError, match="cannot be flattened"):
        gym.spaces.flatdim(space)  # Gymnasium's own message for a space that is not np-flattenable
    for call in (
        lambda: gym.spaces.flatdim(Text(20)),
        lambda: gym.spaces.flatten_space(space),
        lambda: gym.spaces.flatten(space, {"text": "🙂"}),
    ):
        with pytest.raises(ValueError, match="docs/interop.md"):
            call()


def test_text_equality_includes_the_charset():
    assert Text(20, charset="abc") != Text(20, charset="xyz")
    assert Text(20, charset="abc") == Text(20, charset="cba")
    assert "charset='abc'" in repr(Text(20, charset="abc"))


def test_text_sample_with_an_empty_charset_gives_the_empty_string():
    space = Text(5, charset="", seed=1)
    assert [space.sample() for _ in range(10)] == [""] * 10  # was ValueError on any non-zero length

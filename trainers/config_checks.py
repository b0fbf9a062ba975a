"""The checks a trainer config's fields go through, whatever config they belong to.

Holds :func:`check_field_values` (the kind of each bool and numeric field, then
a table of allowed ranges, :data:`Ranges`), :func:`check_device` (a device
torch can parse and this machine has) and :func:`check_field_types` (TOML or
command-line values against the field types, lossless conversions made;
:class:`FieldTypeError` names every value of the wrong type). The configs
themselves and their ranges live in :mod:`llmgym.trainers.config`.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Run:
    ...     steps: int = 1
    >>> check_field_values(Run(steps=0), (("steps", *AT_LEAST_1),))
    Traceback (most recent call last):
    ...
    ValueError: steps must be >= 1, got 0
    >>> check_field_types(Run, {"steps": "5"})
    {'steps': 5}
"""

from __future__ import annotations

import math
import numbers
import types
import typing
from collections.abc import Callable
from typing import Any

import pydantic

__all__ = [
    "Ranges",
    "AT_LEAST_1",
    "NON_NEGATIVE",
    "check_field_values",
    "check_device",
    "check_field_types",
    "FieldTypeError",
]

#: (field, test, what the test allows) for a config's fields; ``None`` in an optional field is not tested
Ranges = tuple[tuple[str, Callable[[Any], bool], str], ...]

AT_LEAST_1 = (lambda v: v >= 1, ">= 1")
NON_NEGATIVE = (lambda v: v >= 0, ">= 0")


def check_field_values(config: Any, ranges: Ranges) -> None:
    """Refuse a value of the wrong kind in a bool or numeric field, then one outside its field's range.

    Checked on every field, whether it came from Python, TOML or the command line: ``nan < 0`` is
    False, so a bare range check lets NaN through (and a NaN or infinite learning rate, clip or
    temperature turns the weights into NaN); ``True`` is an int to Python (``steps=True`` would train
    one step); and ``lora="false"`` is truthy.
    """
    for name, hint in typing.get_type_hints(type(config)).items():
        value = getattr(config, name)
        kinds = set(typing.get_args(hint)) if typing.get_origin(hint) in (typing.Union, types.UnionType) else {hint}
        if value is None and type(None) in kinds:
            continue
        if bool in kinds:
            ok, expected = isinstance(value, bool), "a bool (true or false)"
        elif int in kinds:
            ok, expected = isinstance(value, numbers.Integral) and not isinstance(value, bool), "an integer"
        elif float in kinds:
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
            expected = "a finite number"
        else:
            continue
        if not ok:
            raise ValueError(f"{name} must be {expected}{' or None' if type(None) in kinds else ''}, got {value!r}")
    for name, allowed, words in ranges:
        value = getattr(config, name)
        if value is not None and not allowed(value):
            raise ValueError(f"{name} must be {words}, got {value!r}")


def check_device(name: str) -> None:
    """Refuse a device torch cannot parse (``gpu``) or that this machine lacks (``cuda`` without a GPU).

    Found here, the mistake is one line, not an ``AssertionError`` from deep in the model load.
    """
    if name == "auto":
        return
    try:
        import torch
    except ImportError:  # the trainer itself will say that torch is missing
        return
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N (or another torch device), got {name!r}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {name!r}: no CUDA GPU is available to this torch ({torch.__version__}); use device auto or cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                f"cuda:0 to cuda:{torch.cuda.device_count() - 1}"
            )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {name!r}: MPS is not available on this machine; use device auto or cpu")


class FieldTypeError(ValueError):
    """Config values of the wrong type for their fields (the message names each one)."""


def check_field_types(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` checked against ``cls``'s field types; lossless conversions made (``"5"`` -> 5 for an int).

    TOML and the command line have types: checking them here beats a ``TypeError`` deep in a run.

    Raises:
        FieldTypeError: a value of the wrong type (``micro_batch_size = 2.5``), all of them named.
    """
    hints = typing.get_type_hints(cls)
    checked, problems = {}, []
    for name, value in values.items():
        try:  # strict for a bool: lax pydantic makes ``steps = true`` 1 and ``learning_rate = true`` 1.0
            checked[name] = pydantic.TypeAdapter(hints[name]).validate_python(value, strict=isinstance(value, bool))
        except pydantic.ValidationError as err:
            problems.append(f"{name}: {err.errors()[0]['msg']} (got {value!r})")
    if problems:
        raise FieldTypeError("; ".join(problems))
    return checked

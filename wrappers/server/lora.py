"""LoRA adapters on the model behind ``llmgym serve``, through peft's own functional API.

Holds :class:`LoRAAdapters`, which loads peft LoRA adapter folders onto one
transformers model in place, switches between them per batch and removes
them. It calls ``peft.functional`` (``inject_adapter_in_model``,
``set_peft_model_state_dict``, ``set_adapter``, ``delete_adapter``; peft
0.18 or later), peft's public API for integrations and the layer under
transformers' own ``model.load_adapter``. That integration is not used:
each transformers release demands its own minimum peft version there
(transformers 5.24 refuses peft 0.21, the newest release, with "please use a
version >= 0.22.0").

A load reads the folder whole (config and weights) before the model changes,
and an adapter that fails while being attached (weights for other layers,
shapes of another model) is removed again: a failed load leaves nothing under
its name. Like vLLM, only LoRA is served, without ``modules_to_save``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from llmgym.wrappers.server.protocol import APIError

__all__ = ["LoRAAdapters"]

_WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")


@dataclass(frozen=True)
class _Adapter:
    path: str
    peft_name: str


class LoRAAdapters:
    """The LoRA adapters loaded onto ``model`` (a transformers model), by the names clients use.

    Not thread-safe: the caller runs one method at a time and none while the model generates
    (:class:`~llmgym.wrappers.server.backend.ServedModel` holds its model lock).
    Outside :meth:`active` the adapters are disabled, so the model computes as the base model.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        #: client name -> where it was loaded from and its name inside peft. peft's names are
        #: ``adapter_<n>``: a client's name may hold dots or clash with a module attribute, which peft refuses.
        self.loaded: dict[str, _Adapter] = {}
        self._count = 0

    def load(self, name: str, path: str) -> None:
        """Attach the adapter saved in ``path`` as ``name``, replacing one of that name.

        Raises:
            APIError: 400 naming ``lora_path`` when ``path`` holds no LoRA adapter for this model.
                Nothing is left under ``name`` then, not even the adapter it was to replace: a
                client that asked for new weights never gets the old ones by surprise.
        """
        if name in self.loaded:
            self.unload(name)
        self._count += 1
        peft_name = f"adapter_{self._count}"
        try:
            self._attach(peft_name, *_read_adapter(path))
        except Exception as err:  # noqa: BLE001  whatever peft, torch or the files raise, the adapter is the request's
            raise APIError(
                400, f"Could not load the lora adapter `{name}` from `{path}`: {type(err).__name__}: {err}", "lora_path"
            ) from err
        finally:
            self._disable()
        self.loaded[name] = _Adapter(path, peft_name)

    def unload(self, name: str) -> None:
        """Remove the adapter ``name`` (a name that is loaded)."""
        self._detach(self.loaded.pop(name).peft_name)

    @contextlib.contextmanager
    def active(self, name: str | None) -> Iterator[None]:
        """A block in which the model runs with adapter ``name`` (``None``: the base model)."""
        if name is None or not self.loaded:
            yield
            return
        from peft.functional import set_adapter

        for layer in self._layers():
            layer.enable_adapters(True)
        set_adapter(self.model, self.loaded[name].peft_name, inference_mode=True)
        try:
            yield
        finally:
            self._disable()

    def _attach(self, peft_name: str, config: Any, weights: dict[str, Any]) -> None:
        """Inject and fill adapter ``peft_name``; on any failure it is removed again, however far it got."""
        from peft.functional import cast_adapter_dtype, inject_adapter_in_model, set_peft_model_state_dict

        try:
            inject_adapter_in_model(config, self.model, adapter_name=peft_name)
            result = set_peft_model_state_dict(self.model, weights, adapter_name=peft_name)
            # peft loads with strict=False: weights named for other modules would leave the adapter at its initial
            # values, which for LoRA is the base model, served under the adapter's name without a word
            missing = [key for key in result.missing_keys if _adapter_of(key) == peft_name]
            if result.unexpected_keys or missing:
                example = (missing or result.unexpected_keys)[0].replace(f".{peft_name}.", ".")
                raise ValueError(
                    f"the weights do not fit this model's layers ({len(missing)} missing, "
                    f"{len(result.unexpected_keys)} unexpected, e.g. {example})"
                )
            cast_adapter_dtype(self.model, peft_name)  # fp16/bf16 adapters compute in fp32, as in peft's PeftModel
        except BaseException:
            self._detach(peft_name)
            raise

    def _detach(self, peft_name: str) -> None:
        from peft.functional import delete_adapter

        delete_adapter(self.model, peft_name, prefix="lora_")
        (getattr(self.model, "peft_config", None) or {}).pop(peft_name, None)

    def _disable(self) -> None:
        for layer in self._layers():
            layer.enable_adapters(False)

    def _layers(self) -> list[Any]:
        from peft.tuners.tuners_utils import BaseTunerLayer

        return [module for module in self.model.modules() if isinstance(module, BaseTunerLayer)]


def _read_adapter(path: str) -> tuple[Any, dict[str, Any]]:
    """The LoRA config and weights saved in the folder ``path``, keyed as the bare model names its modules.

    Raises:
        ValueError: no adapter there, or not a LoRA adapter; whatever peft's readers raise for files that do not read.
    """
    if not os.path.isfile(os.path.join(path, "adapter_config.json")):
        raise ValueError("no adapter_config.json there")
    if not any(os.path.isfile(os.path.join(path, file)) for file in _WEIGHT_FILES):
        raise ValueError(f"no weights there ({' or '.join(_WEIGHT_FILES)})")
    from peft import PeftConfig, PeftType
    from peft.utils import load_peft_weights

    config = PeftConfig.from_pretrained(path)
    if getattr(config, "peft_type", None) != PeftType.LORA:
        raise ValueError(f"not a LoRA adapter ({getattr(config, 'peft_type', None)}); only LoRA adapters are served")
    if getattr(config, "modules_to_save", None):
        raise ValueError("it has modules_to_save; as in vLLM, only LoRA weights are served")
    config.inference_mode = True
    weights = load_peft_weights(path, device="cpu")
    # saved from a PeftModel, whose keys start with the wrapper's "base_model.model."; the served model is bare
    return config, {key.removeprefix("base_model.model."): value for key, value in weights.items()}


def _adapter_of(key: str) -> str | None:
    """The adapter a parameter name belongs to: the part after a ``lora_*`` one (``...q_proj.lora_A.<name>.weight``)."""
    parts = key.split(".")
    return next((after for part, after in zip(parts, parts[1:]) if part.startswith("lora_")), None)

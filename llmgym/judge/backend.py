"""Asking the judge model: :class:`JudgeBackend` (an llmgym Policy, or an OpenAI-compatible endpoint).

Also holds :class:`JudgeConfigError`, raised when the endpoint refuses the
judge's configuration (an unknown model, a bad key), which no retry would fix.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

from llmgym.policy import Policy, PolicyRequest, SamplingParams

__all__ = ["JudgeBackend", "JudgeConfigError"]

_OPENAI_HINT = 'a judge behind base_url needs the openai package: pip install "llmgym[openai]"'


class JudgeConfigError(RuntimeError):
    """The judge's endpoint refused its configuration (unknown model, bad key): raised, never a fallback score."""


def _api_message(err: Any) -> str:
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
    return str(err)


class JudgeBackend:
    """Asks the judge model: a Policy, or an OpenAI-compatible endpoint through the ``openai`` client."""

    def __init__(
        self,
        policy: Policy | None,
        base_url: str | None,
        model: str,
        api_key: str | None,
        sampling: SamplingParams,
        timeout: float,
    ):
        if (policy is None) == (base_url is None):
            raise ValueError("give the judge exactly one backend: policy=<an llmgym Policy> or base_url=<a /v1 URL>")
        self.policy, self.model, self.sampling, self.base_url = policy, model, sampling, base_url
        self.api_key, self.timeout = api_key, timeout
        self.client = self._connect()
        self.name = f"policy:{policy.name}" if policy is not None else f"openai:{model}"

    def _connect(self) -> Any:
        if self.base_url is None:
            return None
        try:
            import openai
        except ImportError as err:
            raise ImportError(_OPENAI_HINT) from err
        return openai.OpenAI(
            base_url=self.base_url, api_key=self.api_key or "EMPTY", timeout=self.timeout, max_retries=2
        )

    def __getstate__(self) -> dict[str, Any]:
        # an HTTP client holds locks and open connections: a copy opens its own (__setstate__)
        return {**self.__dict__, "client": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.client = self._connect()

    def __deepcopy__(self, memo: dict[int, Any]) -> JudgeBackend:
        # a deep copy shares the policy, as the rubric an env rebuilds does: it may hold a model on a GPU
        if self.policy is not None:
            memo.setdefault(id(self.policy), self.policy)
        copied = object.__new__(type(self))
        copied.__setstate__(copy.deepcopy(self.__getstate__(), memo))
        return copied

    def ask(self, messages: list[dict[str, str]]) -> str:
        if self.policy is not None:
            generation = self.policy.generate([PolicyRequest(messages, sampling=self.sampling)])[0]
            return generation.message.get("content") or ""
        kwargs: dict[str, Any] = {
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "max_tokens": self.sampling.max_tokens,
        }
        if self.sampling.seed is not None:
            kwargs["seed"] = self.sampling.seed
        if self.sampling.stop:
            kwargs["stop"] = list(self.sampling.stop)
        response = self.client.chat.completions.create(model=self.model, messages=messages, **kwargs)
        return response.choices[0].message.content or ""

    def refused(self, err: Exception) -> JudgeConfigError | None:
        """A clear error when ``err`` is the endpoint refusing the configuration, else ``None``.

        A refused configuration is an unknown model or a bad key. No retry would succeed:
        such a judge would give every episode the fallback score.
        """
        openai = sys.modules.get("openai")
        if openai is None or not isinstance(
            err, (openai.NotFoundError, openai.AuthenticationError, openai.PermissionDeniedError)
        ):
            return None
        where = f"the judge endpoint {self.base_url}" if self.base_url else f"the judge policy {self.name}"
        return JudgeConfigError(
            f"{where} refused the request ({err.status_code}: {_api_message(err)}); "
            "check the model name against its /v1/models and the api key"
        )

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

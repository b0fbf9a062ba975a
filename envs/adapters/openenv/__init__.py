"""OpenEnv both ways: llmgym environments as OpenEnv servers, OpenEnv servers as llmgym environments.

`OpenEnv <https://github.com/meta-pytorch/OpenEnv>`_ (PyPI ``openenv``, extra ``openenv``) serves
environments over HTTP/WebSocket, one session per client connection. Holds:

- :mod:`.wire`: what travels: :func:`~.wire.chat_models` (the action and observation models of an
  llmgym env served through OpenEnv) and the conversions to and from llmgym's step;
- :mod:`.server`: :func:`~.server.create_env_app`, any registered single-agent env behind OpenEnv's own
  app (what ``llmgym serve-env`` runs);
- :mod:`.client`: :class:`~.client.OpenEnvEnv`, any OpenEnv server as a Gymnasium env
  (``gym.make("llmgym/OpenEnv-v0", base_url=...)``).

Nothing here imports ``openenv`` until it is used: it is an optional extra, and ``import llmgym``
registers ``llmgym/OpenEnv-v0`` by name only.
"""

"""Routing the requests of many episodes over several inference servers.

Holds :class:`ServerRouter`, which :class:`~llmgym.wrappers.openai_policy.OpenAIPolicy` asks where
each request goes when it has several base URLs:

- a new episode goes to the server with the fewest requests in flight (ties in turn);
- its later turns go to the same server, whose prefix cache holds the chat so far
  (an episode is known by :attr:`~llmgym.policy.PolicyRequest.episode_id`, which the rollout sets);
- a server that fails (unreachable after the client's own retries) is taken out for ``retry_after``
  seconds: new episodes avoid it, and its episodes move to another server at their next request
  (the failed request itself is sent again elsewhere, so the episode goes on). When every server
  not yet tried is out, the router tries them anyway rather than fail a request it could still place.

The router is plain bookkeeping with no I/O; the policy calls it from its one event-loop thread.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["ServerRouter"]


class ServerRouter:
    """Least-in-flight for new episodes, sticky for their later turns, failed servers taken out for a while.

    Args:
        servers: how many servers there are (they are named by index).
        retry_after: seconds a failed server is left out before new episodes may try it again.
        max_episodes: episodes remembered (least recently used forgotten first): an episode
            forgotten is routed as a new one.
        clock: the time in seconds (``time.monotonic``; a test may pass its own).

    Example:
        >>> router = ServerRouter(2)
        >>> first = router.pick("episode-a")
        >>> router.begin(first)
        >>> second = router.pick("episode-b")  # the least busy: the other server
        >>> (first, second, router.pick("episode-a"))  # episode-a stays where it started
        (0, 1, 0)
        >>> router.fail(0)
        >>> router.pick("episode-a"), router.is_up(0)  # taken out: its episodes move
        (1, False)
    """

    def __init__(
        self,
        servers: int,
        retry_after: float = 30.0,
        max_episodes: int = 65_536,
        clock: Callable[[], float] = time.monotonic,
    ):
        if servers < 1:
            raise ValueError(f"a router needs at least one server, got {servers}")
        if retry_after < 0:
            raise ValueError(f"retry_after must be >= 0 seconds, got {retry_after}")
        self.servers = servers
        self.retry_after = retry_after
        self.max_episodes = max_episodes
        self.clock = clock
        self.in_flight = [0] * servers
        self.failed_at: dict[int, float] = {}  # server -> when it last failed
        self.episodes: OrderedDict[str, int] = OrderedDict()  # episode id -> its server
        self._turn = 0

    def is_up(self, server: int) -> bool:
        """Whether ``server`` takes requests: it has not failed in the last ``retry_after`` seconds."""
        failed = self.failed_at.get(server)
        return failed is None or self.clock() - failed >= self.retry_after

    def pick(self, episode: str | None = None, exclude: set[int] | frozenset[int] = frozenset()) -> int:
        """The server for the next request of ``episode`` (``None``: a request of no episode), never one in ``exclude``.

        Raises:
            ValueError: every server is excluded.
        """
        candidates = [s for s in range(self.servers) if s not in exclude]
        if not candidates:
            raise ValueError("every server is excluded")
        up = [s for s in candidates if self.is_up(s)] or candidates  # all out: try them rather than fail
        if episode is not None and self.episodes.get(episode) in up:
            self.episodes.move_to_end(episode)
            return self.episodes[episode]
        # least busy first; the rotating offset breaks ties round-robin
        server = min(up, key=lambda s: (self.in_flight[s], (s - self._turn) % self.servers))
        self._turn += 1
        if episode is not None:
            self.episodes[episode] = server
            self.episodes.move_to_end(episode)
            while len(self.episodes) > self.max_episodes:
                self.episodes.popitem(last=False)
        return server

    def begin(self, server: int) -> None:
        """A request was sent to ``server``."""
        self.in_flight[server] += 1

    def end(self, server: int) -> None:
        """A request to ``server`` came back (answered or failed)."""
        self.in_flight[server] -= 1

    def succeed(self, server: int) -> None:
        """``server`` answered: it is up again if it had been taken out."""
        self.failed_at.pop(server, None)

    def fail(self, server: int) -> None:
        """``server`` could not be reached: take it out for ``retry_after`` seconds."""
        self.failed_at[server] = self.clock()

"""The episode runner: the one canonical consumer of the MultiAgentEnv contract.

:func:`play` drives any MultiAgentEnv with a per-agent policy and yields every transition;
:func:`rollout` plays one episode and sums it up. Simultaneous, turn-based and irregular orders
need nothing special: whoever is in the observation dict acts. Rewards are summed for every agent
they name, acting or not.

Example:
    >>> from marl_core import rollout
    >>> from marl_core.envs import RockPaperScissors
    >>> result = rollout(RockPaperScissors(), seed=0)
    >>> result.steps, sorted(result.lengths.items())
    (10, [('player1', 10), ('player2', 10)])
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from marl_core.env import ALL, AgentID, MultiAgentEnv, seed_value
from marl_core.errors import EnvContractError, UnknownAgentError
from marl_core.spaces import sample_action_for

Policy = Union[Callable[[AgentID, Any], Any], Mapping[AgentID, Callable[[Any], Any]]]


class RandomPolicy:
    """Uniformly random actions from each agent's action space, legal ones only when masked
    (grouped agents included: each member's mask is read from its slot).

    Draws from its own generator seeded with ``seed``, never from numpy's global RNG, and never
    the stream of an env reset with the same seed: ``MultiAgentEnv.np_random`` is built from the
    seed alone, so the policy's stream comes from ``[seed, 1]`` (else a seeded rollout's "random"
    policy would draw the very numbers of the env's chance events).
    """

    def __init__(self, env: MultiAgentEnv, seed: int | None = None) -> None:
        self.env = env
        self.rng = self.rng_for(seed)

    @staticmethod
    def rng_for(seed: int | None) -> np.random.Generator:
        """The generator a ``RandomPolicy`` seeded with ``seed`` draws from (to replay its actions).

        Raises:
            SeedError: ``seed`` is not a non-negative integer or None.
        """
        seed = seed_value(seed)
        return np.random.default_rng(None if seed is None else [seed, 1])

    def __call__(self, agent_id: AgentID, observation: Any) -> Any:
        space = self.env.get_action_space(agent_id)
        return sample_action_for(space, observation, self.rng, agent_id)


@dataclass(frozen=True)
class Transition:
    """One call of ``reset`` (``index == 0``, ``actions is None``) or ``step``."""

    index: int
    actions: dict[AgentID, Any] | None
    obs: dict[AgentID, Any]
    rewards: dict[AgentID, Any]
    terminateds: dict[AgentID, Any]
    truncateds: dict[AgentID, Any]
    infos: dict[AgentID, Any]

    @property
    def done(self) -> bool:
        """Whether this transition ended the episode (``"__all__"``)."""
        return bool(self.terminateds.get(ALL, False)) or bool(self.truncateds.get(ALL, False))


@dataclass(frozen=True)
class EpisodeResult:
    """What :func:`rollout` measured over one episode.

    ``returns`` holds every agent seen (0.0 for one never rewarded) and every agent rewarded,
    seen or not; ``lengths`` every agent seen, with the number of actions it sent.
    """

    returns: dict[AgentID, float]
    lengths: dict[AgentID, int]
    steps: int
    terminated: bool
    truncated: bool
    agents_seen: list[AgentID] = field(default_factory=list)


def _as_callable(policy: Policy | None, env: MultiAgentEnv, seed: int | None) -> Callable[[AgentID, Any], Any]:
    if policy is None:
        return RandomPolicy(env, seed)
    if isinstance(policy, Mapping):
        table = dict(policy)
        odd = {agent_id: chosen for agent_id, chosen in table.items() if not callable(chosen)}
        if odd:
            raise TypeError(f"a policy per agent must be a callable (observation -> action); received {odd!r}")

        def by_agent(agent_id: AgentID, observation: Any) -> Any:
            chosen = table.get(agent_id)
            if chosen is None:  # (a KeyError inside the policy is the policy's own, and propagates)
                raise UnknownAgentError(agent_id, table, what="agent (no policy given)")
            return chosen(observation)

        return by_agent
    if not callable(policy):
        raise TypeError(f"a policy is a callable (agent_id, observation) -> action, or a dict of callables "
                        f"(observation -> action) by agent id; received {policy!r}")
    return policy


def play(
    env: MultiAgentEnv,
    policy: Policy | None = None,
    *,
    seed: int | None = None,
    max_steps: int = 100_000,
    options: dict[str, Any] | None = None,
) -> Iterator[Transition]:
    """Play one episode, yielding the reset and then every step.

    Args:
        env: any MultiAgentEnv.
        policy: ``policy(agent_id, observation) -> action``, a mapping from agent id to
            ``fn(observation) -> action``, or None for random legal actions seeded by ``seed``.
        seed: passed to ``env.reset(seed=...)`` (and to the random policy).
        max_steps: stop after this many ``step`` calls even if the episode has not ended.
        options: passed to ``env.reset``.

    Raises:
        EnvContractError: the env asked nobody to act without ending the episode.
        SeedError: ``seed`` is not a non-negative integer or None (before the env resets).
    """
    seed = seed_value(seed)
    act = _as_callable(policy, env, seed)
    obs, infos = env.reset(seed=seed, options=options)
    yield Transition(0, None, obs, {}, {ALL: False}, {ALL: False}, infos)
    ending: set[AgentID] = set()
    for index in range(1, max_steps + 1):
        # Agents ending in the last step appear with their final observation; they do not act.
        acting = [agent_id for agent_id in obs if agent_id not in ending]
        if not acting:
            raise EnvContractError(
                f"{type(env).__name__} asked no agent to act after step {index - 1} (observations "
                f"for: {sorted(obs)}) without setting '__all__' in terminateds or truncateds"
            )
        actions = {agent_id: act(agent_id, obs[agent_id]) for agent_id in acting}
        obs, rewards, terminateds, truncateds, infos = env.step(actions)
        transition = Transition(index, actions, obs, rewards, terminateds, truncateds, infos)
        yield transition
        if transition.done:
            return
        ending = {a for a in obs if terminateds.get(a, False) or truncateds.get(a, False)}


def rollout(
    env: MultiAgentEnv,
    policy: Policy | None = None,
    *,
    seed: int | None = None,
    max_steps: int = 100_000,
    options: dict[str, Any] | None = None,
) -> EpisodeResult:
    """Play one episode and return each agent's summed reward and number of actions.

    Rewards count for every agent they name, acting or not. ``truncated`` is True when the env
    truncated the episode or ``max_steps`` ran out first.
    """
    returns: dict[AgentID, float] = {}
    lengths: dict[AgentID, int] = {}
    seen: list[AgentID] = []
    transitions = play(env, policy, seed=seed, max_steps=max_steps, options=options)
    last = first = next(transitions)
    for last in itertools.chain([first], transitions):
        for agent_id in last.obs:
            if agent_id not in lengths:
                lengths[agent_id] = 0
                returns.setdefault(agent_id, 0.0)
                seen.append(agent_id)
        for agent_id in last.actions or {}:
            lengths[agent_id] += 1
        for agent_id, reward in last.rewards.items():
            if agent_id != ALL:
                returns[agent_id] = returns.get(agent_id, 0.0) + float(reward)
    terminated = bool(last.terminateds.get(ALL, False))
    return EpisodeResult(
        returns=returns,
        lengths=lengths,
        steps=last.index,
        terminated=terminated,
        truncated=not terminated,
        agents_seen=seen,
    )

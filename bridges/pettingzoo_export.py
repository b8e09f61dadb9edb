"""MultiAgentEnv -> PettingZoo: :func:`to_aec` and :func:`to_parallel`.

:func:`to_aec` works for any MultiAgentEnv: the agents in an observation dict are stepped one at
a time in the dict's order, their actions buffered until every one of them has acted, and then
sent to the MultiAgentEnv together. :func:`to_parallel` needs an env in which every live agent
acts at every step, and says which agents were not asked to act when that does not hold.

Both undo the bridges of :mod:`bridges.pettingzoo`: ``to_aec(PettingZooEnv(env))`` and
``to_parallel(ParallelPettingZooEnv(env))`` return ``env`` itself, as PettingZoo's own
``aec_to_parallel(parallel_to_aec(x))`` gives back ``x``.

Observations pass through unchanged. PettingZoo's ``api_test`` reads ``observation.dtype``, so it
fails on envs that observe plain Python ints (a Discrete observation ``3`` rather than
``np.int64(3)``) or tuples (a grouped agent's Tuple observation); such envs work with the
converters, but need numpy observations for that test. Its random actions do not read masks
inside a group's Tuple slots either, so on grouped envs with masks they are refused as illegal.

Example:
    >>> from marl_core.envs import RockPaperScissors
    >>> from bridges.pettingzoo import to_aec
    >>> aec = to_aec(RockPaperScissors())
    >>> aec.reset(seed=0)
    >>> aec.agent_selection
    'player1'
    >>> aec.step(0)  # buffered until player2 has acted too
    >>> aec.agent_selection, aec.rewards
    ('player2', {'player1': 0, 'player2': 0})
    >>> aec.step(1)  # paper beats rock
    >>> aec.rewards
    {'player1': -1, 'player2': 1}
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Container, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import AECEnv, ParallelEnv

from bridges.wrapping import require_multi_agent_env
from marl_core.env import ALL, COMMON, AgentID, MultiAgentEnv, check_not_back, merge_common_infos
from marl_core.errors import (
    EnvContractError,
    InvalidActionError,
    ResetNeededError,
    SpaceError,
    UnsupportedEnvError,
)
from marl_core.spaces import action_masks_of, check_acting, check_action, placeholder_observation, snapshot

logger = logging.getLogger(__name__)

__all__ = ["MultiAgentAECEnv", "MultiAgentParallelEnv", "to_aec", "to_parallel"]


class _SpacesOf:
    """Per-agent spaces of a MultiAgentEnv, cached so PettingZoo sees the same object each time."""

    def __init__(self, env: MultiAgentEnv) -> None:
        self._env = env
        self._observation: dict[AgentID, gym.Space] = {}
        self._action: dict[AgentID, gym.Space] = {}

    def observation_space(self, agent_id: AgentID) -> gym.Space:
        space = self._observation.get(agent_id)
        if space is None:
            space = self._observation[agent_id] = self._env.get_observation_space(agent_id)
        return space

    def action_space(self, agent_id: AgentID) -> gym.Space:
        space = self._action.get(agent_id)
        if space is None:
            space = self._action[agent_id] = self._env.get_action_space(agent_id)
        return space


class _CommonInfos:
    """What both exports share: a MultiAgentEnv's ``"__common__"`` infos kept aside (PettingZoo's
    infos hold agents only), and its generator as ``np_random`` (as PettingZoo envs have one)."""

    env: MultiAgentEnv
    common_infos: Any = {}
    _new_common_infos: Any = None

    @property
    def np_random(self) -> np.random.Generator:
        """The MultiAgentEnv's generator (SuperSuit's ``frame_skip_v0`` draws from it)."""
        return self.env.np_random

    def take_common_infos(self) -> Any:
        """The ``"__common__"`` infos of the MultiAgentEnv's last reset or step if they were not
        taken yet, else None (for the bridges of :mod:`bridges.pettingzoo`, which pass them on
        once)."""
        common, self._new_common_infos = self._new_common_infos, None
        return common

    def _keep_common_infos(self, infos: Mapping[AgentID, Any], given: Container[AgentID]) -> None:
        """Keep ``infos[COMMON]``, and the infos of agents that are not ``given`` theirs now (not
        in this step), under their ids: nothing is lost."""
        extra = {a: info for a, info in infos.items() if a not in given and a != COMMON}
        common = merge_common_infos(infos.get(COMMON, {}), extra)
        self.common_infos = common
        self._new_common_infos = common if common or not isinstance(common, Mapping) else None


def _metadata(env: MultiAgentEnv, parallelizable: bool) -> dict[str, Any]:
    """The env's metadata with ``is_parallelizable``: ``parallelizable`` unless the env says so
    itself (a PettingZoo parallel env's flag survives the round trip through ``to_aec``)."""
    metadata = dict(getattr(env, "metadata", {}) or {})
    metadata["is_parallelizable"] = parallelizable or bool(metadata.get("is_parallelizable", False))
    return metadata


class MultiAgentAECEnv(_CommonInfos, AECEnv):
    """A MultiAgentEnv as a PettingZoo ``AECEnv`` (build it with :func:`to_aec`).

    Semantics:
        - **Who acts:** the agents of the MultiAgentEnv's observation dict, one at a time in the
          dict's order; their actions are buffered and sent together once the last has acted.
        - **Agents:** ``agents`` starts as the MultiAgentEnv's ``agents`` plus the observed agents;
          agents join when they first appear and leave after their dead step.
        - **Rewards:** the MultiAgentEnv's rewards of a step land in ``rewards`` after the action
          that completes the step (buffering steps clear ``rewards``), and accumulate in
          ``last()`` as in any AEC env, so each agent's sum is unchanged. A reward for an agent
          that has not joined yet waits until it joins; an agent that ends, or whose episode
          ends, before it was ever observed joins then, for a dead step that carries it. Two
          exceptions cannot reach an agent in the AEC API, and are logged as a warning and left
          out: a reward for an agent that has already left (after its dead step), and one for an
          id outside ``possible_agents`` that never joins before the episode ends.
        - **Dead agents and "__all__":** agents that end (or all agents, on ``"__all__"``) get
          ``terminations`` / ``truncations`` and a dead step, first in the order of the
          observation dict; ``step`` must then receive None for them.
        - **Observations:** ``observe(agent)`` is the agent's latest observation from the
          MultiAgentEnv (it only observes agents when they act or end). An agent that joins only
          to receive a reward, never observed, observes a placeholder inside its space (zeros
          clipped into a Box's bounds, all-zero action masks; see
          :func:`~marl_core.spaces.placeholder_observation`); ``observed(agent)`` says which.
        - **Seeding and chance:** ``reset(seed=s)`` resets the MultiAgentEnv with ``seed=s``.
        - **Masks:** the MultiAgentEnv's Dict observations (with ``"action_mask"``) pass through.
          With ``check_legal`` (the default), ``step`` refuses an action that the agent's mask
          (or, for a grouped agent, a member's mask in its slot) forbids, before it is
          buffered: an action buffered now could only be refused once the last agent has
          acted, when it can no longer be taken back.
        - Bad input (an action outside the space, a masked action, a step before ``reset`` or
          after the end) raises, and the state is unchanged: the same agent must act again.
        - **Infos:** ``infos[agent]`` is what the MultiAgentEnv's last reset or step gave the
          agent: ``{}`` when that call observed it without an info; an agent not observed keeps
          its last. ``common_infos`` holds the ``"__common__"`` infos of that call (``{}`` when
          it gave none), with the infos it gave agents not in ``agents`` (not joined yet, or
          gone) under their ids.
        - An env that asks no agent to act without ending the episode, or observes an agent again
          after it ended, breaks its contract: an :class:`~marl_core.errors.EnvContractError`.
    """

    def __init__(self, env: MultiAgentEnv, *, check_legal: bool = True) -> None:
        super().__init__()
        self.env = env
        self.check_legal = check_legal
        self.metadata = _metadata(env, parallelizable=False)
        self.render_mode = getattr(env, "render_mode", None)
        self.possible_agents = list(env.possible_agents)
        self._possible_set = set(self.possible_agents)
        self._spaces = _SpacesOf(env)
        self.agents: list[AgentID] = []
        self.rewards: dict[AgentID, Any] = {}
        self._cumulative_rewards: dict[AgentID, Any] = {}
        self.terminations: dict[AgentID, bool] = {}
        self.truncations: dict[AgentID, bool] = {}
        self.infos: dict[AgentID, Any] = {}
        self.common_infos: Any = {}
        self._new_common_infos: Any = None
        self.agent_selection: AgentID | None = None
        self._observations: dict[AgentID, Any] = {}
        self._pending: deque[AgentID] = deque()
        self._dead: deque[AgentID] = deque()
        self._buffer: dict[AgentID, Any] = {}
        self._waiting_rewards: dict[AgentID, Any] = {}
        self._gone: set[AgentID] = set()
        # Agents never observed that ended with nothing to receive: their flags, for a reward paid later.
        self._unseen_ends: dict[AgentID, tuple[bool, bool]] = {}

    def observation_space(self, agent: AgentID) -> gym.Space:
        return self._spaces.observation_space(agent)

    def action_space(self, agent: AgentID) -> gym.Space:
        return self._spaces.action_space(agent)

    def observe(self, agent: AgentID) -> Any:
        observation = self._observations.get(agent)
        if observation is None and agent not in self._observations and agent in self._possible_set:
            return self._placeholder(agent)  # joined to receive a reward, never observed
        return observation

    def observed(self, agent: AgentID) -> bool:
        """Whether the MultiAgentEnv has observed ``agent`` in this episode (else :meth:`observe`
        gives a placeholder)."""
        return agent in self._observations

    def _placeholder(self, agent: AgentID) -> Any:
        try:
            return placeholder_observation(self.observation_space(agent))
        except SpaceError:  # a space without one (Graph, Sequence): nothing to observe
            return None

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        obs, infos = self.env.reset(seed=seed, options=options)
        if not obs:
            raise EnvContractError(f"{self.env} asked no agent to act after reset()")
        self._observations = dict(obs)
        self.agents = []
        self.rewards, self._cumulative_rewards = {}, {}
        self.terminations, self.truncations, self.infos = {}, {}, {}
        self._waiting_rewards = {}
        self._gone = set()
        self._unseen_ends = {}
        self._join([*self.env.agents, *obs])
        self._take_infos(infos, obs)
        self._buffer = {}
        self._dead = deque()
        self._pending = deque(obs)
        self.agent_selection = self._pending[0]

    def step(self, action: Any) -> None:
        if not self.agents or self.agent_selection is None:
            raise ResetNeededError("step() called before reset() or after the episode ended")
        agent_id = self.agent_selection
        if self._dead:
            if action is not None:
                raise InvalidActionError(
                    agent_id, "None (the agent has ended; its dead step takes no action)", action
                )
            self._remove(self._dead.popleft())
            self._select()
            return
        mask = action_masks_of(self._observations.get(agent_id)) if self.check_legal else None
        check_action(agent_id, self.action_space(agent_id), action, mask)
        if len(self._pending) > 1:
            self._buffer[agent_id] = snapshot(action)  # as checked: the caller may reuse its array
            self._cumulative_rewards[agent_id] = 0
            self._clear_rewards()
            self._pending.popleft()
            self.agent_selection = self._pending[0]
            return
        actions = {**self._buffer, agent_id: action}
        result = self.env.step(actions)  # may raise: nothing has changed yet
        self._cumulative_rewards[agent_id] = 0
        self._buffer = {}
        self._pending.clear()
        self._apply(*result)

    def _apply(
        self,
        obs: Mapping[AgentID, Any],
        rewards: Mapping[AgentID, Any],
        terminateds: Mapping[AgentID, Any],
        truncateds: Mapping[AgentID, Any],
        infos: Mapping[AgentID, Any],
    ) -> None:
        all_terminated = bool(terminateds.get(ALL, False))
        all_truncated = bool(truncateds.get(ALL, False))
        check_not_back(self.env, self._gone, obs)
        ended = [a for a in obs if terminateds.get(a) or truncateds.get(a)]
        ended_set = set(ended)
        self._observations.update(obs)
        for agent_id in self.agents:
            self.rewards[agent_id] = 0
        # Joining agents receive what waited for them in this step's rewards (so in last() too).
        self._join([*self.env.agents, *(a for a in obs if a not in ended_set)])
        self._join([a for a in ended if a not in self.terminations])
        # An agent never observed that ends with a reward to receive gets a dead step to carry it;
        # one paid only after such an end gets it at the episode's end, with the flags it ended with.
        unseen = self._unseen_ends
        flagged = [a for table in (terminateds, truncateds) for a, flag in table.items()
                   if flag and a in self._possible_set]
        if flagged:  # most steps end no one
            self._join([a for a in flagged if a in self._waiting_rewards or rewards.get(a)])
            present = set(self.agents)
            for agent_id in flagged:
                if agent_id not in present and agent_id not in self._gone:
                    unseen[agent_id] = (bool(terminateds.get(agent_id)), bool(truncateds.get(agent_id)))
        for agent_id, reward in rewards.items():
            if agent_id in self.rewards:
                self.rewards[agent_id] += reward
            elif agent_id in self._gone:
                if not reward:  # nothing lost
                    continue
                logger.warning(
                    "%s gave agent %r a reward of %r after it left; an AEC env cannot deliver it",
                    self.env,
                    agent_id,
                    reward,
                )
            elif agent_id != ALL and reward:  # a zero is nothing to carry
                self._waiting_rewards[agent_id] = self._waiting_rewards.get(agent_id, 0) + reward
        if all_terminated or all_truncated:  # the last chance for rewards waiting for an agent to join
            self._join([a for a in self._waiting_rewards if a in self._possible_set])
        self._accumulate_rewards()
        self._take_infos(infos, obs)
        ended += [a for a in self.agents
                  if (terminateds.get(a) or truncateds.get(a) or a in unseen) and a not in ended_set]
        if all_terminated or all_truncated:
            ended += [a for a in self.agents if a not in ended_set and a not in ended]
        for agent_id in ended:
            if terminateds.get(agent_id) or truncateds.get(agent_id):
                self.terminations[agent_id] = bool(terminateds.get(agent_id, False))
                self.truncations[agent_id] = bool(truncateds.get(agent_id, False))
            elif agent_id in unseen:
                self.terminations[agent_id], self.truncations[agent_id] = unseen.pop(agent_id)
            else:
                self.terminations[agent_id] = all_terminated
                self.truncations[agent_id] = all_truncated
        gone = set(ended)
        self._dead = deque(ended)
        self._pending = deque(a for a in obs if a not in gone)
        if not self._pending and (not self._dead or any(a not in gone for a in self.agents)):
            raise EnvContractError(
                f"{self.env} asked no agent to act after a step without ending the episode "
                f"(agents: {self.agents}{f'; ending now: {ended}' if ended else ''})"
            )
        self._select()

    def _join(self, agent_ids: list[AgentID]) -> None:
        present = set(self.agents)
        for agent_id in agent_ids:
            if agent_id in present or agent_id in self._gone:
                continue
            present.add(agent_id)
            self.agents.append(agent_id)
            self.rewards[agent_id] = self._waiting_rewards.pop(agent_id, 0)
            self._cumulative_rewards[agent_id] = 0
            self.terminations[agent_id] = False
            self.truncations[agent_id] = False
            self.infos[agent_id] = {}

    def _take_infos(self, infos: Mapping[AgentID, Any], observed: Mapping[AgentID, Any]) -> None:
        """This call's infos; an agent observed now without one gets ``{}`` (not an older one)."""
        self._keep_common_infos(infos, self.infos)
        for agent_id in observed:
            if agent_id in self.infos:
                self.infos[agent_id] = {}
        for agent_id, info in infos.items():
            if agent_id in self.infos:
                self.infos[agent_id] = info

    def _remove(self, agent_id: AgentID) -> None:
        self.agents.remove(agent_id)
        self._gone.add(agent_id)
        for table in (self.rewards, self._cumulative_rewards, self.terminations, self.truncations, self.infos):
            del table[agent_id]
        self._clear_rewards()
        if not self.agents and self._waiting_rewards:
            logger.warning(
                "%s ended with rewards for agents that never joined the AEC view: %s",
                self.env,
                self._waiting_rewards,
            )

    def _select(self) -> None:
        if self._dead:
            self.agent_selection = self._dead[0]
        elif self._pending:
            self.agent_selection = self._pending[0]

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def __str__(self) -> str:
        return str(self.metadata.get("name", type(self.env).__name__))


class MultiAgentParallelEnv(_CommonInfos, ParallelEnv):
    """A MultiAgentEnv in which every live agent acts at every step, as a PettingZoo
    ``ParallelEnv`` (build it with :func:`to_parallel`).

    Semantics:
        - **Who acts:** every agent in ``agents``; when the MultiAgentEnv asks only some of its
          live agents to act (a turn-based env), ``reset`` or ``step`` raises
          :class:`~marl_core.errors.UnsupportedEnvError` naming the agents left out.
        - **Rewards** pass unchanged (0 for an acting agent the MultiAgentEnv named no reward for),
          keyed by the agents of the step, as PettingZoo requires. A reward for an agent that has
          not joined yet waits until it joins, so each agent's sum is unchanged. Only a reward
          that cannot wait is in ``rewards`` under an agent outside the step: one for an agent
          that has ended, or that ends, or whose episode ends, before it was ever observed.
          PettingZoo's ``parallel_api_test`` warns of it, and its ``parallel_to_aec`` leaves it
          out (an agent cannot first appear already ended there); :func:`to_aec` delivers it in
          a dead step.
        - **Dead agents and "__all__":** ``"__all__"`` is removed; on it, every live agent gets the
          flag; an ended agent without a final observation gets its latest one.
        - **Seeding and chance:** ``reset(seed=s)`` resets the MultiAgentEnv with ``seed=s``.
        - **Masks** pass through in the Dict observations. With ``check_legal`` (the default),
          ``step`` refuses an action that the agent's mask (or, for a grouped agent, a member's
          mask in its slot) forbids, before the MultiAgentEnv steps.
        - **Infos** are keyed by the agents of the step; ``common_infos`` holds the
          ``"__common__"`` infos of the last reset or step (``{}`` when it gave none), with the
          infos it gave agents outside the step under their ids.
          :class:`~bridges.pettingzoo.ParallelPettingZooEnv` puts them back under ``"__common__"``.
        - An env that observes an agent again after it ended breaks its contract: an
          :class:`~marl_core.errors.EnvContractError`.
    """

    def __init__(self, env: MultiAgentEnv, *, check_legal: bool = True) -> None:
        self.env = env
        self.check_legal = check_legal
        self.metadata = _metadata(env, parallelizable=True)
        self.render_mode = getattr(env, "render_mode", None)
        self.possible_agents = list(env.possible_agents)
        self._possible_set = set(self.possible_agents)
        self._spaces = _SpacesOf(env)
        self.agents: list[AgentID] = []
        self._observations: dict[AgentID, Any] = {}
        self._waiting_rewards: dict[AgentID, Any] = {}
        self._gone: set[AgentID] = set()

    def observation_space(self, agent: AgentID) -> gym.Space:
        return self._spaces.observation_space(agent)

    def action_space(self, agent: AgentID) -> gym.Space:
        return self._spaces.action_space(agent)

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[AgentID, Any], dict[AgentID, Any]]:
        self.agents = []
        obs, infos = self.env.reset(seed=seed, options=options)
        self._require_all_act(obs, set())
        self._observations = dict(obs)
        self._waiting_rewards = {}
        self._gone = set()
        self.agents = list(obs)
        return dict(obs), self._infos(infos, self.agents)

    def step(
        self, actions: Mapping[AgentID, Any]
    ) -> tuple[dict[AgentID, Any], dict[AgentID, Any], dict[AgentID, bool], dict[AgentID, bool], dict[AgentID, Any]]:
        acting = self.agents
        if not acting:
            raise ResetNeededError("step() called before reset() or after the episode ended")
        check_acting(actions, acting)
        observations = self._observations
        for agent_id in acting:
            mask = action_masks_of(observations.get(agent_id)) if self.check_legal else None
            check_action(agent_id, self.action_space(agent_id), actions[agent_id], mask)
        obs, rewards, terminateds, truncateds, infos = self.env.step(dict(actions))
        check_not_back(self.env, self._gone, obs)
        all_terminated = bool(terminateds.get(ALL, False))
        all_truncated = bool(truncateds.get(ALL, False))
        done = all_terminated or all_truncated
        terminations: dict[AgentID, bool] = {}
        truncations: dict[AgentID, bool] = {}
        ended: set[AgentID] = set()
        for agent_id in [*acting, *(a for a in obs if a not in acting)]:
            terminated = bool(terminateds.get(agent_id, False))
            truncated = bool(truncateds.get(agent_id, False))
            if done and not (terminated or truncated):
                terminated, truncated = all_terminated, all_truncated
            terminations[agent_id], truncations[agent_id] = terminated, truncated
            if terminated or truncated:
                ended.add(agent_id)
        self._require_all_act(obs, ended)
        self._observations.update(obs)
        observations = {a: self._observations.get(a) for a in terminations}
        self.agents = [a for a in terminations if a not in ended]
        self._gone |= ended
        out_rewards = self._rewards(rewards, terminations, terminateds, truncateds, done)
        return observations, out_rewards, terminations, truncations, self._infos(infos, list(terminations))

    def _rewards(
        self,
        rewards: Mapping[AgentID, Any],
        stepped: Mapping[AgentID, Any],
        terminateds: Mapping[AgentID, Any],
        truncateds: Mapping[AgentID, Any],
        done: bool,
    ) -> dict[AgentID, Any]:
        """The rewards of the agents of this step, with what waited for them. A reward for an agent
        not observed yet waits for it; one that can wait no longer goes out under its id."""
        waiting = self._waiting_rewards
        out = {a: rewards.get(a, 0) for a in stepped}
        if waiting:
            for agent_id in waiting.keys() & out.keys():
                out[agent_id] += waiting.pop(agent_id)
        if not rewards.keys() <= out.keys():
            for agent_id, reward in rewards.items():
                if agent_id in out or agent_id == ALL:
                    continue
                if agent_id in self._gone:  # it will not be in a step again
                    if reward:  # a zero would read as the dead agent being paid
                        out[agent_id] = reward
                elif reward:  # a zero is nothing to carry
                    waiting[agent_id] = waiting.get(agent_id, 0) + reward
        if waiting:  # the agent ends without ever being observed, or the episode ends
            for agent_id in [a for a in waiting if done or terminateds.get(a) or truncateds.get(a)]:
                out[agent_id] = waiting.pop(agent_id)
                self._gone.add(agent_id)
        return out

    def _require_all_act(self, obs: Mapping[AgentID, Any], ended: set[AgentID]) -> None:
        left_out = [a for a in self.env.agents if a not in obs and a not in ended]
        left_out += [a for a in self.agents if a not in obs and a not in ended and a not in left_out]
        if left_out:
            self.agents = []
            raise UnsupportedEnvError(
                f"to_parallel needs every live agent to act at every step, but {left_out} were not "
                f"asked to act (acting now: {[a for a in obs if a not in ended]}); this env takes "
                f"turns: use to_aec() instead"
            )

    def _infos(self, infos: Mapping[AgentID, Any], agents: list[AgentID]) -> dict[AgentID, Any]:
        out = {a: infos.get(a, {}) for a in agents}
        self._keep_common_infos(infos, out)
        return out

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def state(self) -> Any:
        raise NotImplementedError(f"{self.env} has no global state()")

    def __str__(self) -> str:
        return str(self.metadata.get("name", type(self.env).__name__))


def to_aec(env: MultiAgentEnv, *, check_legal: bool = True) -> AECEnv:
    """A PettingZoo ``AECEnv`` for any MultiAgentEnv.

    ``to_aec(PettingZooEnv(aec_env))`` returns ``aec_env`` itself; any other env is wrapped in a
    :class:`MultiAgentAECEnv`, which refuses masked actions unless ``check_legal`` is False.
    """
    from bridges.pettingzoo import PettingZooEnv

    if type(env) is PettingZooEnv:
        return env.env
    require_multi_agent_env(env, "to_aec", "pettingzoo-aec")
    return MultiAgentAECEnv(env, check_legal=check_legal)


def to_parallel(env: MultiAgentEnv, *, check_legal: bool = True) -> ParallelEnv:
    """A PettingZoo ``ParallelEnv`` for a MultiAgentEnv in which every live agent acts at every step.

    ``to_parallel(ParallelPettingZooEnv(parallel_env))`` returns ``parallel_env`` itself; any other
    env is wrapped in a :class:`MultiAgentParallelEnv`, whose ``reset`` and ``step`` raise
    :class:`~marl_core.errors.UnsupportedEnvError` naming the agents left out when the env takes
    turns, and whose ``step`` refuses masked actions unless ``check_legal`` is False.

    Raises:
        NotOurEnvError: ``env`` is not a marl_core MultiAgentEnv. (A turn-based env is refused
            at ``reset``, where the env first says who acts.)
    """
    from bridges.pettingzoo import ParallelPettingZooEnv

    if type(env) is ParallelPettingZooEnv:
        return env.env
    require_multi_agent_env(env, "to_parallel", "pettingzoo-parallel")
    return MultiAgentParallelEnv(env, check_legal=check_legal)

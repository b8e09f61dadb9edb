"""RLlib's ``MultiAgentEnv`` <-> ours, in both directions (needs the ``rllib`` extra).

Both APIs share one interaction model (ours follows RLlib's docs), so this bridge is mostly about
the decisions RLlib leaves open: agent ids that are not strings (RLlib's ``make_multi_agent``
uses ``0, 1, ...``), a missing ``truncateds["__all__"]``, actions checked before the env sees
them, ``step()`` after the end, and dicts copied at the boundary in both directions.

:func:`from_rllib` gives our MultiAgentEnv for any RLlib multi-agent env; :func:`to_rllib` gives
an instance of a subclass of ``ray.rllib.env.multi_agent_env.MultiAgentEnv`` that RLlib's
algorithms train on (register a creator with ``ray.tune.register_env``). They undo each other.

Example:
    >>> from bridges.rllib import from_rllib, to_rllib
    >>> from examples.tic_tac_toe import TicTacToe
    >>> rllib_env = to_rllib(TicTacToe())
    >>> from ray.rllib.env.multi_agent_env import MultiAgentEnv as RLlibMultiAgentEnv
    >>> isinstance(rllib_env, RLlibMultiAgentEnv)
    True
    >>> from ray.rllib.env.multi_agent_env import make_multi_agent
    >>> env = from_rllib(make_multi_agent("CartPole-v1")({"num_agents": 2}))
    >>> env.possible_agents
    ['agent_0', 'agent_1']
"""

from __future__ import annotations

import logging
import re
from collections.abc import Container, Hashable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from bridges.wrapping import require_multi_agent_env
from marl_core.env import (
    ALL,
    COMMON,
    AgentID,
    MultiAgentDict,
    MultiAgentEnv,
    ObsDict,
    StepResult,
    check_not_back,
    scalar_reward,
    seed_value,
)
from marl_core.errors import (
    DependencyNotInstalled,
    EnvContractError,
    NotTheirEnvError,
    ResetNeededError,
    SpaceError,
    UnknownAgentError,
    type_name,
)
from marl_core.spaces import check_action_dict

try:
    from ray.rllib.env.multi_agent_env import MultiAgentEnv as RLlibMultiAgentEnv
except ImportError as error:  # pragma: no cover - exercised only without the rllib extra
    raise DependencyNotInstalled("ray[rllib]", "rllib") from error

logger = logging.getLogger(__name__)

__all__ = ["RLlibEnv", "RLlibMultiAgentEnvAdapter", "from_rllib", "to_rllib"]

_SPECIAL = (ALL, COMMON)


def string_id(source_id: Hashable) -> AgentID:
    """Our string id for an RLlib agent id: strings stay, ``i`` (an int, numpy's too) becomes ``"agent_i"``.

    >>> string_id(3), string_id("player1")
    ('agent_3', 'player1')
    """
    if isinstance(source_id, str):
        return str(source_id)  # also turns numpy's str_ into a plain str
    if isinstance(source_id, (int, np.integer)) and not isinstance(source_id, bool):
        return f"agent_{int(source_id)}"
    return str(source_id)


def _declared_space(env: Any, kind: str, source_id: Hashable) -> gym.Space | None:
    """The ``kind`` space an RLlib env gives for ``source_id``; None when it has none."""
    try:
        return getattr(env, f"get_{kind}_space")(source_id)
    except KeyError:  # RLlib looks the id up in its space dicts
        return None


def _declared_agents(env: Any) -> list[Hashable]:
    """The agent ids an RLlib env declares: ``possible_agents``, else ``agents``, else the old API
    stack's ``_agent_ids`` set, else the keys of its per-agent ``observation_space`` and
    ``action_space`` Dicts (old API stack too).

    A list holding exactly the ``_agent_ids`` set (RLlib's constructor makes ``list(set)``) comes
    in an order that does not depend on hashing: the order of the PettingZoo env that RLlib's
    PettingZoo wrappers wrap, else sorted (numbers inside ids by value: ``piston_2`` before
    ``piston_10``).
    """
    old_ids = getattr(env, "_agent_ids", None) or ()
    for attr in ("possible_agents", "agents"):
        declared = getattr(env, attr, None)
        if declared:
            declared = list(declared)
            return _in_stable_order(env, declared) if isinstance(old_ids, set) and set(declared) == old_ids else declared
    if old_ids:
        return _in_stable_order(env, list(old_ids))
    observation_space = getattr(env, "observation_space", None)
    action_space = getattr(env, "action_space", None)
    if (isinstance(observation_space, gym.spaces.Dict) and isinstance(action_space, gym.spaces.Dict)
            and set(observation_space.spaces) == set(action_space.spaces)):  # keys that are agent ids
        return list(observation_space.spaces)
    return []


def _in_stable_order(env: Any, ids: list[Hashable]) -> list[Hashable]:
    """``ids`` (a set's members) in the wrapped PettingZoo env's order, else sorted."""
    for inner_attr in ("par_env", "env"):  # RLlib's ParallelPettingZooEnv, PettingZooEnv
        inner = getattr(getattr(env, inner_attr, None), "possible_agents", None)
        if isinstance(inner, (list, tuple)) and sorted(map(repr, inner)) == sorted(map(repr, ids)):
            return list(inner)
    return sorted(ids, key=_id_order)


def _id_order(agent: Hashable) -> tuple[Any, ...]:
    """Groups ids by type; integers by value, others by their text with numbers in it by value."""
    if isinstance(agent, (int, np.integer)) and not isinstance(agent, bool):
        return ("int", int(agent))
    parts = re.split(r"(\d+)", str(agent))
    return (type(agent).__name__, tuple(int(part) if index % 2 else part for index, part in enumerate(parts)))


class RLlibEnv(MultiAgentEnv):
    """Any RLlib multi-agent env as our MultiAgentEnv.

    Args:
        env: an instance of (a subclass of) RLlib's ``MultiAgentEnv``.

    Semantics:
        - **Agent ids:** ``possible_agents`` are the env's (or, on RLlib's old API stack, its
          ``_agent_ids``, or the keys of its per-agent Dict spaces); ids first seen later are
          appended. A list holding exactly the ``_agent_ids`` set (RLlib's constructor makes
          one with ``list(set)``, in an order that changes from process to process) comes in
          the wrapped PettingZoo env's order for RLlib's PettingZoo wrappers, else sorted, so
          every process seats the agents alike. String ids stay as they are; integer ids ``i`` become ``"agent_i"`` (as in
          :func:`marl_core.make_multi_agent`), other ids ``str(id)``. Two ids that would collide
          raise :class:`~marl_core.errors.EnvContractError`.
        - **Rewards:** every reward the env emits is passed on as a float, for any agent, acting
          or not; none is added, dropped or delayed. A reward that is not one number (a vector,
          a bool, a string) is an :class:`~marl_core.errors.EnvContractError` naming the agent,
          after which the env needs a reset.
        - **Dead agents / "__all__":** flags pass through; a missing ``truncateds["__all__"]``
          means False (RLlib's own reading) and is added; a missing ``terminateds["__all__"]``
          breaks RLlib's contract and raises :class:`~marl_core.errors.EnvContractError`.
          ``agents`` drops an agent once it is flagged done, and one observed again later in the
          episode is an :class:`~marl_core.errors.EnvContractError` (RLlib's episodes refuse it
          too); after ``"__all__"``, and after a step
          or reset that raised or returned something broken, ``step()`` raises
          :class:`~marl_core.errors.ResetNeededError` without touching the env. Final observations
          are the env's: the bridge invents none.
        - **Chance / simultaneous moves:** whoever is in the observation dict acts, as in RLlib;
          an action for anyone else, a missing one or one outside its space raises before the env
          is stepped.
        - **Seeding:** ``reset(seed=s)`` passes ``s`` to the env and seeds the bridge's
          ``np_random``; the bridge draws no random numbers of its own. An env that draws from
          global RNGs instead (the RLlib docs' TicTacToe) stays unseeded, and the conformance
          checker reports it.
        - **Masks:** observations pass unchanged, so a canonical ``"action_mask"`` stays canonical.
        - **Dicts:** every returned dict is a new one; the env's dicts are never mutated. A reserved
          key outside its dict (``"__all__"`` beyond the flags, ``"__common__"`` beyond the infos)
          is an :class:`~marl_core.errors.EnvContractError`.
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self._to_ours: dict[Hashable, AgentID] = {}
        self._to_source: dict[AgentID, Hashable] = {}
        source_agents = _declared_agents(env)
        self.possible_agents = []
        for agent in source_agents:
            self._ours(agent)
        self.agents = []
        spaces_known = bool(source_agents) and all(
            all(_declared_space(env, kind, a) is not None for kind in ("observation", "action"))
            for a in source_agents
        )
        if spaces_known:
            self.observation_spaces = {self._ours(a): env.get_observation_space(a) for a in source_agents}
            self.action_spaces = {self._ours(a): env.get_action_space(a) for a in source_agents}
        else:
            self.observation_spaces = self.action_spaces = None
        self.render_mode = getattr(env, "render_mode", None)
        self.metadata = dict(getattr(env, "metadata", None) or {"render_modes": []})
        self._acting: list[AgentID] = []
        self._gone: set[AgentID] = set()  # agents that ended this episode
        self._running = False
        super().__init__()

    # Ids ----------------------------------------------------------------------------------------

    def _ours(self, source_id: Hashable) -> AgentID:
        known = self._to_ours.get(source_id)
        if known is not None:
            return known
        ours = string_id(source_id)
        if ours in _SPECIAL:
            raise EnvContractError(f"{type(self.env).__name__} uses the reserved id {source_id!r} as an agent id")
        if ours in self._to_source and self._to_source[ours] != source_id:
            raise EnvContractError(
                f"agent ids {self._to_source[ours]!r} and {source_id!r} of {type(self.env).__name__} both map to "
                f"{ours!r}; give the env distinct string ids"
            )
        self._to_ours[source_id] = ours
        self._to_source[ours] = source_id
        self.possible_agents.append(ours)
        return ours

    def _convert(self, mapping: Mapping[Hashable, Any], what: str, special: str | None = None) -> dict[AgentID, Any]:
        """``mapping`` keyed by our ids; ``special`` is the one reserved key it may hold
        (``"__all__"`` in flags, ``"__common__"`` in infos)."""
        if not isinstance(mapping, Mapping):
            raise EnvContractError(
                f"{type(self.env).__name__} returned {type(mapping).__name__} for {what}; expected a dict keyed by agent id"
            )
        misplaced = [key for key in mapping if key in _SPECIAL and key != special]
        if misplaced:
            raise EnvContractError(
                f"{type(self.env).__name__} returned the reserved key {misplaced[0]!r} in its {what}"
                + (f"; only {special!r} belongs there" if special else "; it belongs in no such dict")
            )
        return {key if key == special else self._ours(key): value for key, value in mapping.items()}

    # Spaces -------------------------------------------------------------------------------------

    def _source_space(self, agent_id: AgentID, kind: str) -> gym.Space:
        # An id the env has not named (its old API stack may answer any id with one shared space).
        if agent_id not in self._to_source:
            raise UnknownAgentError(agent_id, self.possible_agents, what=f"agent id (no {kind} space)")
        space = _declared_space(self.env, kind, self._to_source[agent_id])
        if space is None:
            raise SpaceError(f"{type(self.env).__name__} has no {kind} space for agent {agent_id!r}")
        return space

    def get_observation_space(self, agent_id: AgentID) -> gym.Space:
        if self.observation_spaces is not None and agent_id in self.observation_spaces:
            return self.observation_spaces[agent_id]
        return self._source_space(agent_id, "observation")

    def get_action_space(self, agent_id: AgentID) -> gym.Space:
        if self.action_spaces is not None and agent_id in self.action_spaces:
            return self.action_spaces[agent_id]
        return self._source_space(agent_id, "action")

    # Episode API --------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsDict, MultiAgentDict]:
        super().reset(seed=seed)
        self.agents, self._acting, self._running = [], [], False  # until the reset has gone through
        result = self.env.reset(seed=seed_value(seed), options=options)  # no numpy ints: gymnasium refuses them
        if not (isinstance(result, tuple) and len(result) == 2):
            raise EnvContractError(
                f"{type(self.env).__name__}.reset() returned {type(result).__name__}; expected (obs, infos), two dicts"
            )
        obs = self._convert(result[0], "reset observations")
        infos = self._convert(result[1], "reset infos", COMMON)
        source_alive = list(getattr(self.env, "agents", None) or [])
        rank = {agent: index for index, agent in enumerate(self.possible_agents)}
        # In possible_agents' order: the env's list may come from a set (RLlib's old API stack).
        self.agents = sorted((self._ours(a) for a in source_alive), key=lambda a: rank.get(a, len(rank))) or list(obs)
        self.agents += [a for a in obs if a not in self.agents]
        self._acting = list(obs)
        self._gone = set()
        self._running = True
        return obs, infos

    def step(self, action_dict: Mapping[AgentID, Any]) -> StepResult:
        if not self._running:
            raise ResetNeededError(
                f"step() on {type(self.env).__name__} called before reset(), after the episode ended "
                f"('__all__' was set) or after a step or reset that failed"
            )
        check_action_dict(self, action_dict, self._acting)
        source_actions = {self._to_source.get(agent_id, agent_id): action for agent_id, action in action_dict.items()}
        agents = self.agents
        # Until the step has gone through: after an env error or a broken result, reset() is needed.
        self.agents, self._acting, self._running = [], [], False
        result = self.env.step(source_actions)
        if not (isinstance(result, tuple) and len(result) == 5):
            raise EnvContractError(
                f"{type(self.env).__name__}.step() returned {type(result).__name__}; expected five dicts "
                f"(obs, rewards, terminateds, truncateds, infos)"
            )
        obs = self._convert(result[0], "observations")
        rewards = {a: scalar_reward(a, r, type(self.env).__name__) for a, r in self._convert(result[1], "rewards").items()}
        terminateds = self._convert(result[2], "terminateds", ALL)
        truncateds = self._convert(result[3], "truncateds", ALL)
        infos = self._convert(result[4], "infos", COMMON)
        if ALL not in terminateds:
            raise _without_all(self.env, terminateds, "RLlib requires it")
        truncateds.setdefault(ALL, False)
        check_not_back(type(self.env).__name__, self._gone, obs)
        ended = {a for a in (*terminateds, *truncateds) if a not in _SPECIAL and (terminateds.get(a) or truncateds.get(a))}
        self._gone |= ended
        if not (terminateds[ALL] or truncateds[ALL]):
            self.agents = [a for a in agents if a not in ended] + [a for a in obs if a not in ended and a not in agents]
            self._acting = [a for a in obs if a not in ended]
            self._running = True
        return obs, rewards, terminateds, truncateds, infos

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None:
            close()

    def __str__(self) -> str:
        return f"<{type(self).__name__}<{type(self.env).__name__}>>"


class RLlibMultiAgentEnvAdapter(RLlibMultiAgentEnv):
    """Our MultiAgentEnv as an RLlib ``MultiAgentEnv`` (made by :func:`to_rllib`).

    Semantics:
        - Everything (rewards, dead agents, ``"__all__"``, chance, simultaneous moves, masks)
          is ours unchanged: both APIs share one model. ``terminateds`` and ``truncateds``
          always carry ``"__all__"``.
        - Spaces: ``observation_spaces`` / ``action_spaces`` list every possible agent, which
          RLlib's env runners read; masked observations stay ``Dict`` spaces.
        - An agent that terminates before the episode ends reaches RLlib at the episode's end:
          its final observation, infos and flags are held until then. Ours may still pay it
          rewards (DESIGN.md: rewards may name any agent at any step), which RLlib's episodes
          refuse for an agent they saw end ("already had its SingleAgentEpisode.is_done set to
          True"); held, it is an agent between two turns to RLlib, whose rewards add up until
          its last step. RLlib's episodes drop, by their own rule, what an agent is paid before
          its first observation.
        - An agent truncated before the episode ends reaches RLlib at once: handed over with a
          terminated episode, RLlib would take it as terminated too (it reads an agent's flags
          with the episode's), and its value would not bootstrap. A reward paid to it later
          cannot reach RLlib: an :class:`~marl_core.errors.EnvContractError` names it (rewards
          of 0 are left out, which loses nothing).
        - RLlib's episodes close an agent with an observation (they refuse to truncate one
          without it, and leave a held one open): an agent that ends without a final observation
          (truncated, held, or alive when the episode is truncated) gets its last one, which
          a truncated agent's value bootstraps from (as in our trainer).
        - Rewards: an agent observed in a step whose rewards do not name it gets a reward of 0
          there (ours may name none; RLlib's episodes refuse an observed agent without one).
        - ``agents`` after a step also lists the agents that end in it and those held (until the
          step that hands them over), as RLlib reads every id in a step's dicts as one of ``agents``.
        - Seeding: ``reset(seed=s)`` seeds the wrapped env.
        - The step's dicts are copied both ways, so neither side can add or remove the other's
          entries; the values in them (an agent's info dict, an observation array) are the
          env's own, as RLlib's env runners take them.
    """

    def __init__(self, env: MultiAgentEnv) -> None:
        super().__init__()
        self.env = env
        self.possible_agents = list(env.possible_agents)
        self.agents = list(env.agents)
        self.observation_spaces = {a: env.get_observation_space(a) for a in self.possible_agents}
        self.action_spaces = {a: env.get_action_space(a) for a in self.possible_agents}
        self.render_mode = getattr(env, "render_mode", None)
        self.metadata = dict(getattr(env, "metadata", None) or {"render_modes": []})
        self._held: dict[AgentID, dict[str, Any]] = {}  # terminated agents, handed over at the episode's end
        self._truncated: set[AgentID] = set()  # agents RLlib saw truncated before the episode's end
        self._last_obs: dict[AgentID, Any] = {}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        self._held, self._truncated, self._last_obs = {}, set(), dict(obs)
        self.agents = list(self.env.agents)
        return dict(obs), dict(infos)

    def step(self, action_dict: dict) -> tuple[dict, dict, dict, dict, dict]:
        obs, rewards, terminateds, truncateds, infos = self.env.step(dict(action_dict))
        terminateds, truncateds = dict(terminateds), dict(truncateds)
        if ALL not in terminateds:
            raise _without_all(self.env, terminateds, "the contract requires it")
        truncateds.setdefault(ALL, False)  # missing means False (DESIGN.md); RLlib needs the key
        obs, rewards, infos = dict(obs), dict(rewards), dict(infos)
        self._last_obs.update(obs)
        if self._truncated:
            self._leave_out_truncated(rewards)
        for agent_id, held in self._held.items():  # infos of held agents wait with them (RLlib drops them now)
            if agent_id in infos:
                held["info"] = {**held.get("info", {}), **infos.pop(agent_id)}
        reported = (("obs", obs), ("info", infos), ("terminated", terminateds), ("truncated", truncateds))
        if terminateds[ALL] or truncateds[ALL]:
            for agent_id, held in self._held.items():
                for key, mapping in reported:
                    if key in held:
                        mapping.setdefault(agent_id, held[key])
            # RLlib closes an agent with an observation: every agent it truncates (all of them, or
            # those truncated in this step), and (else it is left open) the held ones.
            self._fill_last_observations(obs, [a for a in self._last_obs if a not in self._truncated] if truncateds[ALL]
                                         else [*self._held, *_flagged(truncateds, self._truncated)])
            self._held, self._truncated = {}, set()
        else:
            for agent_id in [a for a in terminateds if a not in _SPECIAL and terminateds[a] and a not in self._held]:
                held = self._held[agent_id] = {}
                for key, mapping in reported:
                    if agent_id in mapping:
                        held[key] = mapping.pop(agent_id)
            truncated = _flagged(truncateds, self._held)
            self._fill_last_observations(obs, truncated)
            self._truncated.update(truncated)
        # RLlib refuses a step where an agent acted and is observed but named no reward: ours
        # may name none (DESIGN.md), which is a reward of 0.
        for agent_id in obs:
            if agent_id not in rewards:
                rewards[agent_id] = 0.0
        # RLlib reads every id in a step's dicts as one of env.agents (its env check refuses others):
        # agents that end in this step, or are held, stay listed until they are handed over.
        agents = list(self.env.agents)
        for mapping in (obs, rewards, terminateds, truncateds, infos, self._held):
            for agent_id in mapping:
                if agent_id not in _SPECIAL and agent_id not in agents:
                    agents.append(agent_id)
        self.agents = agents
        return obs, rewards, terminateds, truncateds, infos

    def _fill_last_observations(self, obs: dict[AgentID, Any], agents: list[AgentID]) -> None:
        """Give each of ``agents`` without an observation in ``obs`` its last one (when it had one)."""
        for agent_id in agents:
            if agent_id not in obs and agent_id in self._last_obs:
                obs[agent_id] = self._last_obs[agent_id]

    def _leave_out_truncated(self, rewards: dict[AgentID, Any]) -> None:
        """Leave out rewards of 0 for agents RLlib saw truncated; raise for any other."""
        for agent_id in self._truncated.intersection(rewards):
            if rewards[agent_id] != 0:
                raise EnvContractError(
                    f"{type(self.env).__name__} pays agent {agent_id!r} a reward of {rewards[agent_id]!r} after it "
                    f"was truncated; RLlib's episodes take no data for an agent after its end, so to_rllib cannot "
                    f"hand it over (an agent that terminates instead is held until the episode ends)")
            del rewards[agent_id]

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def __str__(self) -> str:
        return f"<{type(self).__name__}{self.env}>"


def _without_all(env: Any, terminateds: Mapping[Any, Any], why: str) -> EnvContractError:
    """The error for a step of ``env`` whose terminateds lack ``"__all__"`` (the checker's ``api.all-key``)."""
    error = EnvContractError(f"{type(env).__name__}.step() returned terminateds without '__all__' "
                             f"(keys: {sorted(map(str, terminateds))}); {why}")
    error.rule = "api.all-key"
    return error


def _flagged(flags: Mapping[AgentID, Any], but: Container[AgentID]) -> list[AgentID]:
    """The agents ``flags`` sets (not ``"__all__"``), but those in ``but``."""
    return [a for a, flag in flags.items() if flag and a not in _SPECIAL and a not in but]


def to_rllib(env: MultiAgentEnv) -> Any:
    """Our MultiAgentEnv as an instance of a subclass of RLlib's ``MultiAgentEnv``.

    An :class:`RLlibEnv` (made by :func:`from_rllib`) gives back the RLlib env it wraps.

    RLlib's own env check (``check_multiagent_environments``, which RLlib's env runner runs on
    the envs it builds unless the config sets ``disable_env_checking``) steps with
    ``action_space.sample()``, blind to action masks; an env that refuses masked actions (our
    bridges' default ``check_legal=True``) fails it at random. Build such an env with
    ``check_legal=False`` for that check, or disable the check.

    Raises:
        NotOurEnvError: ``env`` is not one of our MultiAgentEnvs (a SpaceError, as before, and an
            UnsupportedEnvError).
    """
    if isinstance(env, RLlibEnv):
        return env.env
    require_multi_agent_env(env, "to_rllib", "rllib")
    return RLlibMultiAgentEnvAdapter(env)


def from_rllib(env: Any) -> MultiAgentEnv:
    """Any RLlib multi-agent env as our MultiAgentEnv (see :class:`RLlibEnv`).

    An env made by :func:`to_rllib` gives back the MultiAgentEnv it wraps.

    Raises:
        NotTheirEnvError: ``env`` is not an RLlib ``MultiAgentEnv`` (an UnsupportedEnvError, and a
            SpaceError as before).
    """
    if isinstance(env, RLlibMultiAgentEnvAdapter):
        return env.env
    if not isinstance(env, RLlibMultiAgentEnv):
        raise NotTheirEnvError(
            f"from_rllib needs an instance of ray.rllib.env.multi_agent_env.MultiAgentEnv, received {type_name(env)}"
        )
    return RLlibEnv(env)

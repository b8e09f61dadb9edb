"""The multi-agent env core: :class:`MultiAgentEnv`, :class:`MultiAgentWrapper` and
:func:`make_multi_agent`.

Interaction model (RLlib's, see DESIGN.md): ``reset()`` and ``step()`` return dicts keyed by
agent id. The observation dict holds exactly the agents that must send an action to the next
``step()`` (plus agents ending in this step, with their final observation), so one API covers
simultaneous moves, turns and any irregular order. ``"__all__"`` in ``terminateds`` /
``truncateds`` ends the episode for everyone.

Example:
    >>> import gymnasium as gym
    >>> from marl_core import MultiAgentEnv
    >>> class Echo(MultiAgentEnv):
    ...     def __init__(self, config=None):
    ...         super().__init__()
    ...         self.agents = self.possible_agents = ["a", "b"]
    ...         self.observation_spaces = self.action_spaces = {
    ...             "a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(2)}
    ...     def reset(self, *, seed=None, options=None):
    ...         super().reset(seed=seed)
    ...         return {"a": 0, "b": 0}, {}
    ...     def step(self, action_dict):
    ...         obs = {"a": action_dict["b"], "b": action_dict["a"]}
    ...         return obs, {"a": 0.0, "b": 0.0}, {"__all__": True}, {"__all__": False}, {}
    >>> env = Echo()
    >>> env.reset(seed=0)
    ({'a': 0, 'b': 0}, {})
    >>> env.step({"a": 1, "b": 0})[0]
    {'a': 0, 'b': 1}
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding

from marl_core.errors import (
    ConfigError,
    EnvContractError,
    ResetNeededError,
    SeedError,
    SpaceError,
    UnknownAgentError,
)

AgentID = str
ALL = "__all__"
COMMON = "__common__"

ObsDict = dict[AgentID, Any]
MultiAgentDict = dict[AgentID, Any]
StepResult = tuple[ObsDict, MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict]

EnvT = TypeVar("EnvT", bound="MultiAgentEnv")


class MultiAgentEnv(gym.Env):
    """Base class of multi-agent envs with RLlib's semantics.

    Subclasses set ``possible_agents`` (every agent that may ever appear), ``agents`` (those alive
    now) and per-agent spaces, either as the ``observation_spaces`` / ``action_spaces`` dicts or by
    overriding :meth:`get_observation_space` / :meth:`get_action_space` (useful with many agents);
    one ``observation_space`` / ``action_space`` (RLlib's old API stack: a Dict keyed by agent ids,
    or a space every agent shares) is read as RLlib reads it.
    They implement :meth:`reset` and :meth:`step`.

    Semantics:
        - ``reset(*, seed=None, options=None) -> (obs, infos)``; calling ``super().reset(seed=seed)``
          seeds ``self.np_random``, the env's only source of randomness.
        - ``step(action_dict) -> (obs, rewards, terminateds, truncateds, infos)``.
        - Rewards may name any agent at any step; infos keys are a subset of the obs keys plus
          ``"__common__"``; an agent that terminated or truncated never appears again.
        - Action masks are a Dict observation with ``"observation"`` and ``"action_mask"``
          (int8, 1 = legal).
    """

    metadata: dict[str, Any] = {"render_modes": []}
    _rng_seed: int | None = None  # the seed of the generator np_random builds when first used

    def __init__(self) -> None:
        # Subclasses may have set these before calling super().__init__(); keep them if so.
        if not hasattr(self, "observation_spaces"):
            self.observation_spaces: dict[AgentID, gym.Space] | None = None
        if not hasattr(self, "action_spaces"):
            self.action_spaces: dict[AgentID, gym.Space] | None = None
        if not hasattr(self, "possible_agents"):
            self.possible_agents: list[AgentID] = []
        if not hasattr(self, "agents"):
            self.agents: list[AgentID] = []

    # Spaces -------------------------------------------------------------------------------

    def get_observation_space(self, agent_id: AgentID) -> gym.Space:
        """The observation space of ``agent_id``.

        From ``observation_spaces``; without it, as on RLlib's old API stack, from
        ``observation_space``: its entry for the agent when it is a ``Dict`` keyed by agent ids,
        else that one space for every agent.

        Raises:
            UnknownAgentError: ``agent_id`` has no observation space.
            SpaceError: the env defines no observation spaces at all.
        """
        return self._space_of(agent_id, self.observation_spaces, "observation")

    def get_action_space(self, agent_id: AgentID) -> gym.Space:
        """The action space of ``agent_id`` (from ``action_spaces``, else ``action_space`` as
        :meth:`get_observation_space` reads ``observation_space``).

        Raises:
            UnknownAgentError: ``agent_id`` has no action space.
            SpaceError: the env defines no action spaces at all.
        """
        return self._space_of(agent_id, self.action_spaces, "action")

    def _space_of(
        self, agent_id: AgentID, spaces: Mapping[AgentID, gym.Space] | None, kind: str
    ) -> gym.Space:
        if spaces is None:
            return self._single_space_of(agent_id, kind)
        try:
            return spaces[agent_id]
        except KeyError:
            raise UnknownAgentError(agent_id, spaces.keys(), what=f"agent id (no {kind} space)") from None

    def _single_space_of(self, agent_id: AgentID, kind: str) -> gym.Space:
        """RLlib's older form: one ``{kind}_space``, per agent (a Dict keyed by them) or shared."""
        try:
            space = getattr(self, f"{kind}_space", None)  # an attribute or a property, as RLlib reads it
        except RecursionError:  # a property built from get_{kind}_space itself
            space = None
        if not isinstance(space, gym.Space):
            raise SpaceError(
                f"{type(self).__name__} defines no {kind} spaces: set self.{kind}_spaces to a dict "
                f"keyed by agent id, or override get_{kind}_space(agent_id)"
            )
        if isinstance(space, gym.spaces.Dict):
            if agent_id in space.spaces:
                return space[agent_id]
            known = set(self.possible_agents) | set(getattr(self, "_agent_ids", None) or ())  # RLlib's old-API set
            if not known.isdisjoint(space.spaces):  # keyed by agent ids, not this one's
                raise UnknownAgentError(agent_id, space.spaces.keys(), what=f"agent id (no {kind} space)")
        return space

    @property
    def num_agents(self) -> int:
        """How many agents are alive now."""
        return len(self.agents)

    @property
    def max_num_agents(self) -> int:
        """How many agents may ever appear."""
        return len(self.possible_agents)

    # Episode API --------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsDict, MultiAgentDict]:
        """Start an episode; ``super().reset(seed=seed)`` seeds ``self.np_random``.

        Subclasses return ``(obs, infos)``; the base only seeds and returns empty dicts. The
        generator is built when first drawn from, with the same numbers as Gymnasium's, so a
        reset that draws nothing (a bridge's, say) pays nothing for it.
        """
        if seed is not None:
            self._rng_seed, self._np_random, self._np_random_seed = seed_value(seed), None, None
        return {}, {}

    @property
    def np_random(self) -> np.random.Generator:
        """The env's generator, seeded by the last ``reset(seed=...)`` (unseeded before one)."""
        if self._np_random is None:
            self._np_random, self._np_random_seed = seeding.np_random(self._rng_seed)
        return self._np_random

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self._np_random, self._np_random_seed = value, -1

    @property
    def np_random_seed(self) -> int:
        """The seed of :attr:`np_random` (-1 when a generator was assigned directly)."""
        self.np_random  # noqa: B018 (builds the generator, and its seed, if not built yet)
        return self._np_random_seed

    def step(self, action_dict: Mapping[AgentID, Any]) -> StepResult:
        """Apply one action per acting agent and return the five dicts."""
        raise NotImplementedError(f"{type(self).__name__} must implement step(action_dict)")

    def render(self) -> Any:
        """Render the env (subclasses choose how); the base renders nothing."""
        return None

    def close(self) -> None:
        """Release resources; safe to call twice."""

    # Conveniences -------------------------------------------------------------------------

    def with_agent_groups(
        self,
        groups: Mapping[str, list[AgentID]],
        obs_space: gym.Space | None = None,
        act_space: gym.Space | None = None,
    ) -> MultiAgentEnv:
        """Group agents into single agents with Tuple spaces (see :mod:`marl_core.grouping`)."""
        from marl_core.grouping import GroupAgentsWrapper

        return GroupAgentsWrapper(self, groups, obs_space, act_space)

    def __str__(self) -> str:
        return f"<{type(self).__name__}>"


class MultiAgentWrapper(MultiAgentEnv, Generic[EnvT]):
    """Base of wrappers: forwards everything to ``self.env`` unless overridden.

    ``str(wrapper)`` shows the whole stack, e.g. ``<GroupAgentsWrapper<PettingZooEnv<...>>>``.
    """

    def __init__(self, env: EnvT) -> None:
        self.env = env
        super().__init__()

    # Attributes that a wrapper does not override come from the inner env, live.
    @property  # type: ignore[override]
    def possible_agents(self) -> list[AgentID]:
        """Every agent that may appear: the inner env's, unless this wrapper sets its own."""
        return self.__dict__.get("_possible_agents", self.env.possible_agents)

    @possible_agents.setter
    def possible_agents(self, value: list[AgentID]) -> None:
        self.__dict__["_possible_agents"] = value

    @property  # type: ignore[override]
    def agents(self) -> list[AgentID]:
        """The agents alive now: the inner env's, unless this wrapper sets its own."""
        return self.__dict__.get("_agents", self.env.agents)

    @agents.setter
    def agents(self, value: list[AgentID]) -> None:
        self.__dict__["_agents"] = value

    @property  # type: ignore[override]
    def observation_spaces(self) -> dict[AgentID, gym.Space] | None:
        """The inner env's observation spaces by agent (None when it has no such dict), unless
        this wrapper sets its own."""
        return self.__dict__.get("_observation_spaces", getattr(self.env, "observation_spaces", None))

    @observation_spaces.setter
    def observation_spaces(self, value: dict[AgentID, gym.Space] | None) -> None:
        if value is not None:
            self.__dict__["_observation_spaces"] = value

    @property  # type: ignore[override]
    def action_spaces(self) -> dict[AgentID, gym.Space] | None:
        """The inner env's action spaces by agent (None when it has no such dict), unless this
        wrapper sets its own."""
        return self.__dict__.get("_action_spaces", getattr(self.env, "action_spaces", None))

    @action_spaces.setter
    def action_spaces(self, value: dict[AgentID, gym.Space] | None) -> None:
        if value is not None:
            self.__dict__["_action_spaces"] = value

    def get_observation_space(self, agent_id: AgentID) -> gym.Space:
        if "_observation_spaces" in self.__dict__:
            return super().get_observation_space(agent_id)
        return self.env.get_observation_space(agent_id)

    def get_action_space(self, agent_id: AgentID) -> gym.Space:
        if "_action_spaces" in self.__dict__:
            return super().get_action_space(agent_id)
        return self.env.get_action_space(agent_id)

    @property
    def np_random(self) -> np.random.Generator:  # type: ignore[override]
        return self.env.np_random

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self.env.np_random = value

    @property
    def np_random_seed(self) -> int:
        return self.env.np_random_seed

    @property
    def render_mode(self) -> str | None:  # type: ignore[override]
        """The inner env's render mode, unless this wrapper sets its own."""
        return self.__dict__.get("_render_mode", getattr(self.env, "render_mode", None))

    @render_mode.setter
    def render_mode(self, value: str | None) -> None:  # a wrapper that renders in its own way
        self.__dict__["_render_mode"] = value

    @property
    def metadata(self) -> dict[str, Any]:  # type: ignore[override]
        return self.__dict__.get("_metadata", getattr(self.env, "metadata", {}))

    @metadata.setter
    def metadata(self, value: dict[str, Any]) -> None:
        self.__dict__["_metadata"] = value

    @property
    def unwrapped(self) -> MultiAgentEnv:  # type: ignore[override]
        return self.env.unwrapped

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsDict, MultiAgentDict]:
        return self.env.reset(seed=seed, options=options)

    def step(self, action_dict: Mapping[AgentID, Any]) -> StepResult:
        return self.env.step(action_dict)

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def __str__(self) -> str:
        return f"<{type(self).__name__}{self.env}>"


def merge_common_infos(common: Any, extra: Mapping[AgentID, Any]) -> Any:
    """``"__common__"`` infos with ``extra`` infos (of agents outside the step) added under their
    ids. Nothing is lost: ``common`` that is not a dict goes under ``"__common__"`` in the merge."""
    if not extra:
        return common
    if common is None or (isinstance(common, Mapping) and not common):
        return dict(extra)
    if isinstance(common, Mapping):
        return {**common, **extra}
    return {COMMON: common, **extra}


def agent_id_of(index: int) -> AgentID:
    """The id of the ``index``-th copy in :func:`make_multi_agent` envs."""
    return f"agent_{index}"


def seed_value(seed: int | None) -> int | None:
    """``seed`` as a Python int (numpy's integers too, as PettingZoo takes them), or None.

    Raises:
        SeedError: a seed that is not a non-negative integer (what Gymnasium's seeding refuses),
            or a bool (which Gymnasium would take as 0 or 1: ``seed=True`` is a mistake, not a seed).
    """
    if seed is None:
        return None
    number = int(seed) if isinstance(seed, np.integer) else seed
    if not (isinstance(number, int) and number >= 0) or isinstance(number, bool):
        raise SeedError(seed)
    return number


# Reward types that float() takes as they are (bools, which it would take too, are refused).
_PLAIN_REWARDS = frozenset({float, int, np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8})


def scalar_reward(agent_id: AgentID, reward: Any, source: Any) -> float:
    """``reward`` (from ``source``, for ``agent_id``) as a float.

    Raises:
        EnvContractError: the reward is not one number: a multi-objective env's vector, a
            string or a bool (which ``float()`` would turn into one silently).
    """
    if type(reward) in _PLAIN_REWARDS:  # the common types first (stepping is hot)
        with contextlib.suppress(OverflowError):  # a Python int beyond floats: refused below
            return float(reward)
    if isinstance(reward, (bool, np.bool_)) or (isinstance(reward, np.ndarray) and reward.dtype.kind == "b"):
        raise EnvContractError(
            f"{source} gave agent {agent_id!r} a reward that is a bool ({reward!r}), not a number; return "
            f"float(...) of it (1.0 for True) if that is the reward meant"
        )
    try:
        if isinstance(reward, (str, bytes, np.complexfloating)) or (
            isinstance(reward, np.ndarray) and reward.dtype.kind not in "iuf"
        ):
            raise TypeError(type(reward).__name__)
        return float(reward)
    except (TypeError, ValueError, OverflowError):
        raise EnvContractError(
            f"{source} gave agent {agent_id!r} a reward that is not one number: {reward!r}; rewards are "
            f"floats, so a multi-objective env's reward vector must be scalarized first (mo-gymnasium's "
            f"LinearReward wrapper, say)"
        ) from None


def check_not_back(source: Any, gone: set[AgentID], obs: Mapping[AgentID, Any]) -> None:
    """Raise :class:`~marl_core.errors.EnvContractError` when ``obs`` (from ``source``) holds an
    agent of ``gone``: an agent that ended never comes back in the same episode."""
    if gone and not gone.isdisjoint(obs):
        back = [a for a in obs if a in gone]
        raise EnvContractError(f"{source} observed {back} again after they ended (an agent that terminated or "
                               "truncated never comes back in the same episode)")


def copy_seed(seed: int, index: int) -> int:
    """The seed of copy ``index`` of :func:`make_multi_agent`'s env reset with ``seed``: ``seed``
    itself for copy 0 (one copy plays as the env alone would), else 31 bits drawn from numpy's
    ``SeedSequence([seed, index])`` (``seed + index`` made copies of vectorized envs twins)."""
    if index == 0:
        return seed
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0] >> 1)


def make_multi_agent(
    env_name_or_creator: str | Callable[[dict[str, Any]], gym.Env],
) -> type[MultiAgentEnv]:
    """A MultiAgentEnv class running N independent copies of a single-agent Gymnasium env.

    As in RLlib: the returned class takes ``config`` with ``"num_agents"`` (default 1); the other
    config keys go to the creator (called as ``creator(config)``, or ``creator()`` when it takes
    no argument, which then refuses other keys rather than drop them) or to
    ``gymnasium.make(name, **kwargs)``. Agents are ``"agent_0"``, ..., ``"agent_{N-1}"``. Every
    live agent acts at every step; an agent ends when its copy terminates or truncates, the
    episode when all have ended.
    ``reset(seed=s)`` seeds copy 0 with ``s`` and copy ``i`` with ``copy_seed(s, i)``,
    drawn from both, so no copy shares a seed with copy 0 of an env seeded ``s + j`` (the envs of
    a vector are).

    Example:
        >>> from marl_core import make_multi_agent
        >>> MultiCartPole = make_multi_agent("CartPole-v1")
        >>> env = MultiCartPole({"num_agents": 2})
        >>> obs, infos = env.reset(seed=0)
        >>> sorted(obs)
        ['agent_0', 'agent_1']
    """

    takes_config = not isinstance(env_name_or_creator, str) and accepts_config(env_name_or_creator)

    def build(config: Mapping[str, Any]) -> gym.Env:
        if isinstance(env_name_or_creator, str):
            kwargs = {k: v for k, v in config.items() if k != "num_agents"}
            return gym.make(env_name_or_creator, **kwargs)
        if takes_config:
            return env_name_or_creator(dict(config))
        extra = sorted(str(key) for key in config if key != "num_agents")
        if extra:  # the creator could not receive them: dropping them would build another env
            raise ConfigError(f"config keys {extra} are set, but the creator {env_name_or_creator!r} takes no "
                              f"argument to receive them: give it a config argument, or drop them")
        return env_name_or_creator()

    class MultiEnv(MultiAgentEnv):
        """N independent copies of one single-agent env (see :func:`make_multi_agent`)."""

        def __init__(self, config: Mapping[str, Any] | None = None) -> None:
            super().__init__()
            config = dict(config or {})
            num = config.get("num_agents", 1)
            if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 1:
                raise ConfigError(f"num_agents must be an integer of 1 or more, received {num!r}")
            num = int(num)
            self.envs = [build(config) for _ in range(num)]
            self.possible_agents = [agent_id_of(i) for i in range(num)]
            self.agents = []
            self.observation_spaces = {
                a: e.observation_space for a, e in zip(self.possible_agents, self.envs, strict=True)
            }
            self.action_spaces = {a: e.action_space for a, e in zip(self.possible_agents, self.envs, strict=True)}
            self.render_mode = getattr(self.envs[0], "render_mode", None)
            self.metadata = dict(getattr(self.envs[0], "metadata", None) or {"render_modes": []})
            self._ended: set[AgentID] = set()

        def reset(
            self, *, seed: int | None = None, options: dict[str, Any] | None = None
        ) -> tuple[ObsDict, MultiAgentDict]:
            super().reset(seed=seed)
            seed = seed_value(seed)  # a Python int: Gymnasium refuses numpy's
            obs, infos = {}, {}
            for i, (agent_id, env) in enumerate(zip(self.possible_agents, self.envs, strict=True)):
                o, info = env.reset(seed=None if seed is None else copy_seed(seed, i), options=options)
                obs[agent_id], infos[agent_id] = o, info
            self.agents = list(self.possible_agents)
            self._ended = set()
            return obs, infos

        def step(self, action_dict: Mapping[AgentID, Any]) -> StepResult:
            if not self.agents:
                raise ResetNeededError("step() called before reset() or after the episode ended")
            from marl_core.spaces import check_action_dict

            check_action_dict(self, action_dict, self.agents)
            obs, rewards, terminateds, truncateds, infos = {}, {}, {}, {}, {}
            acting, self.agents = self.agents, []  # until every copy has stepped: a failed step needs a reset
            for agent_id in acting:
                env = self.envs[self.possible_agents.index(agent_id)]
                o, r, term, trunc, info = env.step(action_dict[agent_id])
                obs[agent_id], rewards[agent_id], infos[agent_id] = o, scalar_reward(agent_id, r, env), info
                terminateds[agent_id], truncateds[agent_id] = bool(term), bool(trunc)
                if term or trunc:
                    self._ended.add(agent_id)
            self.agents = [a for a in acting if a not in self._ended]
            done = not self.agents
            cut_short = any(truncateds[a] and not terminateds[a] for a in truncateds)
            terminateds[ALL] = done and not cut_short
            truncateds[ALL] = done and cut_short
            return obs, rewards, terminateds, truncateds, infos

        def render(self) -> Any:
            return self.envs[0].render()

        def close(self) -> None:
            for env in self.envs:
                env.close()

    name = env_name_or_creator if isinstance(env_name_or_creator, str) else getattr(
        env_name_or_creator, "__name__", "env"
    )
    MultiEnv.__name__ = MultiEnv.__qualname__ = f"MultiEnv_{_identifier(str(name))}"
    return MultiEnv


def _identifier(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text)


def accepts_config(factory: Callable[..., Any]) -> bool:
    """Whether ``factory`` can be called with one positional ``config`` argument."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return False
    try:
        signature.bind({})
    except TypeError:
        return False
    return True

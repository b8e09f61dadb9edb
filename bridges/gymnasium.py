"""Single-agent Gymnasium envs <-> one-agent MultiAgentEnv, in both directions.

:func:`from_gymnasium` turns any ``gymnasium.Env`` into a MultiAgentEnv with one agent;
:func:`to_gymnasium` turns a MultiAgentEnv with exactly one possible agent back into a
``gymnasium.Env`` that passes ``gymnasium.utils.env_checker.check_env``, except an env that refuses
masked actions: that checker steps with unmasked samples of the action space. Build such an env so
that it takes them (the bridges' ``check_legal=False``) to check it; an OpenSpiel game cannot take
an illegal move, so that checker cannot play one. The two undo each other.
For N independent copies of a Gymnasium env use :func:`marl_core.make_multi_agent`.

Example:
    >>> import gymnasium as gym
    >>> from bridges.gymnasium import from_gymnasium, to_gymnasium
    >>> env = from_gymnasium(gym.make("CartPole-v1"), agent_id="cart")
    >>> obs, infos = env.reset(seed=0)
    >>> list(obs), env.possible_agents
    (['cart'], ['cart'])
    >>> obs, rewards, terminateds, truncateds, infos = env.step({"cart": 1})
    >>> rewards, terminateds
    ({'cart': 1.0}, {'cart': False, '__all__': False})
    >>> single = to_gymnasium(env)
    >>> single.reset(seed=0)[0].shape
    (4,)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
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
    scalar_reward,
    seed_value,
)
from marl_core.errors import (
    EnvContractError,
    InvalidActionError,
    NotTheirEnvError,
    ResetNeededError,
    SpaceError,
    UnsupportedEnvError,
    shape_of,
    type_name,
)
from marl_core.spaces import (
    MASK_KEY,
    OBS_KEY,
    action_mask_size,
    check_action,
    check_action_dict,
    mask_from_info,
    masked_space,
)

logger = logging.getLogger(__name__)

__all__ = ["GymnasiumEnv", "SingleAgentEnv", "from_gymnasium", "to_gymnasium"]


class GymnasiumEnv(MultiAgentEnv):
    """A single-agent ``gymnasium.Env`` as a MultiAgentEnv with the one agent ``agent_id``.

    Args:
        env: the Gymnasium env (any wrapper stack).
        agent_id: the id of its one agent.
        mask_info_key: when the env publishes an action mask in ``info`` (Taxi's
            ``info["action_mask"]``), the key it uses; the mask then moves into the observation
            in the canonical ``{"observation", "action_mask"}`` form. None: no mask. It needs a
            Discrete or MultiDiscrete action space (a MultiDiscrete mask is flat, its dimensions'
            masks one after another; Gymnasium's tuple of one array per dimension is taken too).
        check_legal: with a mask, raise :class:`~marl_core.errors.IllegalActionError` for an
            action the mask forbids (default); with False it reaches the env.

    Semantics:
        - **Rewards:** the env's reward, as a float, for ``agent_id`` at every step; nothing is
          added or dropped. A reward that is not one number (a multi-objective env's vector) is
          an :class:`~marl_core.errors.EnvContractError`, after which the env needs a reset.
        - **Dead agents / "__all__":** the agent ends when the env terminates or truncates, and
          so does the episode: ``terminateds["__all__"]`` and ``truncateds["__all__"]`` copy the
          env's two flags. The final observation is the env's. ``step()`` after that raises
          :class:`~marl_core.errors.ResetNeededError` (the env is not stepped).
        - **Chance / simultaneous moves:** none beyond the env's own; the one agent acts at
          every step.
        - **Seeding:** ``reset(seed=s)`` seeds the env with ``s``, so seeded episodes repeat
          exactly when the env's do; the bridge draws no random numbers of its own, and its
          ``np_random`` is seeded with ``s`` too.
        - **Masks:** only with ``mask_info_key``: the mask moves from ``info`` into the
          observation (int8, 1 = legal) and stays in ``info`` too; a mask that is not one 0/1
          entry per action, or a missing one while the episode goes on, is an
          :class:`~marl_core.errors.EnvContractError` (the final step may leave it out: its
          observation then has an all-zero mask, as no action follows).
        - **Errors:** an action outside the action space, masked out (with ``check_legal``), for
          another agent, or missing raises a :class:`~marl_core.errors.MultiAgentEnvError` before
          the env is stepped.
    """

    def __init__(
        self, env: gym.Env, agent_id: AgentID = "agent_0", *, mask_info_key: str | None = None, check_legal: bool = True
    ) -> None:
        if not isinstance(env, gym.Env):
            hint = f" (build it first: gymnasium.make({env!r}))" if isinstance(env, str) else ""
            raise NotTheirEnvError(f"from_gymnasium needs a gymnasium.Env, received {type_name(env)}{hint}")
        _refuse_multi_agent(env)
        for kind in ("observation_space", "action_space"):
            if not isinstance(getattr(env, kind, None), gym.spaces.Space):
                raise SpaceError(f"from_gymnasium needs the {kind} (a gymnasium Space) of {env}, received "
                                 f"{getattr(env, kind, None)!r}")
        if not isinstance(agent_id, str) or agent_id in (ALL, COMMON):
            raise SpaceError(f"agent_id must be a string other than '__all__' and '__common__', received {agent_id!r}")
        self.env = env
        self.agent_id = agent_id
        self.mask_info_key = mask_info_key
        self.check_legal = check_legal
        self._mask: np.ndarray | None = None
        self.possible_agents = [agent_id]
        self.agents = []
        observation_space = env.observation_space
        self._mask_size = action_mask_size(env.action_space)
        if mask_info_key is not None:
            if self._mask_size is None:
                raise SpaceError(
                    f"mask_info_key={mask_info_key!r} needs a Discrete or MultiDiscrete action space for agent "
                    f"{agent_id!r}, received {env.action_space}"
                )
            observation_space = masked_space(env.observation_space, self._mask_size)
        self.observation_spaces = {agent_id: observation_space}
        self.action_spaces = {agent_id: env.action_space}
        self.render_mode = getattr(env, "render_mode", None)
        self.metadata = dict(getattr(env, "metadata", {}) or {})
        super().__init__()

    def _observation(self, observation: Any, info: Mapping[str, Any], final: bool = False) -> Any:
        if self.mask_info_key is None:
            return observation
        if final and self.mask_info_key not in info:  # nothing is left to act on: the step's reward still arrives
            self._mask = np.zeros(self._mask_size, dtype=np.int8)
            return {OBS_KEY: observation, MASK_KEY: self._mask.copy()}
        if self.mask_info_key not in info:
            raise EnvContractError(
                f"agent {self.agent_id!r}: expected an action mask under info[{self.mask_info_key!r}], "
                f"received info keys {sorted(map(str, info))}"
            )
        mask = self._mask = mask_from_info(self.agent_id, info[self.mask_info_key], self.env.action_space)
        return {OBS_KEY: observation, MASK_KEY: mask.copy()}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsDict, MultiAgentDict]:
        seed = seed_value(seed)  # refused before anything is seeded; numpy ints become Python ints
        super().reset(seed=seed)
        self.agents = []  # until the env's reset has gone through
        result = self.env.reset(seed=seed, options=options)
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], Mapping)):
            raise EnvContractError(f"{self.env}.reset() returned {shape_of(result)}; expected (observation, info) "
                                   "with info a dict, as Gymnasium's API has it since 0.26")
        observation, info = result
        observation = self._observation(observation, info)
        self.agents = [self.agent_id]
        return {self.agent_id: observation}, {self.agent_id: dict(info)}

    def step(self, action_dict: Mapping[AgentID, Any]) -> StepResult:
        if not self.agents:
            raise ResetNeededError(
                f"step() for agent {self.agent_id!r} called before reset() or after the episode ended"
            )
        check_action_dict(self, action_dict, self.agents)
        if self._mask is not None and self.check_legal:
            check_action(self.agent_id, self.env.action_space, action_dict[self.agent_id], self._mask)
        agent_id = self.agent_id
        self.agents = []  # until the step has gone through: a failed one needs a reset
        try:
            result = self.env.step(action_dict[agent_id])
        except InvalidActionError:  # our own bridge underneath refused it before stepping: the episode goes on
            self.agents = [agent_id]
            raise
        if not (isinstance(result, tuple) and len(result) == 5 and isinstance(result[4], Mapping)):
            raise EnvContractError(f"{self.env}.step() returned {shape_of(result)}; expected (observation, reward, "
                                   "terminated, truncated, info) with info a dict, as Gymnasium's API has it since 0.26")
        observation, reward, terminated, truncated, info = result
        reward = scalar_reward(agent_id, reward, self.env)
        terminated, truncated = bool(terminated), bool(truncated)
        observation = self._observation(observation, info, final=terminated or truncated)
        if not (terminated or truncated):
            self.agents = [agent_id]
        return (
            {agent_id: observation},
            {agent_id: reward},
            {agent_id: terminated, ALL: terminated},
            {agent_id: truncated, ALL: truncated},
            {agent_id: dict(info)},
        )

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def __str__(self) -> str:
        return f"<{type(self).__name__}{self.env}>"


def _refuse_multi_agent(env: gym.Env) -> None:
    """Raise :class:`UnsupportedEnvError` when ``env`` (or what its gymnasium wrappers wrap) is a
    multi-agent env: ours, or RLlib's (a ``gymnasium.Env`` too, which ``gym.make`` may wrap)."""
    from bridges.wrapping import bridge_name

    inner = getattr(env, "unwrapped", env)
    kind = bridge_name(inner)
    # A wrapper that gives itself one agent's spaces (one side against a fixed opponent, say) is a
    # single-agent env; one that passes the multi-agent env's own through (gym.make's) is not.
    passes_through = inner is env or all(
        getattr(env, name, None) is getattr(inner, name, None) for name in ("observation_space", "action_space"))
    if kind in ("marl_core", "rllib") and passes_through:
        name = f"{type(inner).__module__}.{type(inner).__qualname__}"
        where = f"{env} wraps {name}," if inner is not env else f"{name} is"
        use = "use it as it is" if kind == "marl_core" else "bridge it with from_rllib"
        raise UnsupportedEnvError(
            f"from_gymnasium takes a single-agent env, but {where} a multi-agent env ({kind}): {use}"
            + (" on env.unwrapped (gymnasium wrappers do not apply to multi-agent envs)" if inner is not env else "")
        )
    # RLlib's old style: a gymnasium.Env with possible_agents whose spaces are Dicts keyed by them.
    agents = getattr(inner, "possible_agents", None)
    keyed = [getattr(env, name, None) for name in ("observation_space", "action_space")]
    if passes_through and isinstance(agents, (list, tuple)) and agents and any(
        isinstance(space, gym.spaces.Dict) and set(agents) <= set(space.spaces) for space in keyed
    ):
        raise UnsupportedEnvError(
            f"from_gymnasium takes a single-agent env, but {type(inner).__qualname__} is a gymnasium.Env with "
            f"possible_agents {list(agents)[:12]!r} and spaces keyed by them: a multi-agent env; subclass "
            "marl_core.MultiAgentEnv and set observation_spaces and action_spaces (dicts keyed by agent id), or "
            "define get_observation_space(agent_id) and get_action_space(agent_id)"
        )


class SingleAgentEnv(gym.Env):
    """A MultiAgentEnv with exactly one possible agent as a ``gymnasium.Env``.

    Args:
        env: the MultiAgentEnv; its ``possible_agents`` must hold exactly one agent.

    Semantics:
        - **Rewards:** the reward the env names for its agent at a step (0.0 when it names none
          at that step). Observations, rewards or infos for any other id (infos under
          ``"__common__"`` aside) are an :class:`~marl_core.errors.EnvContractError`, never dropped.
        - **Dead agents / "__all__":** ``terminated`` is the agent's flag or
          ``terminateds["__all__"]``; ``truncated`` is the agent's truncation or
          ``truncateds["__all__"]``; both may be True, as in Gymnasium. If the episode ends without a final
          observation for the agent, the previous observation is returned and
          ``info["final_observation_missing"]`` is True.
        - **Chance / simultaneous moves:** none; the one agent must be in every observation dict
          until the episode ends (otherwise :class:`~marl_core.errors.EnvContractError`).
        - **Seeding:** ``reset(seed=s)`` seeds the wrapped env and this env's ``np_random``.
        - **Masks:** a masked observation stays a ``Dict`` with ``"observation"`` and
          ``"action_mask"``; ``"__common__"`` infos appear under ``info["__common__"]``.
        - **Errors:** an action outside the action space raises
          :class:`~marl_core.errors.InvalidActionError` before the env is stepped; one the env
          refuses itself (a masked action) leaves the episode going, as the env left it.
        - **Round trip:** over a :class:`GymnasiumEnv` (``to_gymnasium(from_gymnasium(e,
          agent_id))``), ``spec`` is ``e``'s, and ``get_wrapper_attr`` / ``has_wrapper_attr`` /
          ``set_wrapper_attr`` reach ``e``'s attributes that this env lacks, as Gymnasium's wrappers do.
    """

    def __init__(self, env: MultiAgentEnv) -> None:
        agents = list(getattr(env, "possible_agents", []) or [])
        if len(agents) != 1:
            raise SpaceError(
                f"to_gymnasium needs a MultiAgentEnv with exactly one possible agent, received "
                f"{len(agents)}: {agents[:12]!r}; use a multi-agent API (to_rllib, to_parallel) instead"
            )
        self.env = env
        self.agent_id: AgentID = agents[0]
        self.observation_space = env.get_observation_space(self.agent_id)
        self.action_space = env.get_action_space(self.agent_id)
        self.render_mode = getattr(env, "render_mode", None)
        self.metadata = dict(getattr(env, "metadata", {}) or {"render_modes": []})
        self._gym_env = env.env if isinstance(env, GymnasiumEnv) else None
        if self._gym_env is not None:
            self.spec = self._gym_env.spec
        self._last_observation: Any = None
        self._running = False

    def get_wrapper_attr(self, name: str) -> Any:
        """``name`` of this env, or else of the Gymnasium env under a :class:`GymnasiumEnv` it wraps."""
        if self._gym_env is None or hasattr(self, name):
            return getattr(self, name)
        return self._gym_env.get_wrapper_attr(name)

    def has_wrapper_attr(self, name: str) -> bool:
        """Whether :meth:`get_wrapper_attr` finds ``name``."""
        return hasattr(self, name) or (self._gym_env is not None and self._gym_env.has_wrapper_attr(name))

    def set_wrapper_attr(self, name: str, value: Any, *, force: bool = True) -> bool:
        """Set ``name`` where :meth:`get_wrapper_attr` finds it: on this env, or else on the Gymnasium
        env under a :class:`GymnasiumEnv` it wraps if that has it; on this env with ``force``."""
        if self._gym_env is None or hasattr(self, name):
            return super().set_wrapper_attr(name, value, force=force)
        if self._gym_env.set_wrapper_attr(name, value, force=False):
            return True
        return super().set_wrapper_attr(name, value, force=force)

    def _unexpected(self, mapping: Mapping[Any, Any], what: str, also: tuple[str, ...] = ()) -> None:
        others = [key for key in mapping if key != self.agent_id and key not in also]
        if others:
            raise EnvContractError(
                f"{what} for agents {others!r} from a one-agent env whose only agent is {self.agent_id!r}"
            )

    def _info(self, infos: Mapping[Any, Any]) -> dict[str, Any]:
        info = dict(infos.get(self.agent_id, {}) or {})
        if COMMON in infos:
            info[COMMON] = infos[COMMON]
        return info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        seed = seed_value(seed)  # a bad seed is refused before anything is seeded; numpy ints are taken
        super().reset(seed=seed)
        obs, infos = self.env.reset(seed=seed, options=options)
        self._unexpected(obs, "observations")
        self._unexpected(infos, "infos", also=(COMMON,))
        if self.agent_id not in obs:
            raise EnvContractError(
                f"reset() returned no observation for agent {self.agent_id!r} (observations for: {sorted(obs)})"
            )
        self._last_observation = obs[self.agent_id]
        self._running = True
        return self._last_observation, self._info(infos)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if not self._running:
            raise ResetNeededError(
                f"step() for agent {self.agent_id!r} called before reset() or after the episode ended"
            )
        check_action(self.agent_id, self.action_space, action)
        self._running = False  # until the step has gone through: a failed one needs a reset
        try:
            obs, rewards, terminateds, truncateds, infos = self.env.step({self.agent_id: action})
        except InvalidActionError:  # refused before it stepped (a masked action): the episode goes on
            self._running = True
            raise
        self._unexpected(obs, "observations")
        self._unexpected(rewards, "rewards")
        self._unexpected(infos, "infos", also=(COMMON,))
        terminated = bool(terminateds.get(self.agent_id, False) or terminateds.get(ALL, False))
        truncated = bool(truncateds.get(self.agent_id, False) or truncateds.get(ALL, False))
        info = self._info(infos)
        if self.agent_id in obs:
            self._last_observation = obs[self.agent_id]
        elif terminated or truncated:
            info["final_observation_missing"] = True
            logger.debug("agent %r ended without a final observation; repeating the last one", self.agent_id)
        else:
            raise EnvContractError(
                f"step() returned no observation for agent {self.agent_id!r} although the episode goes on "
                f"(observations for: {sorted(obs)})"
            )
        reward = scalar_reward(self.agent_id, rewards.get(self.agent_id, 0.0), self.env)
        self._running = not (terminated or truncated)
        return self._last_observation, reward, terminated, truncated, info

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def __str__(self) -> str:
        return f"<{type(self).__name__}{self.env}>"


def from_gymnasium(
    env: gym.Env, agent_id: AgentID | None = None, *, mask_info_key: str | None = None, check_legal: bool = True
) -> MultiAgentEnv:
    """A single-agent ``gymnasium.Env`` as a one-agent MultiAgentEnv (see :class:`GymnasiumEnv`;
    ``agent_id`` defaults to ``"agent_0"``).

    A :class:`SingleAgentEnv` (made by :func:`to_gymnasium`) is unwrapped instead, so the two
    functions undo each other, unless ``agent_id`` names another agent than its own or a mask
    is asked for.

    Raises:
        NotTheirEnvError: ``env`` is not a ``gymnasium.Env`` (an UnsupportedEnvError, and a
            SpaceError as before).
        SpaceError: ``env`` has no gymnasium spaces.
        UnsupportedEnvError: ``env`` is a multi-agent env (ours, or RLlib's, inside gymnasium
            wrappers or not; or a ``gymnasium.Env`` with ``possible_agents`` and spaces that are
            Dicts keyed by them); the message names its bridge or says what it needs.
    """
    if isinstance(env, SingleAgentEnv) and mask_info_key is None and agent_id in (None, env.agent_id):
        return env.env
    return GymnasiumEnv(env, "agent_0" if agent_id is None else agent_id, mask_info_key=mask_info_key,
                        check_legal=check_legal)


def to_gymnasium(env: MultiAgentEnv) -> gym.Env:
    """A one-agent MultiAgentEnv as a ``gymnasium.Env`` (see :class:`SingleAgentEnv`).

    A :class:`GymnasiumEnv` made by :func:`from_gymnasium` with its defaults (agent ``"agent_0"``,
    no mask) is unwrapped instead; any other keeps its agent id through ``from_gymnasium`` of the
    result, so the two functions undo each other.

    Raises:
        NotOurEnvError: ``env`` is not one of our MultiAgentEnvs (a SpaceError, as before, and an
            UnsupportedEnvError).
        SpaceError: it has more or fewer than one possible agent.
    """
    if isinstance(env, GymnasiumEnv) and env.mask_info_key is None and env.agent_id == "agent_0":
        return env.env
    require_multi_agent_env(env, "to_gymnasium", "gymnasium")
    return SingleAgentEnv(env)

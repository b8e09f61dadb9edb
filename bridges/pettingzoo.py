"""PettingZoo <-> MultiAgentEnv, in both directions.

- :class:`PettingZooEnv` turns a PettingZoo ``AECEnv`` (agents act one at a time) into a
  MultiAgentEnv whose observation dict holds the one agent in ``agent_selection``.
- :class:`ParallelPettingZooEnv` turns a PettingZoo ``ParallelEnv`` (every live agent acts at
  every step) into a MultiAgentEnv.
- :func:`to_aec` and :func:`to_parallel` go back (see :mod:`bridges.pettingzoo_export`); they undo
  the two classes above, so ``to_aec(PettingZooEnv(env)) is env``.

Masks have one form on our side: a ``Dict`` observation with ``"observation"`` and
``"action_mask"``. Envs that already observe that way (every classic game) pass through
untouched; a mask that an env puts in ``info["action_mask"]`` moves into the observation.

Example:
    >>> from pettingzoo.classic.tictactoe import tictactoe
    >>> from bridges.pettingzoo import PettingZooEnv
    >>> env = PettingZooEnv(tictactoe.env())
    >>> obs, infos = env.reset(seed=0)
    >>> list(obs), obs["player_1"]["action_mask"].tolist()
    (['player_1'], [1, 1, 1, 1, 1, 1, 1, 1, 1])
    >>> obs, rewards, terminateds, truncateds, infos = env.step({"player_1": 4})
    >>> list(obs), terminateds["__all__"]
    (['player_2'], False)
    >>> env.step({"player_2": 4})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    marl_core.errors.IllegalActionError: illegal action for agent 'player_2': received 4, legal actions now: [0, 1, 2, 3, 5, 6, 7, 8] (...)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from bridges.pettingzoo_checks import ActionChecker, Bounds, admitter
from marl_core.env import (
    ALL,
    COMMON,
    AgentID,
    MultiAgentDict,
    MultiAgentEnv,
    ObsDict,
    StepResult,
    merge_common_infos,
)
from marl_core.errors import (
    EnvContractError,
    ResetNeededError,
    UnknownAgentError,
    UnsupportedEnvError,
    type_name,
)
from marl_core.spaces import (
    MASK_KEY,
    OBS_KEY,
    action_mask_of,
    action_mask_size,
    check_acting,
    is_masked,
    mask_from_info,
    masked_space,
)

if TYPE_CHECKING:
    from pettingzoo.utils.env import AECEnv, ParallelEnv

logger = logging.getLogger(__name__)

__all__ = ["ParallelPettingZooEnv", "PettingZooEnv", "to_aec", "to_parallel"]

_MISSING = object()


def _reads_actions_only(env: Any) -> bool:
    """True for PettingZoo's ``aec_to_parallel_wrapper`` (behind every butterfly, MPE and SISL
    ``parallel_env()``), whose ``step`` only reads ``actions[agent]``: it needs no copy.
    """
    from pettingzoo.utils.conversions import aec_to_parallel_wrapper

    return type(env) is aec_to_parallel_wrapper


def _masked_info_agents(
    possible: Iterable[AgentID], obs_space_of: Any, act_space_of: Any
) -> dict[AgentID, gym.Space]:
    """Agents whose mask must move from info into the observation, with their action spaces."""
    masked = {}
    for agent_id in possible:
        space = act_space_of(agent_id)
        if _mask_moves(space, obs_space_of(agent_id)):
            masked[agent_id] = space
    return masked


def _mask_moves(action_space: gym.Space, observation_space: gym.Space) -> bool:
    """Whether an agent's mask in info moves into its observation: its action space takes one,
    and its observation holds none."""
    return action_mask_size(action_space) is not None and not is_masked(observation_space)


def _with_mask(
    agent_id: AgentID, observation: Any, info: Any, action_space: gym.Space
) -> tuple[dict[str, Any], Any]:
    """The canonical masked observation and the info without its ``"action_mask"`` (a new dict).

    An info that carries no mask means that every action is legal; one that is not a 0/1 entry
    per action is an :class:`EnvContractError`.
    """
    if isinstance(info, Mapping) and MASK_KEY in info:
        mask = mask_from_info(agent_id, info[MASK_KEY], action_space)
        info = {key: value for key, value in info.items() if key != MASK_KEY}
    else:
        mask = np.ones(action_mask_size(action_space), dtype=np.int8)
    return {OBS_KEY: observation, MASK_KEY: mask}, info


def _end_flags(done: bool, terminateds: Mapping[AgentID, Any], truncateds: Mapping[AgentID, Any]) -> tuple[bool, bool]:
    """The ``"__all__"`` flags: the episode is truncated when an agent ending now was cut short."""
    if not done:
        return False, False
    for agent_id, flag in truncateds.items():
        if flag and not terminateds.get(agent_id, False):
            return False, True
    return True, False


def _check_kind(env: Any, wanted: str) -> None:
    """Raise unless ``env`` is a PettingZoo env of the ``wanted`` API ("AEC" or "parallel"),
    by class or, for an env that subclasses neither, by the methods that API calls."""
    from pettingzoo.utils.env import AECEnv, ParallelEnv

    bridge, other, other_bridge = (
        ("PettingZooEnv", "parallel", "ParallelPettingZooEnv") if wanted == "AEC"
        else ("ParallelPettingZooEnv", "AEC", "PettingZooEnv")
    )
    kind = "AEC" if isinstance(env, AECEnv) else "parallel" if isinstance(env, ParallelEnv) else None
    received = type_name(env)
    if kind == other:
        raise UnsupportedEnvError(
            f"{bridge} takes a PettingZoo {wanted} env, received the {other} env {received}; "
            f"wrap it with {other_bridge} instead"
        )
    needs = ("reset", "step", "observation_space", "action_space") + (("observe",) if wanted == "AEC" else ())
    missing = [name for name in needs if not callable(getattr(env, name, None))]
    if kind is None and (missing or isinstance(env, type)):  # a class has the methods, unbound
        raise UnsupportedEnvError(
            f"{bridge} takes a PettingZoo {wanted} env, received {received}"
            + (f", which has no {', '.join(missing)}" if missing else "")
        )


class _PettingZooBase(MultiAgentEnv):
    """What both PettingZoo bridges share: spaces, masks from info, render and seeding."""

    _API = "AEC"

    def __init__(self, env: Any, *, check_legal: bool, mask_in_info: bool | None) -> None:
        _check_kind(env, self._API)
        self.env = env
        self._running = False
        # A MultiAgentEnv exported with to_aec or to_parallel: it keeps its "__common__" infos aside,
        # and tells which agents it never observed.
        base = getattr(env, "unwrapped", env)
        self._export = base if callable(getattr(base, "take_common_infos", None)) else None
        self._observed = getattr(self._export, "observed", None)  # to_aec's (to_parallel has none)
        super().__init__()
        self.metadata = dict(getattr(env, "metadata", {}) or {})
        possible = getattr(env, "possible_agents", None)
        detected = mask_in_info is None
        if detected:
            mask_in_info = self._detect_info_masks()
            possible = possible if possible is not None else list(env.agents)
        elif possible is None:
            self._reset_env(seed=None, options=None)
            possible = list(env.agents)
        self.possible_agents = list(possible)
        self._possible = frozenset(self.possible_agents)
        self._info_masks: dict[AgentID, gym.Space | None] = (  # None: an agent whose mask does not move
            _masked_info_agents(self.possible_agents, env.observation_space, env.action_space)
            if mask_in_info
            else {}
        )
        self.observation_spaces = {a: self._observation_space(a) for a in self.possible_agents}
        self.action_spaces = {a: env.action_space(a) for a in self.possible_agents}
        self._check = ActionChecker(self.get_action_space, check_legal)
        # Found no mask in the infos of reset: watch the infos of the first episode for one, to say so.
        self._watch_info_masks = detected and not mask_in_info and bool(
            _masked_info_agents(self.possible_agents, env.observation_space, env.action_space)
        )

    def _with_common_infos(self, infos: MultiAgentDict) -> MultiAgentDict:
        """``infos`` with the exported MultiAgentEnv's new ``"__common__"`` infos, in a new dict."""
        common = self._export.take_common_infos()  # type: ignore[union-attr]
        if common is None:
            return infos
        kept = infos.get(COMMON)  # infos of agents that ended without a final observation
        return {**infos, COMMON: merge_common_infos(common, kept) if isinstance(kept, Mapping) else common}

    def _late_info_mask(self, infos: Mapping[AgentID, Any]) -> None:
        """Warn (once) when ``infos`` holds a mask that the spaces, fixed without one, leave unchecked."""
        masked = [a for a, info in infos.items() if isinstance(info, Mapping) and MASK_KEY in info]
        if masked:
            self._watch_info_masks = False
            logger.warning(
                "%s put action masks in info for %s, but not in the infos of reset(), where %s looked "
                "for them: the observation spaces have no mask and masked actions reach the env "
                "unchecked. Pass mask_in_info=True to move the masks into the observations.",
                self.env, masked, type(self).__name__,
            )

    def _reset_env(
        self, seed: int | None, options: dict[str, Any] | None
    ) -> tuple[Mapping[AgentID, Any] | None, Mapping[AgentID, Any]]:
        """Reset the wrapped env; return its observations (None for AEC envs) and infos."""
        raise NotImplementedError

    def _detect_info_masks(self) -> bool:
        _, infos = self._reset_env(seed=None, options=None)
        return any(isinstance(info, Mapping) and MASK_KEY in info for info in infos.values())

    def _info_mask_space(self, agent_id: AgentID) -> gym.Space | None:
        """The action space of ``agent_id`` when its mask moves from info (None: it does not). An
        agent outside ``possible_agents`` (generated during an episode) of an env with info masks
        is looked at when first seen, so that its observations take the same form."""
        if agent_id in self._info_masks or not self._info_masks or agent_id in self._possible:
            return self._info_masks.get(agent_id)
        try:
            action_space = self.env.action_space(agent_id)
            observation_space = self.env.observation_space(agent_id)
        except Exception:  # the env's own lookup (KeyError, ...): no space yet, no mask to move now
            return None
        moves = _mask_moves(action_space, observation_space)
        self._info_masks[agent_id] = action_space if moves else None  # None: looked at, none to move
        return self._info_masks[agent_id]

    def _observation_space(self, agent_id: AgentID) -> gym.Space:
        space = self.env.observation_space(agent_id)
        action_space = self._info_mask_space(agent_id)
        return space if action_space is None else masked_space(space, action_mask_size(action_space))

    def get_observation_space(self, agent_id: AgentID) -> gym.Space:
        """The observation space of ``agent_id`` (masked when its mask comes from info).

        Raises:
            UnknownAgentError: the env has no observation space for ``agent_id``.
        """
        space = self.observation_spaces.get(agent_id)
        if space is None:  # an agent outside possible_agents (generated during the episode)
            space = self._space_of_new(agent_id, self.observation_spaces, self._observation_space, "observation")
        return space

    def get_action_space(self, agent_id: AgentID) -> gym.Space:
        """The action space of ``agent_id``, as the wrapped env defines it.

        Raises:
            UnknownAgentError: the env has no action space for ``agent_id``.
        """
        space = self.action_spaces.get(agent_id)
        if space is None:
            space = self._space_of_new(agent_id, self.action_spaces, self.env.action_space, "action")
        return space

    def _space_of_new(
        self, agent_id: AgentID, spaces: dict[AgentID, gym.Space], read: Callable[[AgentID], gym.Space], kind: str
    ) -> gym.Space:
        """The space of an agent outside ``possible_agents``, read from the env; kept once the
        agent is in the env's ``agents`` (a misspelled id that the env answers for is not)."""
        try:
            space = read(agent_id)
        except Exception as error:  # the env's own lookup: KeyError, ValueError, ...
            raise UnknownAgentError(agent_id, spaces.keys(), what=f"agent id (no {kind} space)") from error
        if agent_id in getattr(self.env, "agents", ()):  # PettingZoo has no agents before reset
            spaces[agent_id] = space
        return space

    @property  # type: ignore[override]
    def agents(self) -> list[AgentID]:
        """The agents alive now (empty before ``reset`` and after the end)."""
        return list(self.env.agents) if self._running else []

    @agents.setter
    def agents(self, value: list[AgentID]) -> None:
        """Ignored: the wrapped env owns its agents (kept for ``MultiAgentEnv.__init__``)."""

    @property  # type: ignore[override]
    def render_mode(self) -> str | None:
        """The wrapped env's render mode."""
        return getattr(self.env, "render_mode", None)

    def render(self) -> Any:
        """Render the wrapped env in its own ``render_mode``."""
        return self.env.render()

    def close(self) -> None:
        """Close the wrapped env."""
        self.env.close()

    def __str__(self) -> str:
        return f"<{type(self).__name__}<{self.env}>>"


class PettingZooEnv(_PettingZooBase):
    """A PettingZoo ``AECEnv`` as a MultiAgentEnv.

    Args:
        env: the AEC env (any wrappers included); available as ``.env``.
        check_legal: raise :class:`~marl_core.errors.IllegalActionError` for an action that the
            agent's action mask forbids (default). With False such actions reach the env, which
            decides what they mean (the classic games end the game with a penalty).
        mask_in_info: whether the env puts action masks in ``info["action_mask"]``. None (default)
            finds out by resetting the env once at construction (and warns if a mask shows up in
            info in the first episode, unchecked); True or False skips that reset.

    Semantics:
        - **Who acts:** the observation dict holds ``agent_selection``, the one agent that must act.
          An agent that ended (terminated or truncated) appears once more with its final
          observation, at the point where PettingZoo gives it its last turn; the bridge then makes
          the dead step (``step(None)``) itself. Flattening the observation dicts of an episode
          gives exactly the ``(agent, observation)`` sequence of PettingZoo's
          ``for agent in env.agent_iter(): env.last()`` loop, but for a dead step whose
          observation is None (or, around :func:`to_aec`, a placeholder for an agent the
          MultiAgentEnv never observed): that agent has no final observation, so only its flags
          (and rewards) say it ended, and its info, if any, goes under ``"__common__"``. An
          agent already ended at reset (PettingZoo's first turn is its dead step) acts in no
          step: it is not in reset's dict, and comes with the first step's result instead.
        - **Rewards:** every step returns ``env.rewards`` summed over the agent's step and the
          dead steps that follow, for every agent it names, so rewards reach agents as they
          happen (not at their next turn) and each agent's sum equals the sum of what ``last()``
          reports to it in PettingZoo. Rewards paid at reset come with the first step.
        - **"__all__":** True in ``terminateds`` when the last agent has left, or in ``truncateds``
          instead when an agent ending in that step was truncated and not terminated.
        - **Chance and seeding:** ``reset(seed=s)`` resets the wrapped env with ``seed=s``; the
          bridge draws no random numbers of its own, and its ``np_random`` is seeded with ``s``.
        - **Simultaneous moves:** none in the AEC API; use :class:`ParallelPettingZooEnv`.
        - **Masks:** masks in the observation stay as they are; masks in ``info`` move into a
          ``Dict`` observation (see the module docstring) and out of the info, copied; one that
          is not one 0/1 entry per action is an :class:`~marl_core.errors.EnvContractError`.
        - Different spaces per agent are kept as they are, without padding.
        - Infos are the env's ``infos`` of the agents in the observation dict. Around a
          MultiAgentEnv exported with :func:`to_aec`, its ``"__common__"`` infos come back under
          ``"__common__"`` in the step (or reset) in which the MultiAgentEnv gave them.
    """

    def __init__(self, env: Any, *, check_legal: bool = True, mask_in_info: bool | None = None) -> None:
        self._acting: AgentID | None = None
        self._mask: np.ndarray | None = None
        # What reset() met but cannot return (rewards; agents it found ended): the first step returns it.
        self._from_reset: tuple[MultiAgentDict, ...] | None = None
        super().__init__(env, check_legal=check_legal, mask_in_info=mask_in_info)

    def _reset_env(
        self, seed: int | None, options: dict[str, Any] | None
    ) -> tuple[Mapping[AgentID, Any] | None, Mapping[AgentID, Any]]:
        self.env.reset(seed=seed, options=options)
        self._running = False
        self._acting = None
        return None, self.env.infos

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsDict, MultiAgentDict]:
        """Reset the wrapped env with ``seed`` and ``options``; the obs dict holds the first agent."""
        super().reset(seed=seed)
        self._reset_env(seed, options)
        obs: ObsDict = {}
        infos: MultiAgentDict = {}
        rewards: MultiAgentDict = {agent_id: reward for agent_id, reward in self.env.rewards.items() if reward}
        terminateds: MultiAgentDict = {}
        truncateds: MultiAgentDict = {}
        self._from_reset = None
        self._advance(obs, rewards, terminateds, truncateds, infos)
        if self._acting is None:
            raise EnvContractError(
                f"{self.env} has no agent to act after reset() (agents: {list(self.env.agents)})"
            )
        # Agents found ended (their dead steps made here) act in no step: their final observation
        # and flags come with the first step's result, as do rewards paid at reset.
        ended = {agent_id for agent_id, flag in (*terminateds.items(), *truncateds.items()) if flag}
        if ended or rewards:
            gone = ({a: obs.pop(a) for a in ended if a in obs}, {a: infos.pop(a) for a in ended if a in infos})
            self._from_reset = (rewards, *gone, {a: terminateds[a] for a in ended}, {a: truncateds[a] for a in ended})
        if self._export is not None:
            infos = self._with_common_infos(infos)
        return obs, infos

    def step(self, action_dict: Mapping[AgentID, Any]) -> StepResult:
        """Act for ``agent_selection``, then make the dead steps that follow."""
        agent_id = self._acting
        if agent_id is None:
            raise ResetNeededError(
                "step() called before reset() or after the episode ended; call reset() first"
            )
        # A dict first (the common case, cheapest test), then any other Mapping.
        if not (type(action_dict) is dict or isinstance(action_dict, Mapping)) or (
            len(action_dict) != 1 or agent_id not in action_dict
        ):
            check_acting(action_dict, [agent_id])  # raises with the precise reason
        action = action_dict[agent_id]
        self._check(agent_id, action, self._mask)
        env = self.env
        env.step(action)
        rewards = dict(env.rewards)
        obs: ObsDict = {}
        terminateds: MultiAgentDict = {}
        truncateds: MultiAgentDict = {}
        infos: MultiAgentDict = {}
        done = self._advance(obs, rewards, terminateds, truncateds, infos)
        if self._from_reset is not None:
            self._add_from_reset(rewards, obs, infos, terminateds, truncateds)
        terminateds[ALL], truncateds[ALL] = _end_flags(done, terminateds, truncateds)
        if self._export is not None:
            infos = self._with_common_infos(infos)
        return obs, rewards, terminateds, truncateds, infos

    def _add_from_reset(self, rewards: MultiAgentDict, *reported: MultiAgentDict) -> None:
        """Add what ``reset()`` met to the first step's result: its rewards to the step's, and the
        final observations, infos and flags of the agents it found ended."""
        kept_rewards, *kept = self._from_reset  # type: ignore[misc]
        self._from_reset = None
        for agent_id, reward in kept_rewards.items():
            rewards[agent_id] = rewards.get(agent_id, 0) + reward
        for mapping, earlier in zip(reported, kept, strict=True):
            for agent_id, value in earlier.items():
                mapping.setdefault(agent_id, value)

    def _advance(
        self,
        obs: ObsDict,
        rewards: MultiAgentDict,
        terminateds: MultiAgentDict,
        truncateds: MultiAgentDict,
        infos: MultiAgentDict,
    ) -> bool:
        """Report dead agents and step them out until a live agent is selected; True at the end."""
        env = self.env
        info_masks = self._info_masks
        while env.agents:
            agent_id = env.agent_selection
            terminated = env.terminations[agent_id]
            truncated = env.truncations[agent_id]
            observation = env.observe(agent_id)
            info = env.infos[agent_id]
            if self._watch_info_masks and info:
                self._late_info_mask({agent_id: info})
            if (terminated or truncated) and (observation is None or (
                    self._observed is not None and not self._observed(agent_id))):  # no final observation to give
                if info:  # nothing is lost: its info goes under "__common__"
                    infos[COMMON] = merge_common_infos(infos.get(COMMON), {agent_id: info})
            else:
                if info_masks and (action_space := self._info_mask_space(agent_id)) is not None:
                    observation, info = _with_mask(agent_id, observation, info, action_space)
                obs[agent_id] = observation
                infos[agent_id] = info
            terminateds[agent_id] = terminated
            truncateds[agent_id] = truncated
            if not (terminated or truncated):
                self._acting = agent_id
                # A dict first (the common case, cheapest test), then any other Mapping.
                is_map = type(observation) is dict or isinstance(observation, Mapping)
                self._mask = observation.get(MASK_KEY) if is_map else None
                self._running = True
                return False
            env.step(None)
            for other, reward in env.rewards.items():
                if reward:
                    rewards[other] = rewards.get(other, 0) + reward
        self._acting = None
        self._mask = None
        self._running = False
        self._watch_info_masks = False  # the first episode is over
        return True


class ParallelPettingZooEnv(_PettingZooBase):
    """A PettingZoo ``ParallelEnv`` as a MultiAgentEnv.

    Args:
        env: the parallel env (any wrappers included); available as ``.env``.
        check_legal: raise :class:`~marl_core.errors.IllegalActionError` for an action that the
            agent's action mask forbids (default); with False it reaches the env.
        mask_in_info: whether the env puts action masks in ``info["action_mask"]``. None (default)
            finds out by resetting the env once at construction (and warns if a mask shows up in
            info in the first episode, unchecked).

    Semantics:
        - **Who acts:** every agent in ``env.agents``; the observation dict also holds agents that
          end in this step (with the final observation the env gave them).
        - **Rewards** are the env's reward dict, unchanged: each agent's sum equals the env's.
        - **"__all__":** True in ``terminateds`` when no agent is left, or in ``truncateds`` when an
          agent ending in that step was truncated and not terminated.
        - **Simultaneous moves:** the actions of one step go to the env together.
        - **Chance and seeding:** ``reset(seed=s)`` resets the wrapped env with ``seed=s``.
        - **Masks:** masks in observations stay; masks in ``info`` move into a ``Dict`` observation,
          copied; one that is not one 0/1 entry per action is an
          :class:`~marl_core.errors.EnvContractError`.
        - The dicts the env returned are never modified: ``"__all__"`` goes into new dicts, and
          infos of agents without an observation move under ``"__common__"`` in a new dict. When
          nothing needs to move, the env's own observation, reward and info dicts are returned.
          Around a MultiAgentEnv exported with :func:`to_parallel`, its ``"__common__"`` infos
          come back under ``"__common__"``.
        - Actions are checked before they reach the env (agents, space, mask); the env receives
          a copy of the action dict, except PettingZoo's ``aec_to_parallel_wrapper``, which only
          reads it.
    """

    _API = "parallel"

    def __init__(self, env: Any, *, check_legal: bool = True, mask_in_info: bool | None = None) -> None:
        self._acting_list: list[AgentID] = []
        self._ended: set[AgentID] = set()  # agents whose end this episode was reported
        self._fast: tuple[Any, ...] | None = None
        self._last_fast: tuple[Any, ...] = ()
        self._masks: dict[AgentID, np.ndarray] = {}
        super().__init__(env, check_legal=check_legal, mask_in_info=mask_in_info)
        self._track_masks = bool(self._info_masks) or any(is_masked(s) for s in self.observation_spaces.values())
        # Masks and an exported MultiAgentEnv's "__common__" infos need the full step.
        self._plain = not (self._info_masks or self._track_masks or self._export)

    def _reset_env(
        self, seed: int | None, options: dict[str, Any] | None
    ) -> tuple[Mapping[AgentID, Any] | None, Mapping[AgentID, Any]]:
        self._running = False
        self._acting_list = []
        self._fast = None
        self._ended = set()
        return self.env.reset(seed=seed, options=options)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsDict, MultiAgentDict]:
        """Reset the wrapped env with ``seed`` and ``options``; every live agent acts first."""
        super().reset(seed=seed)
        raw_obs, raw_infos = self._reset_env(seed, options)
        obs, infos = self._adopt(raw_obs or {}, raw_infos or {}, {}, {})
        if not self._acting_list:
            raise EnvContractError(f"{self.env} has no agent to act after reset()")
        if self._export is not None:
            infos = self._with_common_infos(infos)
        return obs, infos

    def step(self, action_dict: Mapping[AgentID, Any]) -> StepResult:
        """Step every live agent at once."""
        fast = self._fast
        if fast is None:
            fast = self._fast = self._make_fast()
        # Plain dicts only: reading a defaultdict with itemgetter would add the missing keys.
        if fast and type(action_dict) is dict and len(action_dict) == len(fast[0]):
            acting, acting_set, get, admits_all, env, env_step, copy = fast
            try:
                actions = get(action_dict)
            except KeyError:  # an agent without an action (and so one that should not have one)
                actions = None
            if actions is not None and admits_all(actions):
                obs, rewards, terms, truncs, infos = env_step(dict(action_dict) if copy else action_dict)
                if self._watch_info_masks:
                    self._late_info_mask(infos)
                # A frozenset on the right side: the cheapest exact key tests on small dicts.
                if (env.agents == acting and obs.keys() == acting_set and acting_set.issuperset(infos)
                        and terms.keys() == acting_set and truncs.keys() == acting_set):
                    # The common step: the same agents act again, nobody ends, nothing moves (flags
                    # of other agents, such as those that left, take _finish).
                    terminateds = dict(terms)
                    terminateds[ALL] = False
                    truncateds = dict(truncs)
                    truncateds[ALL] = False
                    return obs, rewards, terminateds, truncateds, infos
                return self._finish(obs, rewards, terms, truncs, infos, acting_set)
        acting = self._acting_list
        if not acting:
            raise ResetNeededError(
                "step() called before reset() or after the episode ended; call reset() first"
            )
        self._validate(action_dict, acting)  # raises with the precise reason
        return self._finish(*self.env.step(dict(action_dict)), set(acting))

    def _finish(
        self,
        obs: Mapping[AgentID, Any],
        rewards: MultiAgentDict,
        terms: Mapping[AgentID, Any],
        truncs: Mapping[AgentID, Any],
        infos: Mapping[AgentID, Any],
        acted: AbstractSet[AgentID],
    ) -> StepResult:
        """The step result from what the env returned, whoever acts next (``acted``: who acted)."""
        ended = self._ended
        if not (acted.issuperset(terms) and acted.issuperset(truncs)):
            # Flags of agents that ended in an earlier step (envs keying them by possible_agents)
            # would show those agents again, and an old truncation would read as why the episode
            # ends now: only agents that acted, are live, or are observed for the first time keep theirs.
            current = {*acted, *self.env.agents, *(a for a in obs if a not in ended)}
            terms = {agent_id: flag for agent_id, flag in terms.items() if agent_id in current}
            truncs = {agent_id: flag for agent_id, flag in truncs.items() if agent_id in current}
        obs, infos = self._adopt(obs, infos, terms, truncs)
        if len(self._acting_list) != len(acted) or not acted.issuperset(obs):  # some agents came or went
            ended.update(agent_id for agent_id in obs if agent_id not in self._acting_list)
        if self._export is not None:
            infos = self._with_common_infos(infos)
        if self._acting_list:
            return obs, rewards, {**terms, ALL: False}, {**truncs, ALL: False}, infos
        all_terminated, all_truncated = _end_flags(True, terms, truncs)
        return obs, rewards, {**terms, ALL: all_terminated}, {**truncs, ALL: all_truncated}, infos

    def __getstate__(self) -> dict[str, Any]:
        # The fast path's getters and tests are closures (plain pickle refuses them): rebuilt on use.
        return {**self.__dict__, "_fast": None, "_last_fast": ()}

    def _make_fast(self) -> tuple[Any, ...]:
        """What the common step needs, built once per set of acting agents; empty for no fast path.

        That is the acting agents (a list and a set), a getter of their actions and a test that
        admits them (Discrete and Box spaces, agents with equal bounds checked in one loop), the
        env, its bound ``step`` and whether the env needs its own copy of the action dict. Envs
        with masks, and agents with other spaces, take :meth:`_validate` at every step. A new
        episode with the agents of the last fast path reuses it (with ``env.step`` looked up again).
        """
        acting = self._acting_list
        last = self._last_fast
        if last and last[0] == acting:
            return (*last[:5], self.env.step, last[6])
        if not (self._plain and acting) or len(set(acting)) != len(acting):
            return ()
        groups: dict[Bounds, list[AgentID]] = {}
        for agent_id in acting:
            bounds = self._check.bounds(agent_id)
            if bounds is None:
                return ()
            groups.setdefault(bounds, []).append(agent_id)
        env = self.env
        self._last_fast = (acting, frozenset(acting), *admitter(groups), env, env.step,
                           not _reads_actions_only(env))
        return self._last_fast

    def _validate(self, action_dict: Mapping[AgentID, Any], acting: list[AgentID]) -> None:
        """Raise unless ``action_dict`` holds exactly one valid, legal action per acting agent."""
        if not isinstance(action_dict, Mapping) or len(action_dict) != len(acting):
            check_acting(action_dict, acting)  # raises with the precise reason
        check, masks = self._check, self._masks
        for agent_id in acting:
            action = action_dict.get(agent_id, _MISSING)
            if action is _MISSING:
                check_acting(action_dict, acting)
            check(agent_id, action, masks.get(agent_id))

    def _adopt(
        self,
        obs: Mapping[AgentID, Any],
        infos: Mapping[AgentID, Any],
        terms: Mapping[AgentID, Any],
        truncs: Mapping[AgentID, Any],
    ) -> tuple[ObsDict, MultiAgentDict]:
        """Take the env's obs and infos: learn who acts next, move masks, keep our contract."""
        live = self.env.agents
        for agent_id in live:
            if agent_id not in obs:
                self._acting_list = []
                self._fast = None
                self._running = False
                raise EnvContractError(
                    f"{self.env} returned no observation for live agent {agent_id!r} (observations "
                    f"for: {list(obs)}); every agent in env.agents must be observed"
                )
        if live != self._acting_list:  # the fast path stays while the same agents act
            self._acting_list = list(live)
            self._fast = None
        self._running = bool(live)
        if len(obs) != len(live):
            obs = self._drop_stale(obs, live, terms, truncs)
        if self._info_masks:
            obs, infos = self._move_masks(obs, infos)
        elif self._watch_info_masks:
            self._late_info_mask(infos)
            self._watch_info_masks = self._watch_info_masks and bool(live)  # until the first episode ends
        if self._track_masks:
            self._masks = {a: mask for a, o in obs.items() if (mask := action_mask_of(o)) is not None}
        if not infos.keys() <= obs.keys():
            infos = self._split_infos(obs, infos)
        return obs, infos  # type: ignore[return-value]

    def _drop_stale(
        self,
        obs: Mapping[AgentID, Any],
        live: list[AgentID],
        terms: Mapping[AgentID, Any],
        truncs: Mapping[AgentID, Any],
    ) -> ObsDict:
        """Obs of agents neither acting nor ending now break our contract: keep them out (said once
        per step, but not of agents whose end was reported, which envs observing every possible
        agent observe at every step)."""
        live_set = set(live)
        stale = [a for a in obs if a not in live_set and not (terms.get(a) or truncs.get(a))]
        if not stale:
            return obs  # type: ignore[return-value]
        unexpected = [a for a in stale if a not in self._ended]
        if unexpected:
            logger.warning(
                "%s observed agents that neither act nor end in this step: %s; their observations are "
                "left out of the observation dict",
                self.env,
                unexpected,
            )
        return {a: o for a, o in obs.items() if a not in stale}

    def _move_masks(self, obs: Mapping[AgentID, Any], infos: Mapping[AgentID, Any]) -> tuple[ObsDict, MultiAgentDict]:
        new_obs: ObsDict = {}
        new_infos: MultiAgentDict = dict(infos)
        for agent_id, observation in obs.items():
            action_space = self._info_mask_space(agent_id)
            if action_space is None:
                new_obs[agent_id] = observation
                continue
            new_obs[agent_id], info = _with_mask(agent_id, observation, infos.get(agent_id), action_space)
            if agent_id in infos:
                new_infos[agent_id] = info
        return new_obs, new_infos

    @staticmethod
    def _split_infos(obs: Mapping[AgentID, Any], infos: Mapping[AgentID, Any]) -> MultiAgentDict:
        """Infos for agents without an observation go under ``"__common__"`` (nothing is lost)."""
        kept: MultiAgentDict = {k: v for k, v in infos.items() if k in obs}
        extra = {k: v for k, v in infos.items() if k not in obs and k != COMMON}
        common = merge_common_infos(infos.get(COMMON), extra)
        if common is not None:
            kept[COMMON] = common
        return kept


def to_aec(env: MultiAgentEnv, *, check_legal: bool = True) -> AECEnv:
    """A PettingZoo ``AECEnv`` built from any MultiAgentEnv; see :mod:`bridges.pettingzoo_export`.

    ``to_aec(PettingZooEnv(aec_env))`` returns ``aec_env`` itself. Otherwise ``step`` refuses an
    action that the agent's action mask forbids, unless ``check_legal`` is False.
    """
    from bridges.pettingzoo_export import to_aec as _to_aec

    return _to_aec(env, check_legal=check_legal)


def to_parallel(env: MultiAgentEnv, *, check_legal: bool = True) -> ParallelEnv:
    """A PettingZoo ``ParallelEnv`` built from a MultiAgentEnv in which every live agent acts at
    every step; see :mod:`bridges.pettingzoo_export`.

    ``to_parallel(ParallelPettingZooEnv(parallel_env))`` returns ``parallel_env`` itself. Otherwise
    ``step`` refuses an action that the agent's action mask forbids, unless ``check_legal`` is False.
    """
    from bridges.pettingzoo_export import to_parallel as _to_parallel

    return _to_parallel(env, check_legal=check_legal)

"""Agent grouping: :class:`GroupAgentsWrapper`, what ``env.with_agent_groups(groups)`` returns.

Each group becomes one agent whose observation and action are tuples with one slot per member,
in the listed order; agents in no group pass through unchanged. Unlike RLlib's wrapper, members
may die early, receive rewards alone, and the wrapped env may be turn-based (as long as each
group's live members act together).

Example:
    >>> from marl_core.envs import RockPaperScissors
    >>> env = RockPaperScissors().with_agent_groups({"team": ["player1", "player2"]})
    >>> env.possible_agents, env.get_action_space("team")
    (['team'], Tuple(Discrete(3), Discrete(3)))
    >>> obs, infos = env.reset(seed=0)
    >>> obs
    {'team': (0, 0)}
    >>> obs, rewards, terminateds, truncateds, infos = env.step({"team": (0, 1)})
    >>> obs, rewards, infos["team"]["individual_rewards"]
    ({'team': (1, 0)}, {'team': 0.0}, {'player1': -1.0, 'player2': 1.0})
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_core.env import (
    ALL,
    COMMON,
    AgentID,
    MultiAgentDict,
    MultiAgentEnv,
    MultiAgentWrapper,
    ObsDict,
    StepResult,
    scalar_reward,
)
from marl_core.errors import (
    EnvContractError,
    GroupingError,
    InvalidActionError,
    ResetNeededError,
    SpaceError,
    UnknownAgentError,
)
from marl_core.spaces import (
    MASK_KEY,
    _check_masks,
    action_mask_of,
    action_masks_of,
    check_acting,
    is_sequence_of,
    placeholder_observation,
    tuple_slots,
    why_action_not_contained,
)

__all__ = ["GroupAgentsWrapper"]

SpaceArg = spaces.Space | Mapping[str, spaces.Space] | None


class GroupAgentsWrapper(MultiAgentWrapper[MultiAgentEnv]):
    """Groups of agents exposed as single agents with Tuple observation and action spaces.

    Args:
        env: any MultiAgentEnv (available again as ``.env``).
        groups: group id -> member agent ids. Agents in no group pass through unchanged.
        obs_space: the observation space of every group (or a dict group id -> space); each
            must be a ``Tuple`` with one space per member. Default: the Tuple of the members'
            observation spaces.
        act_space: likewise for actions.

    Raises:
        GroupingError: an empty group, members given as one string, a member listed twice or in
            two groups, a member the env does not know, a group id that is not a string or is
            already an agent id, or spaces given (in a dict) for ids that are not groups.
        SpaceError: a given space that is not a Tuple with one entry per member, or a member
            whose observation space has no placeholder value (see Observations below).

    Semantics:
        - **Who acts:** a group is in the obs dict when its live members must act; they must all
          be asked together, otherwise step/reset raises :class:`GroupingError` naming the group,
          the members asked and those not asked (the env has moved on, so ``reset()`` is needed).
          A member is live from its first appearance (or while the env lists it in
          ``env.agents``) until it terminates or truncates.
        - **Observations:** slot ``i`` holds member ``i``'s latest observation. A member that has
          ended keeps its final observation (while the group acts on, with its action mask,
          if it has one, all zeros: it takes no action); a member not seen yet holds the
          "zero" of its space (zeros clipped into Box bounds, the first value of a Discrete, the
          shortest string of a Text space's smallest character).
        - **Actions:** a group's action is a tuple with one slot per member (a list, or a numpy
          array with one row per member, as gymnasium's ``Tuple`` takes): a value of the
          group's Tuple space, every slot in its member's space. The slots of the members asked
          to act are checked against their action masks too, before the env steps
          (:class:`~marl_core.errors.InvalidActionError` or
          :class:`~marl_core.errors.IllegalActionError` naming the group and the slot), and sent
          to the env; the others (members not asked, ended ones) hold any value of their space,
          which is ignored.
        - **Rewards:** a group's reward in a step is the sum of its members' rewards in that
          step (a member without a reward counts 0), present whenever any member got one.
          ``infos[group]["individual_rewards"]`` maps every member to its reward summed since
          the group last appeared in the obs dict (for a group that acts every step, this step's
          rewards), so nothing is lost when members are paid between the group's turns. Rewards
          paid after the group has ended count in the group's reward only: an ended group gets
          no more infos.
          ``infos[group]["member_infos"]`` holds the info dicts members got since the group
          last appeared, by member (the latest of each). RLlib's keys are there too, as lists in
          member order: ``"_group_rewards"`` (the ``individual_rewards`` values) and
          ``"_group_info"`` (each member's info of ``member_infos``, ``{}`` for a member
          without one).
        - **Dead agents:** the group ends when all its members have ended: truncated if any
          member was truncated (and not terminated), terminated otherwise. A group whose last
          members end without final observations gets its final observation (its members'
          latest) when any member got an observation, a reward or an info since the group last
          appeared, as on ``"__all__"`` below.
        - **"__all__":** passed through (always present in both dicts); groups still alive end
          with it and get their final observation when any member got an observation, a reward
          (zero included) or an info since the group last appeared (that observation holds the
          members' latest observations, and the infos carry ``individual_rewards``).
        - **Chance, simultaneous moves, seeding:** those of the wrapped env.
        - **Masks** stay inside each member's slot: a group's Tuple observation holds each
          member's canonical masked observation. ``RandomPolicy``, the checker,
          :func:`marl_core.spaces.sample_action_for`, ``VectorMultiAgentEnv``'s action checks,
          ``to_aec`` / ``to_parallel`` (:func:`marl_core.spaces.action_masks_of`) and the PPO
          trainer read each slot's mask.
    """

    def __init__(
        self,
        env: MultiAgentEnv,
        groups: Mapping[str, Sequence[AgentID]],
        obs_space: SpaceArg = None,
        act_space: SpaceArg = None,
    ) -> None:
        super().__init__(env)
        inner_agents = list(env.possible_agents)
        self.groups: dict[str, list[AgentID]] = {group: list(members) for group, members in groups.items()}
        self._group_of: dict[AgentID, str] = {}
        known = set(inner_agents)
        for group, members in groups.items():
            if isinstance(members, str):  # a string is a sequence of ids too: "ab" would group "a" and "b"
                raise GroupingError(f"the members of group {group!r} must be a list of agent ids, received the "
                                    f"string {members!r}; write [{members!r}] for a group of one")
        for group, members in self.groups.items():
            if not isinstance(group, str):
                raise GroupingError(
                    f"group id {group!r} is not a string ({type(group).__name__}); agent ids are strings"
                )
            if not members:
                raise GroupingError(f"group {group!r} has no members")
            if group in known or group in (ALL, COMMON):
                raise GroupingError(f"group id {group!r} is already an agent id of {env}; choose another name")
            for member in members:
                if member not in known:
                    raise GroupingError(
                        f"unknown member {member!r} of group {group!r}; the env's agents are {inner_agents}"
                    )
                if member in self._group_of:
                    where = "twice in" if self._group_of[member] == group else f"in {self._group_of[member]!r} and in"
                    raise GroupingError(f"agent {member!r} is listed {where} group {group!r}; groups may not overlap")
                self._group_of[member] = group
        self._slot_of = {m: i for members in self.groups.values() for i, m in enumerate(members)}
        self._blanks = {}
        for member, group in self._group_of.items():
            space = env.get_observation_space(member)
            try:
                self._blanks[member] = placeholder_observation(space)
            except SpaceError as error:  # a member not seen yet holds a placeholder in its slot
                raise SpaceError(f"cannot group agent {member!r} into group {group!r}: a member not seen yet "
                                 f"holds a placeholder observation, and its {error}") from None
        self._observation_group_spaces = self._tuple_spaces(obs_space, "observation", env.get_observation_space)
        self._action_group_spaces = self._tuple_spaces(act_space, "action", env.get_action_space)
        possible = list(dict.fromkeys(self._group_of.get(agent_id, agent_id) for agent_id in inner_agents))
        self.possible_agents = possible
        self.observation_spaces = {a: self.get_observation_space(a) for a in possible}
        self.action_spaces = {a: self.get_action_space(a) for a in possible}
        self.agents = []
        self._acting: list[AgentID] | None = None
        self._refused: str | None = None  # why step() needs reset(), when an error stopped the episode
        self._asked: dict[str, list[AgentID]] = {}
        self._slots: dict[str, list[Any]] = {}
        self._ended: set[AgentID] = set()
        self._truncated: set[AgentID] = set()
        self._groups_over: set[str] = set()
        self._seen: set[AgentID] = set()
        self._pending_rewards: dict[str, dict[AgentID, float]] = {}
        self._pending_infos: dict[str, dict[AgentID, Any]] = {}
        self._news: set[str] = set()  # groups whose members got anything since the group last appeared

    def _tuple_spaces(self, given: SpaceArg, kind: str, member_space: Any) -> dict[str, spaces.Tuple]:
        if isinstance(given, Mapping):
            unknown = [key for key in given if key not in self.groups]
            if unknown:  # a misspelled group would silently get the default space
                raise GroupingError(f"{kind} spaces given for {unknown}, which are not groups; the groups are "
                                    f"{list(self.groups)}")
        out = {}
        for group, members in self.groups.items():
            space = given.get(group) if isinstance(given, Mapping) else given
            if space is None:
                out[group] = spaces.Tuple([member_space(m) for m in members])
                continue
            if not isinstance(space, spaces.Tuple) or len(space.spaces) != len(members):
                size = f"a Tuple of {len(space.spaces)}" if isinstance(space, spaces.Tuple) else type(space).__name__
                raise SpaceError(
                    f"the {kind} space of group {group!r} must be a Tuple of {len(members)} spaces (one per member "
                    f"of {members}), received {size}: {space}"
                )
            out[group] = space
        return out

    def get_observation_space(self, agent_id: AgentID) -> spaces.Space:
        if agent_id in self.groups:
            return self._observation_group_spaces[agent_id]
        self._check_not_member(agent_id)
        return self.env.get_observation_space(agent_id)

    def get_action_space(self, agent_id: AgentID) -> spaces.Space:
        if agent_id in self.groups:
            return self._action_group_spaces[agent_id]
        self._check_not_member(agent_id)
        return self.env.get_action_space(agent_id)

    def _check_not_member(self, agent_id: AgentID) -> None:
        if agent_id in self._group_of:
            what = f"agent id (a member of group {self._group_of[agent_id]!r}, which replaces it)"
            raise UnknownAgentError(agent_id, self.possible_agents, what=what)

    # Episode API --------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsDict, MultiAgentDict]:
        self._acting, self.agents = None, []  # until the env's reset is grouped, nothing can step
        try:
            obs, infos = self.env.reset(seed=seed, options=options)
        except Exception as error:
            self._refused = f"the env's reset() raised {type(error).__name__}"
            raise
        self._ended = set()
        self._truncated = set()
        self._groups_over = set()
        self._seen = set()
        self._slots = {group: [copy.deepcopy(self._blanks[m]) for m in members] for group, members in self.groups.items()}
        self._pending_rewards = {group: dict.fromkeys(members, 0.0) for group, members in self.groups.items()}
        self._pending_infos = {group: {} for group in self.groups}
        self._news = set()
        try:
            out_obs, out_infos, acting = self._translate(obs, infos, {}, {}, episode_over=False)
        except Exception as error:
            self._refused = f"reset() raised {type(error).__name__}"
            raise
        self._refused = None
        self._acting = acting
        self._sync_agents(done=False)
        return out_obs, out_infos

    def step(self, action_dict: Mapping[AgentID, Any]) -> StepResult:
        if self._acting is None:
            why = self._refused or "step() was called before reset() or after the episode ended"
            raise ResetNeededError(f"GroupAgentsWrapper.step() needs reset(): {why}")
        inner_actions = self._ungroup_actions(action_dict)
        obs, rewards, terminateds, truncateds, infos = self.env.step(inner_actions)
        episode_over = bool(terminateds.get(ALL, False)) or bool(truncateds.get(ALL, False))
        out_rewards: dict[AgentID, Any] = {}
        try:
            for agent_id, reward in rewards.items():
                group = self._group_of.get(agent_id)
                if group is None:
                    out_rewards[agent_id] = reward
                    continue
                value = scalar_reward(agent_id, reward, self.env)
                out_rewards[group] = out_rewards.get(group, 0.0) + value
                self._pending_rewards[group][agent_id] += value
                self._news.add(group)
            out_obs, out_infos, acting = self._translate(obs, infos, terminateds, truncateds, episode_over)
        except Exception as error:
            # The env has moved on and its result cannot be grouped (nor any other error undone): reset() is needed.
            self._acting, self.agents = None, []
            self._refused = f"the last step() raised {type(error).__name__}, after the env had stepped"
            raise
        out_terminateds, out_truncateds = self._flags(terminateds, truncateds, out_obs, episode_over)
        self._acting = None if episode_over else acting
        self._sync_agents(done=episode_over)
        return out_obs, out_rewards, out_terminateds, out_truncateds, out_infos

    # Internals ----------------------------------------------------------------------------

    def _ungroup_actions(self, action_dict: Mapping[AgentID, Any]) -> dict[AgentID, Any]:
        acting = self._acting or []
        check_acting(action_dict, acting)
        inner: dict[AgentID, Any] = {}
        for agent_id in acting:
            action = action_dict[agent_id]
            members = self.groups.get(agent_id)
            if members is None:
                inner[agent_id] = action
                continue
            if not is_sequence_of(action, len(members)):
                raise InvalidActionError(
                    agent_id,
                    f"a tuple of {len(members)} actions, one per member of {members}",
                    action,
                )
            asked = set(self._asked[agent_id])
            space = self._action_group_spaces[agent_id]
            slots = tuple_slots(space, action)
            for slot, (member, member_action) in enumerate(zip(members, slots, strict=True)):
                # Every slot is in its space (the action is a value of the Tuple space, as every
                # consumer checks it); only the asked members' are masked and reach the env.
                reason = why_action_not_contained(space.spaces[slot], member_action, f"[{slot}]")
                if reason is not None:
                    idle = "" if member in asked else (
                        f"; {member!r} is not asked to act now, so its slot is ignored, but it must still hold a "
                        f"value of its space (its space's sample(), say)")
                    raise InvalidActionError(
                        agent_id, f"an action in {space}", action, f"member {member!r}, {reason}{idle}"
                    )
                if member in asked:
                    mask = action_masks_of(self._slots[agent_id][slot])
                    if mask is not None:  # legal as the group's observation showed it, named as the group
                        _check_masks(agent_id, space.spaces[slot], member_action, mask, action, f"[{slot}]", member)
                    inner[member] = member_action
        return inner

    def _translate(
        self,
        obs: Mapping[AgentID, Any],
        infos: Mapping[AgentID, Any],
        terminateds: Mapping[AgentID, Any],
        truncateds: Mapping[AgentID, Any],
        episode_over: bool,
    ) -> tuple[ObsDict, MultiAgentDict, list[AgentID]]:
        """Group obs and infos; record who must act next; refuse groups asked apart."""
        ending = {a for a in obs if terminateds.get(a, False) or truncateds.get(a, False)}
        for agent_id in {**terminateds, **truncateds}:
            if agent_id in self._group_of and (terminateds.get(agent_id) or truncateds.get(agent_id)):
                self._ended.add(agent_id)
                if not terminateds.get(agent_id):
                    self._truncated.add(agent_id)
        live_inner = set(self.env.agents)
        for agent_id in obs:
            if agent_id in self._group_of:
                self._seen.add(agent_id)
                group = self._group_of[agent_id]
                self._slots[group][self._slot_of[agent_id]] = obs[agent_id]
                self._news.add(group)
                if agent_id in infos:
                    self._pending_infos[group][agent_id] = infos[agent_id]
        out_obs: dict[AgentID, Any] = {}
        acting: list[AgentID] = []
        asked_now: dict[str, list[AgentID]] = {}
        for agent_id in obs:
            group = self._group_of.get(agent_id)
            if group is None:
                out_obs[agent_id] = obs[agent_id]
                if agent_id not in ending:
                    acting.append(agent_id)
            elif group not in out_obs and group not in asked_now:
                members = self.groups[group]
                asked = [m for m in members if m in obs and m not in ending]
                live = [m for m in members if m not in self._ended and (m in self._seen or m in live_inner)]
                if asked and asked != live and not episode_over:
                    not_asked = [m for m in live if m not in asked]
                    raise GroupingError(
                        f"the members of group {group!r} must act together, but the env asked {asked} to act "
                        f"and not {not_asked}; group only agents that always act at the same time"
                    )
                group_over = all(m in self._ended for m in members)
                if asked or group_over or episode_over:
                    acts = bool(asked) and not episode_over
                    out_obs[group] = self._group_observation(group, asked) if acts else tuple(self._slots[group])
                    asked_now[group] = asked
                    if asked and not episode_over:
                        acting.append(group)
        # A group that ends now (with the episode, or by its last members' flags alone) has its last
        # chance to deliver what members got since its last turn: rewards, infos, observations.
        for group, members in self.groups.items():
            if (group in self._news and group not in out_obs and group not in self._groups_over
                    and (episode_over or self._ended.issuperset(members))):
                out_obs[group] = tuple(self._slots[group])
                asked_now[group] = []
        out_infos: dict[AgentID, Any] = {}
        for agent_id, info in infos.items():
            if agent_id not in self._group_of:
                out_infos[agent_id] = info
        for group in asked_now:
            members = self.groups[group]
            member_rewards, member_infos = self._pending_rewards[group], self._pending_infos[group]
            out_infos[group] = {
                "individual_rewards": member_rewards,
                "member_infos": member_infos,
                # RLlib's with_agent_groups keys: lists in member order, for code written against it
                "_group_rewards": [member_rewards[member] for member in members],
                "_group_info": [member_infos.get(member, {}) for member in members],
            }
            self._pending_rewards[group] = dict.fromkeys(self.groups[group], 0.0)
            self._pending_infos[group] = {}
            self._news.discard(group)
        self._asked = asked_now
        return out_obs, out_infos, acting

    def _group_observation(self, group: str, asked: list[AgentID]) -> tuple[Any, ...]:
        """The Tuple observation of a group that acts: the slot of a member not asked to act
        (it has ended) shows every action mask in it as all zeros: that member takes no action."""
        asked_set = set(asked)
        slots = []
        for member, observation in zip(self.groups[group], self._slots[group], strict=True):
            if member not in asked_set:
                slots.append(_no_legal_action(observation))
                continue
            mask = action_mask_of(observation)
            if mask is not None and not mask.any():  # in a slot, that would say "not asked": never silently
                raise EnvContractError(
                    f"{self.env} asks member {member!r} of group {group!r} to act with an action mask that allows "
                    "no action; in a group's slot such a mask marks a member that does not act, so leave the "
                    "member out of the obs dict instead (or end it)"
                )
            slots.append(observation)
        return tuple(slots)

    def _flags(
        self,
        terminateds: Mapping[AgentID, Any],
        truncateds: Mapping[AgentID, Any],
        out_obs: Mapping[AgentID, Any],
        episode_over: bool,
    ) -> tuple[dict[AgentID, Any], dict[AgentID, Any]]:
        out_terminateds: dict[AgentID, Any] = {}
        out_truncateds: dict[AgentID, Any] = {}
        for source, target in ((terminateds, out_terminateds), (truncateds, out_truncateds)):
            for agent_id, flag in source.items():
                if agent_id not in self._group_of:
                    target[agent_id] = flag
        all_terminated = bool(terminateds.get(ALL, False))
        for group, members in self.groups.items():
            if group in self._groups_over:
                continue
            ended_all = all(m in self._ended for m in members)
            over = ended_all or episode_over
            if group not in out_obs and not over:
                continue
            cut_short = any(m in self._truncated for m in members)
            if episode_over and not ended_all:  # "__all__" ends the members still alive
                cut_short = cut_short or not all_terminated
            out_terminateds[group] = over and not cut_short
            out_truncateds[group] = over and cut_short
            if over:
                self._groups_over.add(group)
        out_terminateds[ALL] = all_terminated
        out_truncateds[ALL] = bool(truncateds.get(ALL, False))
        return out_terminateds, out_truncateds

    def _sync_agents(self, done: bool) -> None:
        if done:
            self.agents = []
            return
        live_inner = set(self.env.agents)
        agents = []
        for agent_id in self.possible_agents:
            members = self.groups.get(agent_id)
            if members is None:
                if agent_id in live_inner:
                    agents.append(agent_id)
            elif any(m not in self._ended and (m in self._seen or m in live_inner) for m in members):
                agents.append(agent_id)
        self.agents = agents


def _no_legal_action(observation: Any) -> Any:
    """``observation`` with its action masks all zeros (in a member that is a group too): a copy
    where a mask allowed anything, the very object where nothing changes."""
    if type(observation) is tuple:
        slots = tuple(_no_legal_action(item) for item in observation)
        return observation if all(a is b for a, b in zip(slots, observation, strict=True)) else slots
    mask = action_mask_of(observation)
    if mask is None or not mask.any():
        return observation
    return {**observation, MASK_KEY: np.zeros_like(mask)}

"""The per-call rules: what every ``reset()`` and ``step()`` result must satisfy.

:class:`CallChecker` looks at one result at a time and records findings; it never raises because
of what the env returned. It also tells the driver who must act next and which action masks can be
trusted for sampling.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_core.conformance.collect import ENV_ERRORS, Collector, describe, is_hashable, shown
from marl_core.conformance.rules import RULES
from marl_core.env import ALL, COMMON
from marl_core.errors import a_type, shape_of
from marl_core.spaces import (
    MASK_KEY,
    OBS_KEY,
    SlotMasks,
    action_mask_of,
    action_mask_size,
    action_masks_of,
    mask_problem,
    why_not_contained,
)

_RESULT_NAMES = ("obs", "rewards", "terminateds", "truncateds", "infos")


NO_ARGUMENTS = "reset() without arguments"
"""The label of the check's first episode, which starts with RLlib's unseeded ``reset()``."""


def reset_in(label: str) -> str:
    """How messages name the reset that starts the episode ``label``."""
    return label if label == NO_ARGUMENTS else f"reset() in {label}"


def names(ids: Iterable[Any]) -> str:
    """A short list of ids for messages."""
    ids = list(ids)
    return f"[{', '.join(shown(a) for a in ids[:12])}{', ...' if len(ids) > 12 else ''}]"


def is_flag(value: Any) -> bool:
    """Whether ``value`` is a Python or numpy bool."""
    return isinstance(value, (bool, np.bool_))


def space_of(env: Any, agent_id: Any, kind: str) -> spaces.Space:
    """The ``kind`` ("observation" or "action") space of ``agent_id``, from the override or the dict."""
    method = getattr(env, f"get_{kind}_space", None)
    if callable(method):
        return method(agent_id)
    return getattr(env, f"{kind}_spaces")[agent_id]


def lookup_spaces(env: Any, agent_ids: Iterable[Any], collector: Collector) -> tuple[dict, dict]:
    """Every agent's observation and action spaces; ``spaces.defined`` findings for the gaps."""
    found: tuple[dict, dict] = ({}, {})
    for agent_id in agent_ids:
        for table, kind in zip(found, ("observation", "action"), strict=True):
            try:
                space = space_of(env, agent_id, kind)
            except ENV_ERRORS as error:
                collector.add(
                    "spaces.defined",
                    f"no {kind} space for agent {shown(agent_id)}: looking it up raised {describe(error)}",
                    agent=agent_id,
                )
                continue
            if isinstance(space, spaces.Space):
                table[agent_id] = space
            else:
                collector.add(
                    "spaces.defined",
                    f"the {kind} space of agent {shown(agent_id)} is {a_type(space)} ({shown(space)}), "
                    f"expected a gymnasium.spaces.Space",
                    agent=agent_id,
                )
    return found


def reward_problem(reward: Any) -> str | None:
    """None for a finite real number; otherwise what is wrong with ``reward``."""
    if is_flag(reward):
        return f"a bool ({shown(reward)})"
    if isinstance(reward, np.ndarray):
        if reward.shape != () or reward.dtype.kind not in "iuf":
            return f"an array of shape {reward.shape} and dtype {reward.dtype}"
        reward = reward.item()
    if not isinstance(reward, (int, float, np.integer, np.floating)):
        return f"{a_type(reward)} ({shown(reward)})"
    try:
        finite = math.isfinite(float(reward))
    except OverflowError:
        finite = False
    if not finite:
        return f"{shown(reward, 40)}, not a finite number"
    return None


def truthy(value: Any) -> bool:
    """``bool(value)``, or False for values without a truth value (reported as non-bool elsewhere)."""
    try:
        return bool(value)
    except ENV_ERRORS:
        return False


@dataclass
class Frame:
    """One ``reset()`` (``step == 0``) or ``step()`` result, already split into its dicts."""

    step: int
    obs: dict
    infos: dict
    rewards: dict = field(default_factory=dict)
    terminateds: dict = field(default_factory=dict)
    truncateds: dict = field(default_factory=dict)
    originals: dict = field(default_factory=dict)  # the env's own dict subclasses, read into the above


@dataclass
class Verdict:
    """What the driver needs after a checked call."""

    acting: list[Any]
    masks: dict[Any, np.ndarray | SlotMasks]
    done: bool
    stalled: bool = False  # play cannot go on: nobody acts without "__all__", or an acting agent has no legal action


class CallChecker:
    """Checks ``reset()`` and ``step()`` results against the per-call rules.

    Args:
        env: the env under test.
        collector: where findings go.
        possible: the env's possible agents.
        obs_spaces: observation space per agent (agents without one are not checked).
        act_spaces: action space per agent.
    """

    def __init__(
        self, env: Any, collector: Collector, possible: list[Any], obs_spaces: dict, act_spaces: dict
    ) -> None:
        self.env = env
        self.collector = collector
        self.possible = set(possible)
        self.possible_list = list(possible)
        self.obs_spaces = obs_spaces
        self.act_spaces = act_spaces
        self.label = ""
        self.dead: dict[Any, int] = {}  # agent -> the step it ended in
        self.waiting: set[Any] = set()  # agents that acted and have not been observed since
        self.seen: set[Any] = set()  # agents observed in the episode

    def start_episode(self, label: str) -> None:
        """Forget the previous episode; ``label`` (e.g. ``"episode 0 (seed 0)"``) goes in messages."""
        self.label = label
        self.dead = {}
        self.waiting = set()
        self.seen = set()

    # Splitting results ------------------------------------------------------------------------

    def split_reset(self, result: Any) -> Frame | None:
        """The obs and infos of a ``reset()`` result, or None (with an ``api.reset`` finding)."""
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            self.collector.add(
                "api.reset",
                f"{reset_in(self.label)} returned {shape_of(result)}; expected a tuple (obs, infos) of two dicts",
                step=0,
                key="shape",
                cut_short=True,
            )
            return None
        bad = [name for name, part in zip(("obs", "infos"), result, strict=True) if not isinstance(part, dict)]
        if bad:
            self.collector.add(
                "api.reset",
                f"{reset_in(self.label)} returned "
                f"{', '.join(f'{n} as {a_type(p)}' for n, p in zip(('obs', 'infos'), result, strict=True) if n in bad)}; "
                "expected dicts keyed by agent id",
                step=0,
                key="types",
                cut_short=True,
            )
            return None
        plain = self._plain(result, ("obs", "infos"), "api.reset", "reset()", 0)
        return None if plain is None else Frame(0, *plain[0], originals=plain[1])

    def split_step(self, result: Any, step: int) -> Frame | None:
        """The five dicts of a ``step()`` result, or None (with an ``api.step`` finding)."""
        if not isinstance(result, (tuple, list)) or len(result) != 5:
            self.collector.add(
                "api.step",
                f"step() returned {shape_of(result)} at step {step} of {self.label}; expected a tuple "
                f"(obs, rewards, terminateds, truncateds, infos) of five dicts",
                step=step,
                key="shape",
                cut_short=True,
            )
            return None
        bad = [f"{name} as {a_type(part)}" for name, part in zip(_RESULT_NAMES, result, strict=True) if not isinstance(part, dict)]
        if bad:
            self.collector.add(
                "api.step",
                f"step() returned {', '.join(bad)} at step {step} of {self.label}; expected dicts keyed by agent id",
                step=step,
                key="types " + " ".join(bad),
                cut_short=True,
            )
            return None
        plain = self._plain(result, _RESULT_NAMES, "api.step", "step()", step)
        if plain is None:
            return None
        (obs, rewards, terminateds, truncateds, infos), originals = plain
        return Frame(step, obs, infos, rewards, terminateds, truncateds, originals)

    def _plain(
        self, parts: Any, names: tuple[str, ...], rule: str, call: str, step: int
    ) -> tuple[list[dict], dict[str, Any]] | None:
        """``parts`` with each dict subclass read into a plain dict (the checks then never call
        the env's own methods), and those subclasses' objects by name (obs.aliasing watches
        them); None, with a finding, when reading one raises."""
        plain, originals = [], {}
        for name, part in zip(names, parts, strict=True):
            if type(part) is not dict:
                try:
                    originals[name], part = part, dict(part.items())
                except ENV_ERRORS as error:
                    self.collector.add(rule, f"reading the {name} dict that {call} returned in {self.label} raised",
                                       step=step, error=error, key="unreadable " + name, cut_short=True)
                    return None
            plain.append(part)
        return plain, originals

    # The rules --------------------------------------------------------------------------------

    def check(self, frame: Frame) -> Verdict:
        """Check one frame; return who acts next, the trusted masks and whether the episode is over."""
        at = f"at step {frame.step} of {self.label}" if frame.step else f"after {reset_in(self.label)}"
        self._known(frame, at)
        done, ending, all_missing = self._flags(frame, at) if frame.step else (False, set(), False)
        if frame.step:
            self._dead_agents(frame, at)
            self._final_observations(frame, at, done, ending)
            self._rewards(frame, at)
        self._observations(frame, at)
        acting = [] if done else [a for a in frame.obs if a not in ending]
        self.waiting = (self.waiting - set(frame.obs) - ending) | set(acting)
        self.seen.update(frame.obs)
        self._infos(frame, at, acting)
        # Agents ending in a step that ends the episode may stay listed: nobody acts on that list.
        self._agents_attr(frame, at, acting, set() if done else ending)
        for agent_id in ending:
            self.dead.setdefault(agent_id, frame.step)
        if not acting and not done:
            if all_missing:  # already an api.all-key finding; every agent ended: treat as over
                return Verdict([], {}, True)
            if frame.obs:  # the obs dict holds only final observations: the agents look as if they acted on
                what = (f"every agent in the obs dict ({names(frame.obs)}) terminated or truncated {at}, so no agent "
                        "must act, but '__all__' is not True")
            else:
                what = f"the obs dict {at} is empty, so no agent must act, but '__all__' is not True"
            self.collector.add(
                "lifecycle.no-actor",
                what,
                step=frame.step,
                key="reset" if frame.step == 0 else "step",
                cut_short=True,
            )
            return Verdict([], {}, False, stalled=True)
        masks: dict[Any, np.ndarray | SlotMasks] = {}
        stuck = False  # an acting agent without a legal action: random play cannot go on legally
        for agent_id in acting:
            mask = self._mask(agent_id, frame.obs[agent_id], frame.step, at)
            if mask is _NO_LEGAL_ACTION:
                stuck = True
            elif mask is not None:
                masks[agent_id] = mask
        if stuck:  # once per stopped episode, however many agents have no legal action
            self.collector.cut_short("masks.valid")
        return Verdict(acting, masks, done, stalled=stuck)

    def _known(self, frame: Frame, at: str) -> None:
        tables = [("obs", frame.obs, ()), ("infos", frame.infos, (COMMON,))]
        if frame.step:
            tables += [
                ("rewards", frame.rewards, ()),
                ("terminateds", frame.terminateds, (ALL,)),
                ("truncateds", frame.truncateds, (ALL,)),
            ]
        for name, table, extra in tables:
            for key in table:
                if key not in self.possible and key not in extra:
                    allowed = f" or {names(extra)}" if extra else ""
                    self.collector.add(
                        "ids.known",
                        f"{name} {at} has key {shown(key)}, which is not in possible_agents {names(self.possible_list)} (as read before the first reset){allowed}",
                        agent=key,
                        step=frame.step,
                        key=f"{name}",
                    )

    def _flags(self, frame: Frame, at: str) -> tuple[bool, set[Any], bool]:
        all_missing = ALL not in frame.terminateds
        if all_missing:
            self.collector.add(
                "api.all-key",
                f"terminateds {at} has no '__all__' key (keys: {names(frame.terminateds)})",
                step=frame.step,
                key="missing",
            )
        for name, table in (("terminateds", frame.terminateds), ("truncateds", frame.truncateds)):
            if ALL in table and not is_flag(table[ALL]):
                self.collector.add(
                    "api.all-key",
                    f"{name}['__all__'] {at} is {shown(table[ALL])} ({a_type(table[ALL])}); expected a bool",
                    step=frame.step,
                    key=f"{name} type",
                )
            for agent_id, flag in table.items():
                if agent_id != ALL and not is_flag(flag):
                    self.collector.add(
                        "api.step",
                        f"{name}[{shown(agent_id)}] {at} is {shown(flag)} ({a_type(flag)}); expected a bool",
                        agent=agent_id,
                        step=frame.step,
                        key=f"{name} flag type",
                    )
        done = truthy(frame.terminateds.get(ALL, False)) or truthy(frame.truncateds.get(ALL, False))
        ending = {
            a for table in (frame.terminateds, frame.truncateds) for a, flag in table.items() if a != ALL and truthy(flag)
        }
        return done, ending, all_missing

    def _dead_agents(self, frame: Frame, at: str) -> None:
        for name, table in (("obs", frame.obs), ("terminateds", frame.terminateds), ("truncateds", frame.truncateds)):
            for agent_id in table:
                if agent_id in self.dead:
                    self.collector.add(
                        "lifecycle.dead-agent",
                        f"agent {shown(agent_id)} appears in {name} {at}, after it terminated or truncated at step "
                        f"{self.dead[agent_id]}",
                        agent=agent_id,
                        step=frame.step,
                        key=name,
                    )

    def _final_observations(self, frame: Frame, at: str, done: bool, ending: set[Any]) -> None:
        """Agents that end in this step without a final observation, where one is needed."""
        truncated_by_all = truthy(frame.truncateds.get(ALL, False))  # with terminateds' too, RLlib reads truncation
        for agent_id in sorted({*ending, *(self.waiting if truncated_by_all else ())}, key=repr):
            if agent_id in frame.obs or agent_id in self.dead or agent_id not in self.seen:
                continue  # observed; or a lifecycle.dead-agent finding already; or never in the episode (nothing to end)
            if truthy(frame.truncateds.get(agent_id, False)):
                how = "was truncated"
            elif agent_id not in ending:
                how = "acted and was truncated by '__all__'"
            elif truncated_by_all:  # RLlib reads an agent's end in such a step as a truncation
                how = "terminated in a step that truncates the episode ('__all__', read as a truncation)"
            elif done:  # terminated with the episode: a final observation only if the source has one
                continue
            else:
                how = "terminated while the episode goes on"
            self.collector.add(
                "lifecycle.final-obs",
                f"agent {shown(agent_id)} {how} {at} without a final observation in the obs dict "
                f"(obs keys: {names(frame.obs)})",
                agent=agent_id,
                step=frame.step,
                key=how,
            )

    def _rewards(self, frame: Frame, at: str) -> None:
        for agent_id, reward in frame.rewards.items():
            problem = reward_problem(reward)
            if problem is not None:
                self.collector.add(
                    "rewards.numeric",
                    f"reward of agent {shown(agent_id)} {at} is {problem}; expected a finite real number",
                    agent=agent_id,
                    step=frame.step,
                    key=problem.split(" (")[0] if "array" not in problem else "array",
                )

    def _observations(self, frame: Frame, at: str) -> None:
        for agent_id, observation in frame.obs.items():
            space = self.obs_spaces.get(agent_id)
            if space is None:
                continue
            try:
                reason = why_not_contained(space, observation)
            except ENV_ERRORS as error:  # values so odd that even the diagnosis fails
                reason = f"checking it against the space raised {describe(error)}"
            if reason is not None:
                self.collector.add(
                    "spaces.obs-contains",
                    f"observation of agent {shown(agent_id)} {at} is not in its space {space}: {reason}",
                    agent=agent_id,
                    step=frame.step,
                    hint=_observation_hint(reason),
                    key=_kind_of(reason),
                )

    def _infos(self, frame: Frame, at: str, acting: list[Any]) -> None:
        for agent_id, info in frame.infos.items():
            if agent_id != COMMON and agent_id not in frame.obs and agent_id in self.possible:
                self.collector.add(
                    "infos.keys",
                    f"infos {at} has an entry for agent {shown(agent_id)}, which is not in the obs dict "
                    f"(obs keys: {names(frame.obs)}); infos keys must be obs keys or '__common__'",
                    agent=agent_id,
                    step=frame.step,
                    key="not in obs",
                )
            if not isinstance(info, dict):
                self.collector.add(
                    "infos.keys",
                    f"infos[{shown(agent_id)}] {at} is {a_type(info)} ({shown(info)}); expected a dict",
                    agent=agent_id,
                    step=frame.step,
                    key="not a dict",
                )
            elif MASK_KEY in info and agent_id in acting and not has_mask(frame.obs.get(agent_id)):
                self.collector.add(
                    "masks.in-info",
                    f"agent {shown(agent_id)} {at} has an action_mask in its info, beside an observation without "
                    "one: nothing follows it (random actions here ignore it too)",
                    agent=agent_id,
                    step=frame.step,
                    key="in info",
                )

    def _agents_attr(self, frame: Frame, at: str, acting: list[Any], ending: set[Any]) -> None:
        try:
            agents = getattr(self.env, "agents", None)
        except ENV_ERRORS as error:
            self.collector.add("ids.agents-attr", f"reading env.agents {at} raised", step=frame.step, error=error, key="raised")
            return
        if not isinstance(agents, (list, tuple)):
            self.collector.add(
                "ids.agents-attr",
                f"env.agents {at} is {shown(agents)}; expected a list of the agents alive now",
                step=frame.step,
                key="type",
            )
            return
        unhashable = [a for a in agents if not is_hashable(a)]
        if unhashable:
            self.collector.add(
                "ids.agents-attr",
                f"env.agents {at} holds {', '.join(shown(a, 40) for a in unhashable)}, which cannot be an agent "
                "id (ids must be hashable)",
                step=frame.step,
                key="unhashable",
            )
            agents = [a for a in agents if is_hashable(a)]
        alive = set(agents)
        for agent_id in agents:
            if agent_id not in self.possible:
                self.collector.add(
                    "ids.agents-attr",
                    f"env.agents {at} lists {shown(agent_id)}, which is not in possible_agents {names(self.possible_list)} (as read before the first reset)",
                    agent=agent_id,
                    step=frame.step,
                    key="unknown",
                )
            # Ended earlier and back in obs: a lifecycle.dead-agent finding. Ending now: it has ended.
            elif agent_id in ending or (agent_id in self.dead and agent_id not in frame.obs):
                when = "in this step" if agent_id in ending else "earlier"
                self.collector.add(
                    "ids.agents-attr",
                    f"env.agents {at} still lists {shown(agent_id)}, which terminated or truncated {when}; "
                    "env.agents lists the agents alive now",
                    agent=agent_id,
                    step=frame.step,
                    key="ended still listed",
                )
        for agent_id in acting:
            # Unknown ones: ids.known says so; ones that ended earlier: lifecycle.dead-agent.
            if agent_id not in alive and agent_id in self.possible and agent_id not in self.dead:
                self.collector.add(
                    "ids.agents-attr",
                    f"agent {shown(agent_id)} must act {at} (it is in the obs dict) but is not in env.agents {names(agents)}",
                    agent=agent_id,
                    step=frame.step,
                    key="acting not alive",
                )

    def _mask(self, agent_id: Any, observation: Any, step: int, at: str) -> Any:
        """The agent's mask (its members' masks, for a group) if it is sound; else a finding, and
        None, or :data:`_NO_LEGAL_ACTION` when the mask allows no action at all."""
        space = self.act_spaces.get(agent_id)
        try:
            form = None
            if type(observation) is tuple:  # a group: each member's mask sits in its slot
                grouped = isinstance(space, spaces.Tuple)
                problem = _slot_mask_problem(observation, space, "", _sound_slot) if grouped else None
                if grouped and not problem:
                    form = _slot_mask_problem(observation, space, "", _slot_form)
                mask = action_masks_of(observation)
            else:
                mask = action_mask_of(observation) if isinstance(observation, Mapping) else None
                problem = _mask_problem(mask, space, may_be_empty=False) if mask is not None and space is not None else None
        except ENV_ERRORS as error:
            self.collector.add(
                "masks.valid",
                f"action_mask of agent {shown(agent_id)} {at} is not an array: {describe(error)}",
                agent=agent_id,
                step=step,
                key="not an array",
            )
            return None
        if isinstance(observation, Mapping) and mask is not None:
            form = _mask_form_problem(observation, np.asarray(mask))
        hint = _FORM_HINT if form is not None else None
        if problem is None:
            if form is not None:  # a sound mask in another form: still followed, but the trainer refuses it
                self.collector.add("masks.valid", f"agent {shown(agent_id)} {at} has {form}", agent=agent_id,
                                   step=step, key=form[:30], hint=hint)
            return mask
        also = f"; it also has {form}" if form is not None and type(observation) is not tuple else ""
        self.collector.add("masks.valid", f"agent {shown(agent_id)} must act {at} and has {problem}{also}",
                           agent=agent_id, step=step, key=problem[:30],
                           hint=None if hint is None else f"{RULES['masks.valid'].fix} {hint}")
        return _NO_LEGAL_ACTION if problem.startswith(_ALLOWS_NOTHING) else None


_FORM_HINT = (f"Return a masked observation as the Dict {{{OBS_KEY!r}: ..., {MASK_KEY!r}: mask}} of int8 0/1 entries, "
              f"in the space `marl_core.spaces.masked_space(observation_space, num_actions)`.")


_VALUES = re.compile(r"-?\d+(\.\d*)?([eE][-+]?\d+)?|'[^']*'|\"[^\"]*\"")


def has_mask(observation: Any) -> bool:
    """Whether ``observation`` carries an action mask in the canonical Dict form."""
    return isinstance(observation, Mapping) and MASK_KEY in observation


def _kind_of(reason: str) -> str:
    """The kind of a problem with an observation: its path and its words, without the values in
    it, so that one bug seen with many values is one finding, and two bugs at one path are two."""
    path, sep, words = reason.partition(": ") if reason.startswith("at ") else ("", "", reason)
    return path + sep + _VALUES.sub("#", words)


def _observation_hint(reason: str) -> str | None:
    """The fix for a ``spaces.obs-contains`` reason that the rule's dtype-and-shape fix does not
    fit (None: that one fits)."""
    if "a NoneType" in reason:  # None as the whole observation, or in a part of it
        return None if reason.startswith("at ") else (
            "Give every agent in the obs dict a value of its observation space; an agent with nothing to "
            "observe is left out of the obs dict, not given None.")
    if "where the space needs a tuple" in reason:
        return "Return a tuple for a Tuple space (tuple(values)), not a list or an array."
    if "where the space needs a dict" in reason:
        return "Return a dict with the Dict space's keys for a Dict space."
    return None


_ALLOWS_NOTHING = "an action_mask that allows no"
_NO_LEGAL_ACTION = object()  # what CallChecker._mask gives for an acting agent whose mask allows nothing


def _mask_problem(mask: np.ndarray, space: Any, may_be_empty: bool) -> str | None:
    """What is wrong with ``mask`` for ``space`` (None: nothing). A group's member that does not
    act now shows a mask that allows nothing, so a slot's mask ``may_be_empty``."""
    size = action_mask_size(space)
    if size is None:
        return f"an action_mask, but its action space {space} is not Discrete or MultiDiscrete"
    problem = mask_problem(mask, size, space)
    if problem:
        return problem
    if may_be_empty and not mask.any():
        return None
    if isinstance(space, spaces.Discrete) and not mask.any():
        return f"{_ALLOWS_NOTHING} action"
    if isinstance(space, spaces.MultiDiscrete):
        bounds = np.cumsum([0, *space.nvec.flat])
        empty = [i for i in range(len(bounds) - 1) if not mask[bounds[i] : bounds[i + 1]].any()]
        if empty:
            return f"{_ALLOWS_NOTHING} value in action dimension(s) {empty}"
    return None


def _mask_form_problem(observation: Mapping[Any, Any], mask: np.ndarray) -> str | None:
    """What sets a sound mask apart from the one canonical form (DESIGN.md), or None."""
    if set(observation) != {OBS_KEY, MASK_KEY}:
        rename = (f": rename 'observations' to {OBS_KEY!r} (RLlib's action-masking examples use the plural)"
                  if set(observation) == {"observations", MASK_KEY} else "")
        return (
            f"an action_mask in a Dict with keys {sorted(map(str, observation))}; a masked observation is a "
            f"Dict of exactly {OBS_KEY!r} and {MASK_KEY!r}{rename}"
        )
    if mask.dtype.kind not in "biu":
        return (f"an action_mask of dtype {mask.dtype}; masks hold integers or bools (int8, 1 = legal): build it "
                f"with .astype(np.int8), and its space as Box(0, 1, (n,), np.int8)")
    return None


def _sound_slot(item: Mapping[Any, Any], mask: np.ndarray, space: Any) -> str | None:
    return _mask_problem(mask, space, may_be_empty=True)


def _slot_form(item: Mapping[Any, Any], mask: np.ndarray, space: Any) -> str | None:
    return _mask_form_problem(item, mask)


def _slot_mask_problem(
    observation: tuple,
    space: spaces.Tuple,
    path: str,
    problem_of: Callable[[Mapping[Any, Any], np.ndarray, Any], str | None],
) -> str | None:
    """The first problem that ``problem_of(member observation, mask, slot space)`` finds with
    the masks in the slots of a group's ``observation`` (None: none)."""
    if len(observation) != len(space.spaces):
        return None  # spaces.obs-contains says so
    for index, (item, sub) in enumerate(zip(observation, space.spaces, strict=True)):
        where = f"{path}[{index}]"
        if type(item) is tuple:
            nested = isinstance(sub, spaces.Tuple)
            problem = _slot_mask_problem(item, sub, where, problem_of) if nested else None
        else:
            mask = action_mask_of(item) if isinstance(item, Mapping) else None
            problem = None if mask is None else problem_of(item, mask, sub)
            problem = problem and f"in slot {where} {problem}"
        if problem:
            return problem
    return None

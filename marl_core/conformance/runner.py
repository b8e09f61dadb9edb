"""``check_env``: drive an env with seeded random legal actions and collect every violation.

The plan of a check:

1. build the env (see :mod:`marl_core.conformance.target`) and pickle its factory (``pickle``);
2. read ``possible_agents`` and every agent's spaces (``ids.*``, ``spaces.defined``);
3. call ``reset()`` without arguments, then explore ``episodes`` episodes (seeds ``seed``,
   ``seed + 1``, ...) with random actions that respect action masks, checking every result
   (:mod:`marl_core.conformance.checks`) and whether returned observations change later
   (``obs.aliasing``) or the episode runs past ``max_steps`` (``termination.bounded``);
4. replay every episode with the same seeds and actions on the same instance (state leaking
   across ``reset()``) and on a fresh instance, comparing whole trajectories and watching the
   global random generators (``determinism.seed``);
5. call ``close()`` twice (``close.idempotent``).

Every exception raised by the env becomes a finding with its traceback; nothing relies on
``assert``, and the global random generators are never seeded.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
from gymnasium import spaces as gym_spaces

from marl_core.conformance.checks import (
    NO_ARGUMENTS,
    CallChecker,
    Frame,
    has_mask,
    lookup_spaces,
    names,
    reset_in,
    space_of,
)
from marl_core.conformance.collect import (
    ENV_ERRORS,
    CheckInterrupted,
    Collector,
    describe,
    env_method_of,
    is_hashable,
    shown,
)
from marl_core.conformance.determinism import (
    Episode,
    Record,
    drew,
    fingerprint,
    first_difference,
    global_rng_state,
    same,
)
from marl_core.conformance.report import ConformanceReport
from marl_core.conformance.rules import RULES
from marl_core.conformance.target import Target, copier, name_of, old_api_agent_ids, resolve
from marl_core.errors import ConformanceError, TargetBuildError
from marl_core.spaces import sample_action, sample_action_for, snapshot

logger = logging.getLogger(__name__)

DEFAULT_EPISODES = 3
"""Episodes explored by default; each is replayed twice more for ``determinism.seed``."""

DEFAULT_MAX_STEPS = 1000
"""Step budget per episode by default (``termination.bounded`` warns past it)."""

FRESH_RETRIES = 3
"""Further fresh instances replayed when the first replayed alike but its constructor drew from
numpy's or Python's global generator (whose draws may have agreed by chance)."""

_GONE = object()  # a key missing from a dict returned earlier
_POSSIBLE_HINT = "Set self.possible_agents in __init__ to the list of every agent id that may ever appear."


_RAISED_HINT = (
    "Fix the exception shown in the traceback: the checker calls reset(seed=..., options=None) and sends "
    "one action per agent in the obs dict, drawn from its action space and legal under its action mask."
)


def _reset_raised_hint(error: BaseException) -> str:
    """The fix for reset()'s exception: ``api.reset``'s own when its signature refused the call
    (a TypeError raised at the call itself, before any of the env's code ran)."""
    traceback = error.__traceback__
    signature = (isinstance(error, TypeError) and traceback is not None and traceback.tb_next is None
                 and "argument" in str(error))
    return RULES["api.reset"].fix if signature else _RAISED_HINT


_RNG_HINT = (
    "Draw every random number from self.np_random (seeded by super().reset(seed=seed)), never from "
    "np.random.* or the random module."
)
# PettingZoo's base classes have no np_random and a reset that raises NotImplementedError.
_PETTINGZOO_RNG_HINT = (
    "Seed a generator in reset(seed): self.np_random, self.np_random_seed = "
    "gymnasium.utils.seeding.np_random(seed), as PettingZoo's own envs do, and draw every random number "
    "from it, never from np.random.* or the random module."
)


def check_env(
    env_or_factory: Any,
    *,
    seed: int = 0,
    episodes: int = DEFAULT_EPISODES,
    max_steps: int = DEFAULT_MAX_STEPS,
    skip: Iterable[str] | None = (),
    name: str | None = None,
) -> ConformanceReport:
    """Check a multi-agent env against every conformance rule and report all violations.

    Args:
        env_or_factory: an env instance (ours, or any object following the protocol such as a
            subclass of RLlib's ``MultiAgentEnv``); a class or factory, called with no argument (or
            with ``{}`` when it needs a ``config``); or a PettingZoo, OpenSpiel or Gymnasium env,
            converted with ``bridges.wrap``. An instance is used as it is, and closed at the end
            (``close.idempotent`` calls ``close()`` twice, as Gymnasium's checker closes its env).
        seed: episode ``i`` is reset with ``seed + i``; the random actions are seeded from it too.
        episodes: how many episodes to explore (each is replayed twice for ``determinism.seed``).
        max_steps: step budget per episode (``termination.bounded`` warns past it).
        skip: rule ids not to check (see :data:`~marl_core.conformance.rules.RULES`); None: none.
        name: how the report names the target (``marl-check`` passes the ``MODULE:ATTR`` typed);
            default: the ``module.QualName`` of the object.

    Returns:
        The report; ``report.ok`` is False when any finding is an error. A crash of the env's code
        is a finding, never an exception.

    Raises:
        TargetBuildError: ``env_or_factory`` is not an env and none could be built from it.
        ConformanceError: unknown rule ids in ``skip`` (or a string for it), ``episodes`` /
            ``max_steps`` below 1, or a negative ``seed`` (or any of them not an integer).
        KeyboardInterrupt: passed on, with the report of what was checked until then (its
            ``stopped`` says where) as its ``partial_report`` attribute; so is
            :class:`~marl_core.conformance.collect.CheckInterrupted` (``marl-check --timeout``).

    Example:
        >>> from marl_core.conformance import check_env
        >>> from marl_core.envs import RockPaperScissors
        >>> report = check_env(RockPaperScissors)
        >>> report.ok, report.findings
        (True, ())
    """
    skip = () if skip is None else skip
    if isinstance(skip, (str, bytes)):  # iterated, it would be its characters
        raise ConformanceError(f"skip must be a list of rule ids, received the string {skip!r} (write [{skip!r}])")
    skipped = tuple(dict.fromkeys(skip))
    unknown = [rule for rule in skipped if rule not in RULES]
    if unknown:
        raise ConformanceError(f"unknown rule id(s) in skip: {unknown}; known: {sorted(RULES)}")
    # A negative seed: gymnasium's seeding, and so reset(seed=...) of most envs, refuses it.
    seed, episodes, max_steps = (_whole_number(label, value, least) for label, value, least in
                                 (("seed", seed, 0), ("episodes", episodes, 1), ("max_steps", max_steps, 1)))
    started = time.perf_counter()
    collector = Collector(frozenset(skipped))

    def report(target_name: str, via: str, steps: int, stopped: str = "") -> ConformanceReport:
        return ConformanceReport(
            target=target_name,
            via=via,
            findings=collector.findings(),
            seed=seed,
            episodes=episodes,
            max_steps=max_steps,
            steps=steps,
            seconds=time.perf_counter() - started,
            skipped=skipped,
            skipped_exceptions=collector.skipped_exceptions,
            stopped=stopped,
        )

    try:
        target = resolve(env_or_factory)
    except TargetBuildError as error:
        # A foreign env built, then crashed in the reset its bridge makes (PettingZoo's bridges read
        # the infos of one for action masks): a finding of the env, as any crash of its code.
        if error.env_method != "reset" or not collector.wants("api.reset"):
            raise
        collector.add("api.reset", "reset() raised while bridges.wrap converted the env (a PettingZoo bridge "
                      "resets it once to look for action masks in its infos); nothing else could be checked",
                      step=0, error=error.__cause__, hint=_RAISED_HINT)
        return report(name or name_of(env_or_factory), "bridges.wrap, which could not finish converting it", 0)
    if name is not None:
        target.name = name
    run = _Run(target, collector, seed, episodes, max_steps)

    try:
        run.run()
    except (KeyboardInterrupt, CheckInterrupted) as stop:  # what was found until then goes with it
        what = "interrupted" if isinstance(stop, KeyboardInterrupt) else "stopped by its time limit"
        stop.partial_report = report(  # type: ignore[union-attr]
            target.name, target.via, run.steps, f"{what} while {run.where}, after {run.steps} steps")
        raise
    except BaseException as error:  # the env's code raised where no rule's check could take it: the run stops
        method = env_method_of(error, past_helpers=isinstance(error, Exception))
        if isinstance(error, Exception) and method is None:  # raised in no frame of the env's: the checker's failure
            raise
        rule = "api.reset" if method == "reset" else "api.step"
        if isinstance(error, Exception):  # an env object's method the checker reads through (an obs's items())
            message = (f"the env's code raised {type(error).__name__} in {method}() while {run.where}; the check "
                       f"stopped there (after {run.steps} steps)")
            key, hint = "unguarded exception", _RAISED_HINT
        else:  # trio's Cancelled, say
            message = (f"the env raised {type(error).__name__}, which is not an Exception; the check stopped there "
                       f"(after {run.steps} steps)")
            key, hint = "base exception", ("Raise Exception subclasses from env code: other BaseExceptions pass "
                                           "through every `except Exception`, RLlib's env runners' and this "
                                           "checker's included.")
        if not run.collector.wants(rule):  # skipping the rule must not turn an unfinished check into a pass
            raise ConformanceError(f"{message}: {describe(error)}") from error
        run.collector.add(rule, message, error=error, key=key, hint=hint)
    return report(target.name, target.via, run.steps)


def _whole_number(label: str, value: Any, least: int) -> int:
    """``value`` as a Python int (numpy's integers too).

    Raises:
        ConformanceError: ``value`` is not an integer (a bool neither) of at least ``least``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ConformanceError(f"{label} must be an integer of at least {least}, received {value!r}")
    return int(value)


class _Run:
    """One check of one target (the state of :func:`check_env`)."""

    def __init__(self, target: Target, collector: Collector, seed: int, episodes: int, max_steps: int) -> None:
        self.target = target
        self.env = target.env
        self.collector = collector
        self.seed = seed
        self.episodes = episodes
        self.max_steps = max_steps
        self.steps = 0
        self.where = "setting up"  # what the check is doing, for a report cut short
        self._previous: list[tuple[Any, Any, Any, str]] = []
        self._previous_dicts: list[tuple[str, dict[Any, Any], list[tuple[Any, Any]], str]] = []
        self._first_possible: list[Any] | None = None  # possible_agents as first read, when a list
        # A PettingZoo env (bridged, not one of ours exported) seeds its own generator: super().reset() raises there.
        self._pettingzoo = type(self.env).__module__ == "bridges.pettingzoo" and getattr(self.env, "_export", None) is None

    def run(self) -> None:
        self._pickle()
        possible = self._possible_agents()
        obs_spaces, act_spaces = lookup_spaces(self.env, possible, self.collector)
        self.act_spaces = act_spaces
        self.checker = CallChecker(self.env, self.collector, possible, obs_spaces, act_spaces)
        self.where = "calling reset() without arguments"
        self._reset_without_arguments()
        explored = []
        for index in range(self.episodes):
            self.where = f"exploring episode {index}"
            explored.append(self._explore(index))
        if self.collector.wants("determinism.seed"):
            # Last episode first: state carried from reset to reset (a dealer that rotates with
            # every reset, say) then differs by one reset, whatever its period.
            self._replay(self.env, explored, "on the same instance reset again after the other episodes", leak=True,
                         last_first=True)
            self._compare_fresh(explored)
        self._close()

    # Setup -----------------------------------------------------------------------------------

    def _pickle(self) -> None:
        import cloudpickle

        data = None
        try:
            data = cloudpickle.dumps(self.target.picklable)
            cloudpickle.loads(data)
        except ENV_ERRORS as error:
            what = "the env factory" if self.target.factory is not None else "the env instance"
            message = f"{what} {self.target.name} does not survive a cloudpickle round trip"
            data = None
            if self.target.factory is None:
                fresh, why = copier(None, self.target.picklable)
                self.target.factory, self.target.fresh_error = fresh, why
                if why:
                    message += f", and determinism across fresh instances was not checked because {why}"
            self.collector.add("pickle", message, error=error)
            return
        if self.target.factory is None:
            self.target.factory, self.target.fresh_error = copier(data, self.target.picklable)

    def _possible_agents(self) -> list[Any]:
        try:
            possible = getattr(self.env, "possible_agents", None)
        except ENV_ERRORS as error:
            self.collector.add("ids.agents-attr", "reading possible_agents raised", error=error, hint=_POSSIBLE_HINT)
            return []
        if not isinstance(possible, (list, tuple)) or not possible:
            old_api = old_api_agent_ids(self.env)
            self.collector.add(
                "ids.agents-attr",
                f"possible_agents is {shown(possible)}; expected a non-empty list of every agent id that may appear"
                + (f" (the env names {names(old_api)} in _agent_ids, as on RLlib's old API stack, which this "
                   "MultiAgentEnv does not read)" if old_api else ""),
                hint=_POSSIBLE_HINT + (" On RLlib's old API stack: self.possible_agents = sorted(self._agent_ids), "
                                       "or subclass RLlib's MultiAgentEnv (bridges.wrap reads _agent_ids)."
                                       if old_api else ""),
            )
            return _ids_in(possible) or old_api
        possible = self._first_possible = list(possible)
        unhashable = [a for a in possible if not is_hashable(a)]
        if unhashable:
            self.collector.add(
                "ids.agents-attr",
                f"possible_agents holds unhashable ids {names(unhashable)}; agent ids must be usable as dict keys",
                hint=_POSSIBLE_HINT,
            )
            possible = [a for a in possible if is_hashable(a)]
        repeated = sorted(repr(a) for a, count in Counter(possible).items() if count > 1)
        if repeated:
            self.collector.add("ids.agents-attr", f"possible_agents lists {', '.join(repeated)} more than once")
        odd = [a for a in possible if not isinstance(a, str)]
        if odd:
            self.collector.add(
                "ids.strings",
                f"{len(odd)} agent id(s) are not strings: {names(odd)} ({type(odd[0]).__name__})",
            )
        return possible

    def _reset_without_arguments(self) -> None:
        counted = self.collector.skipped_exceptions
        try:
            self._check_reset_without_arguments()
        finally:  # no play starts from this reset: nothing it finds cut an episode short
            self.collector.skipped_exceptions = counted

    def _check_reset_without_arguments(self) -> None:
        self.checker.start_episode(NO_ARGUMENTS)
        try:
            result = self.env.reset()
        except ENV_ERRORS as error:
            self.collector.add(
                "api.reset", f"{NO_ARGUMENTS} raised", step=0, error=error, hint=_reset_raised_hint(error),
                key="no arguments"
            )
            return
        self._possible_kept(NO_ARGUMENTS)
        frame = self.checker.split_reset(result)
        if frame is not None:  # the results of the no-seed reset RLlib makes are checked like any
            self.checker.check(frame)

    def _possible_kept(self, label: str) -> None:
        """An ``ids.agents-attr`` finding when ``possible_agents`` differs from the list read
        before the first reset, is no longer a list, or cannot be read (the checker goes on with
        the first list, as tools read it once)."""
        first = self._first_possible
        if first is None:
            return  # not a list before the first reset: _possible_agents reported it
        try:
            now = getattr(self.env, "possible_agents", None)
        except ENV_ERRORS as error:
            self.collector.add("ids.agents-attr", f"reading possible_agents raised after {reset_in(label)}",
                               error=error, key="changed", hint=_POSSIBLE_HINT)
            return
        try:
            if isinstance(now, (list, tuple)) and list(now) == first:
                return
        except ENV_ERRORS as error:  # ids whose == does not give a bool
            self.collector.add("ids.agents-attr", f"possible_agents after {reset_in(label)} cannot be compared "
                               f"with the list read before the first reset", error=error, key="changed",
                               hint=_POSSIBLE_HINT)
            return
        now_text = names(list(now)) if isinstance(now, (list, tuple)) else shown(now)
        try:
            shared = isinstance(now, list) and getattr(self.env, "agents", None) is now
        except ENV_ERRORS:
            shared = False
        self.collector.add(
            "ids.agents-attr",
            f"possible_agents changed after {reset_in(label)}: {names(first)} before the first reset, "
            f"{now_text} now; it lists every agent that may ever appear and stays the same for the "
            "env's life (the checker goes on with the first list)"
            + ("; agents and possible_agents are one list object, so changing agents in place changes both"
               if shared else ""),
            key="changed",
            hint=_POSSIBLE_HINT + (" Give agents a list of its own in reset(): self.agents = list(self.possible_agents)."
                                   if shared else ""),
        )

    def _spaces_kept(self, label: str) -> None:
        """A ``spaces.defined`` finding for each space that differs from the one read before the
        first reset (the checker goes on with the first: tools read spaces once)."""
        for first, kind in zip((self.checker.obs_spaces, self.act_spaces), ("observation", "action"), strict=True):
            for agent_id, space in first.items():
                try:
                    now = space_of(self.env, agent_id, kind)
                    changed = now is not space and now != space
                except ENV_ERRORS:
                    continue  # lookup_spaces reported how this lookup fails
                if changed:
                    self.collector.add(
                        "spaces.defined",
                        f"the {kind} space of agent {shown(agent_id)} changed after {reset_in(label)}: {shown(space)} "
                        f"before the first reset, {shown(now)} now; spaces stay the same for the env's life",
                        agent=agent_id,
                        key=f"changed {kind}",
                    )

    # Exploration -----------------------------------------------------------------------------

    def _explore(self, index: int) -> Episode:
        seed = self.seed + index
        label = f"episode {index} (seed {seed})"
        episode = Episode(seed)
        self.checker.start_episode(label)
        rng = np.random.default_rng([self.seed % 2**32, index])
        before = global_rng_state()
        try:
            result = self.env.reset(seed=seed, options=None)
        except ENV_ERRORS as error:
            self.collector.add(
                "api.reset", f"reset(seed={seed}, options=None) raised in {label}", step=0, error=error,
                hint=_reset_raised_hint(error), key="raised"
            )
            return episode
        after = global_rng_state()
        self._possible_kept(label)
        self._spaces_kept(label)
        frame = self.checker.split_reset(result)
        if frame is None:
            return episode
        self._record(episode, frame, before, after, label)
        verdict = self.checker.check(frame)
        step = 0
        while not verdict.done and not verdict.stalled:
            if step >= self.max_steps:
                self.collector.add(
                    "termination.bounded",
                    f"{label} did not end within max_steps={self.max_steps} steps of random play",
                    step=step,
                    key="unbounded",
                )
                break
            step += 1
            actions = self._actions(verdict, frame.obs, rng, step, label)
            if actions is None:
                break
            before = global_rng_state()
            sent = snapshot(actions)  # the env's own copy: what it does to it is checked below
            try:
                result = self.env.step(sent)
            except ENV_ERRORS as error:
                unmasked = [a for a in actions if a not in verdict.masks and has_mask(frame.obs.get(a))]
                hint = _RAISED_HINT if not unmasked else (
                    f"{_RAISED_HINT} Except for {names(unmasked)}: its action mask is unsound (the masks.valid "
                    "finding says why), so its action was drawn from the whole space, which the env may refuse.")
                # A bridge refusing what the env it wraps returned may name the rule broken.
                rule = getattr(error, "rule", None)
                self.collector.add(
                    rule if rule in RULES else "api.step",
                    f"step() raised at step {step} of {label} with actions {shown(actions, 120)}",
                    step=step,
                    error=error,
                    hint=hint if rule not in RULES else None,
                    key=f"raised {type(error).__name__}",
                    cut_short=True,
                )
                break
            after = global_rng_state()
            self.steps += 1
            self._check_unchanged(sent, actions, step, label)
            frame = self.checker.split_step(result, step)
            if frame is None:
                break
            episode.actions.append(actions)
            self._record(episode, frame, before, after, label)
            verdict = self.checker.check(frame)
        return episode

    def _check_unchanged(self, sent: dict[Any, Any], actions: dict[Any, Any], step: int, label: str) -> None:
        """Report what ``step()`` did to the action dict it received (``sent``, a copy of ``actions``)."""
        if not self.collector.wants("actions.unchanged"):
            return
        removed = [a for a in actions if a not in sent]
        added = [a for a in sent if a not in actions]
        changed = [a for a in actions if a in sent and not same(sent[a], actions[a])]
        what = [text for text, agents in ((f"removed the actions of {names(removed)}", removed),
                                          (f"added keys {names(added)}", added)) if agents]
        what += [f"changed the action of {shown(a)} from {shown(actions[a])} to {shown(sent[a])}"
                 for a in changed]
        if what:
            self.collector.add(
                "actions.unchanged",
                f"step() changed the action dict it received at step {step} of {label}: {'; '.join(what)}",
                agent=(removed + changed + added)[0],
                step=step,
                key="changed",
            )

    def _actions(
        self, verdict: Any, observations: Any, rng: np.random.Generator, step: int, label: str
    ) -> dict[Any, Any] | None:
        actions = {}
        for agent_id in verdict.acting:
            space = self.act_spaces.get(agent_id)
            if space is None and agent_id not in self.checker.possible:
                # Already an ids.known finding: act for it if the env has a space for it, else stop.
                space = self._space_of_unknown(agent_id)
                if space is None:
                    return None
            if space is None:
                self.collector.add(
                    "spaces.defined",
                    f"agent {shown(agent_id)} must act at step {step} of {label} but has no action space",
                    agent=agent_id,
                    step=step,
                    key="acting without space",
                    cut_short=True,
                )
                return None
            try:
                mask = verdict.masks.get(agent_id)  # sound masks only: a group's are in its slots
                if type(mask) is tuple:
                    actions[agent_id] = sample_action_for(space, observations[agent_id], rng, agent_id)
                else:
                    actions[agent_id] = sample_action(space, rng, mask, agent_id)
            except ENV_ERRORS as error:
                self.collector.add(
                    "spaces.defined",
                    f"cannot sample an action for agent {shown(agent_id)} from its action space {space}",
                    agent=agent_id,
                    step=step,
                    error=error,
                    cut_short=True,
                )
                return None
        return actions

    def _space_of_unknown(self, agent_id: Any) -> Any:
        try:
            space = space_of(self.env, agent_id, "action")
        except ENV_ERRORS:
            return None
        return space if isinstance(space, gym_spaces.Space) else None

    def _record(self, episode: Episode, frame: Frame, before: tuple, after: tuple, label: str) -> None:
        record = Record.of(frame)
        episode.records.append(record)
        episode.draws.append(after if drew(before, after) else None)
        if not self.collector.wants("obs.aliasing"):
            return
        for agent_id, original, copy, where in self._previous:
            if not same(fingerprint(original), copy):
                self.collector.add(
                    "obs.aliasing",
                    f"the observation of agent {shown(agent_id)} returned {where} was changed in place by the "
                    f"next call (step {frame.step} of {label}): it shares memory with the env's state",
                    agent=agent_id,
                    step=frame.step,
                    key="changed",
                )
        for name, returned, items, where in self._previous_dicts:
            try:
                changed = any(returned.get(key, _GONE) is not value for key, value in items)
                changed = changed or len(returned) != len(items)
            except ENV_ERRORS:  # a dict subclass of the env's that no longer reads: api.step says so
                continue
            if changed:
                self.collector.add(
                    "obs.aliasing",
                    f"the {name} dict returned {where} was changed by the next call (step {frame.step} of "
                    f"{label}): the env reuses one dict, so a stored result shows later values",
                    step=frame.step,
                    key=f"dict {name}",
                )
        at = f"at step {frame.step} of {label}" if frame.step else f"by {reset_in(label)}"
        self._previous = [(a, frame.obs[a], record.obs[a], at) for a in frame.obs]
        returned = {"obs": frame.obs, "infos": frame.infos}
        if frame.step:  # a reset returns no other dicts
            returned.update(rewards=frame.rewards, terminateds=frame.terminateds, truncateds=frame.truncateds)
        # Watched: the env's own objects (dict subclasses too, not the checker's plain copies of them).
        self._previous_dicts = [(name, frame.originals.get(name, d), list(d.items()), at) for name, d in returned.items()]

    # Determinism -----------------------------------------------------------------------------

    def _compare_fresh(self, explored: list[Episode]) -> None:
        if self.target.factory is None:  # the pickle finding says so, unless that rule is skipped
            log = logger.info if self.collector.wants("pickle") else logger.warning
            log("determinism across fresh instances not checked: %s", self.target.fresh_error)
            return
        # A constructor that draws from a global generator makes instances that may differ: each
        # further one built while they replay alike is another chance to see it (a draw of 3
        # values agrees with the first instance's once in 3).
        for attempt in range(1 + FRESH_RETRIES):
            instance = "a second, fresh instance" if attempt == 0 else f"fresh instance {attempt + 2}"
            self.where = f"building {instance}"
            before = global_rng_state()
            try:
                fresh = self.target.factory()
            except ENV_ERRORS as error:
                if attempt == 0:
                    self.collector.add("determinism.seed", f"building {instance} to compare with raised", error=error)
                else:  # an env that can be built only so often (a license, a port) is not the bug looked for
                    logger.info("building %s to compare with raised %s; not retried", instance, describe(error))
                return
            who = f"on {instance}"
            source = drew(before, global_rng_state())
            if source:
                who += f", whose constructor drew from {source}"
            self.where = f"calling reset() without arguments {who}"
            try:  # the same calls as on the explored instance, which started with a bare reset()
                fresh.reset()
            except ENV_ERRORS as error:  # reported as api.reset for the explored instance already
                logger.debug("reset() of the fresh instance raised %s", describe(error))
            diverged = self._replay(fresh, explored, who, leak=False, constructor_draws=source)
            self.where = "closing the fresh instance" if attempt == 0 else f"closing {instance}"
            try:
                fresh.close()
            except ENV_ERRORS as error:  # reported once, for the explored instance, by close.idempotent
                logger.debug("close() of the fresh instance raised %s", describe(error))
            if diverged or not source:
                return

    def _replay(self, env: Any, explored: list[Episode], who: str, *, leak: bool, last_first: bool = False,
                constructor_draws: str | None = None) -> bool:
        """Replay each explored episode on ``env`` (in order, or the last first); one finding at
        the first difference (True: one was found). ``constructor_draws``: the global generator
        ``env``'s constructor drew from, named in the fix."""
        order = list(enumerate(explored))
        for index, episode in reversed(order) if last_first else order:
            label = f"episode {index} (seed {episode.seed})"
            self.where = f"replaying {label} {who}"
            for step, record in enumerate(episode.records):
                call = f"reset(seed={episode.seed})" if step == 0 else f"step() at step {step}"
                before = global_rng_state()
                try:
                    if step == 0:
                        result = env.reset(seed=episode.seed, options=None)
                        leak = leak and not _left_unseeded(env, episode.seed)  # the likelier cause, then
                    else:
                        result = env.step(snapshot(episode.actions[step - 1]))
                        self.steps += 1
                except ENV_ERRORS as error:
                    self._diverged(f"{call} of {label} raised {who}, where the first run did not", step, leak, error,
                                   constructor_draws=constructor_draws)
                    return True
                after = global_rng_state()
                source = drew(before, after)
                if source and (episode.draws[step] is None or episode.draws[step] != after):
                    self.collector.add(
                        "determinism.seed",
                        f"the env draws from {source} in {call} of {label}, which reset(seed=...) does not seed, "
                        f"so the same seed gives different draws {who}",
                        step=step,
                        hint=_PETTINGZOO_RNG_HINT if self._pettingzoo else _RNG_HINT,
                        key=who,
                    )
                    return True
                difference = _difference(record, result, step)
                if difference:
                    text, agent_id = difference
                    self._diverged(
                        f"with seed {episode.seed} and the same actions, the trajectory {who} diverges in "
                        f"{call} of {label}: {text}",
                        step,
                        leak,
                        agent=agent_id,
                        constructor_draws=constructor_draws,
                    )
                    return True
        return False

    def _diverged(
        self, message: str, step: int, leak: bool, error: BaseException | None = None, agent: Any = None,
        constructor_draws: str | None = None,
    ) -> None:
        hint = RULES["determinism.seed"].fix
        if self._pettingzoo:
            hint = _PETTINGZOO_RNG_HINT + ("" if leak else " Reset every piece of episode state in reset().")
        if leak:
            hint += " Something carries over from the previous episode: reset it in reset()."
        if constructor_draws:
            hint += (f" The constructor draws from {constructor_draws}: draw what the episodes use in "
                     "reset(), from self.np_random.")
        self.collector.add("determinism.seed", message, agent=agent, step=step, hint=hint, error=error)

    # Teardown --------------------------------------------------------------------------------

    def _close(self) -> None:
        for attempt in ("first", "second"):
            self.where = f"calling close() the {attempt} time"
            try:
                self.env.close()
            except ENV_ERRORS as error:
                self.collector.add("close.idempotent", f"the {attempt} call of close() raised", error=error)
                return



def _ids_in(possible: Any) -> list[Any]:
    """The ids a ``possible_agents`` of the wrong type holds (dict keys, a numpy array, a set),
    so that the check goes on with them after saying so; none in a string or a non-iterable."""
    if isinstance(possible, (str, bytes)):
        return []
    try:
        return list(possible.tolist() if isinstance(possible, np.ndarray) else possible)
    except ENV_ERRORS:
        return []


def _difference(record: Record, result: Any, step: int) -> tuple[str, Any] | None:
    size = 2 if step == 0 else 5
    if not isinstance(result, (tuple, list)) or len(result) != size or not all(isinstance(p, dict) for p in result):
        return f"it returned {type(result).__name__} instead of {size} dicts as in the first run", None
    if step == 0:
        frame = Frame(0, result[0], result[1])
    else:
        frame = Frame(step, result[0], result[4], result[1], result[2], result[3])
    return first_difference(record, Record.of(frame))


def _left_unseeded(env: Any, seed: int) -> bool:
    """Whether ``env.reset(seed=seed)`` left the env's ``np_random`` seeded otherwise (it did not
    call ``super().reset(seed=seed)``)."""
    try:
        value = getattr(env, "np_random_seed", None)
    except ENV_ERRORS:
        return False
    return isinstance(value, int) and value not in (seed, -1)

"""Each broken env triggers exactly its rule; the findings say where, what and how to fix."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from gymnasium import spaces

from marl_core import MultiAgentEnv
from marl_core.conformance import RULES, check_env, runner
from marl_core.envs import RockPaperScissors
from marl_core.errors import ConformanceError, MultiAgentEnvError
from marl_core.spaces import masked_space
from tests.fixtures import broken_envs
from tests.fixtures.broken_envs import BROKEN

CASES = [
    pytest.param(rule, target, kwargs, id=f"{rule}-{getattr(target, '__name__', type(target).__name__)}")
    for rule, targets in BROKEN.items()
    for target, kwargs in targets
]


def test_every_rule_has_a_broken_env() -> None:
    assert set(BROKEN) == set(RULES)


@pytest.mark.parametrize(("rule", "target", "kwargs"), CASES)
def test_broken_env_triggers_exactly_its_rule(rule: str, target: object, kwargs: dict) -> None:
    report = check_env(target, **kwargs)
    assert report.rules == {rule}, str(report)
    assert {f.severity for f in report.findings} == {RULES[rule].severity}
    assert report.ok is (RULES[rule].severity == "warning")
    for finding in report.findings:
        assert finding.message and finding.hint
    json.dumps(report.to_dict())


@pytest.mark.parametrize(("rule", "target", "kwargs"), CASES)
def test_skipping_the_rule_silences_it(rule: str, target: object, kwargs: dict) -> None:
    report = check_env(target, skip=[rule], **kwargs)
    assert report.findings == ()
    assert report.skipped == (rule,)


def test_skipping_a_rule_that_reports_crashes_says_how_many_it_hid() -> None:
    # A user skipping api.step for one of its parts did not expect an env that crashes in every
    # episode to pass as if it had been checked.
    report = check_env(broken_envs.StepRaises, skip=["api.step"])
    assert report.ok and report.skipped_exceptions == report.episodes == 3  # one in each episode explored
    assert "skipped rules: api.step (they hid 3 findings that cut an episode short, an exception raised by the " \
           "env's code or results play could not go on from: less was checked" in str(report)
    assert report.to_dict()["skipped_exceptions"] == 3
    clean = check_env(broken_envs.Duel, skip=["api.step"])
    assert clean.skipped_exceptions == 0 and "hid" not in str(clean)
    # An exception that cut no episode short is not counted: close() raising, say.
    assert check_env(broken_envs.CloseTwiceFails, skip=["close.idempotent"]).skipped_exceptions == 0
    # An action space whose sampling raises ends every episode at its first step: counted too.
    report = check_env(UnsampledActions, skip=["spaces.defined"])
    assert report.ok and report.steps == 0 and report.skipped_exceptions == 3
    assert "skipped rules: spaces.defined (they hid 3 findings that cut an episode short" in str(report)


@pytest.mark.parametrize(("rule", "target"), [
    ("api.reset", broken_envs.ResetReturnsObsOnly),
    ("api.step", broken_envs.StepReturnsFourTuple),
    ("spaces.defined", broken_envs.MissingActionSpace),
    ("masks.valid", broken_envs.NoLegalAction),
    ("lifecycle.no-actor", broken_envs.NobodyActs),
])
def test_skipping_a_rule_whose_finding_stops_play_says_so_too(rule: str, target: object) -> None:
    # Results play cannot go on from (a 4-tuple, an acting agent without an action space or a
    # legal action, nobody to act) passed as checked when their rule was skipped: nothing said so.
    report = check_env(target, skip=[rule])
    # One per episode explored (3), however many agents are stuck; the reset without arguments plays nothing.
    assert report.ok and report.skipped_exceptions == report.episodes == 3, str(report)
    assert "they hid 3 findings that cut an episode short" in str(report)


class _Unsampled(spaces.Space):
    """Moves 0-2 that cannot be sampled."""

    def __init__(self) -> None:
        super().__init__((), None)

    def contains(self, x: object) -> bool:
        return x in (0, 1, 2)

    def sample(self, mask: object = None, probability: object = None) -> int:
        raise RuntimeError("this space cannot be sampled")


class UnsampledActions(RockPaperScissors):
    def __init__(self, config: dict | None = None) -> None:
        super().__init__(config)
        self.action_spaces = {agent_id: _Unsampled() for agent_id in self.possible_agents}


class TruncatesEveryoneWithoutAll(broken_envs.Duel):
    """At its time limit every agent is truncated, with its final observation, but not "__all__"."""

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if terminateds["__all__"]:
            return obs, rewards, {"__all__": False}, dict.fromkeys(obs, True), infos
        return obs, rewards, terminateds, truncateds, infos


def test_no_actor_says_when_the_agents_in_the_obs_dict_all_ended() -> None:
    # The finding listed them as "obs keys", as if they were the agents that must act.
    (finding,) = [f for f in check_env(TruncatesEveryoneWithoutAll).findings if f.rule == "lifecycle.no-actor"]
    assert finding.message.startswith("every agent in the obs dict (['a', 'b']) terminated or truncated at step 6 of "
                                      "episode 0 (seed 0), so no agent must act, but '__all__' is not True")
    (finding,) = check_env(broken_envs.NobodyActs).findings
    assert finding.message.startswith("the obs dict at step 3 of episode 0 (seed 0) is empty, so no agent must act")


def test_observation_finding_names_agent_path_dtype_and_step() -> None:
    report = check_env(broken_envs.Float64Observations)
    by_agent = {f.agent: f for f in report.findings}
    assert set(by_agent) == {"a", "b"}
    finding = by_agent["a"]
    assert finding.step == 0
    assert "at ['observation']: dtype float64 but the space needs float32" in finding.message
    assert "after reset() without arguments" in finding.message  # the first of them
    assert "seen 22 times" in finding.message  # the reset without arguments, then (reset + 6 steps) x 3 episodes


def test_messages_name_types_with_their_article() -> None:
    # "is 0 (a int)" before.
    (finding,) = check_env(broken_envs.IntAllFlag).findings
    assert "is 0 (an int); expected a bool" in finding.message
    (finding,) = check_env(broken_envs.ResetReturnsObsOnly).findings
    assert finding.message.startswith("reset() without arguments returned a dict")
    from marl_core.errors import a_type

    assert [a_type(value) for value in (1, np.uint8(1), {}, "x", np.zeros(2))] == ["an int", "a uint8", "a dict", "a str", "an ndarray"]
    assert a_type(True) == "a bool"
    from marl_core.spaces import why_action_not_contained

    # "a int64 (...)" and "object where the space needs ..." before.
    assert why_action_not_contained(spaces.Discrete(3, dtype=np.int32), np.int64(1)).startswith("an int64 (")
    assert why_action_not_contained(spaces.Box(0, 1, (2,)), object()) == "an object where the space needs a numpy array"


class MaskTooLongEnforced(broken_envs.MaskTooLong):
    """Masks that do not fit the space (4 entries, 3 actions), which the env enforces all the same."""

    def step(self, action_dict):
        refused = [a for a, action in action_dict.items() if not self.mask()[action]]
        if refused:
            raise ValueError(f"illegal action for {refused}")
        return super().step(action_dict)


def test_an_env_refusing_an_action_drawn_without_its_unsound_mask_says_so() -> None:
    # The hint said the action was "legal under its action mask", which the checker had not used.
    report = check_env(MaskTooLongEnforced)
    assert {f.rule for f in report.findings} == {"masks.valid", "api.step"}
    (raised,) = [f for f in report.findings if f.rule == "api.step"]
    assert ("its action mask is unsound (the masks.valid finding says why), so its action was drawn from the whole "
            "space, which the env may refuse") in raised.hint
    assert check_env(broken_envs.StepRaises).findings[0].hint == runner._RAISED_HINT


class Drifts(MultiAgentEnv):
    """Two bugs in plain Box observations: ``"a"``'s position leaves the Box a little further
    every step, and ``"b"``'s observation turns float64 from step 3 on."""

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["a", "b"]
        self.observation_spaces = dict.fromkeys(self.possible_agents, spaces.Box(-10.0, 10.0, (2,), np.float32))
        self.action_spaces = dict.fromkeys(self.possible_agents, spaces.Discrete(2))
        self.t = 0

    def _obs(self) -> dict:
        drift = np.array([0.0, 8.0 + self.t], np.float32)
        return {"a": drift, "b": np.zeros(2, np.float64 if self.t >= 3 else np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.agents = 0, ["a", "b"]
        return self._obs(), {}

    def step(self, action_dict):
        self.t += 1
        done = self.t >= 6
        self.agents = [] if done else ["a", "b"]
        return self._obs(), {"a": 0.0, "b": 0.0}, {"__all__": done}, {"__all__": False}, {}


class TwoBugsAtOnePath(broken_envs.Duel):
    """At the same path ``["observation"]``, ``"a"`` has the wrong dtype at even steps and the
    wrong shape at odd ones."""

    def observe(self, agent_id):
        observation = super().observe(agent_id)
        if agent_id == "a":
            wrong = observation["observation"].astype(np.float64) if self.t % 2 == 0 else np.zeros(3, np.float32)
            observation["observation"] = wrong
        return observation


class ObservesWrongly(MultiAgentEnv):
    """One agent whose observation space is ``Dict(pair=Tuple(Discrete(2), Discrete(2)))``; it
    observes ``config["wrong"]`` instead of a value of it."""

    def __init__(self, config=None) -> None:
        super().__init__()
        self.wrong = (config or {})["wrong"]
        self.agents = self.possible_agents = ["a"]
        self.observation_spaces = {"a": spaces.Dict({"pair": spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2)))})}
        self.action_spaces = {"a": spaces.Discrete(2)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"a": self.wrong}, {}

    def step(self, action_dict):
        return {"a": self.wrong}, {"a": 0.0}, {"__all__": True}, {"__all__": False}, {}


@pytest.mark.parametrize(("wrong", "hint"), [
    (None, "an agent with nothing to observe is left out of the obs dict, not given None"),
    ({"pair": (None, 0)}, RULES["spaces.obs-contains"].fix),  # None inside: the agent has an observation
    ({"pair": None}, RULES["spaces.obs-contains"].fix),  # not "return a tuple, not a list"
    ({"pair": [0, 1]}, "Return a tuple for a Tuple space (tuple(values)), not a list or an array."),
    ((0, 1), "Return a dict with the Dict space's keys for a Dict space."),
    ({"pair": (0, 5)}, RULES["spaces.obs-contains"].fix),
])
def test_an_observation_outside_its_space_gets_the_fix_its_problem_needs(wrong, hint) -> None:
    # Every such finding said to build observations with the space's dtype and shape (np.asarray(x, dtype=np.float32)).
    report = check_env(lambda: ObservesWrongly({"wrong": wrong}))
    assert report.rules == {"spaces.obs-contains"}, str(report)
    assert all(hint in finding.hint for finding in report.findings), str(report)


class DrawsInItsConstructor(MultiAgentEnv):
    """Broken: its constructor draws the value every observation shows from np.random."""

    def __init__(self, config=None) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["a"]
        self.observation_spaces = self.action_spaces = {"a": spaces.Discrete(3)}
        self.shown = int(np.random.randint(0, 3))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"a": self.shown}, {}

    def step(self, action_dict):
        return {"a": self.shown}, {"a": 0.0}, {"__all__": True}, {"__all__": False}, {}


def test_a_constructor_drawing_from_np_random_is_caught_when_the_second_instance_agrees_by_chance() -> None:
    # Two instances showed the same of 3 values one time in 3, and the check passed clean then.
    state = np.random.get_state()
    try:
        np.random.seed(4)  # the test's own choice: the first two instances draw alike, the third does not
        report = check_env(DrawsInItsConstructor)
    finally:
        np.random.set_state(state)
    assert report.rules == {"determinism.seed"}, str(report)
    finding = report.findings[0]
    assert "on fresh instance 3, whose constructor drew from numpy's global RNG (np.random.*) diverges" in finding.message
    assert "The constructor draws from numpy's global RNG (np.random.*): draw what the episodes use in reset()" in finding.hint
    assert check_env(broken_envs.Duel).ok  # a constructor that draws nothing is replayed once, as before


def test_a_further_fresh_instance_that_cannot_be_built_ends_the_retries_without_a_finding() -> None:
    # A deterministic env that draws an unused value (a port, say) and can be built only twice was
    # reported under determinism.seed for the third build.
    built = []

    def twice():
        if len(built) == 2:
            raise RuntimeError("no license left")
        built.append(random.random())
        return broken_envs.Duel()

    report = check_env(twice)
    assert report.ok and report.findings == (), str(report)


class FlagsEveryPossibleAgent(broken_envs.EndsWithFlags):
    """Correct: ends by truncation flagging every possible agent, "c" too, which never showed up."""

    TERMINATEDS, TRUNCATEDS = {"__all__": False}, {"a": True, "b": True, "c": True, "__all__": True}


class BothFlagsWithoutFinalObservation(broken_envs.EndsWithFlags):
    """Broken: ends with both '__all__' flags True and only "a"'s final observation ("b" acted too)."""

    TERMINATEDS, TRUNCATEDS, DROPPED = {"__all__": True}, {"__all__": True}, ("b",)


class TerminatedAsTheEpisodeIsTruncated(broken_envs.EndsWithFlags):
    """Broken: "b" is flagged terminated, without a final observation, in the step that truncates the episode."""

    TERMINATEDS, TRUNCATEDS, DROPPED = {"b": True, "__all__": False}, {"__all__": True}, ("b",)


def test_final_observations_are_asked_of_agents_in_the_episode_only_and_on_any_truncation() -> None:
    # An agent that never appeared has nothing to end; both '__all__' flags True read as truncation, as RLlib reads them.
    assert check_env(FlagsEveryPossibleAgent).findings == ()
    report = check_env(BothFlagsWithoutFinalObservation)
    assert report.rules == {"lifecycle.final-obs"}, str(report)
    assert "agent 'b' acted and was truncated by '__all__' at step 6" in report.findings[0].message
    report = check_env(TerminatedAsTheEpisodeIsTruncated)
    assert report.rules == {"lifecycle.final-obs"}, str(report)
    assert "agent 'b' terminated in a step that truncates the episode ('__all__', read as a truncation)" in \
        report.findings[0].message


class OldResetSignature(broken_envs.Duel):
    """reset() without ``options``, as gymnasium's API had it before 0.26."""

    def reset(self, seed=None):
        return super().reset(seed=seed)


class ResetCallsWrongly(broken_envs.Duel):
    def reset(self, *, seed=None, options=None):
        return int("1", 2, 3)


def test_a_reset_whose_signature_refuses_the_call_gets_api_resets_fix() -> None:
    # It got the general "fix the exception shown in the traceback" hint.
    report = check_env(OldResetSignature)
    assert report.rules == {"api.reset"} and "unexpected keyword argument 'options'" in report.findings[0].message
    assert {finding.hint for finding in report.findings} == {RULES["api.reset"].fix}, str(report)
    inside = check_env(ResetCallsWrongly)  # a TypeError raised inside reset() is the env's own bug
    assert inside.rules == {"api.reset"} and all(f.hint.startswith("Fix the exception shown") for f in inside.findings)
    shadowed = broken_envs.Duel()
    shadowed.reset = None  # a TypeError at the call, but not about its arguments
    report = check_env(shadowed)
    assert "'NoneType' object is not callable" in report.findings[0].message, str(report)
    assert report.findings[0].hint.startswith("Fix the exception shown"), str(report)


def test_one_bug_seen_with_many_values_is_one_finding() -> None:
    # A value in the finding's key made each new value a new finding, and ten of them crowded
    # out the other agent's dtype bug.
    report = check_env(Drifts)
    assert [(f.rule, f.agent) for f in report.findings] == [("spaces.obs-contains", "a"), ("spaces.obs-contains", "b")]
    drift, widen = report.findings
    assert "value 11.0 at index (1,) is outside [-10.0, 10.0] (seen 12 times" in drift.message
    assert "dtype float64 but the space needs float32 (seen 12 times" in widen.message


def test_two_bugs_at_one_path_are_two_findings() -> None:
    report = check_env(TwoBugsAtOnePath)
    messages = sorted(f.message.split(": ", 1)[1] for f in report.findings)
    assert len(messages) == 2
    assert "dtype float64 but the space needs float32" in messages[0]
    assert "shape (3,) but the space needs (2,)" in messages[1]


def test_exception_in_env_code_is_a_finding_with_its_traceback() -> None:
    report = check_env(broken_envs.StepRaises)
    (finding,) = report.findings
    assert finding.rule == "api.step"
    assert finding.step == 3
    assert "KeyError" in finding.message
    assert finding.traceback is not None
    assert "broken_envs.py" in finding.traceback and "KeyError: 'missing'" in finding.traceback
    assert "conformance/runner.py" not in finding.traceback


def test_reward_and_dead_agent_findings_name_the_agent_and_step() -> None:
    (nan,) = check_env(broken_envs.NanReward).findings
    assert (nan.agent, nan.step) == ("a", 3)
    assert "nan" in nan.message
    (dead,) = check_env(broken_envs.DeadAgentReturns).findings
    assert (dead.agent, dead.step) == ("b", 3)
    assert "appears in obs at step 3 of episode 0 (seed 0), after it terminated or truncated at step 2" in dead.message


def test_state_leak_is_caught_on_the_same_instance_only() -> None:
    (finding,) = check_env(broken_envs.LeakyEpisodeCounter).findings
    assert "same instance reset again" in finding.message
    # Inside an array too, where and what: it printed both arrays' first entries, which were equal.
    assert finding.agent == "a" and "observation of agent 'a' differs at ['observation'][1]: 5.0 then 6.0" in (
        finding.message)
    assert "reset()" in finding.hint


class _GlobalDrawingParallelEnv:
    """A PettingZoo parallel env whose start position comes from numpy's global generator."""

    metadata = {"name": "global_drawing_v0"}
    possible_agents = ["a"]

    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (1,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents = ["a"]
        return {"a": np.random.random(1).astype(np.float32)}, {"a": {}}

    def step(self, actions):
        self.agents = []
        return ({"a": np.zeros(1, np.float32)}, {"a": 0.0}, {"a": True}, {"a": False}, {"a": {}})


def test_the_seeding_fix_for_a_pettingzoo_env_is_pettingzoos_way() -> None:
    # It said "super().reset(seed=seed)", which raises NotImplementedError in PettingZoo's base classes.
    from pettingzoo import ParallelEnv

    env_class = type("GlobalDrawing", (_GlobalDrawingParallelEnv, ParallelEnv), {})
    findings = [f for f in check_env(env_class).findings if f.rule == "determinism.seed"]
    assert findings and all("gymnasium.utils.seeding.np_random(seed)" in f.hint for f in findings)
    assert all("super().reset" not in f.hint for f in findings)
    ours = [f for f in check_env(broken_envs.GlobalRandomNoise).findings if f.rule == "determinism.seed"]
    assert ours and all("super().reset(seed=seed)" in f.hint for f in ours)
    # Ours exported to PettingZoo and checked through the bridge: the code to fix is ours.
    from bridges.pettingzoo import to_parallel

    exported = [f for f in check_env(lambda: to_parallel(broken_envs.GlobalRandomNoise())).findings
                if f.rule == "determinism.seed"]
    assert exported and all("super().reset(seed=seed)" in f.hint for f in exported)


def test_where_observations_differ_is_named_inside_number_arrays_only() -> None:
    from marl_core.conformance.determinism import _where_different

    assert _where_different(np.array([1.0, 2.0]), np.array([1.0, 3.0]), "") == ("[1]", 2.0, 3.0)
    assert _where_different(np.array([[0, 1], [2, 3]]), np.array([[0, 1], [2, 4]]), "x") == ("x[1, 1]", 3, 4)
    zero_d = (np.array(1.0), np.array(2.0))
    assert _where_different(*zero_d, "") == ("", *zero_d)  # no "[]"
    # Object arrays (strings, ragged arrays) are shown whole: comparing them element by element
    # raised inside the checker, which filed it as the env's crash.
    words = (np.array(["a", "b"], dtype=object), np.array(["a", "c"], dtype=object))
    assert _where_different(*words, "") == ("", *words)
    ragged = np.empty(2, dtype=object)
    ragged[:] = [np.zeros(2), np.zeros(3)]
    other = np.empty(2, dtype=object)
    other[:] = [np.zeros(2), np.ones(3)]
    assert _where_different(ragged, other, "")[0] == ""


@pytest.mark.parametrize(("period", "episodes"), [(3, 3), (2, 2), (2, 4), (5, 5)])
def test_state_that_cycles_with_the_number_of_episodes_is_caught(period: int, episodes: int) -> None:
    # Replayed in order, episode k met the same phase of the cycle again: such envs passed.
    findings = check_env(lambda: broken_envs.RotatingDealer({"period": period}), episodes=episodes).findings
    assert [f.rule for f in findings] == ["determinism.seed"]
    assert "same instance reset again" in findings[0].message and "observation of agent 'a' differs" in findings[0].message


def test_global_rng_use_is_caught_on_both_comparisons() -> None:
    findings = check_env(broken_envs.GlobalRandomNoise).findings
    assert len(findings) == 2
    assert all("numpy's global RNG" in f.message for f in findings)
    assert all("self.np_random" in f.hint for f in findings)


def test_unpicklable_instance_says_fresh_instances_were_not_compared() -> None:
    (finding,) = check_env(broken_envs.LockedDuel()).findings
    assert "not checked" in finding.message and "lock" in finding.message


def test_unbounded_episode_stops_at_max_steps() -> None:
    (finding,) = check_env(broken_envs.NeverEnds, max_steps=20, episodes=2).findings
    assert finding.step == 20


def test_env_seeding_the_global_rng_itself_passes() -> None:
    state = np.random.get_state()
    try:
        assert check_env(broken_envs.SeedsGlobalRandom).findings == ()
    finally:
        np.random.set_state(state)


def test_checker_never_touches_the_global_rngs() -> None:
    numpy_state, python_state = np.random.get_state(), random.getstate()
    check_env(broken_envs.Duel)
    after = np.random.get_state()
    assert after[2] == numpy_state[2] and np.array_equal(after[1], numpy_state[1])
    assert random.getstate() == python_state


def test_raise_if_errors_lists_the_findings() -> None:
    report = check_env(broken_envs.NanReward)
    with pytest.raises(ConformanceError, match=r"rewards\.numeric") as raised:
        report.raise_if_errors()
    assert isinstance(raised.value, MultiAgentEnvError)
    assert raised.value.findings == report.errors
    check_env(broken_envs.CloseTwiceFails).raise_if_errors()  # warnings only: no raise


def test_an_env_error_outside_every_rule_is_a_finding_not_an_exception() -> None:
    # The checker reads an observation through its items(); raising there escaped check_env.
    report = check_env(broken_envs.ObservationItemsRaise, episodes=1)
    (finding,) = report.errors
    assert finding.rule == "api.step"  # not raised in reset() itself, but in a method of what it returned
    assert finding.message.startswith("the env's code raised RuntimeError in items() while exploring episode 0; "
                                      "the check stopped there (after 0 steps)")
    assert "items() of the observation broke" in finding.traceback


def test_structured_observations_holding_objects_are_compared_without_stopping_the_check() -> None:
    # numpy's comparison of their object fields raised the objects' error, which stopped the check.
    report = check_env(broken_envs.ObservationEqualityRaises, episodes=2)
    assert report.stopped == ""
    assert not [f for f in report.findings if "raised ValueError" in f.message]


def test_arrays_holding_arrays_are_compared_item_by_item() -> None:
    # numpy's comparison raised ("truth value ... ambiguous") and the fallback compared copies by
    # identity: false determinism.seed and obs.aliasing findings on a deterministic env.
    report = check_env(broken_envs.ObservationHoldingArrays, episodes=2)
    assert not [f for f in report.findings if f.rule in ("determinism.seed", "obs.aliasing")]


def test_nan_in_a_structured_arrays_float_field_equals_itself() -> None:
    # numpy compared the records with NaN unequal: false determinism.seed and obs.aliasing findings.
    report = check_env(broken_envs.StructuredObservationWithNan, episodes=2)
    assert not [f for f in report.findings if f.rule in ("determinism.seed", "obs.aliasing")], report.findings


def test_bad_arguments_raise() -> None:
    with pytest.raises(ConformanceError, match="unknown rule id"):
        check_env(broken_envs.Duel, skip=["rewards.finite"])
    with pytest.raises(ConformanceError, match="at least 1"):
        check_env(broken_envs.Duel, episodes=0)
    with pytest.raises(ConformanceError, match="seed must be an integer of at least 0, received -1"):
        check_env(broken_envs.Duel, seed=-1)
    # These were blamed on the env ("the env raised TypeError"), taken (True) or numpy's TypeError.
    for bad in (1.5, True, None, "0"):
        with pytest.raises(ConformanceError, match=f"seed must be an integer of at least 0, received {bad!r}"):
            check_env(broken_envs.Duel, seed=bad)  # type: ignore[arg-type]
    with pytest.raises(ConformanceError, match=r"max_steps must be an integer of at least 1, received 2\.5"):
        check_env(broken_envs.Duel, max_steps=2.5)  # type: ignore[arg-type]
    with pytest.raises(ConformanceError, match=r"skip must be a list of rule ids, received the string 'pickle' \(write \['pickle'\]\)"):
        check_env(broken_envs.Duel, skip="pickle")
    assert check_env(broken_envs.Duel, seed=np.int64(3), episodes=np.int32(1)).to_dict()["seed"] == 3
    assert check_env(broken_envs.Duel, skip=None, episodes=1).ok  # None: no rule skipped


def test_a_masked_member_finding_names_the_group_and_the_slot() -> None:
    report = check_env(broken_envs.grouped_mask_too_long)
    (finding, *_) = report.findings
    assert finding.rule == "masks.valid" and finding.agent == "team"
    assert "in slot [0] an action_mask of shape (4,), but its action space Discrete(3) needs (3,)" in finding.message


class FloatMaskDuel(broken_envs.Duel):
    """Masks of 0.0 / 1.0 floats (RLlib's action-masking examples use a float Box)."""

    def __init__(self, config=None) -> None:
        super().__init__(config)
        box = spaces.Box(-100.0, 100.0, (2,), np.float32)
        mask_space = spaces.Box(0.0, 1.0, (self.MASK_SIZE,), np.float32)
        self.observation_spaces = {a: spaces.Dict({"observation": box, "action_mask": mask_space}) for a in self.IDS}

    def mask(self) -> np.ndarray:
        return super().mask().astype(np.float32)


class OtherMaskKeysDuel(broken_envs.Duel):
    """A mask beside an ``"observations"`` entry (RLlib's example key), not the canonical Dict."""

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self.observation_spaces = {
            a: spaces.Dict({"observations": space["observation"], "action_mask": space["action_mask"]})
            for a, space in self.observation_spaces.items()
        }

    def observe(self, agent_id):
        observation = super().observe(agent_id)
        return {"observations": observation["observation"], "action_mask": observation["action_mask"]}


def grouped_float_mask_duel():
    return FloatMaskDuel().with_agent_groups({"team": ["a", "b"]})


@pytest.mark.parametrize(
    ("target", "words"),
    [(FloatMaskDuel, "an action_mask of dtype float32; masks hold integers or bools (int8, 1 = legal): build it "
                     "with .astype(np.int8), and its space as Box(0, 1, (n,), np.int8)"),
     (grouped_float_mask_duel, "in slot [0] an action_mask of dtype float32; masks hold integers"),
     (OtherMaskKeysDuel, "an action_mask in a Dict with keys ['action_mask', 'observations']; a masked observation "
                         "is a Dict of exactly 'observation' and 'action_mask': rename 'observations' to "
                         "'observation' (RLlib's action-masking examples use the plural)")],
)
def test_a_sound_mask_in_another_form_is_reported_and_still_followed(target, words) -> None:
    report = check_env(target)
    assert report.rules == {"masks.valid"}, str(report)  # no api.step: the actions sampled were legal
    assert all(words in finding.message for finding in report.findings), str(report)


class SharedTextSpace(MultiAgentEnv):
    """Correct: one Text space object is both spaces; the env seeds it and samples observations from it."""

    def __init__(self, config=None) -> None:
        super().__init__()
        self.space = spaces.Text(6)
        self.agents = self.possible_agents = ["a"]
        self.observation_spaces = self.action_spaces = {"a": self.space}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.space.seed(seed)
        self.t = 0
        self.agents = ["a"]
        return {"a": self.space.sample()}, {}

    def step(self, action_dict):
        self.t += 1
        done = self.t >= 3
        if done:
            self.agents = []
        return {"a": self.space.sample()}, {"a": 1.0}, {"__all__": done}, {"__all__": False}, {}


def test_sampling_actions_leaves_the_envs_own_space_objects_alone() -> None:
    report = check_env(SharedTextSpace)
    assert report.ok and not report.findings, str(report)  # was a false determinism.seed error


class NanInUnboundedBox(broken_envs.Duel):
    def __init__(self, config=None) -> None:
        super().__init__(config)
        box = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.observation_spaces = {a: masked_space(box, self.MASK_SIZE) for a in self.IDS}

    def observe(self, agent_id):
        observation = super().observe(agent_id)
        observation["observation"][0] = np.nan
        return observation


def test_nan_is_named_in_an_unbounded_box_too() -> None:
    finding = check_env(NanInUnboundedBox).findings[0]
    assert finding.rule == "spaces.obs-contains" and "contains NaN at index (0,)" in finding.message, finding.message


def test_a_changed_action_is_shown_as_sent_and_as_found_afterwards() -> None:
    finding = next(f for f in check_env(broken_envs.ChangesArrayActionsInPlace).findings if f.rule == "actions.unchanged")
    assert f"changed the action of '{finding.agent}' from array([" in finding.message
    assert "dtype=float32) to array([0.], dtype=float32)" in finding.message  # clipped to [0, 1] in place


class _Hostile:
    """A reward whose every comparison and conversion raises something unusual."""

    def __eq__(self, other):
        raise RuntimeError("no comparing me")

    __hash__ = object.__hash__

    def __float__(self):
        raise RuntimeError("no converting me")


class HostileReward(broken_envs.Duel):
    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        return obs, {agent_id: _Hostile() for agent_id in rewards}, terminateds, truncateds, infos


def test_a_reward_that_raises_on_every_use_is_a_finding_not_a_crash() -> None:
    report = check_env(HostileReward)
    assert "rewards.numeric" in report.rules, str(report)


def test_possible_agents_changed_by_reset_is_named_with_both_lists() -> None:
    report = check_env(broken_envs.PossibleAgentsChangeInReset)
    (finding,) = report.findings
    assert finding.rule == "ids.agents-attr"
    assert finding.message.startswith(
        "possible_agents changed after reset() without arguments: ['a', 'b', 'c'] before the "
        "first reset, ['a', 'b'] now"
    ), finding.message


class _OneListForBoth(RockPaperScissors):
    """The README's ``self.agents = self.possible_agents = [...]``; a player leaves with ``agents.remove``."""

    def step(self, action_dict):
        result = super().step(action_dict)
        if result[2]["__all__"]:
            self.agents.remove("player2")
        return result


def test_possible_agents_changed_through_agents_says_they_are_one_list() -> None:
    # It said the list changed, one reset late, with no word of why.
    report = check_env(_OneListForBoth, episodes=2)
    finding = next(f for f in report.findings if f.message.startswith("possible_agents changed"))
    assert finding.message.endswith("; agents and possible_agents are one list object, so changing agents in place "
                                    "changes both"), finding.message
    assert finding.hint.endswith("Give agents a list of its own in reset(): self.agents = list(self.possible_agents).")


class _OldApiStackOfOurs(MultiAgentEnv):
    """RLlib's old API stack (agents in ``_agent_ids``, Dict spaces) on our MultiAgentEnv, whose
    ``possible_agents`` stays empty: RLlib's class reads ``_agent_ids``, ours does not."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        self._agent_ids = {"a", "b"}
        self.observation_space = spaces.Dict({a: spaces.Box(0.0, 1.0, (2,), np.float32) for a in "ab"})
        self.action_space = spaces.Dict({a: spaces.Discrete(2) for a in "ab"})

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        self.t, self.agents = 0, ["a", "b"]
        return {a: self.np_random.random(2).astype(np.float32) for a in "ab"}, {}

    def step(self, action_dict: dict) -> tuple:
        self.t += 1
        obs = {a: self.np_random.random(2).astype(np.float32) for a in "ab"}
        return obs, dict.fromkeys("ab", 1.0), {"__all__": self.t >= 3}, {"__all__": False}, {}


def test_an_old_api_stack_env_on_our_class_is_told_how_to_declare_its_agents() -> None:
    # It got four ids.known errors, "which is not in possible_agents []", and no word of _agent_ids.
    report = check_env(_OldApiStackOfOurs)
    (finding,) = report.findings
    assert finding.rule == "ids.agents-attr"
    assert "(the env names ['a', 'b'] in _agent_ids, as on RLlib's old API stack" in finding.message
    assert "self.possible_agents = sorted(self._agent_ids)" in finding.hint


class _NoSuperReset(MultiAgentEnv):
    """Draws from ``self.np_random`` but never calls ``super().reset(seed=seed)``."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["a"]
        self.observation_spaces = {"a": spaces.Box(0.0, 1.0, (2,), np.float32)}
        self.action_spaces = {"a": spaces.Discrete(3)}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        self.t = 0
        return {"a": self.np_random.random(2).astype(np.float32)}, {}

    def step(self, action_dict: dict) -> tuple:
        self.t += 1
        done = self.t >= 3
        return ({"a": self.np_random.random(2).astype(np.float32)}, {"a": 0.0}, {"a": done, "__all__": done},
                {"a": False, "__all__": False}, {})


def test_a_reset_that_leaves_np_random_unseeded_is_not_blamed_on_state_carried_over() -> None:
    # The same-instance finding added "Something carries over from the previous episode", which
    # pointed away from the missing super().reset(seed=seed).
    findings = check_env(_NoSuperReset).findings
    assert [f.rule for f in findings] == ["determinism.seed", "determinism.seed"]
    assert all("super().reset(seed=seed)" in f.hint and "carries over" not in f.hint for f in findings)
    leaky = [f for f in check_env(broken_envs.LeakyEpisodeCounter).findings if "same instance" in f.message]
    assert leaky and all("carries over" in f.hint for f in leaky)  # state that does carry over still says so


def test_a_mask_in_a_dict_of_other_keys_is_told_the_canonical_form_even_beside_another_problem() -> None:
    class WrongKey(MultiAgentEnv):
        def __init__(self, config: dict | None = None) -> None:
            super().__init__()
            self.size = (config or {}).get("size", 3)
            self.agents = self.possible_agents = ["a"]
            self.observation_spaces = {"a": spaces.Dict({"obs": spaces.Box(0.0, 1.0, (2,), np.float32),
                                                         "action_mask": spaces.Box(0, 1, (self.size,), np.int8)})}
            self.action_spaces = {"a": spaces.Discrete(3)}

        def _obs(self) -> dict:
            return {"a": {"obs": np.zeros(2, np.float32), "action_mask": np.ones(self.size, np.int8)}}

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
            super().reset(seed=seed)
            self.t = 0
            return self._obs(), {}

        def step(self, action_dict: dict) -> tuple:
            self.t += 1
            done = self.t >= 3
            return self._obs(), {"a": 0.0}, {"a": done, "__all__": done}, {"a": False, "__all__": False}, {}

    (finding,) = check_env(WrongKey).findings
    assert finding.rule == "masks.valid" and "masked_space(observation_space, num_actions)" in finding.hint
    assert "mask_from_legal" not in finding.hint  # it was the only hint, about another problem
    (finding,) = check_env(lambda: WrongKey({"size": 4})).findings  # the wrong size was all it said
    assert "needs (3,); it also has an action_mask in a Dict with keys ['action_mask', 'obs']" in finding.message
    assert "mask_from_legal" in finding.hint and "masked_space" in finding.hint


def test_unknown_keys_are_named_against_the_list_read_before_the_first_reset() -> None:
    finding = next(f for f in check_env(broken_envs.UnknownRewardKey).findings if f.rule == "ids.known")
    assert "which is not in possible_agents ['a', 'b', 'c'] (as read before the first reset)" in finding.message


class _PossibleAgentsAfterReset(broken_envs.Duel):
    """``possible_agents`` is right until the first reset, then ``AFTER`` (raised if an exception)."""

    AFTER: object = None

    @property
    def possible_agents(self):
        if getattr(self, "_was_reset", False):
            if isinstance(self.AFTER, Exception):
                raise self.AFTER
            return self.AFTER
        return list(self.IDS)

    @possible_agents.setter
    def possible_agents(self, value):
        pass  # Duel.__init__ sets it; this env decides it itself

    def reset(self, *, seed=None, options=None):
        self._was_reset = True
        return super().reset(seed=seed, options=options)


class _ArrayEqualId:
    """An id whose ``==`` answers with an array (as numpy values do): it has no truth value."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> np.ndarray:  # type: ignore[override]
        return np.array([getattr(other, "name", other) == self.name] * 2)


@pytest.mark.parametrize(
    ("after", "now"),
    [({"a", "b", "c"}, "a set"), (None, "None"), (RuntimeError("gone"), "raised"),
     ([_ArrayEqualId(name) for name in "abc"], "incomparable")],
    ids=["set", "none", "raises", "incomparable"],
)
def test_possible_agents_that_stop_being_a_list_after_reset_are_named(after: object, now: str) -> None:
    env_class = type("PossibleAgentsLost", (_PossibleAgentsAfterReset,), {"AFTER": after})
    report = check_env(env_class)
    assert report.rules == {"ids.agents-attr"}, str(report)
    (finding,) = report.findings
    if now == "raised":
        assert finding.message.startswith("reading possible_agents raised after reset() without arguments")
    elif now == "incomparable":  # the read worked: the comparison is what failed
        assert finding.message.startswith(
            "possible_agents after reset() without arguments cannot be compared with the list read "
            "before the first reset: ValueError"), finding.message
    else:
        assert finding.message.startswith(
            "possible_agents changed after reset() without arguments: ['a', 'b', 'c'] before the first reset"
        ), finding.message


class _MaskInInfoOfTheLastObservationOnly(broken_envs.MaskInInfo):
    """Plain observations; a mask in the infos of the final observations only, when nobody acts."""

    def reset(self, *, seed=None, options=None):
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {}

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if not (terminateds["__all__"] or truncateds["__all__"]):
            infos = {}
        return obs, rewards, terminateds, truncateds, infos


def test_a_mask_in_the_infos_of_agents_that_do_not_act_is_no_finding() -> None:
    # masks.in-info warned at the episode's last step, where no agent acts on any mask.
    report = check_env(_MaskInInfoOfTheLastObservationOnly, episodes=2)
    assert report.findings == (), str(report)

"""What :mod:`bridges.matrix` measures besides ``check_env``: round trips and per-action overhead.

Each source API has a raw loop (its own API driven directly, with seeded random legal actions)
and a round trip through its own tooling. Both take the case and the matrix's ``build(case)``.
"""

from __future__ import annotations

import random
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from bridges.compat import Case
from marl_core.env import ALL
from marl_core.spaces import MASK_KEY, action_mask_of, sample_action

Build = Callable[[Case], Any]
ROUNDS = 5
TARGET_SECONDS = 0.1  # per loop and round
MIN_ACTIONS = 50
ROUND_TRIP_STEPS = 300


def _factory(case: Case) -> Callable[[], Any]:
    from bridges.matrix import factory_of

    target = factory_of(case)
    return lambda: target(**dict(case.kwargs))


# Round trips -----------------------------------------------------------------------------------


def round_trip(case: Case, build: Build) -> str:
    """``"pass ..."``, ``"fail: ..."`` or ``"-"`` for the round trip that fits ``case.source``."""
    probe = _ROUND_TRIPS.get(case.source)
    if probe is None:
        return "-"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return probe(case, build)
    except Exception as error:
        cause = error.__cause__ or error.__context__
        text = f"{type(error).__name__}: {error}".split("\n")[0]
        if cause is not None:  # RLlib's checker rewraps the real error in a long generic message
            text = f"{type(cause).__name__}: {cause} (reported as {type(error).__name__})"
        text = " ".join(text.split())
        return "fail: " + (text if len(text) < 200 else text[:197] + "...")


def _aec(case: Case, build: Build) -> str:
    """PettingZoo's ``api_test`` on the bridged env exported back to an AEC env.

    ``MultiAgentAECEnv`` directly: ``to_aec(PettingZooEnv(env))`` hands back ``env`` itself, so
    ``api_test`` would only test upstream PettingZoo; this way both directions of the bridge run.
    """
    from pettingzoo.test import api_test

    from bridges.pettingzoo_export import MultiAgentAECEnv

    exported = MultiAgentAECEnv(build(case))
    _seed_action_spaces(exported.action_space, exported.possible_agents)
    api_test(exported, num_cycles=min(case.max_steps or ROUND_TRIP_STEPS, ROUND_TRIP_STEPS))
    return "pass: api_test on MultiAgentAECEnv(PettingZooEnv(env))"


def _parallel(case: Case, build: Build) -> str:
    """PettingZoo's ``parallel_api_test`` on the bridged env exported back to a parallel env
    (``MultiAgentParallelEnv`` directly, for the reason :func:`_aec` gives)."""
    from pettingzoo.test import parallel_api_test

    from bridges.pettingzoo_export import MultiAgentParallelEnv

    exported = MultiAgentParallelEnv(build(case))
    _seed_action_spaces(exported.action_space, exported.possible_agents)
    parallel_api_test(exported, num_cycles=min(case.max_steps or ROUND_TRIP_STEPS, ROUND_TRIP_STEPS))
    return "pass: parallel_api_test on MultiAgentParallelEnv(ParallelPettingZooEnv(env))"


def _seed_action_spaces(action_space: Callable[[Any], Any], agents: Sequence[Any]) -> None:
    """Seed every agent's action space: PettingZoo's and RLlib's checks sample from them unseeded,
    and the bridges hand out the same space objects each time, so every run draws the same actions."""
    for agent in agents:
        action_space(agent).seed(0)


def _rllib(case: Case, build: Build) -> str:
    from ray.rllib.utils.pre_checks.env import check_multiagent_environments

    from bridges.rllib import RLlibMultiAgentEnvAdapter

    # The adapter directly: to_rllib(from_rllib(x)) would hand back x itself.
    adapter = RLlibMultiAgentEnvAdapter(build(case))
    _seed_action_spaces(adapter.get_action_space, adapter.possible_agents)
    check_multiagent_environments(adapter)
    return "pass: RLlib check_multiagent_environments on to_rllib"


def _gymnasium(case: Case, build: Build) -> str:
    from gymnasium.utils.env_checker import check_env

    from bridges.gymnasium import GymnasiumEnv, SingleAgentEnv
    from bridges.matrix import factory_of
    from bridges.wrapping import wrap

    kwargs = dict(case.kwargs)
    if case.target.endswith(":multi_agent"):
        kwargs["num_agents"] = 1
    env = wrap(factory_of(case)(**kwargs))
    unchecked = ""
    if isinstance(env, GymnasiumEnv) and env.mask_info_key is not None:
        env.check_legal = False  # check_env samples without the mask (unseeded): masked actions must pass
        unchecked = "; legality unchecked, as check_env samples without masks"
    check_env(SingleAgentEnv(env), skip_render_check=True)
    return f"pass: gymnasium check_env on to_gymnasium (one agent{unchecked})"


def _openspiel(case: Case, build: Build) -> str:
    """Play the bridged env with seeded random legal actions, and play the same game in raw pyspiel
    with the actions the probe sent to ``env.step`` (and the chance outcomes the bridge drew);
    compare who acts, the legal actions, the actions the bridge's state took and the returns."""
    import pyspiel

    from bridges._openspiel_loading import reseeded

    env = build(case)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    played = env.state.get_game()
    game = played
    if reseeded(played):
        # Chance is drawn inside pyspiel from the game's RNG: a fresh game with the parameters of
        # the one being played (the bridge set its seed) replays the same outcomes.
        game = pyspiel.load_game(played.get_type().short_name, played.get_parameters())
    raw = game.new_initial_state()
    sums: dict[str, float] = {}
    steps = 0
    terminated = False
    while True:
        _follow_chance(raw, env.state.history())
        acting = list(obs)
        if raw.is_terminal():
            return f"fail: step {steps}: pyspiel's game is over, the bridge asks {sorted(acting)} to act"
        expected = _deciding(raw)
        if sorted(acting) != sorted(f"player_{p}" for p in expected):
            return f"fail: step {steps}: bridge asks {sorted(acting)} to act, pyspiel {sorted(expected)}"
        for agent in acting:
            legal = np.flatnonzero(action_mask_of(obs[agent])).tolist()
            if legal != sorted(raw.legal_actions(int(agent.rsplit("_", 1)[1]))):
                return f"fail: step {steps}: legal actions of {agent} differ from pyspiel's"
        actions = {a: int(sample_action(env.get_action_space(a), rng, action_mask_of(obs[a]), a)) for a in acting}
        obs, rewards, terminateds, truncateds, _ = env.step(actions)
        for agent, reward in rewards.items():
            sums[agent] = sums.get(agent, 0.0) + float(reward)
        # The raw game takes the actions sent, not the bridge's record of them: a bridge that
        # applies another action than it was sent shows here, or in the checks that follow.
        before = len(raw.history())
        _apply_sent(raw, actions)
        sent = raw.history()[before:]
        took = env.state.history()[before : before + len(sent)]
        if took != sent:
            return f"fail: step {steps}: the probe sent {sent}, the bridge's game took {took}"
        steps += 1
        terminated = bool(terminateds[ALL])
        if terminated or truncateds[ALL] or steps >= (case.max_steps or ROUND_TRIP_STEPS):
            break
    _follow_chance(raw, env.state.history())
    if terminated != raw.is_terminal():
        said = "ended the episode" if terminated else "did not end the episode"
        return f"fail: step {steps - 1}: the bridge {said}, pyspiel's game is{'' if raw.is_terminal() else ' not'} over"
    if raw.is_terminal():
        returns = raw.returns()
        for player, value in enumerate(returns):
            if abs(sums.get(f"player_{player}", 0.0) - value) > 1e-6 * max(1.0, abs(value)):
                return f"fail: player_{player} received {sums.get(f'player_{player}', 0.0)}, pyspiel returns {value}"
        return f"pass: {steps} steps, same legal actions and returns as pyspiel"
    return f"pass: {steps} steps (cut at the step budget), same legal actions as pyspiel"


def _apply_sent(raw: Any, actions: Mapping[str, int]) -> None:
    """Apply the actions sent to the bridge (``{"player_<p>": action}``) to the raw state; at a
    simultaneous node, players who were not asked to act pass ``INVALID_ACTION``, as in the bridge."""
    import pyspiel

    by_player = {int(agent.rsplit("_", 1)[1]): action for agent, action in actions.items()}
    if raw.is_simultaneous_node():
        raw.apply_actions([by_player.get(p, pyspiel.INVALID_ACTION) for p in range(raw.num_players())])
    else:
        raw.apply_action(by_player[raw.current_player()])


def _follow_chance(raw: Any, history: list[int]) -> None:
    """At a chance node, apply the outcomes the bridge drew (read from ``history`` at the raw
    state's position) until a decision node, the terminal state or the end of ``history``."""
    while raw.is_chance_node():
        position = len(raw.history())
        if position >= len(history):
            return
        raw.apply_action(history[position])


def _deciding(state: Any) -> list[int]:
    if state.is_simultaneous_node():
        return [p for p in range(state.num_players()) if state.legal_actions(p)]
    return [state.current_player()]


_ROUND_TRIPS: dict[str, Callable[[Case, Build], str]] = {
    "pettingzoo-aec": _aec,
    "pettingzoo-parallel": _parallel,
    "rllib": _rllib,
    "gymnasium": _gymnasium,
    "openspiel": _openspiel,
}


# Overhead --------------------------------------------------------------------------------------


def overhead(case: Case, build: Build) -> tuple[float | None, float]:
    """(raw, bridged) microseconds per agent action; raw is None where there is no raw loop."""
    raw_loop = _RAW_LOOPS.get(case.source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bridged = _Timed(_BRIDGED_LOOPS.get(case.source, _ours_loop)(build(case)))
        raw = _Timed(raw_loop(case)) if raw_loop is not None else None
        budget = _calibrate(bridged, raw)
        bridged_times, raw_times = [], []
        for _ in range(ROUNDS):
            if raw is not None:
                raw_times.append(raw.run(budget))
            bridged_times.append(bridged.run(budget))
    return (statistics.median(raw_times) if raw is not None else None), statistics.median(bridged_times)


class _Timed:
    """Runs a loop generator for ``n`` agent actions and returns microseconds per action."""

    def __init__(self, loop: Any) -> None:
        self.loop = loop

    def run(self, actions: int) -> float:
        start = time.perf_counter()
        done = 0
        while done < actions:
            done += next(self.loop)
        return (time.perf_counter() - start) * 1e6 / done


def _calibrate(bridged: _Timed, raw: _Timed | None) -> int:
    per_action = max(bridged.run(20), raw.run(20) if raw is not None else 0.0)
    # At least MIN_ACTIONS per window, so that windows span episode ends (where some games pay
    # for scoring) instead of sampling only the cheap middle of one episode.
    return int(min(20_000, max(MIN_ACTIONS, TARGET_SECONDS * 1e6 / per_action)))


def _ours_loop(env: Any) -> Any:
    """Our env: random legal play, resetting at the end; yields the actions of each step."""
    rng = np.random.default_rng(0)
    seed = 0
    while True:
        obs, _ = env.reset(seed=seed)
        seed += 1
        ending: set = set()
        while True:
            acting = [a for a in obs if a not in ending]
            actions = {a: sample_action(env.get_action_space(a), rng, action_mask_of(obs[a]), a) for a in acting}
            obs, _, terminateds, truncateds, _ = env.step(actions)
            yield len(actions)
            if terminateds.get(ALL) or truncateds.get(ALL):
                break
            ending = {a for a in obs if terminateds.get(a) or truncateds.get(a)}


def _rllib_raw(case: Case) -> Any:
    return _ours_loop(_factory(case)())  # RLlib's API is ours: the same loop drives it


def _gymnasium_raw(case: Case) -> Any:
    import gymnasium as gym

    kwargs = dict(case.kwargs)
    if "env_id" in kwargs:
        env_id = kwargs.pop("env_id")
        kwargs.pop("mask_info_key", None)
        count = int(kwargs.pop("num_agents", 1 if case.target.endswith(":single_agent") else 2))
        envs = [gym.make(env_id, **kwargs) for _ in range(count)]
    else:
        envs = [_factory(case)()]
    rng = np.random.default_rng(0)
    for index, env in enumerate(envs):
        env.reset(seed=index)
    while True:
        for env in envs:
            _, _, terminated, truncated, _ = env.step(sample_action(env.action_space, rng))
            if terminated or truncated:
                env.reset()
        yield len(envs)


def _mask(observation: Any, info: Any) -> Any:
    mask = action_mask_of(observation)
    if mask is None and isinstance(info, Mapping) and "action_mask" in info:
        mask = np.asarray(info["action_mask"])
    return mask


def _aec_raw(case: Case) -> Any:
    env = _factory(case)()
    rng = np.random.default_rng(0)
    seed = 0
    while True:
        env.reset(seed=seed)
        seed += 1
        for agent in env.agent_iter():
            observation, _, terminated, truncated, info = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            env.step(sample_action(env.action_space(agent), rng, _mask(observation, info), agent))
            yield 1


def _parallel_raw(case: Case) -> Any:
    env = _factory(case)()
    rng = np.random.default_rng(0)
    seed = 0
    while True:
        obs, infos = env.reset(seed=seed)
        seed += 1
        while env.agents:
            actions = {
                a: sample_action(env.action_space(a), rng, _mask(obs.get(a), infos.get(a)), a) for a in env.agents
            }
            obs, _, _, _, infos = env.step(actions)
            yield len(actions)


def _pick(legal: list[int], draw: float) -> int:
    """The legal action that ``draw`` (uniform in [0, 1)) picks: how both OpenSpiel arms choose."""
    return legal[int(draw * len(legal))]


def _openspiel_ours(env: Any) -> Any:
    """The bridged OpenSpiel env driven as :func:`_openspiel_raw` drives pyspiel: seeded once,
    legal actions read from the mask as a list of Python ints, the action drawn with
    :func:`_pick` from a ``random.Random`` (as the raw arm, so neither pays for numpy draws or
    numpy integers the other does not); yields the actions of each step."""
    draw = random.Random(0).random
    obs, _ = env.reset(seed=0)
    while True:
        actions = {}
        for agent, observation in obs.items():
            actions[agent] = _pick(observation[MASK_KEY].nonzero()[0].tolist(), draw())
        obs, _, terminateds, truncateds, _ = env.step(actions)
        yield len(actions)
        if terminateds[ALL] or truncateds[ALL]:
            obs, _ = env.reset()


def _openspiel_raw(case: Case) -> Any:
    """pyspiel with what an RL loop needs, read as the bridge reads it: the acting players'
    legal actions and observation (:func:`raw_observation`), the rewards of each step in games
    that pay them before the end, and at the end the returns and every player's observation."""
    import pyspiel

    from bridges._openspiel_loading import choose_observation_type

    game = build_openspiel_game(case)
    observe, _ = raw_observation(game, choose_observation_type(game))
    players = range(game.num_players())
    step_rewards = game.get_type().reward_model != pyspiel.GameType.RewardModel.TERMINAL
    draw = random.Random(0).random
    chance = random.Random(1).random  # chance has its own stream, as the bridge's has its own
    while True:
        state = game.new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                state.apply_action(_chance_outcome(state.chance_outcomes(), chance()))
                continue
            if state.is_simultaneous_node():
                joint = []
                acting = 0
                for player in players:
                    legal = state.legal_actions(player)
                    if legal:  # players without legal actions are not asked, as in the bridge
                        observe(state, player)
                        joint.append(_pick(legal, draw()))
                        acting += 1
                    else:
                        joint.append(pyspiel.INVALID_ACTION)
                state.apply_actions(joint)
                yield acting
            else:
                player = state.current_player()
                observe(state, player)
                state.apply_action(_pick(state.legal_actions(player), draw()))
                yield 1
            if step_rewards:
                state.rewards()
        state.returns()
        for player in players:  # the bridge hands every player a final observation
            observe(state, player)


def raw_observation(game: Any, kind: str) -> tuple[Callable[[Any, int], Any], np.ndarray | None]:
    """How the raw arm reads ``kind`` observations of ``game``: ``(observe, view)``.

    ``observe(state, player)`` is the ``set_from`` of the observer that
    ``open_spiel.python.observation.make_observation`` builds, the API the bridge reads tensors
    with, filling ``view`` (the observer's numpy tensor) in place. Where the bridge reads the
    state instead (string observations; no observer, or one without a tensor of the right size;
    a Python observer that does not fill its tensor), ``observe`` is the state's method of that
    name, which returns the observation, and ``view`` is None.
    """
    from bridges.openspiel import fills_its_tensor, tensor_observer

    def from_state(state: Any, player: int) -> Any:
        return getattr(state, kind)(player)

    if kind.endswith("_string"):
        return from_state, None
    _, observer = tensor_observer(game, kind)
    if observer is None:
        return from_state, None
    inner = getattr(observer, "_observation", None)
    if inner is not None:
        return inner.set_from, observer.tensor  # the C++ observer's own method, as the bridge calls it
    # A Python game's observer: usable only if it fills its tensor (the bridge checks the same).
    state = game.new_initial_state()
    while state.is_chance_node():
        state.apply_action(state.chance_outcomes()[0][0])
    observer.set_from(state, max(state.current_player(), 0))
    if fills_its_tensor(observer):
        return observer.set_from, observer.tensor
    return from_state, None


def _chance_outcome(outcomes: list[tuple[int, float]], draw: float) -> int:
    """The outcome that ``draw`` (uniform in [0, 1)) picks from ``(outcome, probability)`` pairs."""
    total = 0.0
    for outcome, probability in outcomes:
        total += probability
        if draw < total:
            return int(outcome)
    return int(outcomes[-1][0])


def build_openspiel_game(case: Case) -> Any:
    """The raw ``pyspiel.Game`` of an OpenSpiel case, loaded as the bridge loads it (which
    registers OpenSpiel's Python games first where the name needs them)."""
    from bridges._openspiel_loading import load_game

    return load_game(case.target)


_BRIDGED_LOOPS: dict[str, Callable[[Any], Any]] = {
    "openspiel": _openspiel_ours,  # the others: _ours_loop, as sample_action is their raw arm's policy too
}
_RAW_LOOPS: dict[str, Callable[[Case], Any]] = {
    "pettingzoo-aec": _aec_raw,
    "pettingzoo-parallel": _parallel_raw,
    "rllib": _rllib_raw,
    "gymnasium": _gymnasium_raw,
    "openspiel": _openspiel_raw,
}

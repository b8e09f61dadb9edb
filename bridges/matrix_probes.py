"""What :mod:`bridges.matrix` measures besides ``check_env``: round trips and per-action overhead.

Each source API has a raw loop (its own API driven directly, with seeded random legal actions)
and a round trip through its own tooling. Both take the case and the matrix's ``build(case)``.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from bridges.compat import Case
from marl_core.env import ALL
from marl_core.spaces import action_mask_of, sample_action

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
    from pettingzoo.test import api_test

    from bridges.pettingzoo import to_aec

    api_test(to_aec(build(case)), num_cycles=min(case.max_steps or ROUND_TRIP_STEPS, ROUND_TRIP_STEPS))
    return "pass: api_test on to_aec"


def _parallel(case: Case, build: Build) -> str:
    from pettingzoo.test import parallel_api_test

    from bridges.pettingzoo import to_parallel

    parallel_api_test(to_parallel(build(case)), num_cycles=min(case.max_steps or ROUND_TRIP_STEPS, ROUND_TRIP_STEPS))
    return "pass: parallel_api_test on to_parallel"


def _rllib(case: Case, build: Build) -> str:
    from ray.rllib.utils.pre_checks.env import check_multiagent_environments

    from bridges.rllib import RLlibMultiAgentEnvAdapter

    # The adapter directly: to_rllib(from_rllib(x)) would hand back x itself.
    adapter = RLlibMultiAgentEnvAdapter(build(case))
    for agent_id in adapter.possible_agents:  # RLlib's check samples from the spaces: the same draws every run
        adapter.get_action_space(agent_id).seed(0)
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
    import pyspiel

    env = build(case)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    played = env.state.get_game()
    game = played
    if played.get_type().chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC:
        # Chance is drawn inside pyspiel from the game's RNG: a fresh game with the parameters of
        # the one being played (the bridge set its rng_seed) replays the same outcomes.
        game = pyspiel.load_game(played.get_type().short_name, played.get_parameters())
    raw = game.new_initial_state()
    applied = 0
    sums: dict[str, float] = {}
    steps = 0
    while True:
        applied = _replay(raw, env.state.history(), applied, game.num_players())
        if raw.is_terminal():
            break
        acting = list(obs)
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
        steps += 1
        if terminateds[ALL] or truncateds[ALL] or steps >= (case.max_steps or ROUND_TRIP_STEPS):
            _replay(raw, env.state.history(), applied, game.num_players())
            break
    if raw.is_terminal():
        returns = raw.returns()
        for player, value in enumerate(returns):
            if abs(sums.get(f"player_{player}", 0.0) - value) > 1e-6 * max(1.0, abs(value)):
                return f"fail: player_{player} received {sums.get(f'player_{player}', 0.0)}, pyspiel returns {value}"
        return f"pass: {steps} steps, same legal actions and returns as pyspiel"
    return f"pass: {steps} steps (cut at the step budget), same legal actions as pyspiel"


def _replay(raw: Any, history: list[int], applied: int, num_players: int) -> int:
    """Apply ``history[applied:]`` to ``raw`` (joint actions at simultaneous nodes)."""
    while applied < len(history):
        if raw.is_simultaneous_node():
            raw.apply_actions(history[applied : applied + num_players])
            applied += num_players
        else:
            raw.apply_action(history[applied])
            applied += 1
    return applied


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
        bridged = _Timed(_ours_loop(build(case)))
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


def _openspiel_raw(case: Case) -> Any:
    """pyspiel with what an RL loop needs: legal actions, the acting players' observation, returns."""
    env = build_openspiel_game(case)
    game_type = env.get_type()
    if game_type.provides_observation_tensor:
        observe = "observation_tensor"
    elif game_type.provides_information_state_tensor:
        observe = "information_state_tensor"
    elif game_type.provides_observation_string:
        observe = "observation_string"
    else:
        observe = "information_state_string"
    rng = np.random.default_rng(0)
    while True:
        state = env.new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                state.apply_action(_chance_outcome(state.chance_outcomes(), rng.random()))
            elif state.is_simultaneous_node():
                joint = []
                for player in range(state.num_players()):
                    legal = state.legal_actions(player)
                    getattr(state, observe)(player)
                    joint.append(int(legal[rng.integers(len(legal))]) if legal else 0)
                state.apply_actions(joint)
                yield state.num_players()
            else:
                player = state.current_player()
                legal = state.legal_actions(player)
                getattr(state, observe)(player)
                state.apply_action(int(legal[rng.integers(len(legal))]))
                yield 1
        state.returns()  # what an RL loop reads at the end (bridge scores its deals here)


def _chance_outcome(outcomes: list[tuple[int, float]], draw: float) -> int:
    """The outcome that ``draw`` (uniform in [0, 1)) picks from ``(outcome, probability)`` pairs."""
    total = 0.0
    for outcome, probability in outcomes:
        total += probability
        if draw < total:
            return int(outcome)
    return int(outcomes[-1][0])


def build_openspiel_game(case: Case) -> Any:
    """The raw ``pyspiel.Game`` of an OpenSpiel case."""
    import pyspiel

    return pyspiel.load_game(case.target)


_RAW_LOOPS: dict[str, Callable[[Case], Any]] = {
    "pettingzoo-aec": _aec_raw,
    "pettingzoo-parallel": _parallel_raw,
    "rllib": _rllib_raw,
    "gymnasium": _gymnasium_raw,
    "openspiel": _openspiel_raw,
}

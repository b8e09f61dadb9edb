"""OpenSpielEnv chance and seeding: recorded histories, and the memo of a game's opening.

``openspiel_seeded_histories.json`` holds ``state.history()`` at the end of every episode played by
:func:`seeded_histories` (recorded once; any change to how chance is sampled shows up here). Each
game plays a seeded episode, two unseeded ones that keep drawing from the same generator (past
the 256-draw block boundary for the longer games), then a reseeded one.

``reset`` memoizes the nodes that open a game (its first chance nodes and the first decision);
what it hands out from the memo must equal what pyspiel gives on a fresh state, and be a copy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bridges import OpenSpielEnv

RECORDED = Path(__file__).with_name("openspiel_seeded_histories.json")
GAMES = ["kuhn_poker", "leduc_poker", "liars_dice", "pig", "backgammon", "2048", "goofspiel(imp_info=True)"]
OPENING_GAMES = ["kuhn_poker", "leduc_poker", "liars_dice", "backgammon", "2048", "goofspiel", "tic_tac_toe"]


def seeded_histories(name: str) -> list[list[int]]:
    """Histories of four episodes of seeded random legal play (at most 300 steps each)."""
    env = OpenSpielEnv(name, max_steps=300)
    rng = np.random.default_rng(11)
    histories = []
    for seed in (5, None, None, 6):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            actions = {a: int(rng.choice(np.flatnonzero(o["action_mask"]))) for a, o in obs.items()}
            obs, _, terminateds, truncateds, _ = env.step(actions)
            done = terminateds["__all__"] or truncateds["__all__"]
        histories.append(env.state.history())
    return histories


@pytest.mark.parametrize("name", GAMES)
def test_same_seed_and_actions_give_the_recorded_history(name: str) -> None:
    recorded = json.loads(RECORDED.read_text())[name]
    assert seeded_histories(name) == recorded


def expected_obs(env: OpenSpielEnv) -> dict[str, tuple[list[float], list[int]]]:
    """What pyspiel itself gives for the players acting now: observation tensor and legal actions."""
    state = env.state
    acting = [state.current_player()] if state.current_player() >= 0 else [
        p for p in range(env.game.num_players()) if state.legal_actions(p)
    ]
    return {f"player_{p}": (state.observation_tensor(p), state.legal_actions(p)) for p in acting}


def as_lists(obs: dict) -> dict[str, tuple[list[float], list[int]]]:
    return {
        agent_id: (o["observation"].ravel().tolist(), np.flatnonzero(o["action_mask"]).tolist())
        for agent_id, o in obs.items()
    }


@pytest.mark.parametrize("name", OPENING_GAMES)
def test_resets_from_the_memo_equal_pyspiel_and_fresh_envs(name: str) -> None:
    warm = OpenSpielEnv(name)
    for seed in range(12):  # the first pass fills the memo, the second reads it
        warm.reset(seed=seed)
    for seed in range(12):
        obs, infos = warm.reset(seed=seed)
        cold = OpenSpielEnv(name)  # its first reset reads every node from pyspiel
        cold_obs, cold_infos = cold.reset(seed=seed)
        assert warm.state.history() == cold.state.history()
        assert as_lists(obs) == as_lists(cold_obs) == expected_obs(warm)
        assert warm.agents == cold.agents and infos == cold_infos == {}
        for agent_id, observation in obs.items():
            assert observation["observation"].dtype == np.float32 and observation["action_mask"].dtype == np.int8
            assert observation["observation"].shape == cold_obs[agent_id]["observation"].shape


@pytest.mark.parametrize("name", ["kuhn_poker", "tic_tac_toe"])
def test_what_reset_hands_out_is_a_fresh_copy(name: str) -> None:
    env = OpenSpielEnv(name)
    first, _ = env.reset(seed=3)
    snapshot = as_lists(first)
    for observation in first.values():  # a user writing into what it received changes nothing else
        assert observation["observation"].flags.writeable and observation["action_mask"].flags.writeable
        observation["observation"][...] = 7.0
        observation["action_mask"][...] = 7
    again, _ = env.reset(seed=3)
    assert as_lists(again) == snapshot
    for agent_id, observation in again.items():
        assert observation["observation"] is not first[agent_id]["observation"]
        assert observation["action_mask"] is not first[agent_id]["action_mask"]
    (agent_id, observation), = again.items()  # play on: the env's own state is intact
    obs, *_ = env.step({agent_id: int(np.flatnonzero(observation["action_mask"])[0])})
    assert as_lists(obs) == expected_obs(env)

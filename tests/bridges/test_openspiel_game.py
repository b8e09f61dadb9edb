"""to_openspiel: MultiAgentEnvs as OpenSpiel games, checked with OpenSpiel's own tools."""

from __future__ import annotations

import copy
import functools
import logging
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyspiel
import pytest
from open_spiel.python.algorithms import mcts
from pettingzoo.classic import tictactoe_v3

from bridges import OpenSpielEnv, to_openspiel
from examples.rock_paper_scissors import RockPaperScissors
from examples.tic_tac_toe import TicTacToe
from marl_core.conformance import check_env
from marl_core.env import MultiAgentEnv
from marl_core.errors import EnvContractError, IllegalActionError, MultiAgentEnvError, UnsupportedEnvError
from marl_core.rollout import play
from tests.fixtures.envs import HeterogeneousSpacesEnv, IrregularOrderEnv, JoinLeaveEnv


def round_trip_game() -> pyspiel.Game:
    return to_openspiel(lambda: OpenSpielEnv("tic_tac_toe"), name="test_round_trip_tic_tac_toe")


# Round trip -----------------------------------------------------------------------------------


def test_round_trip_matches_pyspiel_tic_tac_toe_move_for_move() -> None:
    env = OpenSpielEnv(round_trip_game())
    reference = pyspiel.load_game("tic_tac_toe")
    for seed in range(20):
        rng = np.random.default_rng(seed)
        state = reference.new_initial_state()
        obs, _ = env.reset(seed=seed)
        sums = dict.fromkeys(env.possible_agents, 0.0)
        while not state.is_terminal():
            (agent_id, observation), = obs.items()
            assert agent_id == f"player_{state.current_player()}"
            assert np.flatnonzero(observation["action_mask"]).tolist() == state.legal_actions()
            np.testing.assert_array_equal(
                observation["observation"].ravel(), np.asarray(state.observation_tensor(), np.float32)
            )
            action = int(rng.choice(state.legal_actions()))
            state.apply_action(action)
            obs, rewards, terminateds, _, _ = env.step({agent_id: action})
            for key, reward in rewards.items():
                sums[key] += reward
        assert terminateds["__all__"]
        assert [sums["player_0"], sums["player_1"]] == state.returns()
        assert env.state.returns() == state.returns()


def test_random_sim_test_passes_on_exported_games() -> None:
    pyspiel.random_sim_test(round_trip_game(), num_sims=10, serialize=True, verbose=False)
    seeded = to_openspiel(TicTacToe, name="test_sim_tic_tac_toe", seeds=range(5), max_game_length=200)
    pyspiel.random_sim_test(seeded, num_sims=10, serialize=True, verbose=False)
    rps = to_openspiel(RockPaperScissors, name="test_sim_rps")
    assert rps.get_type().dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS
    pyspiel.random_sim_test(rps, num_sims=5, serialize=True, verbose=False)
    irregular = to_openspiel(IrregularOrderEnv, name="test_sim_irregular", dynamics="simultaneous")
    pyspiel.random_sim_test(irregular, num_sims=5, serialize=True, verbose=False)


def test_states_of_a_game_exported_from_a_lambda_pickle_and_play_on() -> None:
    # pickle cannot name a lambda; the export goes with cloudpickle, and the env is not pickled.
    game = round_trip_game()
    state = game.new_initial_state()
    for action in (4, 0, 2):
        state.apply_action(action)
    twin = pickle.loads(pickle.dumps(state))
    assert twin.history() == [4, 0, 2] and twin.legal_actions() == state.legal_actions()
    for action in (1, 6):  # x completes the diagonal 2-4-6
        state.apply_action(action)
        twin.apply_action(action)
    assert twin.is_terminal() and state.is_terminal() and twin.returns() == state.returns() == [1.0, -1.0]
    assert pickle.loads(pickle.dumps(game)).new_initial_state().legal_actions() == list(range(9))


def _tic_tac_toe() -> OpenSpielEnv:
    return OpenSpielEnv("tic_tac_toe")


def _connect_four() -> OpenSpielEnv:
    return OpenSpielEnv("connect_four")


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda env: pickle.loads(pickle.dumps(env))], ids=["deepcopy", "pickle"])
def test_an_env_over_an_exported_game_copies_with_its_own_game(clone: Any) -> None:
    # The export pickles itself; the name it was registered under may mean another game by now.
    env = OpenSpielEnv(to_openspiel(_tic_tac_toe, name="test_copied_export"))
    env.reset(seed=0)
    env.step({"player_0": 4})
    to_openspiel(_connect_four, name="test_copied_export")
    twin = clone(env)
    assert twin.game.num_distinct_actions() == 9 and twin.state.history() == [4]
    assert list(twin.step({"player_1": 0})[0]) == list(env.step({"player_1": 0})[0]) == ["player_0"]


# MCTS -----------------------------------------------------------------------------------------


def mcts_results(games: int) -> list[float]:
    """MCTSBot (200 simulations) against uniform random on the seeds' TicTacToe; MCTS's returns."""
    game = to_openspiel(
        TicTacToe, name="test_mcts_tic_tac_toe", seeds=range(100), reward_model="terminal", max_game_length=100
    )
    bot = mcts.MCTSBot(
        game,
        uct_c=2.0,
        max_simulations=200,
        evaluator=mcts.RandomRolloutEvaluator(n_rollouts=1, random_state=np.random.RandomState(1)),
        random_state=np.random.RandomState(2),
        solve=True,
    )
    rng = np.random.default_rng(0)
    results = []
    for index in range(games):
        state = game.new_initial_state()
        state.apply_action(index % 100)  # the seed, which picks the start player
        mcts_player = index % 2
        while not state.is_terminal():
            if state.current_player() == mcts_player:
                action = bot.step(state)
            else:
                action = int(rng.choice(state.legal_actions()))
            state.apply_action(action)
        results.append(state.returns()[mcts_player])
    return results


def test_mcts_beats_random_quick() -> None:
    results = mcts_results(4)
    assert all(value >= 0.0 for value in results), results  # >= 0: a win or a draw, no penalty


@pytest.mark.slow
def test_mcts_wins_or_draws_95_of_100_games() -> None:
    results = mcts_results(100)
    assert sum(value >= 0.0 for value in results) >= 95, results


# Semantics ------------------------------------------------------------------------------------


def test_seeds_are_the_chance_node_and_pick_the_start_player() -> None:
    game = to_openspiel(TicTacToe, name="test_seeds_tic_tac_toe", seeds=range(10))
    state = game.new_initial_state()
    assert state.is_chance_node() and state.chance_outcomes() == [(k, 0.1) for k in range(10)]
    starters = set()
    for seed in range(10):
        child = state.child(seed)
        starters.add(child.current_player())
        assert child.legal_actions() == list(range(9))  # the seeds' env has no mask: every action
    assert starters == {0, 1}


def test_clones_replay_and_are_independent() -> None:
    game = to_openspiel(TicTacToe, name="test_clone_tic_tac_toe", seeds=(3,))
    state = game.new_initial_state()
    for action in (4, 0, 8):
        state.apply_action(action)
    clone = state.clone()
    assert clone.history() == state.history() == [4, 0, 8]
    assert clone.observation_tensor(0) == state.observation_tensor(0)
    assert clone.information_state_string(1) == state.information_state_string(1)
    clone.apply_action(2)
    assert state.history() == [4, 0, 8] and clone.history() == [4, 0, 8, 2]
    assert state.current_player() != clone.current_player()


@pytest.mark.parametrize(("game_name", "moves", "illegal"), [
    ("tic_tac_toe", [4], 4),  # turn-based: a taken cell
    ("goofspiel(num_cards=4)", [[0, 0]], [0, 1]),  # simultaneous: a card already played
])
def test_an_illegal_action_leaves_the_exported_state_and_its_clones_unchanged(
    game_name: str, moves: list, illegal: Any
) -> None:
    game = to_openspiel(lambda: OpenSpielEnv(game_name), name=f"test_illegal_{game_name.split('(')[0]}")
    state = game.new_initial_state()
    for move in moves:
        state.apply_actions(move) if isinstance(move, list) else state.apply_action(move)
    before = [state.information_state_string(p) for p in range(2)], state.history()
    with pytest.raises(IllegalActionError):
        state.apply_actions(illegal) if isinstance(illegal, list) else state.apply_action(illegal)
    assert ([state.information_state_string(p) for p in range(2)], state.history()) == before
    clone = state.clone()
    assert [clone.information_state_string(p) for p in range(2)] == before[0]
    legal = [state.legal_actions(p)[-1] if state.legal_actions(p) else 0 for p in range(2)]
    for target in (state, clone):  # both play on, and clone again, after the refusal
        target.apply_actions(legal) if isinstance(illegal, list) else target.apply_action(legal[1])
        assert target.clone().history() == target.history()


def test_a_chance_outcome_or_joint_action_of_the_wrong_size_is_refused_and_changes_nothing() -> None:
    # A seed index out of range was an IndexError (-2 silently the second to last); a joint action of
    # the wrong length an IndexError, or, with an entry too many, taken and recorded in history().
    game = to_openspiel(TicTacToe, name="test_bad_chance_tic_tac_toe", seeds=(0, 1, 2))
    state = game.new_initial_state()
    for outcome in (3, -2):
        with pytest.raises(IllegalActionError, match=rf"agent 'chance': received {outcome}, legal actions now: "
                                                     r"\[0, 1, 2\] \(a chance outcome is the index of one of the game's 3 seeds\)"):
            state.apply_action(outcome)
    assert state.is_chance_node() and state.history() == []
    state.apply_action(2)
    goofspiel = to_openspiel(lambda: OpenSpielEnv("goofspiel(num_cards=4)"), name="test_bad_joint_goofspiel")
    state = goofspiel.new_initial_state()
    for joint in ([1], [1, 0, 1]):
        with pytest.raises(MultiAgentEnvError, match=rf"a joint action has one entry per player \(2: \['player_0', "
                                                    rf"'player_1'\]\), received {len(joint)}: "):
            state.apply_actions(joint)
    assert state.history() == [] and state.is_simultaneous_node()
    state.apply_actions([1, 0])
    assert state.history() == [1, 0]


def _play_to_the_end(state: Any, joint: list[int]) -> int:
    moves = 0
    while not state.is_terminal():
        state.apply_actions(joint)
        moves += 1
    return moves


@pytest.mark.parametrize(("call", "message"), [
    # One agent's action at a simultaneous node reached the env alone: a bare KeyError, after the
    # env had counted the move (the state ended a move early, its clones did not).
    (lambda s: s.apply_action(1), r"apply_action\(1\) at a simultaneous node: \['player1', 'player2'\] act at once"),
    # An action outside the space reached the env (a KeyError, after the env had moved).
    (lambda s: s.apply_actions([0, 5]), r"invalid action for agent 'player2': expected an OpenSpiel action in 0\.\.2, "
                                        r"received 5"),
    (lambda s: s.apply_actions([-1, 0]), r"invalid action for agent 'player1': .* received -1"),
], ids=["one-action", "out-of-range", "negative"])
def test_a_refused_action_at_a_simultaneous_node_leaves_the_env_untouched(call: Any, message: str) -> None:
    game = to_openspiel(RockPaperScissors, name="test_refused_rps")
    state = game.new_initial_state()
    with pytest.raises(MultiAgentEnvError, match=message):
        call(state)
    assert state.history() == []
    clone = state.clone()
    assert _play_to_the_end(state, [0, 1]) == _play_to_the_end(clone, [0, 1]) == 10  # RockPaperScissors: 10 moves
    assert state.returns() == clone.returns() == [-10.0, 10.0]


def test_a_turn_based_exported_game_refuses_what_its_env_would_misread() -> None:
    game = to_openspiel(TicTacToe, name="test_refused_tic_tac_toe")
    state = game.new_initial_state()
    # -2 was played as board[-2] (cell 7), 9 was a bare IndexError.
    for action in (-2, 9):
        with pytest.raises(MultiAgentEnvError, match=rf"agent 'player2': expected an OpenSpiel action in 0\.\.8, received {action}"):
            state.apply_action(action)
    assert state.history() == [] and state.legal_actions() == list(range(9))
    # A joint action on a sequential game applied the first entry and recorded both in history().
    with pytest.raises(MultiAgentEnvError, match=r"apply_actions\(\[4, 0\]\) on a game exported as sequential: "
                                                 r"apply_action takes the action of the one player to act \(\['player2'\] now\)"):
        state.apply_actions([4, 0])
    assert state.history() == []
    for action in (4, 0, 2, 6, 3, 5, 1, 7, 8):
        state.apply_action(action)
    assert state.is_terminal()
    with pytest.raises(MultiAgentEnvError, match=r"apply_action\(8\) on a terminal state: the game is over"):
        state.apply_action(8)  # was a bare IndexError
    with pytest.raises(MultiAgentEnvError, match=r"chance_outcomes\(\) at a node that is not a chance node"):
        state.chance_outcomes()  # was the seed distribution
    seeded = to_openspiel(TicTacToe, name="test_refused_tic_tac_toe_seeds", seeds=(0, 1, 2)).new_initial_state()
    assert seeded.action_to_string(pyspiel.PlayerId.CHANCE, 2) == "seed=2"
    with pytest.raises(IllegalActionError, match="agent 'chance': received -1"):
        seeded.action_to_string(pyspiel.PlayerId.CHANCE, -1)  # was "seed=2": the last seed
    with pytest.raises(MultiAgentEnvError, match=r"apply_actions\(\[0, 0\]\) at the chance node"):
        seeded.apply_actions([0, 0])
    # Outside the players' indices, or their action ranges: OpenSpiel's current player at a terminal
    # node (-4) was a bare IndexError, and an action outside the agent's space got a name.
    with pytest.raises(MultiAgentEnvError, match=r"action_to_string\(player=-4, action=8\): the player must be an "
                                                 r"agent's index \(0-1: \['player1', 'player2'\]\) .*terminal"):
        state.action_to_string(8)
    with pytest.raises(MultiAgentEnvError, match=r"action_to_string\(player=1, action=9\): agent 'player2' has "
                                                 r"actions 0-8"):
        state.action_to_string(1, 9)


class _NoLegalMoveAfterTheFirst(MultiAgentEnv):
    """Turn-based with masks; after a's move, b is asked to act with a mask that allows nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["a", "b"]
        masked = gym.spaces.Dict({"observation": gym.spaces.Discrete(2),
                                  "action_mask": gym.spaces.Box(0, 1, (2,), np.int8)})
        self.observation_spaces = dict.fromkeys(self.possible_agents, masked)
        self.action_spaces = {agent_id: gym.spaces.Discrete(2) for agent_id in self.possible_agents}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.agents = list(self.possible_agents)
        return {"a": {"observation": 0, "action_mask": np.ones(2, np.int8)}}, {}

    def step(self, action_dict):
        stuck = {"observation": 1, "action_mask": np.zeros(2, np.int8)}
        return {"b": stuck}, {}, {"__all__": False}, {"__all__": False}, {}


def test_a_player_asked_to_act_with_no_legal_action_is_the_envs_error() -> None:
    # It was a decision node with legal_actions() == [], which OpenSpiel's algorithms cannot take.
    state = to_openspiel(_NoLegalMoveAfterTheFirst, name="test_no_legal_move").new_initial_state()
    with pytest.raises(EnvContractError, match=r"_NoLegalMoveAfterTheFirst asks 'b' to act after 1 steps "
                                               r"with an action mask that allows no action"):
        state.apply_action(1)


class _ReusesItsBuffer(MultiAgentEnv):
    """Turn-based; every observation is the one array it writes the step count into."""

    def __init__(self, config: Any = None) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["a", "b"]
        self.observation_spaces = {a: gym.spaces.Box(0, 99, (1,), np.float32) for a in self.agents}
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.agents}
        self.buffer = np.zeros(1, np.float32)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        self.buffer[:] = 0
        return {"a": self.buffer}, {}

    def step(self, action_dict):
        self.t += 1
        self.buffer[:] = self.t
        done = self.t >= 4
        obs = {a: self.buffer for a in self.agents} if done else {"ab"[self.t % 2]: self.buffer}
        return obs, {}, {"__all__": done}, {"__all__": False}, {}


def test_an_env_writing_into_its_last_observation_does_not_rewrite_the_past() -> None:
    state = to_openspiel(_ReusesItsBuffer, name="test_reused_buffer").new_initial_state()
    assert state.information_state_string(0) == "observed [0.]"
    state.apply_action(0)
    assert state.information_state_string(0) == "observed [0.]\ndid 0"  # was "observed [1.]\ndid 0"
    assert state.observation_tensor(0) == [0.0]  # what 'a' last received


def test_python_games_inside_wrapper_games_load_in_a_fresh_process() -> None:
    # Only names that started with "python_" registered OpenSpiel's Python games: "Unknown game".
    script = ("from bridges._openspiel_loading import load_game\n"
              "game = load_game('turn_based_simultaneous_game(game=python_iterated_prisoners_dilemma())')\n"
              "print(game.get_type().short_name)\n"
              "for name in ('xyzzy', 'conect_four', 'turn_based_simultaneous_game(game=nope())'):\n"
              "    try:\n        load_game(name)\n    except Exception as error:\n        print(error)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "turn_based_simultaneous_game"
    # pyspiel's message listed every registered game, one a line, and pyspiel printed them to stderr too.
    assert lines[1:] == [
        "OpenSpiel game 'xyzzy' does not load: 'xyzzy' is not a registered game; pyspiel.registered_names() "
        "lists the games",
        "OpenSpiel game 'conect_four' does not load: 'conect_four' is not a registered game (did you mean "
        "'connect_four'?); pyspiel.registered_names() lists the games",
        "OpenSpiel game 'turn_based_simultaneous_game(game=nope())' does not load: Unknown game 'nope'. "
        "pyspiel.registered_names() lists the games",
    ]
    assert "Available games" not in done.stderr.split("'nope'")[0]


def test_rewards_and_returns_in_both_reward_models() -> None:
    # The seeds' TicTacToe charges -5 for a move onto a taken cell: a reward during play.
    stepwise = to_openspiel(TicTacToe, name="test_rewards_tic_tac_toe", seeds=(0,))
    terminal = to_openspiel(TicTacToe, name="test_terminal_tic_tac_toe", seeds=(0,), reward_model="terminal")
    moves = [4, 4, 0, 1, 8]  # the second player first wastes a move, then the first completes 4-0-8
    for game in (stepwise, terminal):
        state = game.new_initial_state()
        first = state.current_player()
        seen = []
        for action in moves:
            state.apply_action(action)
            seen.append(state.rewards())
        assert state.is_terminal()
        expected = [0.0, 0.0]
        expected[first], expected[1 - first] = 5.0, -10.0
        assert state.returns() == expected
        if game is stepwise:
            assert seen[1][1 - first] == -5.0
        else:
            assert all(r == [0.0, 0.0] for r in seen[:-1]) and seen[-1] == expected


class _PaysEveryStep(MultiAgentEnv):
    """One agent paid 1.0 per step; the episode is truncated after ``config["length"]`` steps."""

    def __init__(self, config=None) -> None:
        super().__init__()
        self.length = (config or {}).get("length", 10)
        self.possible_agents = ["a"]
        self.observation_spaces = {"a": gym.spaces.Box(0, 1e6, (1,), np.float32)}
        self.action_spaces = {"a": gym.spaces.Discrete(2)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.agents = 0, ["a"]
        return {"a": np.zeros(1, np.float32)}, {}

    def step(self, actions):
        self.t += 1
        over = self.t >= self.length
        if over:
            self.agents = []
        return ({"a": np.full(1, self.t, np.float32)}, {"a": 1.0}, {"__all__": False},
                {"__all__": over, "a": over}, {})


def _play_out(env) -> tuple[float, dict, dict, int]:
    env.reset(seed=0)
    total, steps = 0.0, 0
    while True:
        _, rewards, terminateds, truncateds, _ = env.step({"player_0": 0})  # OpenSpielEnv names players
        total, steps = total + rewards["player_0"], steps + 1
        if terminateds["__all__"] or truncateds["__all__"]:
            return total, terminateds, truncateds, steps


def test_truncation_survives_a_round_trip_and_termination_stays_termination() -> None:
    game = to_openspiel(_PaysEveryStep, name="test_truncated_pays")
    total, terminateds, truncateds, steps = _play_out(OpenSpielEnv(game))
    assert (total, steps) == (10.0, 10)
    assert truncateds == {"player_0": True, "__all__": True} and terminateds == {"player_0": False, "__all__": False}
    state = game.new_initial_state()
    while not state.is_terminal():
        state.apply_action(0)
    assert state.is_truncated() and state.returns() == [10.0]
    last = list(play(OpenSpielEnv(round_trip_game()), seed=0))[-1]  # tic-tac-toe ends by termination
    assert last.terminateds["__all__"] and not last.truncateds["__all__"]


def test_an_episode_cut_at_max_game_length_ends_truncated_with_a_warning_once(caplog) -> None:
    game = to_openspiel(lambda: _PaysEveryStep({"length": 50}), name="test_cut_pays", max_game_length=5)
    with caplog.at_level(logging.WARNING, logger="bridges.openspiel_game"):
        for _ in range(2):
            total, terminateds, truncateds, steps = _play_out(OpenSpielEnv(game))
            assert (total, steps, truncateds["__all__"], terminateds["__all__"]) == (5.0, 5, True, False)
    assert [r.getMessage() for r in caplog.records] == [
        "test_cut_pays: the env's episode was cut at max_game_length=5 steps (the game ends there, as truncated); "
        "pass a larger max_game_length to to_openspiel to play it out"]


def test_a_terminal_reward_game_cut_short_by_max_steps_still_pays_what_the_env_paid() -> None:
    # returns() of a terminal-reward export stay zero until the end (as OpenSpiel requires, which
    # random_sim_test checks): a truncated episode paid 0 until OpenSpielEnv read paid_returns().
    game = to_openspiel(_PaysEveryStep, name="test_terminal_cut_short", reward_model="terminal")
    pyspiel.random_sim_test(game, num_sims=3, serialize=True, verbose=False)
    state = game.new_initial_state()
    state.apply_action(0)
    assert state.returns() == [0.0] and state.paid_returns() == [1.0]
    total, _, truncateds, steps = _play_out(OpenSpielEnv(game, max_steps=4))
    assert (total, steps, truncateds["__all__"]) == (4.0, 4, True)
    total, _, truncateds, steps = _play_out(OpenSpielEnv(game))
    assert (total, steps, truncateds["__all__"]) == (10.0, 10, True)


def test_observations_and_information_states() -> None:
    game = to_openspiel(IrregularOrderEnv, name="test_obs_irregular", dynamics="simultaneous")
    assert game.observation_tensor_shape() == [2]
    state = game.new_initial_state()
    assert state.is_simultaneous_node() and state.legal_actions(1) == []  # agent_2 waits
    state.apply_actions([1, 0, 1])
    assert "did 1" in state.information_state_string(0)
    assert len(state.observation_tensor(0)) == 2


def test_sequential_export_of_a_simultaneous_env_says_how_to_fix() -> None:
    game = to_openspiel(JoinLeaveEnv, name="test_join_leave_sequential")
    assert game.get_type().dynamics == pyspiel.GameType.Dynamics.SEQUENTIAL  # only scout acts at first
    state = game.new_initial_state()
    with pytest.raises(EnvContractError, match="dynamics='simultaneous'"):
        for _ in range(4):
            state.apply_action(state.legal_actions()[0])
    fixed = to_openspiel(JoinLeaveEnv, name="test_join_leave_simultaneous", dynamics="simultaneous")
    pyspiel.random_sim_test(fixed, num_sims=3, serialize=False, verbose=False)


def test_refusals() -> None:
    with pytest.raises(UnsupportedEnvError, match="Discrete action space"):
        to_openspiel(HeterogeneousSpacesEnv, name="test_heterogeneous")
    with pytest.raises(UnsupportedEnvError, match="already a pyspiel game"):
        to_openspiel(TicTacToe, name="tic_tac_toe")
    with pytest.raises(UnsupportedEnvError, match=r"a sequence of one or more seeds, received \(\)"):
        to_openspiel(TicTacToe, name="test_no_seed", seeds=())
    # Each was cut by int() (1.7 played as seed 1) or a bare ValueError ("ab").
    for seeds, bad in (((1.7, 2.9), "1.7"), ((True,), "True"), ((3, -1), "-1"), ((None,), "None")):
        with pytest.raises(UnsupportedEnvError, match=rf"seeds must be non-negative integers, received {bad} in "):
            to_openspiel(TicTacToe, name="test_bad_seeds", seeds=seeds)
    for seeds in ("ab", 7):  # seeds=7 for seed=7 was a bare TypeError
        with pytest.raises(UnsupportedEnvError, match=rf"a sequence of one or more seeds, received {seeds!r}"):
            to_openspiel(TicTacToe, name="test_bad_seeds", seeds=seeds)
    assert "test_bad_seeds" not in pyspiel.registered_names()
    numpy_seeds = to_openspiel(TicTacToe, name="test_numpy_seeds", seeds=np.array([3, 4])).new_initial_state()
    assert numpy_seeds.action_to_string(pyspiel.PlayerId.CHANCE, 1) == "seed=4"  # was "truth value ... ambiguous"
    # An env where a factory belongs was a TypeError from functools.partial; a factory of a
    # PettingZoo env an AttributeError ('raw_env' object has no attribute 'get_action_space').
    with pytest.raises(UnsupportedEnvError, match=r"takes a factory that builds a MultiAgentEnv .*received the "
                                                  r"TicTacToe instance .*pass its class"):
        to_openspiel(TicTacToe(), name="test_instance")
    with pytest.raises(UnsupportedEnvError, match=r"to_openspiel \(through env_factory\) takes a marl_core "
                                                  r"MultiAgentEnv, .*it is a PettingZoo AECEnv"):
        to_openspiel(tictactoe_v3.env, name="test_pettingzoo_factory")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"name": "bad(name)"}, r"without '\(' or '\)' .*received 'bad\(name\)'"),
        ({"name": ""}, r"a non-empty string .*received ''"),
        ({"max_game_length": 0}, r"max_game_length must be a positive int, received 0"),
        ({"max_game_length": -5}, r"max_game_length must be a positive int, received -5"),
        ({"utility_range": (1.0, -1.0)}, r"min <= max, received \(1.0, -1.0\)"),
        ({"utility": "zero_sum", "utility_sum": 3.0}, r"utility_sum=3.0 contradicts utility='zero_sum'"),
        ({"utility": "general_sum", "utility_sum": 1.0}, r"utility_sum=1.0 contradicts utility='general_sum'"),
    ],
)
def test_contradictory_or_unusable_arguments_are_refused_before_registering(arguments, message) -> None:
    arguments = {"name": "test_refused_arguments", **arguments}
    with pytest.raises(UnsupportedEnvError, match=message):
        to_openspiel(TicTacToe, **arguments)
    assert arguments["name"] not in pyspiel.registered_names()


class _Signal(MultiAgentEnv):
    """'a' picks 0 or 1; 'b' sees the pick at one entry of a long vector, then guesses it."""

    SIZE = 10_001

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["a", "b"]
        self.observation_spaces = {k: gym.spaces.Box(0, 1, (self.SIZE,), np.float32) for k in self.possible_agents}
        self.action_spaces = {k: gym.spaces.Discrete(2) for k in self.possible_agents}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.agents = ["a", "b"]
        return {"a": np.zeros(self.SIZE, np.float32)}, {}

    def step(self, actions):
        if "a" in actions:
            self.pick = actions["a"]
            seen = np.zeros(self.SIZE, np.float32)
            seen[self.SIZE // 2] = self.pick
            return {"b": seen}, {}, {"__all__": False}, {"__all__": False}, {}
        won = 1.0 if actions["b"] == self.pick else -1.0
        zeros = np.zeros(self.SIZE, np.float32)
        return {"a": zeros, "b": zeros}, {"a": -won, "b": won}, {"__all__": True}, {"__all__": False}, {}


def test_information_state_strings_tell_apart_long_observations_and_close_floats() -> None:
    game = to_openspiel(_Signal, name="test_signal_strings", utility="zero_sum")
    picked_0, picked_1 = game.new_initial_state(), game.new_initial_state()
    picked_0.apply_action(0)
    picked_1.apply_action(1)
    assert picked_0.information_state_string(1) != picked_1.information_state_string(1)
    assert picked_0.observation_string(1) != picked_1.observation_string(1)
    assert "..." not in picked_0.observation_string(1)
    from bridges.openspiel_game import _render

    assert _render(np.float32([1.0, 1.0000001])) != _render(np.float32([1.0, 1.0]))
    # Equal numbers of another type read the same (an info set is not split by np.int64 against int).
    assert _render({"observation": np.int64(2), "action_mask": (np.bool_(True), 1)}) == \
        _render({"observation": 2, "action_mask": (True, 1)}) == "{observation: 2, action_mask: (True, 1)}"
    assert _render(np.float32(0.1)) != _render(0.1) and _render(np.float64(0.1)) == _render(0.1)
    assert _render((np.zeros(2000), 1)) != _render((np.eye(1, 2000, 1999)[0], 1))  # inside tuples too


def test_exported_games_pickle_deep_copy_and_load_in_another_process() -> None:
    factory = functools.partial(OpenSpielEnv, "kuhn_poker")
    game = to_openspiel(factory, name="test_pickled_kuhn", seeds=(0, 1, 2, 3))
    assert pickle.loads(pickle.dumps(game)) is not None and copy.deepcopy(game) is game
    env = OpenSpielEnv(game)
    env.reset(seed=0)
    copy.deepcopy(env).reset(seed=0)
    report = check_env(functools.partial(OpenSpielEnv, game), seed=0)
    assert report.ok and "pickle" not in report.rules, str(report)
    # A fresh interpreter has never exported the game: unpickling exports it there again.
    script = (
        "import pickle, sys; game = pickle.load(sys.stdin.buffer); state = game.new_initial_state();"
        "state.apply_action(2); state.apply_action(0); state.apply_action(1);"
        "print(game.get_type().short_name, state.returns())"
    )
    done = subprocess.run([sys.executable, "-c", script], input=pickle.dumps(game), capture_output=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2], check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    state = game.new_initial_state()
    for action in (2, 0, 1):
        state.apply_action(action)
    assert done.stdout.decode().split(maxsplit=1) == ["test_pickled_kuhn", f"{state.returns()}\n"]
    # A game whose name another export took over still copies and unpickles as itself.
    first = to_openspiel(RockPaperScissors, name="test_pickled_reused_name")
    to_openspiel(TicTacToe, name="test_pickled_reused_name")
    for again in (pickle.loads(pickle.dumps(first)), copy.copy(first)):
        assert again.get_type().dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS
        assert again.num_distinct_actions() == 3
    assert pyspiel.load_game("test_pickled_reused_name").num_distinct_actions() == 9


def test_states_of_exported_games_unpickle_in_a_fresh_interpreter() -> None:
    # pyspiel's own state pickle loads the game by its name, which a fresh process never exported:
    # "Unknown game". Multiprocessing and parallel search send bare states.
    kuhn = to_openspiel(functools.partial(OpenSpielEnv, "kuhn_poker"), name="test_state_pickled_kuhn",
                        seeds=(0, 1, 2, 3))
    sequential = kuhn.new_initial_state()
    for action in (2, 0):
        sequential.apply_action(action)
    rps = to_openspiel(RockPaperScissors, name="test_state_pickled_rps")
    simultaneous = rps.new_initial_state()
    simultaneous.apply_actions([0, 1])
    script = (
        "import pickle, sys\n"
        "for state in pickle.load(sys.stdin.buffer):\n"
        "    print(state.get_game().get_type().short_name, state.history(), state.legal_actions(0))"
    )
    done = subprocess.run([sys.executable, "-c", script], input=pickle.dumps([sequential, simultaneous]),
                          capture_output=True, timeout=120, cwd=Path(__file__).resolve().parents[2], check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().splitlines() == [
        f"test_state_pickled_kuhn {sequential.history()} {sequential.legal_actions(0)}",
        f"test_state_pickled_rps {simultaneous.history()} {simultaneous.legal_actions(0)}",
    ]
    twin = pickle.loads(pickle.dumps(simultaneous))  # and here, with its game
    assert twin.history() == simultaneous.history() and twin.legal_actions(1) == simultaneous.legal_actions(1)


def test_the_utility_type_of_a_wrapped_game_carries_over_and_solvers_accept_it() -> None:
    from open_spiel.python import policy
    from open_spiel.python.algorithms import exploitability

    raw = pyspiel.load_game("kuhn_poker")
    seeds = tuple(range(40))  # enough seeds to cover kuhn's six deals
    game = to_openspiel(functools.partial(OpenSpielEnv, "kuhn_poker"), name="test_zero_sum_kuhn", seeds=seeds)
    assert game.get_type().utility == pyspiel.GameType.Utility.ZERO_SUM
    assert (game.min_utility(), game.max_utility(), game.utility_sum()) == (-2.0, 2.0, 0.0)
    ours = exploitability.exploitability(game, policy.UniformRandomPolicy(game))
    assert ours == pytest.approx(exploitability.exploitability(raw, policy.UniformRandomPolicy(raw)), abs=0.05)
    plain = to_openspiel(TicTacToe, name="test_general_sum_default")
    assert plain.get_type().utility == pyspiel.GameType.Utility.GENERAL_SUM
    declared = to_openspiel(TicTacToe, name="test_declared_zero_sum", utility="zero_sum", utility_range=(-1, 1))
    assert declared.get_type().utility == pyspiel.GameType.Utility.ZERO_SUM and declared.max_utility() == 1.0
    with pytest.raises(UnsupportedEnvError, match="needs utility_sum"):
        to_openspiel(TicTacToe, name="test_constant_sum_without_sum", utility="constant_sum")
    with pytest.raises(UnsupportedEnvError, match="utility must be"):
        to_openspiel(TicTacToe, name="test_bad_utility", utility="cooperative")  # type: ignore[arg-type]


class ScalarObservations(RockPaperScissors):
    """Rock-paper-scissors observing one number (a 0-d Box) instead of the opponent's move."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(config)
        self.observation_spaces = {a: gym.spaces.Box(-1.0, 3.0, (), np.float32) for a in self.possible_agents}

    def reset(self, *, seed=None, options=None):
        obs, infos = super().reset(seed=seed, options=options)
        return {a: np.float32(o) for a, o in obs.items()}, infos

    def step(self, action_dict):
        obs, *rest = super().step(action_dict)
        return ({a: np.float32(o) for a, o in obs.items()}, *rest)


def test_a_zero_dimensional_observation_keeps_its_tensor_through_export() -> None:
    env = OpenSpielEnv(to_openspiel(ScalarObservations, name="test_scalar_observations"))
    assert env.observation_type == "observation_tensor"
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step({"player_0": 2, "player_1": 0})
    assert obs["player_0"]["observation"].shape == () and float(obs["player_0"]["observation"]) == 0.0
    assert float(obs["player_1"]["observation"]) == 2.0


def test_names_pyspiel_takes_and_integer_like_arguments_are_accepted() -> None:
    game = to_openspiel(TicTacToe, name="test-game.v1", max_game_length=np.int64(50))
    assert pyspiel.load_game("test-game.v1").max_game_length() == 50 == game.max_game_length()


def test_load_game_by_name_and_re_export() -> None:
    to_openspiel(TicTacToe, name="test_reexport", seeds=(0,))
    assert pyspiel.load_game("test_reexport").get_type().chance_mode == pyspiel.GameType.ChanceMode.DETERMINISTIC
    to_openspiel(TicTacToe, name="test_reexport", seeds=(0, 1))
    assert pyspiel.load_game("test_reexport").new_initial_state().is_chance_node()


def test_factories_that_need_a_config_get_an_empty_one() -> None:
    configs = []

    def factory(config):
        configs.append(config)
        return TicTacToe(config)

    game = to_openspiel(factory, name="test_config_factory")
    game.new_initial_state().apply_action(0)
    assert configs and all(config == {} for config in configs)


def test_a_factory_returning_one_env_every_time_is_refused() -> None:
    # States shared the env and stepped each other's games: a state listed legal actions its env
    # no longer had.
    shared = TicTacToe()
    with pytest.raises(UnsupportedEnvError, match=r"env_factory '.*<lambda>' returned the same env object twice: "
                                                  r"every game state needs an env of its own"):
        to_openspiel(lambda: shared, name="test_shared_env")
    built = []

    def fresh() -> TicTacToe:
        built.append(TicTacToe())
        return built[-1]

    to_openspiel(fresh, name="test_fresh_env").new_initial_state().apply_action(4)
    assert len(built) == 2  # the second env built serves the first state


def test_an_env_refused_by_to_openspiel_is_closed() -> None:
    # The env built to read the spaces stayed open when they were refused (a port, a window held).
    built, closed = [], []

    class Tracked(TicTacToe):
        def __init__(self, config=None):
            super().__init__(config)
            built.append(self)

        def close(self):
            closed.append(self)
            super().close()

    class BoxActions(Tracked):
        def get_action_space(self, agent_id):
            return gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    with pytest.raises(UnsupportedEnvError, match="Discrete action space"):
        to_openspiel(BoxActions, name="test_refused_closed")
    with pytest.raises(UnsupportedEnvError, match="utility_range"):
        to_openspiel(Tracked, name="test_refused_closed_2", utility_range=(5.0, -5.0))
    assert len(built) == len(closed) == 2
    # Arguments pyspiel refuses (a pybind TypeError, after an env was built) or took silently.
    for arguments, reason in (({"long_name": 5}, "long_name must be text or None, received 5"),
                              ({"max_game_length": 2**40}, "max_game_length must be at most 2147483647, received "
                                                           "1099511627776"),
                              ({"perfect_information": "yes"}, "perfect_information must be True or False")):
        with pytest.raises(UnsupportedEnvError, match=re.escape(reason)):
            to_openspiel(Tracked, name="test_refused_closed_3", **arguments)
    assert len(built) == len(closed) == 2


def test_round_trip_of_an_irregular_simultaneous_env_keeps_who_acts_and_rewards() -> None:
    direct = IrregularOrderEnv()
    bridged = OpenSpielEnv(to_openspiel(IrregularOrderEnv, name="test_round_trip_irregular", dynamics="simultaneous"))
    names = dict(zip(bridged.possible_agents, direct.possible_agents, strict=True))
    direct_obs, _ = direct.reset(seed=0)
    obs, _ = bridged.reset(seed=0)
    direct_sums = dict.fromkeys(direct.possible_agents, 0.0)
    sums = dict.fromkeys(direct.possible_agents, 0.0)
    done = False
    while not done:
        assert sorted(names[a] for a in obs) == sorted(direct_obs)
        actions = {agent_id: index % 2 for index, agent_id in enumerate(obs)}
        obs, rewards, terminateds, _, _ = bridged.step(actions)
        direct_obs, direct_rewards, direct_terminateds, _, _ = direct.step({names[a]: v for a, v in actions.items()})
        for agent_id, reward in rewards.items():
            sums[names[agent_id]] += reward
        for agent_id, reward in direct_rewards.items():
            direct_sums[agent_id] += reward
        done = terminateds["__all__"]
        assert done == direct_terminateds["__all__"]
    assert sums == pytest.approx(direct_sums)
    # At its simultaneous nodes the current player is -2, which named the agent at index -2.
    state = bridged.game.new_initial_state()
    assert state.current_player() == pyspiel.PlayerId.SIMULTANEOUS
    assert state.action_to_string(0, 1) == "agent_1:1"
    with pytest.raises(MultiAgentEnvError, match=r"action_to_string\(player=-2, action=1\): .* not -2 \(simultaneous: "
                                                 r"this game names no joint actions"):
        state.action_to_string(1)

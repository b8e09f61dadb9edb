"""The tactical league player, the Connect-4 CNN and the preset's options."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from marl_core.errors import ConfigError
from marl_core.ppo import PPO
from marl_core.ppo.config import DEFAULT_MODEL
from marl_core.ppo.connect4_model import tactical_planes
from marl_core.ppo.evaluation import play_match
from marl_core.ppo.rollout import Episode
from marl_core.ppo.selfplay import (
    FIXED_PLAYERS,
    MAIN,
    RANDOM,
    TACTICAL,
    Connect4CNN,
    LeagueMapping,
    SelfPlayLeague,
    _wins_at,
    canonical_board,
    connect4_config,
    connect4_module,
    connect4_preset,
    main_vs_fixed,
    make_env,
    tactical_legal_action,
)


def play(moves: list[int]) -> dict:
    """The observation of the player to move after ``moves`` (columns, x first)."""
    env = make_env()
    obs, _ = env.reset(seed=0)
    for index, column in enumerate(moves):
        obs, *_ = env.step({f"player_{index % 2}": column})
    (observation,) = obs.values()
    return observation


def test_tactical_player_takes_a_win_before_blocking():
    # x: columns 0, 1, 2 on the bottom row; o: column 6 three high. x to move wins in column 3.
    assert tactical_legal_action(play([0, 6, 1, 6, 2, 6])) == 3
    # o to move with x threatening the bottom row and o threatening column 6: o wins first.
    assert tactical_legal_action(play([0, 6, 1, 6, 2, 6, 5])) == 6


def test_tactical_player_blocks_the_opponents_win():
    # x holds columns 0, 1, 2 on the bottom row; o (to move) has no win and must block column 3.
    assert {tactical_legal_action(play([0, 6, 1, 5, 2])) for _ in range(20)} == {3}
    # A vertical threat: x three high in column 4; o blocks on top.
    assert {tactical_legal_action(play([4, 0, 4, 1, 4])) for _ in range(20)} == {4}


def test_tactical_player_does_not_give_a_win_away():
    # o (plane 1) to move; x (plane 0) holds columns 1-3 of the second row; the bottom row reads
    # o x o in columns 1-3 and o in column 6. Playing column 0 or 4 would let x win on top of it.
    board = np.zeros((3, 6, 7), dtype=np.float32)
    board[0, 1, 1:4] = 1
    board[0, 0, 2] = 1
    board[1, 0, [1, 3, 6]] = 1
    board[2] = 1 - board[0] - board[1]
    observation = {"observation": board, "action_mask": np.ones(7, dtype=np.int8)}
    assert {tactical_legal_action(observation) for _ in range(300)} == {1, 2, 3, 5, 6}


def test_tactical_player_beats_random_play():
    match = play_match(tactical_legal_action, "random", 40, seed=5)
    assert match.win_rate >= 0.85 and match.wins_by_seat[0] > 0 and match.wins_by_seat[1] > 0


def test_cnn_sees_the_side_to_move_and_outputs_logits_and_values():
    env = make_env()
    torch.manual_seed(0)
    net = Connect4CNN(env.get_observation_space("player_0")["observation"], env.get_action_space("player_0"),
                      {"hiddens": [16], "conv_channels": [4, 4]})
    after_x = torch.as_tensor(np.asarray(play([3])["observation"])[None])  # o to move
    logits, values = net(torch.cat([after_x, after_x]))
    assert logits.shape == (2, 7) and values.shape == (2,)
    # The same position for the side to move with the colours swapped (x to move, o's piece in
    # column 3) looks the same to the network.
    swapped = after_x[:, [1, 0, 2]]
    assert torch.allclose(net(swapped)[0], net(after_x)[0]) and torch.allclose(net(swapped)[1], net(after_x)[1])
    before = torch.as_tensor(np.asarray(play([])["observation"])[None])
    assert not torch.allclose(net(before)[0], net(after_x)[0])


def test_preset_with_tactical_player_trains_and_checkpoints(tmp_path):
    config = connect4_config(num_envs=4, league="tactical", network="cnn").training(
        train_batch_size=200, minibatch_size=100, num_epochs=1,
        model={"hiddens": [16], "activation": "relu", "network": "cnn", "conv_channels": [4]})
    algo = config.build()
    try:
        result = algo.train()
        assert result["policies"][TACTICAL]["num_episodes"] > 0 and result["policies"][RANDOM]["num_episodes"] > 0
        league = SelfPlayLeague(fixed=(RANDOM, TACTICAL), threshold=-1.0, min_episodes=0)
        league(algo, result)
        assert algo.config.policy_mapping_fn == LeagueMapping((RANDOM, TACTICAL, "main_v1"), 0)
        path = algo.save(tmp_path / "final")
    finally:
        algo.stop()
    saved = json.loads((path / "config.json").read_text())
    assert saved["policies"][TACTICAL]["ref"] == "marl_core.ppo.selfplay:tactical_legal_action"
    restored = PPO.from_checkpoint(path)
    try:
        again = SelfPlayLeague()
        again(restored, {"policies": {MAIN: {"episode_return_mean": 0.0, "num_episodes": 1}}})
        assert again.opponents() == (RANDOM, TACTICAL, "main_v1")
        obs, _ = make_env().reset(seed=0)
        assert 0 <= int(restored.compute_actions(obs, policy_id=MAIN, explore=False)["player_0"]) < 7
    finally:
        restored.stop()


def test_first_mapping_with_the_tactical_player_draws_both_fixed_opponents():
    drawn = set()
    for episode_id in range(40):
        pair = [main_vs_fixed(agent_id, Episode(episode_id, 0, 0)) for agent_id in ("player_0", "player_1")]
        assert pair[episode_id % 2] == MAIN
        drawn.add(pair[1 - episode_id % 2])
    assert drawn == {RANDOM, TACTICAL}


def test_preset_options_reach_the_config():
    from marl_core.ppo.selfplay import main_vs_fixed_self

    config = connect4_preset(lr=3e-4, league="tactical").build_config()
    assert config.lr == 3e-4 and sorted(config.policy_entries()) == [MAIN, RANDOM, TACTICAL]
    assert config.policy_mapping_fn is main_vs_fixed
    preset = connect4_preset()  # the default league: random, tactical and (twice) main itself
    assert preset.build_config().policy_mapping_fn is main_vs_fixed_self
    assert preset.build_config().num_env_runners == 1  # the main job samples on a local Ray
    assert preset.callbacks[0].opponents() == (RANDOM, TACTICAL, MAIN, MAIN)  # main meets itself half the time
    assert preset.callbacks[0].threshold == float("inf")  # and no snapshots join (SNAPSHOT_THRESHOLDS)
    assert connect4_preset(league="tactical").callbacks[0].threshold == 0.85
    config = preset.build_config()
    model = config.model_for(config.policy_entries()[MAIN])
    assert model["features"] == "tactical" and model["mirror"]  # threat planes, mirror-averaged
    board_only = connect4_preset(features="board").build_config()
    assert board_only.model_for(board_only.policy_entries()[MAIN])["features"] == "board"


def test_mcts_player_rebuilds_the_position_and_takes_a_win():
    import pyspiel

    from marl_core.ppo.selfplay import _state_from_board, mcts_legal_action

    env = make_env()
    obs, _ = env.reset(seed=3)
    rng = np.random.default_rng(3)
    game = pyspiel.load_game("connect_four")
    for _ in range(15):
        ((agent_id, observation),) = obs.items()
        board = np.asarray(observation["observation"]) > 0.5
        rebuilt = _state_from_board(game, board)
        assert rebuilt is not None
        assert np.array_equal(np.asarray(rebuilt.observation_tensor(0)).reshape(board.shape) > 0.5, board)
        assert rebuilt.current_player() == int(agent_id[-1])
        obs, _, terminateds, *_ = env.step({agent_id: int(rng.choice(np.flatnonzero(observation["action_mask"])))})
        if terminateds["__all__"]:
            break
    assert mcts_legal_action(play([0, 6, 1, 6, 2, 6])) == 3


def test_every_reachable_position_is_rebuilt_for_the_mcts_player():
    import pyspiel

    from marl_core.ppo.selfplay import _state_from_board

    game = pyspiel.load_game("connect_four")
    rng = np.random.default_rng(0)
    histories = [[6, 6, 4]]  # leftmost-first replay puts x in column 4 first and then finds no o
    for _ in range(300):
        state, history = game.new_initial_state(), []
        for _ in range(int(rng.integers(0, 42))):
            if state.is_terminal():
                break
            history.append(int(rng.choice(state.legal_actions())))
            state.apply_action(history[-1])
        histories.append(history)
    for history in histories:
        state = game.new_initial_state()
        for column in history:
            state.apply_action(column)
        if state.is_terminal():
            continue
        board = np.asarray(state.observation_tensor(0)).reshape(3, 6, 7) > 0.5
        rebuilt = _state_from_board(game, board)
        assert rebuilt is not None, history
        assert str(rebuilt) == str(state) and rebuilt.current_player() == state.current_player()


def test_self_league_plays_main_against_itself_and_trains_both_seats():
    from marl_core.ppo.selfplay import main_vs_fixed_self

    pairs = {tuple(main_vs_fixed_self(a, Episode(i, 0, 0)) for a in ("player_0", "player_1")) for i in range(60)}
    assert (MAIN, MAIN) in pairs and (MAIN, TACTICAL) in pairs and (RANDOM, MAIN) in pairs
    algo = connect4_config(num_envs=4, league="self").training(
        train_batch_size=400, minibatch_size=200, num_epochs=1, model={"hiddens": [16], "activation": "relu"}).build()
    try:
        assert sorted(algo.policies) == [MAIN, RANDOM, TACTICAL]
        result = algo.train()
        # Main's episodes outnumber its opponents' ones: in games against itself it has both seats.
        others = sum(result["policies"][pid]["num_episodes"] for pid in (RANDOM, TACTICAL))
        assert result["policies"][MAIN]["num_episodes"] > others > 0
        league = SelfPlayLeague(fixed=(RANDOM, TACTICAL, MAIN), threshold=-1.0, min_episodes=0)
        league(algo, result)
        assert algo.config.policy_mapping_fn == LeagueMapping((RANDOM, TACTICAL, MAIN, "main_v1"), 0)
    finally:
        algo.stop()


def test_the_league_draws_opponents_with_the_trainers_seed():
    from marl_core.ppo.selfplay import main_vs_fixed_self

    def draws(mapping):
        return [mapping("player_0", Episode(i, 0, 0)) + mapping("player_1", Episode(i, 0, 0)) for i in range(40)]

    for seed in (0, 7):
        algo = connect4_config(num_envs=2, league="self", seed=seed).build()
        try:
            league = SelfPlayLeague(fixed=FIXED_PLAYERS["self"], threshold=float("inf"))
            league.attach(algo)  # marl-train's start: --seed set the config's seed
            mapping = algo.config.policy_mapping_fn
            if seed == 0:  # the first mapping already draws with seed 0: kept as it is
                assert mapping is main_vs_fixed_self
            else:
                assert mapping == LeagueMapping(FIXED_PLAYERS["self"], 7)
                assert draws(mapping) != draws(main_vs_fixed_self)
            league.attach(algo)
            assert algo.config.policy_mapping_fn == mapping  # stable from one iteration to the next
        finally:
            algo.stop()
    # A seed given to the league itself wins over the trainer's.
    algo = connect4_config(num_envs=2, league="self", seed=7).build()
    try:
        SelfPlayLeague(fixed=FIXED_PLAYERS["self"], seed=0).attach(algo)
        assert algo.config.policy_mapping_fn is main_vs_fixed_self
    finally:
        algo.stop()


@pytest.mark.parametrize("features", ["board", "tactical"])
@pytest.mark.parametrize("network", ["mlp", "cnn"])
def test_mirror_averaged_networks_give_a_mirrored_board_the_mirrored_policy(network, features):
    env = make_env()
    space, action_space = env.get_observation_space("player_0")["observation"], env.get_action_space("player_0")
    config = {**DEFAULT_MODEL, "hiddens": [16], "activation": "relu", "conv_channels": [4], "network": network,
              "features": features}
    torch.manual_seed(0)
    mirrored_net = connect4_module(space, action_space, {**config, "mirror": True})
    torch.manual_seed(0)
    plain_net = connect4_module(space, action_space, config)
    board = torch.as_tensor(np.asarray(play([0, 1, 0])["observation"])[None])  # lopsided: not symmetric
    logits, values = mirrored_net(board)
    mirror_logits, mirror_values = mirrored_net(board.flip(-1))
    assert torch.allclose(mirror_logits, logits.flip(-1), atol=1e-6)
    assert torch.allclose(mirror_values, values, atol=1e-6)
    # Without the option the same weights are not equivariant, so the test can tell the two apart.
    plain_logits, _ = plain_net(board)
    assert not torch.allclose(plain_net(board.flip(-1))[0], plain_logits.flip(-1), atol=1e-4)


def test_tactical_planes_mark_every_winning_cell_and_the_playable_cells():
    env = make_env()
    rng = np.random.default_rng(11)
    checked = {"mine": 0, "theirs": 0, "unsafe": 0}
    for game in range(30):
        obs, _ = env.reset(seed=game)
        done = False
        while not done:
            ((agent_id, observation),) = obs.items()
            board = canonical_board(torch.as_tensor(np.asarray(observation["observation"])[None]))
            planes = tactical_planes(board)[0].numpy()
            pieces = planes[:3] > 0.5
            for plane, which in ((3, 0), (4, 1)):
                expected = np.array([[pieces[2, r, c] and _wins_at(pieces[which], r, c) for c in range(7)]
                                     for r in range(6)])
                assert np.array_equal(planes[plane] > 0.5, expected)
                checked["mine" if which == 0 else "theirs"] += int(expected.sum())
            heights = (~pieces[2]).sum(axis=0)
            playable = np.zeros((6, 7), bool)
            for column, height in enumerate(heights):
                if height < 6:
                    playable[height, column] = True
            assert np.array_equal(planes[5] > 0.5, playable)
            assert np.array_equal(planes[6] > 0.5, (planes[3] > 0.5) & playable)
            assert np.array_equal(planes[7] > 0.5, (planes[4] > 0.5) & playable)
            below_their_win = np.zeros((6, 7), bool)
            below_their_win[:-1] = planes[4, 1:] > 0.5
            assert np.array_equal(planes[8] > 0.5, below_their_win & playable)
            checked["unsafe"] += int(planes[8].sum())
            legal = np.flatnonzero(observation["action_mask"])
            obs, _, terminateds, truncateds, _ = env.step({agent_id: int(rng.choice(legal))})
            done = terminateds["__all__"] or truncateds["__all__"]
    assert min(checked.values()) > 5, checked  # the games did reach every kind of threat


def test_unknown_features_are_refused_by_name():
    env = make_env()
    with pytest.raises(ConfigError, match="'threats'"):
        connect4_module(env.get_observation_space("player_0")["observation"], env.get_action_space("player_0"),
                        {**DEFAULT_MODEL, "features": "threats"})

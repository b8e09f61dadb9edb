"""The self-play league, its mapping, the evaluation callback and checkpoints of the preset."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from marl_core.errors import CheckpointError, ConfigError, SpaceError
from marl_core.ppo import PPO
from marl_core.ppo.evaluation import load_history
from marl_core.ppo.rollout import Episode
from marl_core.ppo.selfplay import (
    FIXED_PLAYERS,
    MAIN,
    RANDOM,
    TACTICAL,
    Connect4Evaluation,
    LeagueMapping,
    SelfPlayLeague,
    canonical_board,
    connect4_config,
    main_spec,
    main_vs_random,
    make_env,
    random_legal_action,
)


def small_algo(seed: int = 0) -> PPO:
    config = connect4_config(num_envs=4, seed=seed).training(
        train_batch_size=200, minibatch_size=100, num_epochs=1, model={"hiddens": [32], "activation": "relu"}
    )
    return config.build()


def result_with(mean: float, episodes: int, opponent: str = RANDOM) -> dict:
    """A training result in which ``opponent``'s recent mean return against main is ``mean``."""
    return {"policies": {opponent: {"episode_return_mean": mean, "num_episodes": episodes}}}


# Mapping.


def test_main_plays_both_seats_and_the_other_seat_is_random_at_first():
    seats = {}
    for episode_id in range(6):
        episode = Episode(episode_id, 0, 0)
        seats[episode_id] = (main_vs_random("player_0", episode), main_vs_random("player_1", episode))
    assert {pair for pair in seats.values()} == {(MAIN, RANDOM), (RANDOM, MAIN)}
    assert all(MAIN in pair for pair in seats.values())


def test_league_mapping_draws_every_opponent_and_agrees_within_an_episode():
    mapping = LeagueMapping((RANDOM, "main_v1", "main_v2"), seed=3)
    drawn = []
    for episode_id in range(300):
        episode = Episode(episode_id, episode_id % 4, 1)
        pair = [mapping(agent_id, episode) for agent_id in ("player_0", "player_1")]
        assert pair.count(MAIN) == 1 and pair[episode_id % 2] == MAIN
        other = pair[1 - episode_id % 2]
        assert mapping(f"player_{1 - episode_id % 2}", episode) == other  # asked again: same answer
        drawn.append(other)
    counts = {name: drawn.count(name) for name in mapping.opponents}
    assert all(60 <= count <= 140 for count in counts.values()), counts
    assert [LeagueMapping(mapping.opponents, seed=4)("player_1", Episode(i, 0, 0)) for i in range(1, 40, 2)] != [
        other for other in drawn[1:40:2]
    ]


def test_random_player_plays_only_legal_moves_and_all_of_them():
    mask = np.array([0, 1, 0, 1, 1, 0, 0], dtype=np.int8)
    moves = {random_legal_action({"observation": None, "action_mask": mask}) for _ in range(200)}
    assert moves == {1, 3, 4}


def test_env_creator_builds_connect_four():
    env = make_env({"game": "connect_four"})
    obs, _ = env.reset(seed=0)
    assert list(obs) == ["player_0"] and obs["player_0"]["action_mask"].tolist() == [1] * 7


def test_board_is_seen_from_the_side_to_move():
    env = make_env()
    obs, _ = env.reset(seed=0)
    start = torch.as_tensor(obs["player_0"]["observation"][None])
    assert torch.equal(canonical_board(start), start)
    obs, *_ = env.step({"player_0": 3})  # x in column 4; o to move
    after_x = torch.as_tensor(obs["player_1"]["observation"][None])
    seen = canonical_board(after_x)
    assert seen[0, 0].sum() == 0 and seen[0, 1].sum() == 1  # "mine" empty, "theirs" holds x's piece
    assert torch.equal(seen[0, 2], after_x[0, 2])
    obs, *_ = env.step({"player_1": 2})  # x to move again: unchanged
    after_o = torch.as_tensor(obs["player_0"]["observation"][None])
    assert torch.equal(canonical_board(after_o), after_o)
    both = canonical_board(torch.cat([after_x, after_o]))
    assert torch.equal(both, torch.cat([seen, after_o]))


# League.


def test_snapshot_joins_when_main_beats_the_league():
    algo = small_algo()
    try:
        league = SelfPlayLeague(threshold=0.85, min_episodes=100)
        result = result_with(-0.6, 150)  # score 0.8: not yet
        league(algo, result)
        assert sorted(algo.policies) == [MAIN, RANDOM] and result["league"]["added"] == ""
        result = result_with(-0.8, 40)  # score 0.9, but only 40 more episodes (190 in all): joins
        league(algo, result)
        assert result["league"] == {"score": pytest.approx(0.9), "size": 2, "snapshots": 1,
                                    "latest_snapshot": 1, "added": "main_v1"}
        assert sorted(algo.policies) == [MAIN, "main_v1", RANDOM]
        assert algo.to_train == [MAIN]
        assert algo.config.policy_mapping_fn == LeagueMapping((RANDOM, "main_v1"), 0)
        main, frozen = algo.get_weights([MAIN, "main_v1"]).values()
        assert all(np.array_equal(main[key], frozen[key]) for key in main)
        result = result_with(-0.9, 99)  # the window has not refreshed since the snapshot
        league(algo, result)
        assert result["league"]["added"] == "" and league.games_since_snapshot == {RANDOM: 99, "main_v1": 0}
    finally:
        algo.stop()


def _main_only(agent_id, episode, **kwargs):
    return MAIN


def test_a_league_of_main_alone_stays_one_member_iteration_after_iteration():
    # Without random, tactical or mcts among the policies, every attach appended main's places
    # again: the league doubled each iteration (2, 4, 8, ...), and the runners got a new mapping.
    config = connect4_config(num_envs=2).multi_agent(policies={MAIN: main_spec()}, policy_mapping_fn=_main_only)
    with config.training(train_batch_size=40, minibatch_size=40, num_epochs=1).build() as algo:
        league = SelfPlayLeague(fixed=(MAIN,))
        for _ in range(3):
            league(algo, algo.train())
            assert league.opponents() == (MAIN,)


def test_games_of_main_against_itself_do_not_count_in_its_league_score():
    # Main against itself always splits (+1 and -1): counted, they kept the preset's league score
    # near 0.5 + a third, so no snapshot could ever join however well main played.
    config = connect4_config(num_envs=4, league="self").training(model={"hiddens": [32]})
    algo = config.build()
    try:
        league = SelfPlayLeague(fixed=FIXED_PLAYERS["self"], threshold=0.85, min_episodes=100)
        result = {"policies": {
            MAIN: {"episode_return_mean": 0.33, "num_episodes": 300},  # wins and splits with itself
            RANDOM: {"episode_return_mean": -1.0, "num_episodes": 40},  # main won them all: 1.0
            TACTICAL: {"episode_return_mean": -0.7, "num_episodes": 50},  # 0.85
            "other": {"episode_return_mean": 1.0, "num_episodes": 10},  # not in the league
        }}
        league(algo, result)
        assert result["league"]["score"] == pytest.approx(0.925)
        assert result["league"]["added"] == "" and league.games_since_snapshot == {RANDOM: 40, TACTICAL: 50}
        result["policies"][RANDOM]["num_episodes"] = 60
        league(algo, result)  # 100 games against each member now: every window is new
        assert result["league"]["added"] == "main_v1" and league.games_since_snapshot == {}
        # The snapshot is a member now; it has not played yet, so it is left out of the mean.
        result["policies"][TACTICAL]["episode_return_mean"] = -0.5
        result["policies"]["main_v1"] = {"episode_return_mean": float("nan"), "num_episodes": 0}
        league(algo, result)
        assert result["league"]["score"] == pytest.approx(0.875) and league.episodes_since_snapshot == 0
    finally:
        algo.stop()


def test_the_next_snapshot_waits_until_every_members_window_is_new():
    # 100 games in all since the last snapshot, a third against each member, left two thirds of
    # each window from before it: a snapshot joined on games main had played before the last one.
    algo = small_algo()
    try:
        league = SelfPlayLeague(fixed=(RANDOM,), threshold=0.85, min_episodes=100)
        league(algo, result_with(-1.0, 100))
        assert league.snapshots == ["main_v1"]
        for games in (34, 33, 32):
            result = {"policies": {RANDOM: {"episode_return_mean": -0.9, "num_episodes": games},
                                   "main_v1": {"episode_return_mean": -0.8, "num_episodes": games}}}
            league(algo, result)
            assert result["league"]["added"] == ""
        assert league.episodes_since_snapshot == 99
        result["policies"][RANDOM]["num_episodes"] = result["policies"]["main_v1"]["num_episodes"] = 1
        league(algo, result)  # 100 games against each now; the score has been 0.925 all along
        assert result["league"]["added"] == "main_v2"
    finally:
        algo.stop()


def test_league_games_are_played_and_old_snapshots_leave():
    algo = small_algo()
    try:
        league = SelfPlayLeague(threshold=-1.0, min_episodes=0, max_snapshots=2)
        weights = []
        for _ in range(3):
            result = algo.train()
            league(algo, result)
            weights.append(algo.get_weights([MAIN])[MAIN])
        assert league.snapshots == ["main_v2", "main_v3"]
        assert sorted(algo.policies) == [MAIN, "main_v2", "main_v3", RANDOM]
        assert algo.to_train == [MAIN]
        frozen = algo.get_weights(["main_v3"])["main_v3"]
        assert all(np.array_equal(frozen[key], weights[-1][key]) for key in frozen)
        before = algo.get_weights(["main_v2"])["main_v2"]
        result = algo.train()
        after = algo.get_weights(["main_v2", MAIN])
        # Snapshots are frozen while main keeps learning; both snapshots get games.
        assert all(np.array_equal(before[key], after["main_v2"][key]) for key in before)
        assert any(not np.array_equal(weights[-1][key], after[MAIN][key]) for key in before)
        played = {pid: result["policies"][pid]["num_episodes"] for pid in ("main_v2", "main_v3", RANDOM)}
        assert sum(played.values()) == result["policies"][MAIN]["num_episodes"] > 0
    finally:
        algo.stop()


# Evaluation callback and checkpoints.


def test_evaluation_callback_reports_metrics_history_and_chart(tmp_path, capsys):
    algo = small_algo()
    try:
        evaluation = Connect4Evaluation(every_minutes=10.0, opponents=(("random", 4), ("mcts:5", 2)),
                                        strong_every_minutes=10.0, strong_opponents=(("mcts:8", 2),),
                                        final_opponents=(("random", 6), ("mcts:10", 2)))
        algo.out_dir = tmp_path / "run"
        algo.config.evaluation_interval, algo.config.evaluation_duration = 3, 2  # evaluate()'s figures, at the 3rd
        evaluation.attach(algo)  # a new run: evaluations reach the run directory as they are played
        results = []
        for _ in range(3):
            result = algo.train()
            evaluation(algo, result)
            results.append(result)
            if len(results) == 2:
                assert [p.iteration for p in load_history(tmp_path / "run" / "evaluation.jsonl")] == [2]
            evaluation.every_minutes = 0.0  # the first call is too soon; from then on, every time
            if len(results) == 2:
                evaluation.strong_every_minutes = 0.0  # the third also plays the strong opponents
                algo.save(tmp_path / "run" / "checkpoint")
        assert "evaluation" not in results[0]
        metrics = results[1]["evaluation"]
        assert metrics["random/games"] == 4 and metrics["mcts5/games"] == 2 and "mcts8/games" not in metrics
        assert results[2]["evaluation"]["mcts8/games"] == 2 and results[2]["evaluation"]["random/games"] == 4
        assert results[2]["evaluation"]["num_episodes"] == 2  # kept beside the matches' (they replaced it)
        assert 0.0 <= metrics["random/win_low"] <= metrics["random/win_rate"] <= metrics["random/win_high"] <= 1.0
        capsys.readouterr()
        summary = evaluation.final(algo, tmp_path / "run")
        # Each final match is printed as it ends (the slow ones come last), in the summary's words.
        printed = capsys.readouterr().out.splitlines()
        assert printed == [f"final evaluation: {summary['random']}", f"final evaluation: {summary['mcts10']}"]
        assert set(summary) >= {"random", "mcts10", "chart", "history", "minutes", "env_steps"}
        assert "(6 games" in summary["random"] and "(2 games" in summary["mcts10"]
        points = load_history(tmp_path / "run" / "evaluation.jsonl")
        assert [p.iteration for p in points] == [2, 3, 3] and points[2].env_steps == algo.env_steps_lifetime
        # Seeds by iteration (2i, and 2i + 1 for the final one): a resumed run plays new games.
        assert [p.seed for p in points] == [1_040_000, 1_060_000, 1_070_000]
        assert (tmp_path / "run" / "win_rate.png").read_bytes()[:4] == b"\x89PNG"
        path = algo.save(tmp_path / "run" / "final")
    finally:
        algo.stop()
    # Resumed in its run directory: the evaluations up to the checkpoint stay, minutes go on.
    restored = PPO.from_checkpoint(path)
    try:
        restored.out_dir = tmp_path / "run"
        resumed = Connect4Evaluation(final_opponents=(("random", 2),))
        resumed.attach(restored)
        assert [p.iteration for p in resumed.history] == [2, 3, 3]
        # The time spent evaluating goes on from the run's too, as its minutes do: a resumed run's
        # final_result.json counted all sessions in "minutes" and the last one in "minutes_evaluating".
        assert all(p.seconds > 0 for p in points)
        assert resumed.seconds_evaluating == pytest.approx(evaluation.seconds_evaluating)
        restored.train()
        summary = resumed.final(restored, tmp_path / "run")
        points = load_history(tmp_path / "run" / "evaluation.jsonl")
        assert [p.iteration for p in points] == [2, 3, 3, 4] and points[-1].seed == 1_090_000
        assert points[-1].minutes >= points[2].minutes
        assert summary["minutes_evaluating"] == round(sum(p.seconds for p in points) / 60.0, 2)
        # Resumed elsewhere: nothing to load.
        elsewhere = Connect4Evaluation()
        restored.out_dir = tmp_path / "elsewhere"
        elsewhere.attach(restored)
        assert elsewhere.history == []
    finally:
        restored.stop()
    # From the iteration-2 checkpoint: the later evaluations are trained again, so they go.
    earlier = PPO.from_checkpoint(tmp_path / "run" / "checkpoint")
    try:
        earlier.out_dir = tmp_path / "run"
        again = Connect4Evaluation()
        chart = (tmp_path / "run" / "win_rate.png").read_bytes()
        again.attach(earlier)
        assert [p.iteration for p in again.history] == [2]
        # The file and chart too, at once: a run stopped before its next evaluation left the
        # discarded points in them (and a later resume kept them for good).
        assert [p.iteration for p in load_history(tmp_path / "run" / "evaluation.jsonl")] == [2]
        assert (tmp_path / "run" / "win_rate.png").read_bytes() != chart
    finally:
        earlier.stop()


def test_checkpoint_with_snapshots_loads_by_name_and_acts_as_main(tmp_path):
    algo = small_algo()
    try:
        league = SelfPlayLeague(threshold=-1.0, min_episodes=0)
        league(algo, algo.train())
        path = algo.save(tmp_path / "final")
        saved = json.loads((path / "config.json").read_text())
        assert saved["policy_mapping_fn"] == "marl_core.ppo.selfplay:main_vs_random"
        assert saved["policies"][RANDOM]["ref"] == "marl_core.ppo.selfplay:random_legal_action"
        for policy_id in (MAIN, "main_v1"):
            assert saved["policies"][policy_id]["model"]["module"] == "marl_core.ppo.connect4_model:connect4_module"
        weights = algo.get_weights([MAIN])[MAIN]
    finally:
        algo.stop()
    restored = PPO.from_checkpoint(path)
    try:
        assert sorted(restored.policies) == [MAIN, "main_v1", RANDOM]
        assert all(np.array_equal(weights[k], restored.get_weights([MAIN])[MAIN][k]) for k in weights)
        env = make_env()
        obs, _ = env.reset(seed=0)
        action = restored.compute_actions(obs, policy_id=MAIN, explore=False)["player_0"]
        assert 0 <= int(action) < 7
        # Attached before training, a league on the restored algorithm takes over its snapshots, so
        # the first iteration already plays them (the checkpoint keeps only the first mapping).
        assert restored.config.policy_mapping_fn is main_vs_random
        again = SelfPlayLeague(threshold=2.0)
        again.attach(restored)
        assert again.snapshots == ["main_v1"] and again.next_version == 2
        assert restored.config.policy_mapping_fn == LeagueMapping((RANDOM, "main_v1"), 0)
        again(restored, result_with(0.0, 10))
        assert again.snapshots == ["main_v1"] and again.next_version == 2
    finally:
        restored.stop()


def test_a_resumed_league_counts_the_games_played_before_the_checkpoint(tmp_path):
    # Counted from zero again, a resumed league waited min_episodes more games for its next snapshot.
    algo = small_algo()
    try:
        league = SelfPlayLeague(threshold=0.85, min_episodes=100)
        league(algo, result_with(-0.9, 60))  # score 0.95, but 60 games only
        assert league.snapshots == [] and league.games_since_snapshot == {RANDOM: 60}
        path = algo.save(tmp_path / "checkpoint")
    finally:
        algo.stop()
    restored = PPO.from_checkpoint(path)
    try:
        again = SelfPlayLeague(threshold=0.85, min_episodes=100)
        again.attach(restored)
        assert again.games_since_snapshot == {RANDOM: 60}
        result = result_with(-0.9, 40)
        again(restored, result)  # 100 games since the last snapshot, as without the interruption
        assert result["league"]["added"] == "main_v1" and again.games_since_snapshot == {}
    finally:
        restored.stop()


@pytest.mark.parametrize("saved", [{"games_since_snapshot": {RANDOM: -3}}, {"games_since_snapshot": [1]}, "x"])
def test_a_damaged_league_state_is_a_checkpoint_error(saved):
    algo = small_algo()
    try:
        algo.callback_state["league"] = saved
        with pytest.raises(CheckpointError, match=r"league state is .*games_since_snapshot.*damaged checkpoint"):
            SelfPlayLeague().attach(algo)
    finally:
        algo.stop()


def test_marl_train_refuses_to_resume_a_damaged_league_state_in_one_line(tmp_path, capsys):
    from marl_core.ppo.cli import main

    algo = small_algo()
    try:
        algo.callback_state["league"] = {"games_since_snapshot": {RANDOM: "many"}}
        final = algo.save(tmp_path / "run" / "final")
    finally:
        algo.stop()
    # The logs of later iterations than the checkpoint's: a refused resume must not have cut them.
    logs = "training_iteration,num_env_steps_sampled_lifetime\n0,10\n1,20\n2,30\n"
    (tmp_path / "run" / "progress.csv").write_text(logs)
    status = main(["connect4", "--resume", str(final), "--out", str(tmp_path / "run"), "--iterations", "1",
                   "--no-progress"])
    out, err = capsys.readouterr()
    assert status == 2 and err.startswith(f"marl-train: cannot resume from {final}: the checkpoint's league state")
    assert "Traceback" not in err and "writing to" not in out
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["final", "progress.csv"]
    assert (tmp_path / "run" / "progress.csv").read_text() == logs
    # Into an --out that did not exist: the directories made for it go again.
    assert main(["connect4", "--resume", str(final), "--out", str(tmp_path / "fresh" / "new"), "--iterations", "1",
                 "--no-progress"]) == 2
    assert "league state" in capsys.readouterr().err and not (tmp_path / "fresh").exists()
    # An evaluation history that cannot be read back: refused before the logs are cut too.
    with PPO.from_checkpoint(final) as algo:
        algo.callback_state.clear()
        algo.save(final)
    (tmp_path / "run" / "evaluation.jsonl").write_text("not json\n")
    assert main(["connect4", "--resume", str(final), "--out", str(tmp_path / "run"), "--iterations", "1",
                 "--no-progress"]) == 2
    assert "cannot continue the logs" in capsys.readouterr().err
    assert (tmp_path / "run" / "progress.csv").read_text() == logs


@pytest.mark.ray
@pytest.mark.slow
def test_league_runs_on_ray_env_runners():
    import ray

    algo = connect4_config(num_envs=2).env_runners(num_env_runners=1).training(
        train_batch_size=200, minibatch_size=100, num_epochs=1, model={"hiddens": [32]}
    ).resources(num_cpus=1).build()
    try:
        league = SelfPlayLeague(threshold=-1.0, min_episodes=0)
        league(algo, algo.train())
        snapshot_games = 0
        for _ in range(3):  # each new episode draws its opponent: a few iterations hold snapshot games
            result = algo.train()
            assert result["policies"]["main_v1"]["num_episodes"] + result["policies"][RANDOM]["num_episodes"] == (
                result["policies"][MAIN]["num_episodes"]
            )
            assert result["policies"][MAIN]["num_episodes"] > 0
            snapshot_games += result["policies"]["main_v1"]["num_episodes"]
        # The new mapping (a LeagueMapping) reached the runner: snapshot games were played there.
        assert snapshot_games > 0
    finally:
        algo.stop()
        if ray.is_initialized():
            ray.shutdown()


@pytest.mark.parametrize(
    ("model", "named"),
    [
        ({"network": "rnn"}, r"model network must be one of \['mlp', 'cnn'\], received 'rnn'"),
        ({"hiddens": ["x"]}, r"model hiddens must be a list of layer sizes .*received \['x'\]"),
        ({"hiddens": 64}, r"model hiddens must be .*received 64"),
        ({"activation": "foo"}, r"model activation must be one of .*received 'foo'"),
        ({"network": "cnn", "hiddens": []}, r"model hiddens must hold the size of the CNN's hidden layer for network 'cnn', received \[\]"),
        ({"network": "cnn", "conv_channels": [0]}, r"model conv_channels must be .*received \[0\]"),
        ({"mirror": "no"}, r"model mirror must be true or false, received 'no'"),
        ({"features": "pixels"}, r"model features must be one of \['board', 'tactical'\], received 'pixels'"),
    ],
)
def test_connect4_model_settings_it_cannot_take_are_config_errors_naming_the_key(model, named):
    config = connect4_config(num_envs=2).training(train_batch_size=20, minibatch_size=10)
    config = config.training(model={**config.model, **model})
    with pytest.raises(ConfigError, match=r"^connect4_module: " + named):
        config.build()


@pytest.mark.parametrize("key", ["hiddenz", "fcnet_hiddens", "networkk"])
def test_a_connect4_model_key_it_does_not_read_is_refused_by_name(key, tmp_path, capsys):
    # The module factory's keys went unchecked: a typo trained the default network, exit 0.
    config = connect4_config(num_envs=2).training(model={**connect4_config().model, key: [64]})
    with pytest.raises(ConfigError, match=rf"policy 'main': model has unknown keys \['{key}'\]; its module "
                                          r"'marl_core.ppo.connect4_model:connect4_module' reads \['activation', "):
        config.validate()
    from marl_core.ppo.cli import main

    assert main(["connect4", "--iterations", "1", "--out", str(tmp_path / "run"), "--set", f'model={{"{key}": [64]}}']) == 2
    assert f"unknown keys ['{key}']" in capsys.readouterr().err and not (tmp_path / "run").exists()


def test_connect4_networks_refuse_another_game_at_build():
    config = connect4_config(num_envs=2).environment(make_env, env_config={"game": "tic_tac_toe"})
    with pytest.raises(SpaceError, match=r"policy 'main' \(its spaces from agent 'player_1', which maps to it\): "
                                         r"connect4_module reads Connect-4 boards .*shape \(3, 6, 7\)\), "
                                         r"received Box\(-inf, inf, \(3, 3, 3\), float32\)"):
        config.training(train_batch_size=20, minibatch_size=10).build()


def test_connect4_networks_built_directly_refuse_an_unknown_features_value():
    from gymnasium import spaces as gym_spaces

    from marl_core.ppo.connect4_model import Connect4CNN, SideToMoveActorCritic

    board, moves = gym_spaces.Box(-np.inf, np.inf, (3, 6, 7), np.float32), gym_spaces.Discrete(7)
    for network in (SideToMoveActorCritic, Connect4CNN):
        with pytest.raises(ConfigError, match=r"^model features must be one of \['board', 'tactical'\], received 'pixels'$"):
            network(board, moves, {"hiddens": [8], "activation": "relu", "features": "pixels"})

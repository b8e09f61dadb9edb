from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from examples.pistonball_ppo import build_config, train
from examples.rps_learned_vs_heuristic import train as train_rps
from marl_core.errors import ConfigError
from marl_core.ppo.presets import pistonball_env


def test_learned_policy_beats_the_beat_last_move_heuristic():
    # Random play scores 0 against the heuristic; the best feed-forward policy scores +6.
    score = train_rps(iterations=8, verbose=False)
    assert score > 2.0


def test_pistonball_example_trains_and_writes_its_learning_curve(tmp_path):
    config = build_config(n_pistons=4, max_cycles=12, num_env_runners=0).training(
        train_batch_size=24, minibatch_size=32, num_epochs=1)
    assert config.num_envs_per_env_runner == 4
    results = train(config, tmp_path, iterations=2, verbose=False)
    assert len(results) == 2
    # All 4 pistons act in each of the 24 env steps; an agent whose episode is still open keeps
    # its last action for the next batch, so up to one step per agent and env moves over.
    assert [result["num_agent_steps_sampled"] for result in results] == [4 * 24, 4 * 24]
    trained = results[-1]["policies"]["shared"]["num_agent_steps_trained"]
    assert 4 * 24 - 4 * 4 <= trained <= 4 * 24 + 4 * 4
    assert (tmp_path / "learning_curve.png").stat().st_size > 0
    assert (tmp_path / "final" / "state.pt").is_file()


def test_pistonball_example_trains_one_iteration_when_starting_took_its_time(tmp_path):
    config = build_config(n_pistons=4, max_cycles=12, num_env_runners=0).training(
        train_batch_size=24, minibatch_size=32, num_epochs=1)
    results = train(config, tmp_path, minutes=1e-9, verbose=False)  # saved an untrained final/
    assert [result["training_iteration"] for result in results] == [1]


def test_pistonball_example_defaults_are_ten_pistons_with_discrete_moves_on_supersuit_frames():
    config = build_config()
    assert config.env_config == {"n_pistons": 10, "max_cycles": 125, "continuous": False}
    assert config.num_env_runners == 0
    env = config.env(config.env_config)
    observations, _ = env.reset(seed=0)
    assert sorted(observations) == sorted(f"piston_{i}" for i in range(10))
    assert env.get_action_space("piston_0") == spaces.Discrete(3)
    frame = observations["piston_0"]
    assert frame.shape == (84, 84, 3) and frame.dtype == np.uint8
    # Three stacked grayscale frames: at reset the two older frames are still empty.
    assert frame[..., 2].any() and not frame[..., :2].any()


def test_pistonball_continuous_flag_gives_pettingzoos_box_moves():
    env = pistonball_env({"n_pistons": 3, "max_cycles": 5, "continuous": True})
    env.reset(seed=1)
    assert env.get_action_space("piston_2") == spaces.Box(-1.0, 1.0, (1,), np.float32)


@pytest.mark.parametrize(
    ("env_config", "named"),
    [
        ({"max_cycles": 0}, "max_cycles must be an integer of at least 1, received 0"),
        ({"n_pistons": 1}, "n_pistons must be an integer of at least 2, received 1"),
        ({"n_pistons": 2.7}, "n_pistons must be an integer of at least 2, received 2.7"),
        ({"continuous": "no"}, "continuous must be true or false, received 'no'"),
        ({"pistons": 4}, r"has unknown keys \['pistons'\]; it reads \['n_pistons', 'continuous', 'max_cycles'\]"),
    ],
)
def test_pistonball_env_config_it_cannot_take_is_a_config_error_naming_the_key(env_config, named):
    with pytest.raises(ConfigError, match=r"^pistonball env_config " + named + "$"):
        pistonball_env(env_config)


def test_pistonball_frames_follow_the_ball():
    # pistonball_v6 draws its screen only with a render mode; without one every frame is the reset's.
    env = pistonball_env({"n_pistons": 3, "max_cycles": 20, "continuous": False})
    observations, _ = env.reset(seed=2)
    first = {agent: frame[..., 2].copy() for agent, frame in observations.items()}
    for _ in range(5):
        observations, *_ = env.step({agent: 2 for agent in observations})
    assert any((observations[agent][..., 2] != first[agent]).any() for agent in first)
    # The stack shifts: the newest frame of the last step is the middle one now (copied: SuperSuit
    # updates its stack in place).
    previous = {agent: frame.copy() for agent, frame in observations.items()}
    observations, *_ = env.step({agent: 0 for agent in observations})
    assert all((observations[agent][..., 1] == previous[agent][..., 2]).all() for agent in first)

from __future__ import annotations

from examples.pistonball_ppo import build_config, train
from examples.rps_learned_vs_heuristic import train as train_rps


def test_learned_policy_beats_the_beat_last_move_heuristic():
    # Random play scores 0 against the heuristic; the best feed-forward policy scores +6.
    score = train_rps(iterations=8, verbose=False)
    assert score > 2.0


def test_pistonball_example_trains_and_writes_its_learning_curve(tmp_path):
    config = build_config(n_pistons=4, max_cycles=12, num_env_runners=0).training(
        train_batch_size=24, minibatch_size=32, num_epochs=1)
    results = train(config, tmp_path, iterations=2, verbose=False)
    assert len(results) == 2
    assert results[-1]["policies"]["shared"]["num_agent_steps_trained"] == 4 * 24
    assert (tmp_path / "learning_curve.png").stat().st_size > 0
    assert (tmp_path / "final" / "state.pt").is_file()

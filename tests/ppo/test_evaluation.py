"""Evaluation games, Wilson intervals, opponent specs, history files and the PNG chart."""

from __future__ import annotations

import numpy as np
import pytest

from marl_core.errors import MultiAgentEnvError, OpponentSpecError, RunLogError
from marl_core.ppo.evaluation import (
    EvaluationPoint,
    MatchResult,
    evaluate,
    flat_metrics,
    load_history,
    make_connect4_env,
    make_opponent,
    opponent_label,
    parse_opponent,
    play_match,
    plot_history,
    save_history,
    wilson_interval,
)


def leftmost(observation):
    """Always the leftmost legal column: easy to beat, easy to predict."""
    return int(np.flatnonzero(observation["action_mask"])[0])


# Wilson intervals: values computed by hand from the closed form (z = 1.959964).


@pytest.mark.parametrize(
    ("successes", "trials", "low", "high"),
    [
        (8, 10, 0.4902, 0.9433),
        (50, 100, 0.4038, 0.5962),
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (1, 1, 0.2065, 1.0),
        (95, 100, 0.88825, 0.97846),
    ],
)
def test_wilson_interval_matches_hand_computed_values(successes, trials, low, high):
    got = wilson_interval(successes, trials)
    assert got == pytest.approx((low, high), abs=5e-5)


def test_wilson_interval_without_trials_is_everything():
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_wilson_interval_ends_exactly_at_0_and_100_percent():
    for trials in range(1, 2001):
        assert wilson_interval(0, trials)[0] == 0.0 and wilson_interval(trials, trials)[1] == 1.0


@pytest.mark.parametrize(("successes", "trials"), [(-1, 5), (6, 5), (0, -1)])
def test_wilson_interval_rejects_impossible_counts(successes, trials):
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(successes, trials)


def test_wilson_interval_narrows_with_more_games():
    widths = [np.subtract(*wilson_interval(n // 2, n)[::-1]) for n in (10, 100, 1000)]
    assert widths[0] > widths[1] > widths[2] > 0


# Opponent specs.


@pytest.mark.parametrize(
    ("spec", "parsed", "label"),
    [("random", ("random", 0), "random"), (" MCTS:25 ", ("mcts", 25), "mcts25"), ("mcts:400", ("mcts", 400), "mcts400")],
)
def test_parse_opponent(spec, parsed, label):
    assert parse_opponent(spec) == parsed
    assert opponent_label(spec) == label


@pytest.mark.parametrize("spec", ["", "mcts", "mcts:", "mcts:0", "mcts:-5", "mcts:abc", "alphazero", "random:3"])
def test_bad_opponent_spec_names_it_and_the_accepted_forms(spec):
    with pytest.raises(OpponentSpecError) as caught:
        parse_opponent(spec)
    assert isinstance(caught.value, MultiAgentEnvError)
    assert repr(spec) in str(caught.value)
    assert "mcts:N" in str(caught.value)


def test_bad_opponent_fails_before_any_game():
    calls = []

    def policy(observation):
        calls.append(observation)
        return leftmost(observation)

    with pytest.raises(OpponentSpecError):
        evaluate(policy, [("random", 2), ("mcts:x", 2)])
    assert calls == []


def test_mcts_opponent_searches_the_live_state():
    env = make_connect4_env()
    obs, _ = env.reset(seed=0)
    bot = make_opponent("mcts:50", env, seed=1)
    # x has three in the bottom row at columns 0-2; o to move must block column 3.
    for action in (0, 6, 1, 6, 2):
        (agent_id,) = obs
        obs, *_ = env.step({agent_id: action})
    (agent_id,) = obs
    assert agent_id == "player_1"
    assert bot(agent_id, obs[agent_id]) == 3


# Matches.


def test_match_splits_seats_and_counts_every_game():
    seen = []

    def policy(observation):
        seen.append(observation)
        return leftmost(observation)

    match = play_match(policy, "random", 7, seed=3)
    assert match.games == 7 == match.wins + match.draws + match.losses
    assert match.games_by_seat == (4, 3)
    assert sum(match.wins_by_seat) == match.wins
    assert match.moves > 7 * 7
    # The policy sees the bridge's masked observations, not raw game states.
    assert all(set(obs) == {"observation", "action_mask"} for obs in seen)
    assert all(obs["action_mask"].dtype == np.int8 for obs in seen)


def test_match_is_reproducible_from_its_seed():
    first = play_match(leftmost, "random", 6, seed=11)
    again = play_match(leftmost, "random", 6, seed=11)
    other = [play_match(leftmost, "random", 6, seed=s) for s in (12, 13, 14)]
    key = lambda m: (m.wins, m.draws, m.losses, m.wins_by_seat, m.moves)  # noqa: E731
    assert key(first) == key(again)
    assert any(key(m) != key(first) for m in other)


def test_strong_policy_beats_random_and_weak_policy_loses_to_mcts():
    # A policy that searches with MCTS itself wins every game against random moves in both seats;
    # stacking the leftmost column loses every game to MCTS. Swapped outcomes would fail both.
    env = make_connect4_env()
    env.reset(seed=0)
    searcher = make_opponent("mcts:200", env, seed=5)

    def strong(observation):
        return searcher("me", observation)

    strong_match = play_match(strong, "random", 4, seed=0, env_factory=lambda: env)
    assert (strong_match.wins, strong_match.wins_by_seat) == (4, (2, 2))
    weak_match = play_match(leftmost, "mcts:100", 4, seed=0)
    assert (weak_match.losses, weak_match.win_rate) == (4, 0.0)
    assert weak_match.interval("loss")[0] > 0.35


def test_match_rejects_zero_games():
    with pytest.raises(ValueError, match="games"):
        play_match(leftmost, "random", 0)


# Metrics, history and chart.


def test_match_metrics_carry_rates_and_intervals():
    match = MatchResult("mcts:100", wins=8, draws=0, losses=2, seconds=5.0)
    metrics = match.metrics()
    assert metrics["win_rate"] == 0.8 and metrics["loss_rate"] == 0.2 and metrics["draw_rate"] == 0.0
    assert (metrics["win_low"], metrics["win_high"]) == pytest.approx((0.4902, 0.9433), abs=5e-5)
    assert metrics["seconds_per_game"] == 0.5
    flat = flat_metrics({"mcts:100": match, "random": MatchResult("random", 10, 0, 0)})
    assert flat["mcts100/win_rate"] == 0.8 and flat["random/win_low"] == pytest.approx(0.7225, abs=5e-5)
    assert "W  80.0% [ 49.0,  94.3]" in match.summary()
    with pytest.raises(ValueError, match="outcome"):
        match.interval("wins")


def _points():
    return [
        EvaluationPoint(1, 0.5, 4000, {"random": MatchResult("random", 6, 0, 4, (3, 3), (5, 5))}),
        EvaluationPoint(
            2, 1.1, 8000,
            {"random": MatchResult("random", 9, 0, 1), "mcts:25": MatchResult("mcts:25", 2, 1, 7)},
        ),
    ]


def test_history_round_trips_through_json_lines(tmp_path):
    points = _points()
    path = save_history(points, tmp_path / "deep" / "evaluation.jsonl")
    assert len(path.read_text().splitlines()) == 2
    assert load_history(path) == points
    assert [p.name for p in path.parent.iterdir()] == ["evaluation.jsonl"]  # no temporary file left


def test_history_drops_a_cut_off_last_line_and_names_a_damaged_one(tmp_path, caplog):
    points = _points()
    path = save_history(points, tmp_path / "evaluation.jsonl")
    path.write_text(path.read_text() + '{"iteration": 3, "minu')  # a crash while writing
    assert load_history(path) == points
    assert "cut short" in caplog.text
    path.write_text('{"iteration": 1}\n')
    with pytest.raises(RunLogError, match=r"evaluation\.jsonl cannot be read back: KeyError"):
        load_history(path)
    path.write_text('{"iteration": 1, "minutes": 0.1, "env_steps": 5, "results": []}\n')
    with pytest.raises(RunLogError, match="AttributeError"):
        load_history(path)


def test_chart_is_a_png(tmp_path):
    path = plot_history(_points(), tmp_path / "charts" / "win_rate.png", title="test")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000

"""Evaluation games for two-player OpenSpiel policies: win/draw/loss with Wilson intervals.

A trained policy is measured on games of its own, never on training batches: it plays a fixed
number of games against an opponent, half of them in each seat, through
:class:`bridges.openspiel.OpenSpielEnv` (so it sees exactly the observations it was trained on)
and :func:`marl_core.rollout.rollout` (the one episode loop). Opponents are given by a spec:

- ``"random"``: uniformly random legal moves (:class:`marl_core.rollout.RandomPolicy`);
- ``"mcts:N"``: OpenSpiel's ``MCTSBot`` with ``uct_c=2``, ``N`` simulations per move and a
  random-rollout evaluator (one rollout per leaf), seeded per game.

Every game is seeded from ``seed`` and its index, so a match repeats exactly for a deterministic
policy. Rates come with 95% Wilson score intervals (:func:`wilson_interval`), which stay inside
[0, 1] and remain honest at 0% and 100%, where the normal approximation collapses to a point.

Example:
    >>> low, high = wilson_interval(8, 10)
    >>> round(low, 4), round(high, 4)
    (0.4902, 0.9433)
    >>> parse_opponent("mcts:100")
    ('mcts', 100)
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from marl_core.env import AgentID
from marl_core.errors import OpponentSpecError, RunLogError
from marl_core.ppo.progress import complete_lines, write_atomic, write_text_atomic
from marl_core.rollout import RandomPolicy, rollout

logger = logging.getLogger(__name__)

Z_95 = 1.959963984540054
"""The two-sided 95% quantile of the standard normal distribution."""

PolicyFn = Callable[[Any], Any]
"""A policy as the trainer hands it out: ``fn(observation) -> action``."""

Opponent = Callable[[AgentID, Any], Any]
"""An opponent as :func:`marl_core.rollout.play` calls it: ``fn(agent_id, observation) -> action``."""

MAX_SIMULATIONS = 100_000


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion.

    Args:
        successes: how many trials succeeded (0 <= successes <= trials).
        trials: how many trials were run; with none the interval is the whole of [0, 1].
        z: the normal quantile; the default gives a two-sided 95% interval.

    Returns:
        ``(low, high)``, both within [0, 1].

    Raises:
        ValueError: ``successes`` is negative or larger than ``trials``.
    """
    if trials < 0 or successes < 0 or successes > trials:
        raise ValueError(f"need 0 <= successes <= trials, got successes={successes}, trials={trials}")
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    z2 = z * z
    denominator = 1.0 + z2 / trials
    center = (p + z2 / (2 * trials)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    # At 0% and 100% the interval ends exactly at the estimate (rounding would leave it a hair off).
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == trials else min(1.0, center + half)
    return low, high


def parse_opponent(spec: str) -> tuple[str, int]:
    """Split an opponent spec into its kind and simulation count (0 for ``"random"``).

    Raises:
        OpponentSpecError: anything but ``"random"`` or ``"mcts:N"`` with ``1 <= N <= 100000``.
    """
    text = spec.strip().lower()
    if text == "random":
        return "random", 0
    kind, _, count = text.partition(":")
    if kind == "mcts" and count.isascii() and count.isdigit() and 1 <= int(count) <= MAX_SIMULATIONS:
        return "mcts", int(count)
    raise OpponentSpecError(
        f"unknown opponent {spec!r}: expected 'random' or 'mcts:N' with N simulations per move "
        f"(1..{MAX_SIMULATIONS}), e.g. 'mcts:100'"
    )


def opponent_label(spec: str) -> str:
    """A metric-friendly name for an opponent spec: ``"random"``, ``"mcts100"``."""
    kind, simulations = parse_opponent(spec)
    return kind if kind == "random" else f"mcts{simulations}"


def make_opponent(spec: str, env: Any, seed: int) -> Opponent:
    """Build the opponent named by ``spec`` for games on ``env`` (an ``OpenSpielEnv``).

    The MCTS bot searches from ``env.state``, the live OpenSpiel state, so it sees the true
    position rather than the observation tensor.
    """
    kind, simulations = parse_opponent(spec)
    if kind == "random":
        return RandomPolicy(env, seed)
    from open_spiel.python.algorithms import mcts

    random_state = np.random.RandomState(seed % 2**32)
    bot = mcts.MCTSBot(
        env.game,
        uct_c=2.0,
        max_simulations=simulations,
        evaluator=mcts.RandomRolloutEvaluator(n_rollouts=1, random_state=random_state),
        random_state=random_state,
    )

    def search(agent_id: AgentID, observation: Any) -> Any:
        return bot.step(env.state)

    return search


@dataclass(frozen=True)
class MatchResult:
    """The outcome of one match: a policy against one opponent, half the games in each seat.

    Attributes:
        opponent: the opponent spec, e.g. ``"mcts:100"``.
        wins, draws, losses: game counts from the policy's point of view.
        wins_by_seat: wins as ``[first player, second player]``.
        games_by_seat: games played as ``[first player, second player]``.
        seconds: wall-clock time the match took.
        moves: moves made by both sides.
    """

    opponent: str
    wins: int
    draws: int
    losses: int
    wins_by_seat: tuple[int, int] = (0, 0)
    games_by_seat: tuple[int, int] = (0, 0)
    seconds: float = 0.0
    moves: int = 0

    @property
    def games(self) -> int:
        """How many games were played."""
        return self.wins + self.draws + self.losses

    @property
    def win_rate(self) -> float:
        """The fraction of games won (0 when no game was played)."""
        return self.wins / self.games if self.games else 0.0

    @property
    def draw_rate(self) -> float:
        """The fraction of games drawn."""
        return self.draws / self.games if self.games else 0.0

    @property
    def loss_rate(self) -> float:
        """The fraction of games lost."""
        return self.losses / self.games if self.games else 0.0

    def interval(self, outcome: str) -> tuple[float, float]:
        """The 95% Wilson interval of ``"win"``, ``"draw"`` or ``"loss"``."""
        counts = {"win": self.wins, "draw": self.draws, "loss": self.losses}
        if outcome not in counts:
            raise ValueError(f"outcome must be one of {sorted(counts)}, got {outcome!r}")
        return wilson_interval(counts[outcome], self.games)

    def metrics(self) -> dict[str, float]:
        """Flat scalar metrics: rates, their 95% intervals, games and seconds per game."""
        out: dict[str, float] = {"games": float(self.games)}
        for outcome, rate in (("win", self.win_rate), ("draw", self.draw_rate), ("loss", self.loss_rate)):
            low, high = self.interval(outcome)
            out[f"{outcome}_rate"] = rate
            out[f"{outcome}_low"] = low
            out[f"{outcome}_high"] = high
        out["seconds_per_game"] = self.seconds / self.games if self.games else 0.0
        return out

    def summary(self) -> str:
        """One line: ``mcts:100  W 61.0% [51.2, 70.0]  D ...  L ...  (100 games)``."""
        parts = [f"{self.opponent:<10}"]
        for outcome, letter, rate in (
            ("win", "W", self.win_rate),
            ("draw", "D", self.draw_rate),
            ("loss", "L", self.loss_rate),
        ):
            low, high = self.interval(outcome)
            parts.append(f"{letter} {100 * rate:5.1f}% [{100 * low:5.1f}, {100 * high:5.1f}]")
        parts.append(f"({self.games} games, {self.seconds:.1f} s)")
        return "  ".join(parts)


def make_connect4_env() -> Any:
    """A fresh ``OpenSpielEnv("connect_four")`` (imported here: pyspiel is optional)."""
    from bridges.openspiel import OpenSpielEnv

    return OpenSpielEnv("connect_four")


def play_match(
    policy: PolicyFn,
    opponent: str,
    games: int,
    *,
    seed: int = 0,
    env_factory: Callable[[], Any] = make_connect4_env,
) -> MatchResult:
    """Play ``games`` games of ``policy`` against ``opponent``, half of them in each seat.

    Game ``i`` is played with the policy as first player when ``i`` is even, as second player
    otherwise; the env and the opponent are seeded with ``seed + i``.

    Args:
        policy: ``fn(observation) -> action``; it sees the env's observations (with masks).
        opponent: ``"random"`` or ``"mcts:N"``.
        games: how many games (at least 1).
        seed: the base seed.
        env_factory: builds the two-player OpenSpiel env (default: Connect-4).

    Raises:
        OpponentSpecError: ``opponent`` is not a valid spec.
        ValueError: ``games`` is below 1.
    """
    parse_opponent(opponent)
    if games < 1:
        raise ValueError(f"games must be at least 1, got {games}")
    env = env_factory()
    seats = list(env.possible_agents)
    wins = draws = losses = moves = 0
    wins_by_seat, games_by_seat = [0, 0], [0, 0]
    start = time.perf_counter()
    for index in range(games):
        seat = index % 2
        me = seats[seat]
        other = make_opponent(opponent, env, seed + index)

        def act(agent_id: AgentID, observation: Any, me: AgentID = me, other: Opponent = other) -> Any:
            return policy(observation) if agent_id == me else other(agent_id, observation)

        result = rollout(env, act, seed=seed + index)
        moves += sum(result.lengths.values())
        games_by_seat[seat] += 1
        mine = result.returns.get(me, 0.0)
        theirs = max((r for a, r in result.returns.items() if a != me), default=0.0)
        if mine > theirs:
            wins += 1
            wins_by_seat[seat] += 1
        elif mine < theirs:
            losses += 1
        else:
            draws += 1
    match = MatchResult(
        opponent=opponent,
        wins=wins,
        draws=draws,
        losses=losses,
        wins_by_seat=(wins_by_seat[0], wins_by_seat[1]),
        games_by_seat=(games_by_seat[0], games_by_seat[1]),
        seconds=time.perf_counter() - start,
        moves=moves,
    )
    logger.info("evaluation %s", match.summary())
    return match


def evaluate(
    policy: PolicyFn,
    opponents: Mapping[str, int] | Iterable[tuple[str, int]],
    *,
    seed: int = 0,
    env_factory: Callable[[], Any] = make_connect4_env,
    on_match: Callable[[str, MatchResult], None] | None = None,
) -> dict[str, MatchResult]:
    """Play one match per ``(opponent spec, games)`` and return them by spec.

    ``on_match(spec, result)``, when given, runs after each match: to show or keep the matches
    finished so far while slower ones are still playing (an interrupt loses only the one playing).
    """
    pairs = list(opponents.items()) if isinstance(opponents, Mapping) else list(opponents)
    for spec, _ in pairs:
        parse_opponent(spec)  # fail on a bad spec before any game is played
    results: dict[str, MatchResult] = {}
    for spec, games in pairs:
        results[spec] = play_match(policy, spec, games, seed=seed, env_factory=env_factory)
        if on_match is not None:
            on_match(spec, results[spec])
    return results


def flat_metrics(results: Mapping[str, MatchResult]) -> dict[str, float]:
    """``{"random/win_rate": ..., "mcts100/win_low": ...}`` for logging."""
    out: dict[str, float] = {}
    for spec, match in results.items():
        label = opponent_label(spec)
        for key, value in match.metrics().items():
            out[f"{label}/{key}"] = value
    return out


@dataclass(frozen=True)
class EvaluationPoint:
    """One evaluation during training: when it happened and what it measured.

    Attributes:
        iteration: the training iteration just finished.
        minutes: wall-clock minutes since the run started (evaluation time included).
        env_steps: environment steps sampled by the trainer so far.
        results: match results by opponent spec.
        seed: the seed the matches were played with (``evaluate(..., seed=seed)`` replays them);
            None when unknown.
        seconds: wall-clock seconds the evaluation's games took (0 in files written before
            they were recorded).
    """

    iteration: int
    minutes: float
    env_steps: int
    results: Mapping[str, MatchResult] = field(default_factory=dict)
    seed: int | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (one line of ``evaluation.jsonl``)."""
        return {
            "iteration": self.iteration,
            "minutes": self.minutes,
            "env_steps": self.env_steps,
            "results": {spec: asdict(match) for spec, match in self.results.items()},
            "seed": self.seed,
            "seconds": self.seconds,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvaluationPoint:
        """The inverse of :meth:`to_json`."""
        results = {}
        for spec, match in data["results"].items():
            fields = dict(match)
            fields["wins_by_seat"] = tuple(fields.get("wins_by_seat", (0, 0)))
            fields["games_by_seat"] = tuple(fields.get("games_by_seat", (0, 0)))
            results[spec] = MatchResult(**fields)
        seed = data.get("seed")
        return cls(int(data["iteration"]), float(data["minutes"]), int(data["env_steps"]), results,
                   None if seed is None else int(seed), float(data.get("seconds", 0.0)))


def save_history(points: Sequence[EvaluationPoint], path: str | Path) -> Path:
    """Write ``points`` as JSON lines to ``path`` (replaced atomically) and return it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(path, "".join(json.dumps(point.to_json()) + "\n" for point in points))


def load_history(path: str | Path) -> list[EvaluationPoint]:
    """Read points written by :func:`save_history` (a last line cut short by a crash is dropped).

    Raises:
        RunLogError: a line is not an evaluation point.
    """
    path = Path(path)
    try:
        text = complete_lines(path.read_text(encoding="utf-8"), path)
        return [EvaluationPoint.from_json(json.loads(line)) for line in text.split("\n") if line.strip()]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise RunLogError(f"{path} cannot be read back: {type(error).__name__}: {error}") from error


def plot_history(points: Sequence[EvaluationPoint], path: str | Path, title: str = "") -> Path:
    """Draw win rate (with its 95% interval as a band) against minutes and env steps as a PNG.

    One line per opponent; the right panel uses environment steps on the x axis, so curves from
    machines of different speed can be compared.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure = Figure(figsize=(11, 4.2), dpi=100)
    axes = figure.subplots(1, 2, sharey=True)
    specs: list[str] = []
    for point in points:
        specs.extend(spec for spec in point.results if spec not in specs)
    for spec in specs:
        having = [p for p in points if spec in p.results]
        rates = np.array([p.results[spec].win_rate for p in having])
        lows = np.array([p.results[spec].interval("win")[0] for p in having])
        highs = np.array([p.results[spec].interval("win")[1] for p in having])
        for axis, xs in (
            (axes[0], np.array([p.minutes for p in having])),
            (axes[1], np.array([p.env_steps for p in having])),
        ):
            (line,) = axis.plot(xs, rates, marker="o", markersize=3, label=f"vs {spec}")
            axis.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.2, linewidth=0)
    axes[0].set_xlabel("wall-clock minutes (evaluation included)")
    axes[1].set_xlabel("environment steps")
    axes[0].set_ylabel("win rate (95% Wilson interval)")
    for axis in axes:
        axis.set_ylim(-0.02, 1.02)
        axis.grid(alpha=0.3)
    if specs:
        axes[0].legend(loc="lower right")
    figure.suptitle(title or "win rate on evaluation games")
    figure.tight_layout()
    return write_atomic(path, figure.savefig)  # rewritten after every final match, where Ctrl-C is expected

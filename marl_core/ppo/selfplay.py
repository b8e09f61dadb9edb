"""Self-play Connect-4 through OpenSpiel: a league of frozen snapshots, evaluation, the preset.

The learning policy is ``"main"``. In every training episode it takes one seat (the seat
alternates with the episode id, so it learns both) and the other seat is drawn from the league:
fixed players (by the preset's ``league`` option, :data:`FIXED_PLAYERS`) and frozen copies of
``"main"`` (``"main_v1"``, ``"main_v2"``, ...). The fixed players are a uniformly random player
(``"random"``), a tactical one that wins when it can and blocks when it must (``"tactical"``),
OpenSpiel's MCTS at 25 simulations (``"mcts"``, slow: about 4x fewer env steps a minute) and
``"main"`` itself, which then plays both seats and learns from both. The preset's league is
``"self"``: random, tactical and main itself listed twice, so half of main's games are against
itself (random games teach little once main beats it; it stays in the league as a floor), and
no snapshots join it (:data:`SNAPSHOT_THRESHOLDS`).
Without main in the league (random only) main learned to win but not to defend: it blocked 2 of
59 immediate threats and stayed at 2-8% against MCTS-100 up to 30 minutes.
After every iteration :class:`SelfPlayLeague` looks at main's recent
training games against the other league members (its games against itself say nothing); when its
score against the league (wins plus half the draws, averaged over the members, with at least
``min_episodes`` games against each played since the last snapshot) reaches ``threshold``, a new snapshot
joins the league, as in RLlib's self-play example.

Training batches say how main does against the league, not how good it is. That is measured by
:class:`Connect4Evaluation` on separate games (:mod:`marl_core.ppo.evaluation`): against random
moves and OpenSpiel's MCTS at fixed budgets, half the games in each seat, with 95% intervals,
written to the metrics, to ``evaluation.jsonl`` and to a PNG chart.

Main's network (:mod:`marl_core.ppo.connect4_model`) is the trainer's default actor-critic (two
256-unit ReLU layers) fed the board from the side to move (:func:`canonical_board`): OpenSpiel's
observation tensor is the same for both players, and one network plays both seats. The preset
adds six threat planes to its input (``features="tactical"``,
:func:`~marl_core.ppo.connect4_model.tactical_planes`: where each side would complete four, which
of those cells are playable now, which playable cells hand the opponent a win). They are fixed
functions of the board; what to do with them is learned. With the board alone the network has to
discover lines of four from self-play: after 15 minutes it took 31% of immediate wins and blocked
42% of single threats in the benchmark's test positions, and won 20% against MCTS-100; with the
planes, 91% and 94%, and 61.7% (the README's 30-minute run at 15 minutes). The preset also
averages the network over each board and its mirror image (``mirror=True``: Connect-4 is
left-right symmetric, so each position teaches both orientations). ``network="cnn"`` selects :class:`Connect4CNN` instead (with the board alone: 10%
against MCTS-100 after 480k env steps where the MLP had 15% after 404k, and 2-3x slower per step).

:func:`connect4_preset` is what ``marl-train connect4`` runs. Its checkpoints load with
``PPO.from_checkpoint(path)`` and act with ``compute_actions(obs, policy_id="main")``: the
fixed players and the first mapping fns are module-level functions, and the snapshots are
ordinary learned policies, so nothing in a checkpoint needs pickled code.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from marl_core.errors import CheckpointError
from marl_core.ppo.connect4_model import (  # noqa: F401 - re-exported: checkpoints name them here
    Connect4CNN,
    SideToMoveActorCritic,
    canonical_board,
    connect4_module,
    mirror_averaged,
)
from marl_core.ppo.evaluation import (
    EvaluationPoint,
    MatchResult,
    evaluate,
    flat_metrics,
    load_history,
    opponent_label,
    plot_history,
    save_history,
)
from marl_core.ppo.progress import keep_until

if TYPE_CHECKING:
    from marl_core.ppo.algorithm import PPO
    from marl_core.ppo.config import PolicySpec, PPOConfig
    from marl_core.ppo.presets import Preset

logger = logging.getLogger(__name__)

MAIN = "main"
RANDOM = "random"
TACTICAL = "tactical"
MCTS = "mcts"
SNAPSHOT_PREFIX = "main_v"
_SNAPSHOT = re.compile(rf"^{SNAPSHOT_PREFIX}(\d+)$")

# The random league player's generator. It is module-level so that the player stays a plain,
# importable function (checkpoints refer to it by name); every process (the driver, each env
# runner) starts its own copy from this seed.
_RANDOM_PLAYER_RNG = np.random.default_rng(20_251_122)


def make_env(env_config: Mapping[str, Any] | None = None) -> Any:
    """``OpenSpielEnv(env_config.get("game", "connect_four"))``: the env creator of the preset."""
    from bridges.openspiel import OpenSpielEnv

    return OpenSpielEnv((env_config or {}).get("game", "connect_four"))


def random_legal_action(observation: Mapping[str, Any]) -> int:
    """The league's random player: a uniformly random legal move (from ``"action_mask"``)."""
    legal = np.flatnonzero(observation["action_mask"])
    return int(legal[_RANDOM_PLAYER_RNG.integers(len(legal))])


_DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))


def _wins_at(pieces: np.ndarray, row: int, col: int) -> bool:
    """Whether a piece dropped at ``(row, col)`` completes four in a row of ``pieces`` (6x7 bools)."""
    rows, cols = pieces.shape
    for dr, dc in _DIRECTIONS:
        count = 1
        for sign in (1, -1):
            r, c = row + sign * dr, col + sign * dc
            while 0 <= r < rows and 0 <= c < cols and pieces[r, c]:
                count += 1
                r, c = r + sign * dr, c + sign * dc
        if count >= 4:
            return True
    return False


@dataclass(frozen=True)
class Position:
    """A Connect-4 observation read as the side to move sees it (planes x, o, empty; row 0 is the
    bottom): its legal columns, the height each would drop a piece at, and both sides' pieces."""

    legal: list[int]
    heights: dict[int, int]
    mine: np.ndarray
    theirs: np.ndarray

    @classmethod
    def of(cls, observation: Mapping[str, Any]) -> Position:
        """The position of a masked Connect-4 observation (``{"observation", "action_mask"}``);
        the side to move is the one with as many pieces as the other, or one fewer."""
        board = np.asarray(observation["observation"]) > 0.5
        legal = [int(c) for c in np.flatnonzero(observation["action_mask"])]
        mine, theirs = (board[0], board[1]) if board[0].sum() == board[1].sum() else (board[1], board[0])
        heights = {c: int(board.shape[1] - board[2][:, c].sum()) for c in legal}
        return cls(legal, heights, mine, theirs)

    def winning_columns(self, pieces: np.ndarray) -> list[int]:
        """The legal columns where a piece of ``pieces`` (``mine`` or ``theirs``) wins at once."""
        return [col for col in self.legal if _wins_at(pieces, self.heights[col], col)]


def tactical_legal_action(observation: Mapping[str, Any]) -> int:
    """The league's tactical player: win if it can, block if it must, never set up the opponent's win.

    Otherwise it plays a uniformly random legal move that does not put the opponent's winning cell
    right above it (any legal move when all do).
    """
    position = Position.of(observation)
    for pieces in (position.mine, position.theirs):
        wins = position.winning_columns(pieces)
        if wins:
            return wins[0]
    rows, heights, theirs = position.theirs.shape[0], position.heights, position.theirs
    safe = [c for c in position.legal if heights[c] + 1 >= rows or not _wins_at(theirs, heights[c] + 1, c)]
    choices = safe or position.legal
    return choices[int(_RANDOM_PLAYER_RNG.integers(len(choices)))]


MCTS_SIMULATIONS = 25
"""Simulations per move of the league's MCTS player (:func:`mcts_legal_action`)."""

_MCTS_BOT: list[Any] = []  # (game, bot), built on first use in each process


def _state_from_board(game: Any, board: np.ndarray) -> Any:
    """An OpenSpiel Connect-4 state with ``board``'s pieces (None if no move order is found).

    The history differs from the real one, the position does not: a depth-first search finds a
    move order, x first and alternating, that drops each piece on its cell and completes no four
    before the last move (the game would have ended there). Positions already searched (known by
    their column heights) are not searched again.
    """
    order = _move_order(board)
    if order is None:
        return None
    state = game.new_initial_state()
    for column in order:
        state.apply_action(column)
    return state


def _move_order(board: np.ndarray) -> list[int] | None:
    """The columns of a move order that builds ``board`` (see :func:`_state_from_board`)."""
    _, rows, cols = board.shape
    pieces = (board[0], board[1])
    total = int(board[0].sum() + board[1].sum())
    target = [int(board[0][:, c].sum() + board[1][:, c].sum()) for c in range(cols)]
    placed = (np.zeros((rows, cols), bool), np.zeros((rows, cols), bool))
    heights, order, dead = [0] * cols, [], set()

    def search(move: int) -> bool:
        if move == total:
            return True
        key = tuple(heights)
        if key in dead:
            return False
        side = move % 2
        for column in range(cols):
            row = heights[column]
            if row >= target[column] or not pieces[side][row, column]:
                continue
            if move < total - 1 and _wins_at(placed[side], row, column):
                continue
            placed[side][row, column] = True
            heights[column] += 1
            order.append(column)
            if search(move + 1):
                return True
            order.pop()
            heights[column] -= 1
            placed[side][row, column] = False
        dead.add(key)
        return False

    return order if search(0) else None


def mcts_legal_action(observation: Mapping[str, Any]) -> int:
    """The league's MCTS player: OpenSpiel's ``MCTSBot`` (``MCTS_SIMULATIONS``, random rollouts).

    It searches from a state rebuilt from the board (:func:`_state_from_board`); when no move
    order rebuilds it (a board no game reaches) or the game is over, it plays as
    :func:`tactical_legal_action`.
    """
    if not _MCTS_BOT:
        import pyspiel
        from open_spiel.python.algorithms import mcts

        game = pyspiel.load_game("connect_four")
        random_state = np.random.RandomState(int(_RANDOM_PLAYER_RNG.integers(2**31)))
        _MCTS_BOT.append((game, mcts.MCTSBot(
            game, uct_c=2.0, max_simulations=MCTS_SIMULATIONS,
            evaluator=mcts.RandomRolloutEvaluator(n_rollouts=1, random_state=random_state),
            random_state=random_state)))
    game, bot = _MCTS_BOT[0]
    state = _state_from_board(game, np.asarray(observation["observation"]) > 0.5)
    if state is None or state.is_terminal():
        return tactical_legal_action(observation)
    return int(bot.step(state))


def seat_of(agent_id: str) -> int:
    """The OpenSpiel player index of ``"player_<i>"``."""
    return int(agent_id.rsplit("_", 1)[1])


def main_seat(episode: Any) -> int:
    """The seat ``"main"`` takes in ``episode``: alternates with the episode id."""
    return int(episode.id_) % 2


def main_vs_random(agent_id: str, episode: Any, **kwargs: Any) -> str:
    """The league's first mapping: ``"main"`` in one seat, ``"random"`` in the other."""
    return MAIN if seat_of(agent_id) == main_seat(episode) else RANDOM


def main_vs_fixed(agent_id: str, episode: Any, **kwargs: Any) -> str:
    """The first mapping of league ``"tactical"``: main against ``"random"`` or ``"tactical"``."""
    return LeagueMapping(FIXED_PLAYERS["tactical"])(agent_id, episode)


def main_vs_fixed_mcts(agent_id: str, episode: Any, **kwargs: Any) -> str:
    """The first mapping of league ``"mcts"``: main against ``"random"``, ``"tactical"`` or ``"mcts"``."""
    return LeagueMapping(FIXED_PLAYERS["mcts"])(agent_id, episode)


def main_vs_fixed_self(agent_id: str, episode: Any, **kwargs: Any) -> str:
    """The first mapping of league ``"self"``: main against ``"random"``, ``"tactical"`` or itself."""
    return LeagueMapping(FIXED_PLAYERS["self"])(agent_id, episode)


@dataclass(frozen=True)
class LeagueMapping:
    """``policy_mapping_fn`` of a league: main in one seat, an opponent drawn per episode.

    The draw depends only on ``(seed, episode.id_)``, so both agents of an episode agree and
    a rerun maps the same way.

    Example:
        >>> from marl_core.ppo.rollout import Episode
        >>> mapping = LeagueMapping(("random", "main_v1"))
        >>> mapping("player_0", Episode(4, 0, 0)), mapping("player_1", Episode(5, 0, 0))
        ('main', 'main')
    """

    opponents: tuple[str, ...]
    seed: int = 0

    def __call__(self, agent_id: str, episode: Any, **kwargs: Any) -> str:
        if seat_of(agent_id) == main_seat(episode):
            return MAIN
        rng = np.random.default_rng([self.seed, abs(int(episode.id_))])
        return self.opponents[int(rng.integers(len(self.opponents)))]


@dataclass
class SelfPlayLeague:
    """The league callback: adds a frozen snapshot of ``"main"`` when main beats the league.

    Main's score is read from the recent training episodes of its opponents: every league member
    but main itself plays only against main, and games are zero-sum (+1 win, 0 draw, -1 loss), so
    main's score against member ``p`` is ``(1 - mean) / 2`` with ``mean`` from ``result["policies"]
    [p]["episode_return_mean"]``. The score against the league is the mean over its members that
    have played; games of main against itself, which it always splits, do not count.

    Attributes:
        threshold: score against the league that earns a new snapshot.
        min_episodes: games of main against each member needed since the last snapshot before
            the next (at least the trainer's 100-episode return window, so that every member's
            window holds only games played since).
        max_snapshots: the oldest snapshot leaves the league beyond this many.
        seed: seed of the opponent draw; ``None`` (the default): the algorithm's ``seed``, so
            that runs with different seeds draw different opponents.
    """

    threshold: float = 0.85
    min_episodes: int = 100
    max_snapshots: int = 8
    seed: int | None = None
    fixed: tuple[str, ...] = (RANDOM,)
    snapshots: list[str] = field(default_factory=list)
    next_version: int = 1
    games_since_snapshot: dict[str, int] = field(default_factory=dict)
    """Games of main against each member since the last snapshot."""

    def opponents(self) -> tuple[str, ...]:
        """The league: the random player and the current snapshots."""
        return (*self.fixed, *self.snapshots)

    def members(self) -> list[str]:
        """The league's members other than main itself: those its score is read from."""
        return [pid for pid in dict.fromkeys(self.opponents()) if pid != MAIN]

    @property
    def episodes_since_snapshot(self) -> int:
        """Games since the last snapshot against the member that has played main least (0 when
        main is alone in the league)."""
        return min((self.games_since_snapshot.get(pid, 0) for pid in self.members()), default=0)

    def attach(self, algo: PPO) -> None:
        """Take over the snapshots that ``algo`` already holds and play against them from now on.

        Call it before training an algorithm restored from a checkpoint (``marl-train --resume``
        does); otherwise the first iteration plays the saved first mapping, without snapshots.
        The games counted since the last snapshot come back from the checkpoint too (under
        ``algo.callback_state["league"]``), so a resumed league snapshots when an uninterrupted
        one would.
        """
        saved = algo.callback_state.get(_STATE_KEY)
        if saved is not None:
            self.games_since_snapshot = _saved_games(saved)
        found = sorted((int(m.group(1)), pid) for pid in algo.policies if (m := _SNAPSHOT.match(pid)))
        players = tuple(pid for pid in (RANDOM, TACTICAL, MCTS) if pid in algo.policies)
        # The fixed players the algorithm holds, and main's own places (once: this runs every iteration).
        fixed = (*players, *(MAIN,) * self.fixed.count(MAIN)) if players else self.fixed
        drawn_with = _draw_seed_of(algo.config.policy_mapping_fn)
        if ([pid for _, pid in found] != self.snapshots or fixed != self.fixed
                or (drawn_with is not None and drawn_with != self._draw_seed(algo))):
            self.snapshots, self.fixed = [pid for _, pid in found], fixed
            self.next_version = max([v for v, _ in found], default=0) + 1
            algo.set_policy_mapping_fn(self._mapping(algo))

    def _draw_seed(self, algo: PPO) -> int:
        """The seed of the opponent draw: :attr:`seed`, or the algorithm's."""
        return int(self.seed if self.seed is not None else (algo.config.seed or 0))

    def _mapping(self, algo: PPO) -> LeagueMapping:
        """The mapping of the league as it is now."""
        return LeagueMapping(self.opponents(), self._draw_seed(algo))

    def __call__(self, algo: PPO, result: dict[str, Any]) -> None:
        """After every iteration: maybe add a snapshot; report the league under ``result["league"]``."""
        self.attach(algo)
        policies = result.get("policies", {})
        members = self.members()
        for pid in members:
            games = int(policies.get(pid, {}).get("num_episodes", 0))
            self.games_since_snapshot[pid] = self.games_since_snapshot.get(pid, 0) + games
        means = [float(policies.get(pid, {}).get("episode_return_mean", float("nan"))) for pid in members]
        scores = [(1.0 - mean) / 2.0 for mean in means if np.isfinite(mean)]
        score = float(np.mean(scores)) if scores else float("nan")
        added = None
        if self.episodes_since_snapshot >= self.min_episodes and score >= self.threshold:
            added = f"{SNAPSHOT_PREFIX}{self.next_version}"
            self.next_version += 1
            self.snapshots.append(added)
            algo.add_policy(added, algo.config.policy_entries()[MAIN], weights_from=MAIN, policies_to_train=[MAIN],
                            policy_mapping_fn=self._mapping(algo))
            while len(self.snapshots) > self.max_snapshots:
                oldest = self.snapshots.pop(0)
                algo.remove_policy(oldest, policy_mapping_fn=self._mapping(algo),
                                   policies_to_train=[MAIN])
            self.games_since_snapshot = {}
            logger.info("main scored %.3f against the league: added %s (league: %s)", score, added,
                        self.opponents())
        result["league"] = {
            "score": score,
            "size": len(self.opponents()),
            "snapshots": len(self.snapshots),
            "latest_snapshot": self.next_version - 1,
            "added": added or "",
        }
        algo.callback_state[_STATE_KEY] = {"games_since_snapshot": dict(self.games_since_snapshot)}


_STATE_KEY = "league"


def _saved_games(saved: Any) -> dict[str, int]:
    """The league's saved ``games_since_snapshot`` (CheckpointError: a damaged checkpoint)."""
    games = saved.get("games_since_snapshot") if isinstance(saved, dict) else None
    if not isinstance(games, dict) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in games.values()
    ):
        raise CheckpointError(f"the checkpoint's league state is {saved!r}, where "
                              "{'games_since_snapshot': {policy id: count of games}} belongs (a damaged checkpoint?)")
    return dict(games)


_CHART_TITLE = "Connect-4 self-play: main on evaluation games"


@dataclass
class Connect4Evaluation:
    """Evaluation games during training and at the end, written as metrics, JSON lines and a PNG.

    Periodic evaluations are spaced in wall-clock time, so their cost stays a steady fraction of
    the run whatever the machine's speed: with the defaults, about 2 s of games (random and
    MCTS-25) every 30 s, and every 5 minutes a few games against MCTS-100 and MCTS-400 as well
    (about 15 s: MCTS-100 costs about 0.3-0.5 s a game and MCTS-400 1.5-3 s on a laptop core).
    :meth:`final` plays more games against all of them.

    Attributes:
        every_minutes: minimum wall-clock minutes between periodic evaluations (0: after every
            iteration).
        opponents: ``(spec, games)`` played at each periodic evaluation.
        strong_every_minutes: minimum wall-clock minutes between periodic evaluations that also
            play ``strong_opponents`` (0: every periodic evaluation).
        strong_opponents: ``(spec, games)`` of the slow opponents, played every
            ``strong_every_minutes``.
        final_opponents: ``(spec, games)`` played by :meth:`final`.
        seed: base seed of the games, numbered by iteration so that each iteration's evaluation
            plays new games: ``seed + 10000 * (2 * i)`` after iteration ``i``, ``seed + 10000 *
            (2 * i + 1)`` for the final one (a model evaluated again at its iteration, say a run
            resumed and stopped at once, plays the same games again).
        out_dir: where ``evaluation.jsonl`` and ``win_rate.png`` go once known (set by
            :meth:`attach` from ``algo.out_dir``, by ``final`` at the latest).
    """

    every_minutes: float = 0.5
    opponents: Sequence[tuple[str, int]] = (("random", 40), ("mcts:25", 20))
    strong_every_minutes: float = 5.0
    strong_opponents: Sequence[tuple[str, int]] = (("mcts:100", 10), ("mcts:400", 4))
    final_opponents: Sequence[tuple[str, int]] = (("random", 200), ("mcts:25", 100), ("mcts:100", 60),
                                                  ("mcts:400", 20))
    seed: int = 1_000_000
    out_dir: Path | None = None
    history: list[EvaluationPoint] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    seconds_evaluating: float = 0.0
    last_evaluation: float = field(default_factory=time.perf_counter)
    last_strong_evaluation: float = field(default_factory=time.perf_counter)

    def attach(self, algo: PPO) -> None:
        """Before the first iteration: evaluations go to ``algo.out_dir`` (when set) as they are
        played, so a run stopped early keeps them. For an algorithm restored from a checkpoint
        (``algo.restored_from``) resumed in its old run directory, keep the evaluations written
        there up to the restored iteration; the minutes go on from the last, and the time spent
        evaluating from theirs.

        Raises:
            RunLogError: ``evaluation.jsonl`` there cannot be read back.
        """
        if algo.out_dir is not None:
            self.out_dir = Path(algo.out_dir)
        if algo.restored_from is None:
            return
        minutes = algo.time_total_s / 60.0
        if self.out_dir is not None and (self.out_dir / "evaluation.jsonl").is_file():
            path = self.out_dir / "evaluation.jsonl"
            loaded = load_history(path)
            kept = keep_until(loaded, algo.iteration, lambda point: point.iteration, path)
            self.history = kept + self.history
            self.seconds_evaluating += sum(point.seconds for point in kept)
            minutes = max([minutes, *(point.minutes for point in kept)])
            if len(kept) < len(loaded):  # the file and chart at once: the run may stop before it evaluates
                save_history(self.history, path)
                chart = self.out_dir / "win_rate.png"
                if self.history:
                    plot_history(self.history, chart, title=_CHART_TITLE)
                else:
                    chart.unlink(missing_ok=True)
        self.started = time.perf_counter() - 60.0 * minutes

    def _run(self, algo: PPO, opponents: Sequence[tuple[str, int]], final: bool = False,
             on_match: Callable[[str, MatchResult], None] | None = None) -> EvaluationPoint:
        """Play ``opponents``; the history's last point holds the matches finished so far, each
        added as it ends (before ``on_match(spec, result)``), so an interrupt keeps them."""
        start = time.perf_counter()
        policy = algo.get_policy_callable(MAIN, explore=False)
        # Numbered by iteration, so a resumed run (or a chain of them) plays new games.
        seed = self.seed + 10_000 * (2 * int(algo.iteration) + int(final))
        results: dict[str, MatchResult] = {}
        begun = len(self.history)

        def record() -> None:
            self.history[begun:] = [EvaluationPoint(
                iteration=int(algo.iteration),
                minutes=(time.perf_counter() - self.started) / 60.0,
                env_steps=int(algo.env_steps_lifetime),
                results=dict(results),
                seed=seed,
                seconds=time.perf_counter() - start,
            )]

        def played(spec: str, match: MatchResult) -> None:
            results[spec] = match
            record()
            if on_match is not None:
                on_match(spec, match)

        try:
            evaluate(policy, opponents, seed=seed, on_match=played)
            if not results:
                record()  # no opponents: the point says when it was asked for
        finally:  # the points' seconds, as a resumed run adds them up
            self.seconds_evaluating += sum(point.seconds for point in self.history[begun:])
        return self.history[begun]

    def __call__(self, algo: PPO, result: dict[str, Any]) -> None:
        """After every iteration: play evaluation games when ``every_minutes`` have passed (and the
        strong opponents' games too when ``strong_every_minutes`` have)."""
        now = time.perf_counter()
        if now - self.last_evaluation < 60.0 * self.every_minutes:
            return
        opponents = list(self.opponents)
        if now - self.last_strong_evaluation >= 60.0 * self.strong_every_minutes:
            opponents += self.strong_opponents
            self.last_strong_evaluation = now
        point = self._run(algo, opponents)
        if self.out_dir is not None:
            self.write(self.out_dir)
        self.last_evaluation = time.perf_counter()
        result["evaluation"] = {**result.get("evaluation", {}), **flat_metrics(point.results),  # beside evaluate()'s
                                "minutes": point.minutes, "seconds_evaluating": self.seconds_evaluating}

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``evaluation.jsonl`` and ``win_rate.png`` into ``out_dir``."""
        out_dir = Path(out_dir)
        return {
            "history": save_history(self.history, out_dir / "evaluation.jsonl"),
            "chart": plot_history(self.history, out_dir / "win_rate.png", title=_CHART_TITLE),
        }

    def final(self, algo: PPO, out_dir: Path) -> dict[str, Any]:
        """The final evaluation: more games, stronger MCTS; returns one summary line per opponent.

        Each match is printed and written (``evaluation.jsonl``, ``win_rate.png``) as it ends, so
        one interrupted keeps those before it.
        """
        self.out_dir = Path(out_dir)
        files: dict[str, Path] = {}

        def keep(spec: str, match: MatchResult) -> None:
            files.update(self.write(self.out_dir))
            print(f"final evaluation: {match.summary()}", flush=True)

        point = self._run(algo, self.final_opponents, final=True, on_match=keep)
        if not files:
            files.update(self.write(self.out_dir))
        summary: dict[str, Any] = {
            opponent_label(spec): match.summary() for spec, match in point.results.items()
        }
        summary.update({"iteration": point.iteration, "env_steps": point.env_steps,
                        "minutes": round(point.minutes, 2),
                        "minutes_evaluating": round(self.seconds_evaluating / 60.0, 2),
                        "chart": str(files["chart"]), "history": str(files["history"])})
        return summary


def main_spec() -> PolicySpec:
    """The PolicySpec of ``"main"`` and its snapshots."""
    from marl_core.ppo.config import PolicySpec

    return PolicySpec(model={"module": connect4_module})


FIXED_PLAYERS: dict[str, tuple[str, ...]] = {
    "random": (RANDOM,),
    "tactical": (RANDOM, TACTICAL),
    "mcts": (RANDOM, TACTICAL, MCTS),
    "self": (RANDOM, TACTICAL, MAIN, MAIN),
}
"""The players that stay in the league (snapshots come and go), by the preset's ``league`` option."""

SNAPSHOT_THRESHOLDS: dict[str, float] = {"random": 0.85, "tactical": 0.85, "mcts": 0.85, "self": float("inf")}
"""Main's score against the league that adds a snapshot, by the preset's ``league`` option. None
join the ``"self"`` league: main's current self already plays half its games there, and snapshots
joining as well (about every 10 iterations at 0.85) took games from the tactical player (a
twentieth of them instead of a quarter): two 5-minute runs ended at 68% and 74% against MCTS-25,
below every one of the README's runs without snapshots (78-95%)."""

FIRST_MAPPINGS = {"random": main_vs_random, "tactical": main_vs_fixed, "mcts": main_vs_fixed_mcts,
                  "self": main_vs_fixed_self}


def _draw_seed_of(mapping: Any) -> int | None:
    """The seed a league's mapping draws opponents with (the first mappings' draw is seed 0's);
    ``None`` for a mapping that draws none (``main_vs_random``, a user's own)."""
    if isinstance(mapping, LeagueMapping):
        return mapping.seed
    return 0 if mapping in (main_vs_fixed, main_vs_fixed_mcts, main_vs_fixed_self) else None


def connect4_config(*, num_envs: int = 16, seed: int = 0, lr: float = 1e-3, network: str = "mlp",
                    league: str = "random", train_batch_size: int = 4000, num_epochs: int = 4,
                    minibatch_size: int = 512, entropy_coeff: float = 0.01,
                    num_env_runners: int = 0, mirror: bool = False, hiddens: Sequence[int] = (256, 256),
                    features: str = "board") -> PPOConfig:
    """The trainer config of the preset: main vs the league, tuned for a 2-core laptop.

    By default sampling happens in the driver (``num_env_runners=0``); :func:`connect4_preset`
    samples on one Ray env runner (the local embedded Ray). ``--set env_runners.num_env_runners=N``
    (and ``--ray-address``) move sampling to more Ray actors unchanged: the league's mapping fn
    and the module factory travel to them.

    Args:
        num_envs: envs sampled together in the driver.
        seed: the trainer's seed.
        lr: learning rate.
        network: ``"mlp"`` or ``"cnn"`` (:func:`connect4_module`).
        mirror: average the network over each board and its mirror image (:func:`mirror_averaged`).
        hiddens: hidden layer sizes (the CNN uses the first).
        features: ``"board"`` or ``"tactical"`` (the board and its threat planes:
            :func:`~marl_core.ppo.connect4_model.tactical_planes`).
        league: the fixed players, a key of :data:`FIXED_PLAYERS`; ``"random"`` here, ``"self"``
            in :func:`connect4_preset`.
        train_batch_size: env steps per iteration.
        num_epochs: passes over each batch.
        minibatch_size: SGD minibatch.
        entropy_coeff: entropy bonus.
        num_env_runners: Ray env-runner actors (0: sample in the driver).
    """
    from marl_core.ppo.config import PPOConfig

    players = {RANDOM: random_legal_action, TACTICAL: tactical_legal_action, MCTS: mcts_legal_action}
    policies: dict[str, Any] = {MAIN: main_spec(),
                                **{pid: players[pid] for pid in FIXED_PLAYERS[league] if pid != MAIN}}
    return (
        PPOConfig()
        .environment(make_env, env_config={"game": "connect_four"})
        .multi_agent(policies=policies, policy_mapping_fn=FIRST_MAPPINGS[league],
                     policies_to_train=[MAIN])
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=num_envs)
        .training(lr=lr, gamma=0.99, lambda_=0.95, clip_param=0.2, entropy_coeff=entropy_coeff,
                  num_epochs=num_epochs, minibatch_size=minibatch_size, train_batch_size=train_batch_size,
                  model={"hiddens": [int(h) for h in hiddens], "activation": "relu", "network": network,
                         "mirror": bool(mirror), "features": features})
        .resources(num_cpus=2)
        .debugging(seed=seed)
    )


def laptop_config(**options: Any) -> PPOConfig:
    """:func:`connect4_config`, with torch limited to one thread in this process.

    Sampling and learning alternate in the driver, so a second intra-op thread gains little; on a
    busy 2-core machine its spinning threads made iterations 8-10x slower (measured: 300 vs 2,500
    env steps/s under a load average of 8).
    """
    torch.set_num_threads(1)
    return connect4_config(**options)


def connect4_preset(**options: Any) -> Preset:
    """The preset of ``marl-train connect4``: self-play with a league, evaluation, a final report.

    ``options`` are keyword arguments of :func:`connect4_config` (for experiments); the league
    defaults to ``"self"``, the network to ``features="tactical"`` with ``mirror=True``, and
    sampling to one env runner on a local embedded Ray. Snapshots join the league by
    :data:`SNAPSHOT_THRESHOLDS` (never in the default ``"self"`` league).
    """
    from marl_core.ppo.presets import Preset

    options = {"league": "self", "num_env_runners": 1, "features": "tactical", "mirror": True, **options}
    league = SelfPlayLeague(fixed=FIXED_PLAYERS[options["league"]], threshold=SNAPSHOT_THRESHOLDS[options["league"]])
    evaluation = Connect4Evaluation()
    return Preset(
        name="connect4",
        description="Connect-4 (OpenSpiel) by self-play against itself, a tactical and a random player; "
        "evaluated against random moves and MCTS on separate games.",
        build_config=functools.partial(laptop_config, **options),
        callbacks=(league, evaluation),
        start=(league.attach, evaluation.attach),
        final=evaluation.final,
        default_minutes=5.0,
    )

"""Connect-4 self-play with the preset defaults: win rate against random and MCTS over wall-clock time.

Trains ``marl-train connect4``'s preset (same config, league and periodic evaluation) for
``--minutes``, saving a checkpoint at each of ``--at`` minutes of wall-clock time (evaluation
included). After training, every checkpoint plays evaluation games against random moves and
OpenSpiel's MCTS at 25, 100 and 400 simulations (half the games in each seat), so the curve is
measured on separate games and the slow MCTS games do not eat the training budget. Prints a
table with 95% Wilson intervals and writes ``curve.png`` and ``curve.jsonl`` into ``--out``.

The table's last columns say how each checkpoint's greedy policy handles one-move tactics: in
``--tactics-games`` games where every other move is a uniformly random one (so positions vary),
the share of positions with a winning move where it wins at once, and of positions with exactly
one opponent threat (and no win of its own) where it blocks.

Run::

    python bench/bench_connect4.py --minutes 30 --out runs/bench-connect4
    python bench/bench_connect4.py --minutes 5 --at 1,2,3,4,5 --games random=100,mcts:100=40
    python bench/bench_connect4.py --minutes 6 --at 2,4,6 --option league=random --option network=cnn

``--option key=value`` passes keyword arguments to ``connect4_preset`` (``league``, ``network``,
``lr``, ``train_batch_size``, ...) for experiments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from marl_core._cli import number_arg
from marl_core.ppo import PPO
from marl_core.ppo.evaluation import (
    EvaluationPoint,
    OpponentSpecError,
    evaluate,
    parse_opponent,
    plot_history,
    save_history,
)
from marl_core.ppo.selfplay import MAIN, Position, connect4_preset, make_env


def parse_games(text: str) -> list[tuple[str, int]]:
    """``"random=100,mcts:25=50"`` as ``[("random", 100), ("mcts:25", 50)]`` (an argparse type:
    a bad item is a usage error before any training, not a traceback after it)."""
    pairs = []
    for item in text.split(","):
        spec, _, games = item.partition("=")
        try:
            parse_opponent(spec)
            count = int(games)
        except (OpponentSpecError, ValueError) as error:
            raise argparse.ArgumentTypeError(f"{item!r}: expected OPPONENT=GAMES, e.g. mcts:100=50 ({error})") from None
        if count < 1:
            raise argparse.ArgumentTypeError(f"{item!r}: expected at least 1 game")
        pairs.append((spec.strip(), count))
    return pairs


def parse_minutes(text: str) -> list[float]:
    """``"1,2,5"`` as ``[1.0, 2.0, 5.0]`` (an argparse type)."""
    try:
        marks = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected minutes separated by commas, e.g. 1,2,5, received {text!r}") from None
    if not all(0 < mark < float("inf") for mark in marks):
        raise argparse.ArgumentTypeError(f"expected minutes above 0, received {text!r}")
    return marks


def parse_options(items: list[str]) -> dict[str, Any]:
    """``key=value`` pairs (values read as JSON when they parse, else as strings)."""
    options = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def train(minutes: float, at: list[float], out: Path, seed: int,
          options: dict[str, Any] | None = None) -> list[tuple[float, int, int, Path]]:
    """Train with the preset; return ``(minutes, iteration, env_steps, checkpoint)`` per mark."""
    preset = connect4_preset(**(options or {}))
    config = preset.build_config()
    config.seed = seed
    start = time.perf_counter()
    algo = config.build()
    marks = sorted(m for m in at if m <= minutes)
    saved = []
    try:
        while marks:
            result = algo.train()
            for callback in preset.callbacks:
                callback(algo, result)
            elapsed = (time.perf_counter() - start) / 60.0
            if elapsed >= marks[0]:
                while marks and elapsed >= marks[0]:
                    marks.pop(0)
                path = algo.save(out / f"at-{elapsed:05.2f}min")
                saved.append((elapsed, algo.iteration, algo.env_steps_lifetime, path))
                league = result.get("league", {})
                print(f"  {elapsed:5.2f} min  iteration {algo.iteration:4d}  {algo.env_steps_lifetime:9d} env steps"
                      f"  league size {league.get('size', '?')}  load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        algo.stop()
    return saved


def one_move_tactics(policy: Any, games: int, seed: int = 0) -> tuple[float, float]:
    """Share of immediate wins taken and of single threats blocked by ``policy`` (see the docstring)."""
    env, rng = make_env(), np.random.default_rng(seed)
    taken = blocked = wins_seen = threats_seen = 0
    for game in range(games):
        obs, _ = env.reset(seed=seed + game)
        done = False
        while not done:
            ((agent_id, observation),) = obs.items()
            position = Position.of(observation)
            wins, threats = position.winning_columns(position.mine), position.winning_columns(position.theirs)
            action = int(policy(observation))
            if wins:
                wins_seen, taken = wins_seen + 1, taken + (action in wins)
            elif len(threats) == 1:
                threats_seen, blocked = threats_seen + 1, blocked + (action in threats)
            if rng.random() < 0.5:  # every other move (on average) random, so positions vary
                action = int(rng.choice(position.legal))
            obs, _, terminateds, truncateds, _ = env.step({agent_id: action})
            done = terminateds["__all__"] or truncateds["__all__"]
    return taken / max(wins_seen, 1), blocked / max(threats_seen, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=number_arg(float), default=30.0, help="training budget (wall clock)")
    parser.add_argument("--at", type=parse_minutes, default="1,2,3,5,10,20,30", help="minutes at which to checkpoint")
    parser.add_argument("--games", type=parse_games, default="random=100,mcts:25=50,mcts:100=50,mcts:400=20",
                        help="opponent=games evaluated per checkpoint")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-connect4"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tactics-games", type=number_arg(int, inclusive=True), default=200,
                        help="games per checkpoint for the one-move tactics columns (0: skip)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a keyword of connect4_preset / connect4_config, e.g. tactical=true (repeatable)")
    args = parser.parse_args(argv)
    at, games = args.at, args.games
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"Connect-4 self-play, preset defaults, {args.minutes} min on {os.cpu_count()} CPUs "
          f"(load average at start: {os.getloadavg()[0]:.1f})")
    options = parse_options(args.option)
    if options:
        print(f"preset options: {options}")
    saved = train(args.minutes, at, args.out, args.seed, options)
    print(f"\nevaluating {len(saved)} checkpoints: {', '.join(f'{s}={g}' for s, g in games)} games, half per seat")
    points, tactics = [], []
    for minutes, iteration, steps, path in saved:
        algo = PPO.from_checkpoint(path)
        try:
            results = evaluate(algo.get_policy_callable(MAIN), games, seed=777)
            if args.tactics_games:
                tactics.append(one_move_tactics(algo.get_policy_callable(MAIN), args.tactics_games))
        finally:
            algo.stop()
        points.append(EvaluationPoint(iteration, minutes, steps, results))
        save_history(points, args.out / "curve.jsonl")
    plot_history(points, args.out / "curve.png", title="Connect-4 self-play: checkpoints vs opponents")
    header = f"{'minutes':>7} {'env steps':>10} " + " ".join(f"{spec + ' win% [95% CI]':>26}" for spec, _ in games)
    if tactics:
        header += f" {'wins taken':>10} {'blocks':>7}"
    print("\n" + header)
    for index, point in enumerate(points):
        cells = []
        for spec, _ in games:
            match = point.results[spec]
            low, high = match.interval("win")
            cells.append(f"{100 * match.win_rate:9.1f} [{100 * low:5.1f}, {100 * high:5.1f}] ({match.games:3d})")
        if tactics:
            cells.append(f"{100 * tactics[index][0]:9.0f}% {100 * tactics[index][1]:6.0f}%")
        print(f"{point.minutes:7.2f} {point.env_steps:10d} " + " ".join(f"{c:>26}" for c in cells))
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}; chart: {args.out / 'curve.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

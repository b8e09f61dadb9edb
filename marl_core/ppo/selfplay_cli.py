"""Command lines for trained Connect-4 policies: ``marl-eval`` and ``marl-play``.

``marl-eval CHECKPOINT --opponent random|mcts:N --games G`` plays evaluation games of a
checkpoint's policy (half in each seat) and prints win/draw/loss with 95% Wilson intervals.

``marl-play connect4 CHECKPOINT`` lets a person play the policy in the terminal: the person
picks a seat, the board is drawn after every move, input that is not a legal column is asked
again with a short message, and end of input (Ctrl-D) or ``q`` leaves cleanly.

The game loop, :func:`play_human`, takes its input and output streams as arguments, so it runs
the same with a terminal, a pipe or a test.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from marl_core._cli import number_arg, quiet_on_closed_pipe
from marl_core.env import ALL
from marl_core.errors import OpponentSpecError
from marl_core.ppo.evaluation import (
    PolicyFn,
    evaluate,
    make_connect4_env,
    parse_opponent,
)
from marl_core.spaces import action_mask_of

GAMES = {"connect4": make_connect4_env}
"""Games ``marl-play`` knows, by the name given on the command line."""

QUIT_WORDS = {"q", "quit", "exit"}


class _Quit(Exception):
    """The person asked to stop, or the input ended."""


def load_policy(
    checkpoint: str | Path, policy_id: str = "main", env_factory: Callable[[], Any] = make_connect4_env
) -> tuple[PolicyFn, Callable[[], None]]:
    """The greedy policy ``policy_id`` from a trainer checkpoint, and a function that releases it.

    Raises:
        CheckpointError: the path is not a checkpoint of the trainer, or its policy (for a fixed
            policy: the players it was trained with) observes something else than the env of
            ``env_factory`` (a checkpoint of another game).
        ConfigError: the checkpoint has no policy ``policy_id``.
    """
    import torch

    from marl_core.errors import CheckpointError
    from marl_core.ppo import PPO

    # One observation at a time: a second torch thread only adds contention, and the CPU is as
    # good as any device (a run trained on a GPU plays on a laptop). Sampling settings of the
    # training run do not matter here, so no env runner (and no Ray) is started.
    torch.set_num_threads(1)
    saved = _saved_config(Path(checkpoint))
    _check_saved_env(saved)
    overrides: dict[str, Any] = {}
    # Saved without a name (a lambda): these games build their env and pick their players
    # themselves, so this game's env and any mapping do (a policy of another game is told apart below).
    if "env" in saved and saved["env"] is None:
        overrides["env"], overrides["env_config"] = env_factory, {}  # the saved env_config was that env's
    if "policy_mapping_fn" in saved and saved["policy_mapping_fn"] is None:
        overrides["policy_mapping_fn"] = lambda agent_id, episode, **kwargs: policy_id
    algo = PPO.from_checkpoint(str(checkpoint), num_env_runners=0, num_envs_per_env_runner=1, device="cpu",
                               **overrides)
    try:
        env = env_factory()
        expected = env.get_observation_space(env.possible_agents[0])
        players = [obs for obs, _ in algo._spaces.values()]
        if policy_id not in algo.policies and players and expected not in players:  # say the likelier cause
            raise CheckpointError(
                f"{checkpoint} has no policy {policy_id!r}, and its players observe {players[0]}, but this game's "
                f"players observe {expected}: a checkpoint of another game?"
            )
        policy = algo.get_policy_callable(policy_id, explore=False)
        # A fixed policy has no space of its own: the players of the env it was trained with do.
        trained = getattr(algo.policies[policy_id], "observation_space", None)
        observed = [trained] if trained is not None else [obs for obs, _ in algo._spaces.values()]
        if expected not in observed:
            raise CheckpointError(
                f"policy {policy_id!r} of {checkpoint} observes {observed[0]}, but this game's players observe "
                f"{expected}: a checkpoint of another game?"
            )
    except BaseException:
        algo.stop()
        raise
    return policy, algo.stop


def _saved_config(checkpoint: Path) -> dict[str, Any]:
    """The checkpoint's saved config as JSON data; ``{}`` when it cannot be read (loading then
    says what is wrong with the checkpoint itself)."""
    import json

    try:
        saved = json.loads((checkpoint / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


def _check_saved_env(config: Mapping[str, Any]) -> None:
    """Raise a :class:`CheckpointError` when the env the checkpoint trained (in its saved
    ``config``) does not import here: most likely a checkpoint of another game (whose code the
    game commands do not need)."""
    from marl_core.errors import CheckpointError
    from marl_core.ppo.config import resolve

    saved = config.get("env")
    if not isinstance(saved, str):
        return
    if saved.startswith("__main__:"):
        raise CheckpointError(
            f"it trained env {saved!r}, defined in the script that trained it, which no other process can import; "
            "load it with PPO.from_checkpoint(path, env=...)"
        )
    try:
        resolve(saved)
    except (ImportError, AttributeError, ValueError, CheckpointError) as error:
        raise CheckpointError(
            f"it trained env {saved!r}, which does not import here ({type(error).__name__}: {error}): "
            "a checkpoint of another game?"
        ) from error


# Terminal play ------------------------------------------------------------------------------


def render_board(state: Any) -> str:
    """The Connect-4 board of an OpenSpiel state, with column numbers 1-7 under it."""
    rows = [line for line in str(state).splitlines() if line.strip()]
    width = max((len(row) for row in rows), default=7)
    body = ["| " + " ".join(row) + " |" for row in rows]
    footer = "+" + "-" * (2 * width + 1) + "+"
    numbers = "  " + " ".join(str(column + 1) for column in range(width))
    return "\n".join([*body, footer, numbers])


def _ask(prompt: str, input_stream: TextIO, output: TextIO) -> str:
    output.write(prompt)
    output.flush()
    line = input_stream.readline()
    if not line:  # end of input
        output.write("\n")
        raise _Quit
    answer = line.strip().lower()
    if answer in QUIT_WORDS:
        raise _Quit
    return answer


def _ask_seat(input_stream: TextIO, output: TextIO) -> int:
    while True:
        answer = _ask("Play first (x) or second (o)? [1/2, q to quit] ", input_stream, output)
        if answer in {"1", "first", "x"}:
            return 0
        if answer in {"2", "second", "o"}:
            return 1
        output.write("Please type 1 to move first or 2 to move second.\n")


def _ask_move(mask: np.ndarray, input_stream: TextIO, output: TextIO) -> int:
    legal = [int(i) + 1 for i in np.flatnonzero(mask)]
    columns = len(mask)
    while True:
        answer = _ask(f"Your move (column 1-{columns}, q to quit): ", input_stream, output)
        if not (answer.isascii() and answer.isdigit()) or not 1 <= int(answer) <= columns:
            output.write(f"{answer!r} is not a column: type a number from 1 to {columns}.\n")
            continue
        if int(answer) not in legal:
            output.write(f"Column {answer} is full; legal columns: {' '.join(map(str, legal))}.\n")
            continue
        return int(answer) - 1


def _play_one(policy: PolicyFn, env: Any, seat: int, seed: int, input_stream: TextIO, output: TextIO) -> float:
    human = env.possible_agents[seat]
    marks = "xo"
    output.write(f"You play {marks[seat]} ({'first' if seat == 0 else 'second'}).\n")
    obs, _ = env.reset(seed=seed)
    returns = dict.fromkeys(env.possible_agents, 0.0)
    while True:
        output.write(render_board(env.state) + "\n")
        (agent_id, observation), *_ = obs.items()
        if agent_id == human:
            action = _ask_move(action_mask_of(observation), input_stream, output)
        else:
            action = int(policy(observation))
            output.write(f"The policy plays column {action + 1}.\n")
        obs, rewards, terminateds, truncateds, _ = env.step({agent_id: action})
        for rewarded, reward in rewards.items():
            returns[rewarded] = returns.get(rewarded, 0.0) + float(reward)
        if terminateds.get(ALL, False) or truncateds.get(ALL, False):
            break
    output.write(render_board(env.state) + "\n")
    mine = returns[human]
    output.write("You win!\n" if mine > 0 else "You lose.\n" if mine < 0 else "Draw.\n")
    return mine


def play_human(
    policy: PolicyFn,
    *,
    env_factory: Callable[[], Any] = make_connect4_env,
    input_stream: TextIO | None = None,
    output: TextIO | None = None,
    seat: int | None = None,
    seed: int = 0,
) -> dict[str, int]:
    """Let a person play ``policy`` game after game until they stop; return the score.

    Args:
        policy: ``fn(observation) -> action`` (the trained policy, greedy).
        env_factory: builds the two-player OpenSpiel env (default: Connect-4).
        input_stream: where the person's answers come from (default: stdin).
        output: where the board and messages go (default: stdout).
        seat: 0 to move first, 1 to move second; None asks before every game.
        seed: seed of the first game (then one more per game).

    Returns:
        ``{"won": ..., "drawn": ..., "lost": ...}`` from the person's point of view.

    Raises:
        KeyboardInterrupt: on Ctrl-C, after the score of the games finished is written.
    """
    input_stream = sys.stdin if input_stream is None else input_stream
    output = sys.stdout if output is None else output
    env = env_factory()
    score = {"won": 0, "drawn": 0, "lost": 0}
    try:
        while True:
            chosen = _ask_seat(input_stream, output) if seat is None else seat
            mine = _play_one(policy, env, chosen, seed, input_stream, output)
            score["won" if mine > 0 else "lost" if mine < 0 else "drawn"] += 1
            seed += 1
            while True:
                again = _ask("Play again? [y/n] ", input_stream, output)
                if again in {"y", "yes", "n", "no"}:
                    break
                output.write("Please answer y or n.\n")
            if again in {"n", "no"}:
                break
    except _Quit:
        pass
    except KeyboardInterrupt:  # the games finished so far still count: say them, then stop
        output.write("\n")
        _farewell(score, output)
        raise
    _farewell(score, output)
    return score


def _farewell(score: Mapping[str, int], output: TextIO) -> None:
    output.write(f"Bye. You won {score['won']}, drew {score['drawn']}, lost {score['lost']}.\n")
    output.flush()


# Command lines ------------------------------------------------------------------------------


def _opponent_arg(text: str) -> str:
    try:
        parse_opponent(text)
    except OpponentSpecError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text.strip().lower()


def eval_parser() -> argparse.ArgumentParser:
    """The argument parser of ``marl-eval``."""
    parser = argparse.ArgumentParser(
        prog="marl-eval",
        description="Play evaluation games of a Connect-4 checkpoint (half in each seat) and print "
        "win/draw/loss with 95% Wilson intervals.",
    )
    parser.add_argument("checkpoint", help="a checkpoint directory written by marl-train (e.g. runs/connect4/final)")
    parser.add_argument(
        "--opponent",
        action="append",
        type=_opponent_arg,
        help="'random' or 'mcts:N' (OpenSpiel MCTSBot, N simulations per move); repeat for several "
        "(default: random)",
    )
    parser.add_argument("--games", type=number_arg(int), default=100, help="games per opponent (default: 100)")
    parser.add_argument("--policy", default="main", help="policy id in the checkpoint (default: main)")
    parser.add_argument("--seed", type=number_arg(int, inclusive=True, why=" (seeds cannot be negative)"), default=0,
                        help="base seed of the games (default: 0)")
    return parser


def _load_or_say(prog: str, checkpoint: str, policy_id: str) -> tuple[PolicyFn, Callable[[], None]] | None:
    """:func:`load_policy`, or None after saying on stderr why the checkpoint cannot be loaded."""
    from marl_core.errors import MultiAgentEnvError

    try:
        return load_policy(checkpoint, policy_id)
    except (MultiAgentEnvError, FileNotFoundError) as error:
        print(f"{prog}: cannot load {checkpoint}: {error}", file=sys.stderr)
        if "from_checkpoint" in str(error):  # advice for loading in Python, which this command cannot follow
            print(f"{prog}: it takes no settings for the checkpoint: load it in Python, "
                  f"algo = PPO.from_checkpoint(path, name=value) with a value importable by name (defined in "
                  f"a module: not a lambda, nor in the script run), save it again with algo.save(new_path), "
                  f"and give {prog} new_path", file=sys.stderr)
        return None


@quiet_on_closed_pipe
def eval_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``marl-eval``; returns the exit status."""
    args = eval_parser().parse_args(argv)
    opponents = args.opponent or ["random"]
    try:
        loaded = _load_or_say("marl-eval", args.checkpoint, args.policy)
    except KeyboardInterrupt:  # loading imports torch and builds the policy: seconds
        return _interrupted("marl-eval")
    if loaded is None:
        return 2
    policy, release = loaded
    try:
        first = (args.games + 1) // 2  # even games move first
        print(f"{args.games} games per opponent ({first} moving first, {args.games - first} second), seed {args.seed}")
        for spec in opponents:
            match = evaluate(policy, [(spec, args.games)], seed=args.seed)[spec]
            print(match.summary(), flush=True)
    except KeyboardInterrupt:  # the opponents finished so far are printed above
        return _interrupted("marl-eval")
    finally:
        release()
    return 0


def _interrupted(prog: str) -> int:
    """Say that Ctrl-C stopped ``prog``; return its exit status (130, as the shell reports SIGINT)."""
    print(f"\n{prog}: interrupted", file=sys.stderr)
    return 130


def play_parser() -> argparse.ArgumentParser:
    """The argument parser of ``marl-play``."""
    parser = argparse.ArgumentParser(prog="marl-play", description="Play a trained policy in the terminal.")
    parser.add_argument("game", choices=sorted(GAMES), help="the game")
    parser.add_argument("checkpoint", help="a checkpoint directory written by marl-train")
    parser.add_argument("--policy", default="main", help="policy id in the checkpoint (default: main)")
    parser.add_argument(
        "--seat", choices=["first", "second"], default=None, help="your seat (default: asked before each game)"
    )
    return parser


@quiet_on_closed_pipe
def play_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``marl-play``; returns the exit status."""
    args = play_parser().parse_args(argv)
    try:
        loaded = _load_or_say("marl-play", args.checkpoint, args.policy)
    except KeyboardInterrupt:
        return _interrupted("marl-play")
    if loaded is None:
        return 2
    policy, release = loaded
    seat = None if args.seat is None else ["first", "second"].index(args.seat)
    try:
        play_human(policy, env_factory=GAMES[args.game], seat=seat)
    except KeyboardInterrupt:  # play_human has said goodbye with the score
        return 130
    finally:
        release()
    return 0

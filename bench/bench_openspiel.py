"""Per-step cost of OpenSpielEnv against a raw pyspiel loop, RLlib's OpenSpielEnv and Shimmy.

Every loop plays uniformly random legal actions, drawn the same way (``random.Random``), and
reads what an RL loop needs:

- ``raw``: pyspiel itself: apply the action, then read the acting players' observation tensors
  and legal actions; chance nodes sampled in the loop. At the end of an episode it reads
  ``state.returns()`` and every player's final observation tensor, as OpenSpiel's own
  ``rl_environment`` does in its last time step (an RL loop needs the outcome, and the env hands
  every player a final observation).
- ``ours``: ``bridges.OpenSpielEnv``; legal actions come from the ``"action_mask"``. Its resets
  read a game's opening (first chance nodes, first decision) from the env's memo once it has met
  that opening, so they call pyspiel less than ``raw`` does; steps read what ``raw`` reads.
- ``rllib``: ``ray.rllib.env.wrappers.open_spiel.OpenSpielEnv``; it gives no mask, so the loop
  asks ``env.state.legal_actions(player)``.
- ``shimmy``: ``shimmy.OpenSpielCompatibilityV0`` (a PettingZoo AEC env); mask from ``infos``.

A step is one decision: one ``step()`` call (a joint action at a simultaneous node). The loops
alternate in rounds within one process, so machine load hits all of them alike; the table shows
the median over rounds of microseconds per step and of each loop's ratio to ``raw`` in the same
round. The clock is the process's CPU time by default (``--clock cpu``): on a shared machine, wall
time (``--clock wall``) also counts the time the process waits for a core.

Run: ``python bench/bench_openspiel.py [--rounds 7] [--steps 20000] [--games connect_four ...]
[--loops raw ours ...] [--clock cpu|wall]``
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np
import pyspiel

from bridges import OpenSpielEnv
from marl_core._cli import number_arg

GAMES = ["connect_four", "tic_tac_toe", "kuhn_poker", "leduc_poker", "goofspiel"]
Loop = Callable[[int, int], int]


def _chance(state: pyspiel.State, rng: random.Random) -> None:
    while state.is_chance_node():
        draw = rng.random()
        outcomes = state.chance_outcomes()
        action = outcomes[-1][0]
        for outcome, probability in outcomes:
            draw -= probability
            if draw < 0.0:
                action = outcome
                break
        state.apply_action(action)


def raw_loop(name: str) -> Loop:
    game = pyspiel.load_game(name)
    players = range(game.num_players())

    def run(steps: int, seed: int) -> int:
        rng = random.Random(seed)
        done_steps = 0
        while done_steps < steps:
            state = game.new_initial_state()
            _chance(state, rng)
            while not state.is_terminal():
                if state.is_simultaneous_node():
                    joint = []
                    for player in players:
                        state.observation_tensor(player)
                        legal = state.legal_actions(player)
                        joint.append(legal[int(rng.random() * len(legal))])
                    state.apply_actions(joint)
                else:
                    player = state.current_player()
                    state.observation_tensor(player)
                    legal = state.legal_actions(player)
                    state.apply_action(legal[int(rng.random() * len(legal))])
                done_steps += 1
                _chance(state, rng)
            state.returns()
            for player in players:
                state.observation_tensor(player)
        return done_steps

    return run


def ours_loop(name: str) -> Loop:
    env = OpenSpielEnv(name)

    def run(steps: int, seed: int) -> int:
        rng = random.Random(seed)
        done_steps = 0
        episode = 0
        while done_steps < steps:
            obs, _ = env.reset(seed=seed if episode == 0 else None)  # seeded once, as RL loops do
            episode += 1
            done = False
            while not done:
                actions = {}
                for agent_id, observation in obs.items():
                    legal = observation["action_mask"].nonzero()[0]
                    actions[agent_id] = legal.item(int(rng.random() * len(legal)))
                obs, _, terminateds, truncateds, _ = env.step(actions)
                done_steps += 1
                done = terminateds["__all__"] or truncateds["__all__"]
        return done_steps

    return run


def rllib_loop(name: str) -> Loop:
    from ray.rllib.env.wrappers.open_spiel import OpenSpielEnv as RLlibOpenSpielEnv

    env = RLlibOpenSpielEnv(pyspiel.load_game(name))

    def run(steps: int, seed: int) -> int:
        rng = random.Random(seed)
        np.random.seed(seed)  # RLlib samples chance nodes with numpy's global RNG
        done_steps = 0
        while done_steps < steps:
            obs, _ = env.reset(seed=seed)
            done = False
            while not done:
                actions = {}
                for player in obs:
                    legal = env.state.legal_actions(player)
                    actions[player] = legal[int(rng.random() * len(legal))]
                obs, _, terminateds, _, _ = env.step(actions)
                done_steps += 1
                done = terminateds["__all__"]
        return done_steps

    return run


def shimmy_loop(name: str) -> Loop:
    from shimmy import OpenSpielCompatibilityV0

    env = OpenSpielCompatibilityV0(env=pyspiel.load_game(name))

    def run(steps: int, seed: int) -> int:
        rng = random.Random(seed)
        done_steps = 0
        episode = 0
        while done_steps < steps:
            env.reset(seed=seed if episode == 0 else None)
            episode += 1
            for _agent in env.agent_iter():
                _, _, terminated, truncated, info = env.last()
                if terminated or truncated:
                    env.step(None)
                    continue
                legal = info["action_mask"].nonzero()[0]
                before = env.game_state.move_number()
                env.step(legal.item(int(rng.random() * len(legal))))
                # One decision per joint action: at a simultaneous node Shimmy buffers the first
                # players' actions and applies them all at the last player's step.
                done_steps += env.game_state.move_number() != before
        return done_steps

    return run


LOOPS: dict[str, tuple[Callable[[str], Loop], float]] = {
    # name: (builder, share of --steps it runs per round; the slow wrappers run fewer)
    "raw": (raw_loop, 1.0),
    "ours": (ours_loop, 1.0),
    "rllib": (rllib_loop, 1.0),
    "shimmy": (shimmy_loop, 0.1),
}


CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}


def measure(
    name: str, rounds: int, steps: int, labels: list[str], clock: Callable[[], float] = time.process_time
) -> dict[str, tuple[float, float]]:
    """Median us/step and median ratio to raw, per loop, over alternating rounds."""
    loops = {label: (LOOPS[label][0](name), LOOPS[label][1]) for label in labels}  # raw first
    per_step: dict[str, list[float]] = {label: [] for label in loops}
    ratios: dict[str, list[float]] = {label: [] for label in loops}
    for loop, share in loops.values():  # warm-up
        loop(max(100, int(steps * share) // 10), 0)
    for index in range(rounds):
        this_round = {}
        for label, (loop, share) in loops.items():
            start = clock()
            done = loop(max(100, int(steps * share)), index + 1)
            this_round[label] = (clock() - start) / done * 1e6
        for label, value in this_round.items():
            per_step[label].append(value)
            ratios[label].append(value / this_round["raw"])
    return {label: (statistics.median(per_step[label]), statistics.median(ratios[label])) for label in loops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=number_arg(int), default=7)
    parser.add_argument("--steps", type=number_arg(int), default=20_000, help="steps per loop per round (shimmy: a tenth)")
    parser.add_argument("--games", nargs="+", default=GAMES)
    parser.add_argument("--loops", nargs="+", default=list(LOOPS), choices=list(LOOPS), help="raw always runs")
    parser.add_argument("--clock", choices=list(CLOCKS), default="cpu", help="process CPU time or wall time")
    args = parser.parse_args()
    labels = ["raw", *(label for label in args.loops if label != "raw")]
    warnings.filterwarnings("ignore")  # ray and shimmy warn about their own deprecations on import
    print(
        f"us/step, {args.clock} clock (median of {args.rounds} alternating rounds; x = median ratio to raw in "
        "the same round)"
    )
    print(f"| game | {' | '.join(labels)} |")
    print(f"|---|{'---|' * len(labels)}")
    for name in args.games:
        results = measure(name, args.rounds, args.steps, labels, CLOCKS[args.clock])
        cells = [f"{us:.1f} ({ratio:.2f}x)" for us, ratio in results.values()]
        print(f"| {name} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()

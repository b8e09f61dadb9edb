"""Every registered OpenSpiel game through OpenSpielEnv, driven by the case table.

Each game's checks run in a child process (``python -m tests.bridges.test_openspiel_games ID...``)
that reports one JSON line per game, so a crash inside pyspiel (an abort, a segfault) fails that
game's case only: the parent attributes the crash to the game that had started and not finished,
and runs the remaining games in a fresh child. The selected games are split between two
children that run at once, so process start-up is paid once per batch, not once per game.

Per game: ``check_env`` reports no error; at every step of seeded random legal play the masks
equal ``state.legal_actions(player)`` and the observations equal pyspiel's own tensors or
strings; the final step gives every player a final observation; each player's reward sum equals
``state.returns()``; and the same seed with the same actions gives the same history and
observations.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bridges.compat import Case
from bridges.compat.openspiel_cases import CASES

ROOT = Path(__file__).resolve().parents[2]
PLAY_SEEDS = (0, 1)
CHECK_EPISODES = 2
DEFAULT_BUDGET = 1000
CHILDREN = 2
CASE_TIMEOUT_S = 300  # a child that reports nothing for this long is killed; its game fails

RUNNABLE = [case for case in CASES if case.left_out is None]
BY_ID = {case.id: case for case in CASES}


# The checks (run in the child) ---------------------------------------------------------------


def _pyspiel_view(env: Any, player: int) -> Any:
    state = env.state
    kind = env.observation_type
    if kind.endswith("_tensor"):
        return np.asarray(getattr(state, kind)(player), np.float32).reshape(getattr(env.game, f"{kind}_shape")())
    return getattr(state, kind)(player)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and bool(np.array_equal(a, b))
    return a == b


def _play(case: Case, seed: int, failures: list[str]) -> tuple[list[int], list[Any]]:
    """One seeded episode of random legal play with step-by-step checks; the history and a trace."""
    from bridges.openspiel import OpenSpielEnv
    from marl_core.env import ALL

    env = OpenSpielEnv(case.target, **case.kwargs)
    budget = case.max_steps or DEFAULT_BUDGET
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    sums = dict.fromkeys(env.possible_agents, 0.0)
    trace: list[Any] = []
    for step in range(budget + 1):
        for agent_id, observation in obs.items():
            player = env.possible_agents.index(agent_id)
            legal = [int(a) for a in np.flatnonzero(observation["action_mask"])]
            if legal != env.state.legal_actions(player):
                failures.append(f"seed {seed} step {step}: mask of {agent_id} gives {legal}, legal_actions {env.state.legal_actions(player)}")
            if not _same(observation["observation"], _pyspiel_view(env, player)):
                failures.append(f"seed {seed} step {step}: observation of {agent_id} differs from pyspiel's {env.observation_type}")
            if not env.observation_spaces[agent_id].contains(observation):
                failures.append(f"seed {seed} step {step}: observation of {agent_id} is outside its space")
            trace.append((agent_id, observation["observation"]))
        if step == budget:
            break
        actions = {a: int(rng.choice(np.flatnonzero(o["action_mask"]))) for a, o in obs.items()}
        obs, rewards, terminateds, _, _ = env.step(actions)
        for agent_id, reward in rewards.items():
            sums[agent_id] += reward
        if terminateds[ALL]:
            if sorted(obs) != sorted(env.possible_agents) or not all(terminateds[a] for a in env.possible_agents):
                failures.append(f"seed {seed}: final step gives observations {sorted(obs)}, terminateds {terminateds}")
            if any(o["action_mask"].any() for o in obs.values()):
                failures.append(f"seed {seed}: a final observation has a non-zero mask")
            break
    returns = dict(zip(env.possible_agents, env.state.returns(), strict=True))
    if any(abs(sums[a] - returns[a]) > 1e-6 * max(1.0, abs(returns[a])) for a in sums):
        failures.append(f"seed {seed}: reward sums {sums} but state.returns() {returns}")
    return env.state.history(), trace


def check_case(case: Case) -> list[str]:
    """Every check of one game; the list of failures (empty: the game passes)."""
    from bridges.openspiel import OpenSpielEnv
    from marl_core.conformance import check_env

    failures: list[str] = []
    report = check_env(
        lambda: OpenSpielEnv(case.target, **case.kwargs),
        seed=0,
        episodes=CHECK_EPISODES,
        max_steps=case.max_steps or DEFAULT_BUDGET,
    )
    if not report.ok:
        failures.append(f"check_env: {report}")
    for seed in PLAY_SEEDS:
        history, trace = _play(case, seed, failures)
        again, trace_again = _play(case, seed, failures)
        if history != again or len(trace) != len(trace_again):
            failures.append(f"seed {seed}: histories differ between two runs: {history[:20]} vs {again[:20]}")
        elif not all(a[0] == b[0] and _same(a[1], b[1]) for a, b in zip(trace, trace_again, strict=True)):
            failures.append(f"seed {seed}: observations differ between two runs with the same seed")
    return failures


def main(case_ids: list[str]) -> int:
    """Child entry: check each game, one JSON line when it starts and one when it ends."""
    for case_id in case_ids:
        print(json.dumps({"case": case_id, "event": "start"}), flush=True)
        try:
            failures = check_case(BY_ID[case_id])
        except Exception as error:  # any exception fails this game, the next one still runs
            failures = [f"{type(error).__name__}: {error}"]
        print(json.dumps({"case": case_id, "event": "end", "failures": failures}), flush=True)
    return 0


# The parent: batches of games in children, crashes attributed to their game ---------------------


CHILD = [sys.executable, "-m", "tests.bridges.test_openspiel_games"]


def _run_child(case_ids: list[str], command: list[str]) -> Iterator[dict[str, Any]]:
    """Run one child over ``case_ids``; yield its JSON records, then one for a crash if any."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    stderr_lines: list[str] = []
    started = None
    with subprocess.Popen(
        [*command, *case_ids], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        reader = threading.Thread(target=lambda: stderr_lines.extend(process.stderr), daemon=True)
        reader.start()
        timer = threading.Timer(CASE_TIMEOUT_S, process.kill)
        timer.start()
        try:
            for line in process.stdout:
                timer.cancel()
                timer = threading.Timer(CASE_TIMEOUT_S, process.kill)
                timer.start()
                record = json.loads(line)
                started = record["case"] if record["event"] == "start" else None
                yield record
        finally:
            timer.cancel()
            code = process.wait()
            reader.join(timeout=5)
    if started is not None:
        tail = "".join(stderr_lines[-15:])
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        yield {"case": started, "event": "end", "failures": [f"the child process died ({how}) in this game:\n{tail}"]}


def run_cases(case_ids: list[str], command: list[str] = CHILD) -> dict[str, list[str]]:
    """Failures of each game, running batches in children until every game has a result."""
    results: dict[str, list[str]] = {}
    pending = list(case_ids)
    while pending:
        for record in _run_child(pending, command):
            if record["event"] == "end":
                results[record["case"]] = record["failures"]
        remaining = [case_id for case_id in pending if case_id not in results]
        if remaining == pending:  # the child died before starting anything
            results[pending[0]] = ["the child process died before checking this game"]
            remaining = pending[1:]
        pending = remaining
    return results


@pytest.fixture(scope="module")
def results(request: pytest.FixtureRequest) -> dict[str, list[str]]:
    """Results of every game selected in this session, computed in one pass of children."""
    selected = []
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if getattr(item, "module", None) is sys.modules[__name__] and "case" in params:
            selected.append(params["case"].id)
    # Two children at a time (the machine has two cores); each batch interleaves slow and fast games.
    batches = [selected[index::CHILDREN] for index in range(CHILDREN)]
    with concurrent.futures.ThreadPoolExecutor(CHILDREN) as pool:
        merged: dict[str, list[str]] = {}
        for part in pool.map(run_cases, [batch for batch in batches if batch]):
            merged.update(part)
    return merged


def _param(case: Case) -> Any:
    return pytest.param(case, id=case.id, marks=[pytest.mark.slow] if case.slow else [])


@pytest.mark.parametrize("case", [_param(case) for case in RUNNABLE])
def test_game(case: Case, results: dict[str, list[str]]) -> None:
    failures = results[case.id]
    assert not failures, f"{case.id}:\n" + "\n".join(failures[:10])


def test_table_has_a_row_for_every_registered_game() -> None:
    # In a fresh interpreter: games exported by to_openspiel in this one are registered too.
    code = "import pyspiel; print(' '.join(pyspiel.registered_names()))"
    names = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert sorted(case.target.partition("(")[0] for case in CASES) == sorted(names)  # games with their parameters
    assert len({case.id for case in CASES}) == len(CASES)


def test_every_left_out_game_is_refused_or_does_not_load() -> None:
    from bridges.openspiel import OpenSpielEnv
    from marl_core.errors import UnsupportedEnvError

    for case in CASES:
        if case.left_out is not None:
            with pytest.raises(UnsupportedEnvError):
                OpenSpielEnv(case.target)


def test_fast_tier_covers_simultaneous_stochastic_and_string_games() -> None:
    import pyspiel

    fast = [pyspiel.load_game(case.target).get_type() for case in RUNNABLE if not case.slow]
    assert any(t.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS for t in fast)
    assert any(t.chance_mode == pyspiel.GameType.ChanceMode.EXPLICIT_STOCHASTIC for t in fast)
    assert any(not t.provides_observation_tensor and not t.provides_information_state_tensor for t in fast)


def test_a_crash_is_attributed_to_its_game(tmp_path: Path) -> None:
    """A child killed by a signal fails the game it was in; the games after it still run."""
    script = tmp_path / "child.py"
    script.write_text(
        "import json, os, sys\n"
        "for case in sys.argv[1:]:\n"
        "    print(json.dumps({'case': case, 'event': 'start'}), flush=True)\n"
        "    if case == 'crashes':\n"
        "        os.abort()\n"
        "    failures = ['wrong'] if case == 'fails' else []\n"
        "    print(json.dumps({'case': case, 'event': 'end', 'failures': failures}), flush=True)\n"
    )
    results = run_cases(["passes", "crashes", "fails", "passes too"], command=[sys.executable, str(script)])
    assert results["passes"] == [] and results["passes too"] == []
    assert results["fails"] == ["wrong"]
    assert results["crashes"][0].startswith("the child process died (signal 6) in this game")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Correct but tricky envs pass with no finding; the seeds' TicTacToe is caught by determinism.seed."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from examples.rock_paper_scissors import RockPaperScissors
from examples.tic_tac_toe import TicTacToe
from marl_core import MultiAgentEnv, make_multi_agent
from marl_core.conformance import check_env
from tests.fixtures import seed_envs
from tests.fixtures.broken_envs import Duel
from tests.fixtures.envs import CORRECT_ENVS, ManyAgentsEnv


@pytest.mark.parametrize("name", sorted(CORRECT_ENVS))
def test_contract_fixture_envs_have_no_finding(name: str) -> None:
    report = check_env(CORRECT_ENVS[name])
    assert report.findings == (), str(report)
    assert report.ok
    assert report.steps > 0


def test_seeds_rock_paper_scissors_with_empty_truncateds_and_infos_passes() -> None:
    report = check_env(seed_envs.RockPaperScissors)
    assert report.findings == (), str(report)


def test_seeds_tic_tac_toe_is_flagged_for_its_global_rng_start_player() -> None:
    report = check_env(seed_envs.TicTacToe)
    assert report.rules == {"determinism.seed"}, str(report)
    assert any("numpy's global RNG" in f.message and "reset(seed=0)" in f.message for f in report.findings)


def test_our_seeded_examples_pass() -> None:
    for env in (RockPaperScissors, TicTacToe, RockPaperScissors(), TicTacToe()):
        assert check_env(env).findings == ()


def test_base_of_the_broken_envs_passes() -> None:
    assert check_env(Duel).findings == ()


def test_gymnasium_copies_ending_at_different_steps_pass() -> None:
    multi_cart_pole = make_multi_agent("CartPole-v1")
    report = check_env(lambda: multi_cart_pole({"num_agents": 3}), episodes=2)
    assert report.findings == (), str(report)


def test_one_hundred_agents_through_space_overrides() -> None:
    report = check_env(lambda: ManyAgentsEnv({"num_agents": 100, "length": 4}), episodes=2)
    assert report.findings == (), str(report)
    assert report.steps == 3 * 2 * 4  # explored, replayed on the same instance, replayed on a fresh one


def test_other_seeds_give_other_trajectories_and_still_pass() -> None:
    assert check_env(TicTacToe, seed=12345, episodes=3).findings == ()


class _GraphActions(MultiAgentEnv):
    """Two agents act with Graph actions (namedtuples) for 3 steps; the actions are only read."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["a", "b"]
        self.observation_spaces = dict.fromkeys(self.agents, spaces.Discrete(4))
        graph = spaces.Graph(node_space=spaces.Box(-1.0, 1.0, (2,), np.float32), edge_space=spaces.Discrete(3))
        self.action_spaces = dict.fromkeys(self.agents, graph)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return dict.fromkeys(self.agents, 0), {}

    def step(self, action_dict):
        self.t += 1
        rewards = {a: float(len(action.nodes)) for a, action in action_dict.items()}  # a namedtuple's field
        done = self.t >= 3
        return dict.fromkeys(self.agents, self.t), rewards, {"__all__": done}, {"__all__": False}, {}


def test_namedtuple_actions_reach_the_env_as_themselves_and_are_not_reported_as_changed() -> None:
    report = check_env(_GraphActions, skip=["spaces.obs-contains"])
    assert "actions.unchanged" not in report.rules and "api.step" not in report.rules, str(report)


class _Move(tuple):
    """An action type: a tuple of a direction array and a speed."""


class _MoveSpace(spaces.Space):
    """A space of :class:`_Move` actions: a direction in [-1, 1]^2 and a speed of 0, 1 or 2."""

    def sample(self, mask=None, probability=None):
        return _Move((self.np_random.uniform(-1, 1, 2).astype(np.float32), int(self.np_random.integers(3))))

    def contains(self, x) -> bool:
        return isinstance(x, _Move) and len(x) == 2 and x[0].shape == (2,) and x[1] in (0, 1, 2)


class _MoveActions(_GraphActions):
    """:class:`_GraphActions` whose actions are :class:`_Move` tuples holding an array; only read."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(config)
        self.action_spaces = dict.fromkeys(self.agents, _MoveSpace())

    def step(self, action_dict):
        self.t += 1
        rewards = {a: float(action[1]) for a, action in action_dict.items()}
        done = self.t >= 3
        return dict.fromkeys(self.agents, self.t), rewards, {"__all__": done}, {"__all__": False}, {}


def test_tuple_subclass_actions_holding_arrays_are_not_reported_as_changed() -> None:
    # The checker's copy of such an action was a plain tuple: actions.unchanged warned of every action.
    report = check_env(_MoveActions)
    assert "actions.unchanged" not in report.rules, str(report)

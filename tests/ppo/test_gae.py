from __future__ import annotations

import numpy as np
import pytest

from marl_core.ppo.gae import compute_gae


def test_terminated_trajectory_matches_hand_computed_values():
    # gamma 0.9, lambda 0.8; rewards (1, 0, 2), values (0.5, 0.4, 0.3), terminal end.
    # deltas: d2 = 2 - 0.3 = 1.7; d1 = 0 + 0.9*0.3 - 0.4 = -0.13; d0 = 1 + 0.9*0.4 - 0.5 = 0.86
    # A2 = 1.7; A1 = -0.13 + 0.72*1.7 = 1.094; A0 = 0.86 + 0.72*1.094 = 1.64768
    adv, ret = compute_gae(np.array([1.0, 0.0, 2.0]), np.array([0.5, 0.4, 0.3]), last_value=99.0,
                           terminated=True, gamma=0.9, lambda_=0.8)
    np.testing.assert_allclose(adv, [1.64768, 1.094, 1.7], rtol=1e-6)
    np.testing.assert_allclose(ret, [2.14768, 1.494, 2.0], rtol=1e-6)


def test_truncated_trajectory_bootstraps_with_the_last_value():
    # One step, reward 1, V(s0) = 0.5, V(final obs) = 2: delta = 1 + 0.9*2 - 0.5 = 2.3
    adv, ret = compute_gae(np.array([1.0]), np.array([0.5]), last_value=2.0, terminated=False,
                           gamma=0.9, lambda_=0.95)
    assert adv.tolist() == pytest.approx([2.3])
    assert ret.tolist() == pytest.approx([2.8])


def test_lambda_one_gives_discounted_returns_minus_values():
    rewards = np.array([1.0, 2.0, 3.0, 4.0])
    values = np.array([0.1, 0.2, 0.3, 0.4])
    _, ret = compute_gae(rewards, values, last_value=10.0, terminated=False, gamma=0.5, lambda_=1.0)
    expected = [1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 4 + 0.0625 * 10, 2 + 0.5 * 3 + 0.25 * 4 + 0.125 * 10,
                3 + 0.5 * 4 + 0.25 * 10, 4 + 0.5 * 10]
    np.testing.assert_allclose(ret, expected, rtol=1e-6)


def test_lambda_zero_is_one_step_td():
    adv, _ = compute_gae(np.array([1.0, 1.0]), np.array([0.5, 0.25]), last_value=1.0, terminated=False,
                         gamma=1.0, lambda_=0.0)
    np.testing.assert_allclose(adv, [1 + 0.25 - 0.5, 1 + 1.0 - 0.25])

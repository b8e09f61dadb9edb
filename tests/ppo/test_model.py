from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from marl_core.errors import SpaceError
from marl_core.ppo.actions import ActionLayout
from marl_core.ppo.batching import stack_obs
from marl_core.ppo.config import DEFAULT_MODEL
from marl_core.ppo.model import TorchPolicy
from marl_core.spaces import masked_space

BOX = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def _policy(obs_space, act_space, **model):
    torch.manual_seed(0)
    return TorchPolicy(obs_space, act_space, {**DEFAULT_MODEL, **model})


def test_masked_actions_are_never_sampled():
    policy = _policy(masked_space(BOX, 5), gym.spaces.Discrete(5))
    rng = np.random.default_rng(0)
    masks = (rng.random((4000, 5)) < 0.3).astype(np.int8)
    masks[np.arange(4000), rng.integers(0, 5, 4000)] = 1  # at least one legal action each
    obs = {"observation": rng.uniform(-1, 1, (4000, 4)).astype(np.float32), "action_mask": masks}
    # Make the masked logits the largest ones: sampling must still never pick them.
    with torch.no_grad():
        policy.module.pi_head.bias.copy_(torch.tensor([5.0, 5.0, 5.0, 5.0, 5.0]))
    rows, logp, _ = policy.act(obs, explore=True, rng=np.random.default_rng(1))
    chosen = rows[:, 0].astype(int)
    assert masks[np.arange(4000), chosen].all()
    assert np.isfinite(logp).all()
    greedy, _, _ = policy.act(obs, explore=False)
    assert masks[np.arange(4000), greedy[:, 0].astype(int)].all()


@pytest.mark.parametrize("legal_logit", [np.nan, -np.inf, -5e9])
@pytest.mark.parametrize("explore", [True, False])
def test_a_masked_action_is_not_drawn_even_when_legal_logits_are_below_the_masked_logit(legal_logit, explore):
    # Masked logits became -1e9: legal ones below it (or NaN, or -inf) made a masked action the choice.
    layout = ActionLayout(gym.spaces.Discrete(4))
    inputs = np.array([[0.0, legal_logit, 3.0, legal_logit]] * 200, np.float32)
    mask = np.array([[0, 1, 0, 1]] * 200, np.int8)  # the first masked: NaN scores made argmax pick it
    rows, _ = layout.sample(inputs, mask, explore=explore, rng=np.random.default_rng(0))
    assert set(rows[:, 0].astype(int).tolist()) <= {1, 3}


def test_masked_multidiscrete_respects_each_dimension():
    space = gym.spaces.MultiDiscrete([3, 2])
    policy = _policy(masked_space(BOX, 5), space)
    mask = np.array([[0, 1, 0, 1, 0]] * 500, np.int8)  # dim 0: only 1; dim 1: only 0
    obs = {"observation": np.zeros((500, 4), np.float32), "action_mask": mask}
    rows, _, _ = policy.act(obs, explore=True, rng=np.random.default_rng(0))
    actions = policy.layout.to_env(rows)
    assert all(a.tolist() == [1, 0] for a in actions)


def test_box_actions_are_clipped_for_the_env_and_log_probs_are_consistent():
    space = gym.spaces.Box(-0.1, 0.1, (2,), np.float32)
    policy = _policy(BOX, space)
    obs = np.zeros((256, 4), np.float32)
    rows, logp, _ = policy.act(obs, explore=True, rng=np.random.default_rng(0))
    assert np.abs(rows).max() > 0.1  # the Gaussian samples outside the bounds...
    actions = policy.layout.to_env(rows)
    assert all(space.contains(a) for a in actions)  # ...but the env receives clipped actions
    again, _, _ = policy.evaluate(torch.as_tensor(obs), torch.as_tensor(rows))
    np.testing.assert_allclose(again.detach().numpy(), logp, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(), (2, 3)])
def test_box_actions_reach_the_env_as_arrays_our_checks_accept(shape):
    # A shape-() Box's actions came out as numpy scalars, which check_action (grouping, the
    # Gymnasium bridge) refuses: "a float32 where the space needs a numpy array".
    from marl_core.spaces import why_action_not_contained

    space = gym.spaces.Box(-1, 1, shape, np.float32)
    policy = _policy(BOX, space)
    rows, _, _ = policy.act(np.zeros((8, 4), np.float32), explore=True, rng=np.random.default_rng(0))
    for action in policy.layout.to_env(rows):
        assert type(action) is np.ndarray and action.shape == shape and action.dtype == np.float32
        assert why_action_not_contained(space, action) is None


def test_box_actions_take_their_std_from_the_observation_without_free_log_std():
    space = gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)])
    obs = torch.as_tensor(np.random.default_rng(0).uniform(-1, 1, (2, 4)).astype(np.float32))
    free = _policy(BOX, space)
    assert free.module.log_std is not None and free.module.log_std.shape == (2,)
    inputs, _ = free.module(obs)  # [3 logits, 2 means, 2 log stds]
    torch.testing.assert_close(inputs[0, 5:], inputs[1, 5:])  # one log std for every observation
    tied = _policy(BOX, space, free_log_std=False)
    assert tied.module.log_std is None and tied.module.pi_head.out_features == 3 + 2 + 2
    with torch.no_grad():
        tied.module.pi_head.weight.mul_(100.0)
    inputs, _ = tied.module(obs)
    assert not torch.allclose(inputs[0, 5:], inputs[1, 5:])  # the actor outputs it
    rows = torch.as_tensor(tied.act(obs.numpy(), explore=True, rng=np.random.default_rng(0))[0])
    logp, _, _ = tied.evaluate(obs, rows)
    assert torch.isfinite(logp).all()


def test_a_mask_beside_other_keys_than_observation_is_refused_by_name():
    space = gym.spaces.Dict({"pos": BOX, "action_mask": gym.spaces.Box(0, 1, (4,), np.int8)})
    with pytest.raises(SpaceError, match=r"must be the canonical Dict of 'observation' and 'action_mask'.*keys \['action_mask', 'pos'\]"):
        _policy(space, gym.spaces.Discrete(4))


def test_tuple_actions_of_grouped_agents():
    space = gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,), np.float32)])
    policy = _policy(gym.spaces.Tuple([BOX, gym.spaces.Discrete(4)]), space)
    obs = stack_obs(policy.observation_space, [(np.zeros(4, np.float32), 2), (np.ones(4, np.float32), 3)])
    rows, logp, values = policy.act(obs)
    assert rows.shape == (2, 3) and logp.shape == (2,) and values.shape == (2,)
    for row, action in zip(rows, policy.layout.to_env(rows), strict=True):
        assert space.contains(action)
        assert policy.layout.from_env(action)[0] == row[0]


def test_images_use_a_cnn_and_vectors_an_mlp():
    image = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
    policy = _policy(image, gym.spaces.Discrete(3))
    assert policy.module.encoder.cnn is not None
    obs = np.random.default_rng(0).integers(0, 256, (2, 84, 84, 3), dtype=np.uint8)
    rows, _, _ = policy.act(obs)
    assert rows.shape == (2, 1)
    assert _policy(BOX, gym.spaces.Discrete(3)).module.encoder.cnn is None


@pytest.mark.parametrize(
    ("shape", "match"),
    [((7, 7, 3), r"conv_filters \[\[32, 8, 4\], \[64, 4, 2\], \[64, 3, 1\]\] do not fit it: layer 0's kernel is "
                 r"8x8 and its input 7x7\. Pass model=\{'conv_filters': \[\.\.\.\]\} for 7x7 images, or observe a float Box"),
     ((4, 84, 84), r"layer 0's kernel is 8x8 and its input 4x84\. .*this one looks channels-first; transpose it"),
     ((35, 35, 1), r"layer 2's kernel is 3x3 and its input 2x2")],
)
def test_images_the_default_convs_do_not_fit_are_refused_with_what_to_do(shape, match):
    # They failed inside torch: "Kernel size can't be greater than actual input size".
    with pytest.raises(SpaceError, match=match):
        TorchPolicy(gym.spaces.Box(0, 255, shape, np.uint8), gym.spaces.Discrete(3), dict(DEFAULT_MODEL))
    small = {**DEFAULT_MODEL, "conv_filters": [[16, 3, 1]]}
    TorchPolicy(gym.spaces.Box(0, 255, (7, 7, 3), np.uint8), gym.spaces.Discrete(3), small)  # fits


def test_dict_and_discrete_observations_are_encoded():
    space = gym.spaces.Dict({"pos": BOX, "mode": gym.spaces.Discrete(3), "grid": gym.spaces.MultiDiscrete([2, 5])})
    policy = _policy(space, gym.spaces.Discrete(2))
    assert policy.module.encoder.out_size == 4 + 3 + 7
    obs = stack_obs(space, [space.sample() for _ in range(3)])
    assert policy.act(obs)[0].shape == (3, 1)


def test_dict_observations_are_read_by_key_not_by_order():
    space = gym.spaces.Dict({"a": BOX, "b": gym.spaces.Discrete(3)})  # gymnasium sorts the keys
    policy = _policy(space, gym.spaces.Discrete(2))
    rows = [space.sample() for _ in range(4)]
    in_order = {"a": np.stack([r["a"] for r in rows]), "b": np.array([r["b"] for r in rows])}
    reversed_keys = {"b": in_order["b"], "a": in_order["a"]}  # an env may build its dicts this way
    torch.testing.assert_close(policy.value(in_order), policy.value(reversed_keys))


def test_custom_module_factory():
    class Linear(torch.nn.Module):
        def __init__(self, obs_space, act_space, config):
            super().__init__()
            self.layer = torch.nn.Linear(4, act_space.n + 1)

        def forward(self, obs):
            out = self.layer(obs)
            return out[:, :-1], out[:, -1]

    policy = _policy(BOX, gym.spaces.Discrete(3), module=Linear)
    assert isinstance(policy.module, Linear)
    rows, _, _ = policy.act(np.zeros((5, 4), np.float32))
    assert rows.shape == (5, 1)


STRUCTURED_ACTIONS = {
    "multibinary": gym.spaces.MultiBinary([2, 3]),
    "int-box": gym.spaces.Box(np.array([-2, 0]), np.array([1, 255]), (2,), np.int64),
    "uint8-box-scalar": gym.spaces.Box(3, 9, (), np.uint8),
    "bool-box": gym.spaces.Box(0, 1, (3,), np.bool_),
    "int8-box-full-range": gym.spaces.Box(-128, 127, (2,), np.int8),
    "uint64-box-high": gym.spaces.Box(np.uint64(2**63), np.uint64(2**63 + 3), (2,), np.uint64),
    "dict": gym.spaces.Dict({"move": gym.spaces.Discrete(3, start=1), "bits": gym.spaces.MultiBinary(2),
                             "force": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                             "pair": gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Box(0, 4, (1,), np.int32)])}),
}


@pytest.mark.parametrize("name", list(STRUCTURED_ACTIONS))
def test_multibinary_integer_box_and_dict_actions_reach_the_env_in_their_space(name):
    # They were refused ("no action distribution"); RLlib takes Dict, not MultiBinary or integer Box.
    from marl_core.spaces import check_action

    space = STRUCTURED_ACTIONS[name]
    policy = _policy(BOX, space)
    obs = np.random.default_rng(0).uniform(-1, 1, (300, 4)).astype(np.float32)
    rows, logp, _ = policy.act(obs, explore=True, rng=np.random.default_rng(1))
    actions = policy.layout.to_env(rows)
    for row, action in zip(rows, actions, strict=True):
        check_action("a", space, action)  # type, dtype and shape as the env's own check wants them
        assert space.contains(action)
        if name != "dict":  # the float Box inside is clipped on the way out
            np.testing.assert_array_equal(policy.layout.from_env(action), row)
    again, _, _ = policy.evaluate(torch.as_tensor(obs), torch.as_tensor(rows))
    np.testing.assert_allclose(again.detach().numpy(), logp, rtol=1e-5, atol=1e-5)
    # Every value of every categorical entry is drawn: the whole range reaches the env.
    assert len({policy.layout.from_env(action).tobytes() for action in actions}) > 1
    if name == "int-box":
        values = np.array(actions)
        assert set(values[:, 0].tolist()) == {-2, -1, 0, 1} and values[:, 1].min() >= 0 and values[:, 1].max() <= 255


def test_dict_actions_follow_the_spaces_key_order_not_the_actions():
    space = STRUCTURED_ACTIONS["dict"]
    layout = ActionLayout(space)
    action = {"pair": (1, np.array([3], np.int32)), "force": np.array([0.5, -0.5], np.float32),
              "bits": np.array([1, 0], np.int8), "move": np.int64(2)}  # another key order than the space's
    row = layout.from_env(action)
    back = layout.to_env(row[None])[0]
    assert list(back) == list(space.spaces) and space.contains(back)
    assert back["move"] == 2 and back["bits"].tolist() == [1, 0] and back["pair"][1].tolist() == [3]
    np.testing.assert_allclose(back["force"], [0.5, -0.5])


def test_normalized_actions_map_a_float_box_inside_a_dict():
    space = gym.spaces.Dict({"n": gym.spaces.Discrete(2), "x": gym.spaces.Box(0.0, 10.0, (1,), np.float32)})
    action = ActionLayout(space, normalize_actions=True).to_env(np.array([[1.0, 0.0]], np.float32))[0]
    assert action["n"] == 1 and action["x"].tolist() == [5.0]


def test_unsupported_spaces_raise_clear_errors():
    with pytest.raises(SpaceError, match=r"no action distribution for Text\("):
        ActionLayout(gym.spaces.Text(4))
    with pytest.raises(SpaceError, match=r"an integer Box action needs finite bounds in every entry.*MultiDiscrete"):
        ActionLayout(gym.spaces.Box(np.array([0, -np.inf]), np.array([3, 3]), (2,), np.int64))
    with pytest.raises(SpaceError, match=r"an entry takes 100001 values, more than the 65536"):
        ActionLayout(gym.spaces.Box(0, 100_000, (2,), np.int64))
    # The widest bounds: high - low + 1 overflowed int64, to 0 or a negative size, and numpy or
    # torch failed while sampling or building the model.
    widest = np.iinfo(np.int64)
    for space, values in [(gym.spaces.Box(widest.min, widest.max, (2,), np.int64), 2**64),
                          (gym.spaces.Box(0, widest.max, (2,), np.int64), 2**63),
                          (gym.spaces.Box(0, 2**64 - 1, (1,), np.uint64), 2**64)]:
        with pytest.raises(SpaceError, match=f"an entry takes {values} values, more than the 65536"):
            ActionLayout(space)
    with pytest.raises(SpaceError, match=r"its entries take 5419008 values in all \(one logit each\), more than 1048576"):
        ActionLayout(gym.spaces.Box(0, 255, (84, 84, 3), np.uint8))  # an image as an action
    # Empty spaces were taken, then failed inside numpy while sampling ("need at least one array").
    empty = [gym.spaces.Tuple(()), gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Tuple(()))),
             gym.spaces.MultiDiscrete(np.zeros(0, np.int64)), gym.spaces.Box(0.0, 1.0, (0,), np.float32),
             gym.spaces.Dict({}), gym.spaces.Box(0, 3, (0,), np.int64)]
    for space in empty:
        with pytest.raises(SpaceError, match="holds no action to choose"):
            ActionLayout(space)
    with pytest.raises(SpaceError, match="action_mask of shape"):
        _policy(masked_space(BOX, 4), gym.spaces.Discrete(5))


@pytest.mark.parametrize(
    "space",
    [gym.spaces.Discrete(3, dtype=np.int32), gym.spaces.Tuple((gym.spaces.Discrete(3, start=-1, dtype=np.int8),))],
    ids=["discrete-int32", "tuple-int8"],
)
def test_discrete_actions_reach_the_env_in_the_spaces_dtype(space) -> None:
    # They were np.int64, which the env's own check (ours, gymnasium's) refuses for these spaces.
    from marl_core.spaces import check_action

    rows = np.array([[0.0], [2.0]], np.float32)
    for action in ActionLayout(space).to_env(rows):
        check_action("a", space, action)
        assert space.contains(action)


def test_normalized_box_actions_map_minus_one_to_one_onto_the_bounds():
    wide = gym.spaces.Box(np.array([0.0, -10.0], np.float32), np.array([100.0, 10.0], np.float32))
    layout = ActionLayout(wide, normalize_actions=True)
    rows = np.array([[-1.0, 0.0], [0.0, 0.5], [1.0, -1.0], [3.0, -7.0]], np.float32)
    actions = layout.to_env(rows)
    np.testing.assert_allclose(actions, [[0.0, 0.0], [50.0, 5.0], [100.0, -10.0], [100.0, -10.0]])  # then clipped
    assert all(wide.contains(action) for action in actions)
    for row in rows[:3]:
        np.testing.assert_allclose(layout.from_env(layout.to_env(row[None])[0]), row, atol=1e-6)
    # Without normalization, the rows are the env's units (clipped); a Box with an unbounded
    # entry, an integer Box, and Discrete slots are never mapped (RLlib's rule).
    np.testing.assert_allclose(ActionLayout(wide).to_env(rows[1:2])[0], [0.0, 0.5])
    half = gym.spaces.Box(np.array([0.0, -np.inf], np.float32), np.array([100.0, np.inf], np.float32))
    np.testing.assert_allclose(ActionLayout(half, normalize_actions=True).to_env(rows[1:2])[0], [0.0, 0.5])
    grouped = gym.spaces.Tuple([gym.spaces.Discrete(3), wide])
    action = ActionLayout(grouped, normalize_actions=True).to_env(np.array([[2.0, 0.0, 0.0]], np.float32))[0]
    assert action[0] == 2 and np.allclose(action[1], [50.0, 0.0])
    # A pickled or deep-copied layout still maps (its Boxes are new objects; it lost the mapping).
    for copied in (pickle.loads(pickle.dumps(ActionLayout(grouped, normalize_actions=True))),
                   copy.deepcopy(ActionLayout(grouped, normalize_actions=True))):
        action = copied.to_env(np.array([[2.0, 0.0, 0.0]], np.float32))[0]
        assert action[0] == 2 and np.allclose(action[1], [50.0, 0.0])
    # The widest bounds of float32 and float64: the mapping does not overflow (to inf, or NaN at -1).
    for dtype in (np.float32, np.float64):
        widest = gym.spaces.Box(np.finfo(dtype).min, np.finfo(dtype).max, (1,), dtype)
        layout = ActionLayout(widest, normalize_actions=True)
        ends = layout.to_env(np.array([[-1.0], [0.0], [1.0], [-2.5], [7.0]], np.float32))  # beyond ±1: clipped
        assert [end[0] for end in ends] == [np.finfo(dtype).min, 0.0, np.finfo(dtype).max, np.finfo(dtype).min,
                                            np.finfo(dtype).max]
        ends = ends[:3]
        np.testing.assert_allclose([layout.from_env(end)[0] for end in ends], [-1.0, 0.0, 1.0])


def test_a_policy_with_normalized_actions_starts_in_the_middle_of_a_wide_box():
    wide = gym.spaces.Box(0.0, 100.0, (2,), np.float32)
    obs = np.zeros((64, 4), np.float32)
    normalized = TorchPolicy(BOX, wide, dict(DEFAULT_MODEL), normalize_actions=True)
    rows, _, _ = normalized.act(obs, explore=True, rng=np.random.default_rng(0))
    actions = np.array(normalized.layout.to_env(rows))
    # The Gaussian starts at mean 0, std 1: spread over the whole box, not piled on its lower bound.
    assert 30.0 < actions.mean() < 70.0 and (actions <= 0.0).mean() < 0.3
    plain = TorchPolicy(BOX, wide, dict(DEFAULT_MODEL))
    rows, _, _ = plain.act(obs, explore=True, rng=np.random.default_rng(0))
    assert (np.array(plain.layout.to_env(rows)) <= 0.0).mean() > 0.3


@pytest.mark.parametrize("vf_clip_param", [None, 0.5])
def test_vf_clip_param_caps_each_squared_value_error_as_rllib_does(vf_clip_param):
    # It clipped the new values around the old ones (CleanRL's), under RLlib's name.
    from marl_core.ppo.config import PPOConfig
    from marl_core.ppo.learner import Learner

    policy = _policy(BOX, gym.spaces.Discrete(3))
    params = PPOConfig().training(vf_clip_param=vf_clip_param, num_epochs=1, minibatch_size=64).for_policy(None)
    learner = Learner(policy, params)
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (64, 4)).astype(np.float32)
    rows, logp, values = policy.act(obs, explore=True, rng=rng)
    returns = values + np.linspace(-3.0, 3.0, 64, dtype=np.float32)  # errors from 0 to 9 when squared
    batch = {"obs": obs, "actions": rows, "logp": logp, "values": values, "returns": returns,
             "advantages": rng.standard_normal(64).astype(np.float32)}
    errors = (values - returns) ** 2
    expected = 0.5 * (errors if vf_clip_param is None else np.minimum(errors, vf_clip_param)).mean()
    metrics = learner.update(batch, np.random.default_rng(1))
    assert metrics["vf_loss"] == pytest.approx(float(expected), rel=1e-4)

from __future__ import annotations

import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch

from marl_core.errors import SpaceError
from marl_core.ppo.batching import stack_obs
from marl_core.ppo.config import DEFAULT_MODEL
from marl_core.ppo.model import TorchPolicy, to_tensor
from marl_core.ppo.numpy_policy import NumpyPolicy
from marl_core.spaces import masked_space

BOX = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (20, 16, 3), np.uint8)
SMALL_CNN = {"conv_filters": [[4, 3, 2], [8, 3, 1]], "conv_hidden": 32}

CASES = {
    "box-discrete": (BOX, gym.spaces.Discrete(5), {}),
    "masked": (masked_space(BOX, 5), gym.spaces.Discrete(5), {}),
    "masked-multidiscrete": (masked_space(BOX, 5), gym.spaces.MultiDiscrete([3, 2]), {"activation": "relu"}),
    "box-gaussian": (BOX, gym.spaces.Box(-2.0, 2.0, (3,), np.float32), {"vf_share_layers": True}),
    "image": (IMAGE, gym.spaces.Discrete(3), SMALL_CNN),
    "box-gaussian-tied-std": (BOX, gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)]),
                              {"free_log_std": False}),
    "grouped-masked": (
        gym.spaces.Tuple([masked_space(BOX, 3), gym.spaces.Discrete(4), masked_space(BOX, 5)]),
        gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gym.spaces.Discrete(5)]),
        {},
    ),
    "group-of-groups-masked": (
        gym.spaces.Tuple([gym.spaces.Tuple([masked_space(BOX, 4), gym.spaces.Discrete(3)]), BOX]),
        gym.spaces.Tuple([gym.spaces.Tuple([gym.spaces.Discrete(4), gym.spaces.MultiDiscrete([2, 2])]),
                          gym.spaces.Box(-1.0, 1.0, (2,), np.float32)]),
        {},
    ),
    "structured-actions": (
        BOX,
        gym.spaces.Dict({"bits": gym.spaces.MultiBinary([2, 2]), "level": gym.spaces.Box(-2, 5, (3,), np.int16),
                         "push": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "move": gym.spaces.Discrete(4)}),
        {},
    ),
    "nested": (
        gym.spaces.Dict({"img": IMAGE, "pos": BOX, "mode": gym.spaces.Discrete(3, start=1),
                         "grid": gym.spaces.MultiDiscrete([2, 4]), "pair": gym.spaces.Tuple([BOX, gym.spaces.MultiBinary(3)])}),
        gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)]),
        {**SMALL_CNN, "activation": "silu", "hiddens": [32, 16, 8]},
    ),
}


def _pair(name: str) -> tuple[TorchPolicy, NumpyPolicy, object]:
    obs_space, act_space, overrides = CASES[name]
    config = {**DEFAULT_MODEL, **overrides}
    torch.manual_seed(0)
    torch_policy = TorchPolicy(obs_space, act_space, config)
    with torch.no_grad():  # random, not tiny, output layers: the comparison must see real numbers
        for head in (torch_policy.module.pi_head, torch_policy.module.vf_head):
            head.weight.normal_(0.0, 0.5)
        if torch_policy.module.log_std is not None:
            torch_policy.module.log_std.normal_(0.0, 0.3)
    numpy_policy = NumpyPolicy(obs_space, act_space, config)
    numpy_policy.set_weights(torch_policy.get_weights())
    obs_space.seed(1)
    obs = stack_obs(obs_space, [obs_space.sample() for _ in range(64)])
    if isinstance(obs, dict) and "action_mask" in obs:  # random masks: give each sub-action one legal choice
        offset = 0
        for leaf in numpy_policy.layout.leaves:
            part = obs["action_mask"][:, offset : offset + leaf.size]
            part[~part.any(axis=1), 0] = 1
            offset += leaf.size
    return torch_policy, numpy_policy, obs


@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_forward_matches_the_torch_module(name):
    torch_policy, numpy_policy, obs = _pair(name)
    rows_t, logp_t, values_t = torch_policy.act(obs, explore=False)
    rows_n, logp_n, values_n = numpy_policy.act(obs, explore=False)
    np.testing.assert_allclose(values_n, values_t, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rows_n, rows_t, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logp_n, logp_t, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(numpy_policy.value(obs), values_t, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_sampled_actions_have_the_log_probs_the_learner_computes(name):
    torch_policy, numpy_policy, obs = _pair(name)
    rows, logp, _ = numpy_policy.act(obs, explore=True, rng=np.random.default_rng(3))
    again = numpy_policy.act(obs, explore=True, rng=np.random.default_rng(3))[0]
    np.testing.assert_array_equal(again, rows)  # the same generator state draws the same actions
    learner_logp, _, _ = torch_policy.evaluate(to_tensor(torch_policy.masks.canonical(obs)), torch.as_tensor(rows))
    np.testing.assert_allclose(learner_logp.detach().numpy(), logp, rtol=1e-4, atol=1e-4)
    for action in numpy_policy.layout.to_env(rows):
        assert CASES[name][1].contains(action)


def test_masked_actions_are_never_drawn():
    _, policy, obs = _pair("masked")
    mask = np.zeros_like(obs["action_mask"])
    mask[:, 3] = 1
    mask[::2, 0] = 1
    rows, _, _ = policy.act({**obs, "action_mask": mask}, explore=True, rng=np.random.default_rng(0))
    assert set(rows[1::2, 0].tolist()) == {3.0} and set(rows[::2, 0].tolist()) <= {0.0, 3.0}


def test_grouped_members_masks_govern_their_slots():
    torch_policy, numpy_policy, obs = _pair("grouped-masked")
    first, _, third = obs
    first["action_mask"][:] = [0, 0, 1]
    first["action_mask"][::4] = 0  # the member does not act now: its slot takes any action
    third["action_mask"][:] = [0, 1, 0, 1, 0]
    for policy in (torch_policy, numpy_policy):
        rows, logp, _ = policy.act(obs, explore=True, rng=np.random.default_rng(0))
        actions = policy.layout.to_env(rows)
        assert {int(a[0]) for i, a in enumerate(actions) if i % 4} == {2}
        assert len({int(a[0]) for a in actions[::4]}) > 1
        assert {int(a[2]) for a in actions} == {1, 3}
        assert np.isfinite(logp).all()
    canonical = numpy_policy.masks.canonical(obs)
    assert canonical["action_mask"].shape == (64, 3 + 5)  # the Box slot has no categorical leaf
    assert set(canonical) == {"observation", "action_mask"} and len(canonical["observation"]) == 3


def test_a_group_of_groups_reads_the_masks_of_its_members_members():
    torch_policy, numpy_policy, obs = _pair("group-of-groups-masked")
    (member, _), _ = obs
    member["action_mask"][:] = [0, 1, 0, 0]
    canonical = numpy_policy.masks.canonical(obs)
    assert canonical["action_mask"].shape == (64, 4 + 4)  # Discrete(4), then MultiDiscrete([2, 2]) free
    assert canonical["action_mask"][:, 4:].all()
    for policy in (torch_policy, numpy_policy):
        actions = policy.layout.to_env(policy.act(obs, explore=True, rng=np.random.default_rng(0))[0])
        assert {int(action[0][0]) for action in actions} == {1}


@pytest.mark.parametrize(
    ("slot", "slot_action", "message"),
    [
        (gym.spaces.Dict({"observation": BOX, "action_mask": gym.spaces.Box(0, 1, (3,), np.int8), "extra": BOX}),
         gym.spaces.Discrete(3), r"slot \[0\] of the grouped agent's Tuple observation: .*canonical Dict.*'extra'"),
        (masked_space(BOX, 4), gym.spaces.Discrete(3),
         r"slot \[0\] of the grouped agent's Tuple observation: action_mask of shape \(4,\) does not fit Discrete\(3\)"),
        (masked_space(BOX, 3), gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
         r"slot \[0\] of the grouped agent's Tuple observation: an action_mask needs a Discrete or MultiDiscrete"),
    ],
)
def test_a_masked_member_that_does_not_fit_is_refused_naming_its_slot(slot, slot_action, message):
    observation_space = gym.spaces.Tuple([slot, BOX])
    action_space = gym.spaces.Tuple([slot_action, gym.spaces.Discrete(2)])
    for build in (TorchPolicy, NumpyPolicy):
        with pytest.raises(SpaceError, match=message):
            build(observation_space, action_space, dict(DEFAULT_MODEL))


def test_weights_that_do_not_fit_and_custom_modules_are_refused():
    obs_space, act_space, _ = CASES["image"]
    policy = NumpyPolicy(obs_space, act_space, {**DEFAULT_MODEL, **SMALL_CNN})
    with pytest.raises(SpaceError, match="no weights yet"):
        policy.act(np.zeros((1, *IMAGE.shape), np.uint8))
    with pytest.raises(SpaceError, match=r"missing encoder\.cnn\.0\.0\.bias"):
        policy.set_weights({"pi_head.weight": np.zeros((3, 64), np.float32)})
    with pytest.raises(SpaceError, match="custom torch module"):
        NumpyPolicy(BOX, act_space, {**DEFAULT_MODEL, "module": lambda *args: None})


def test_a_runner_of_built_in_models_never_imports_torch():
    script = textwrap.dedent("""
        import sys
        from marl_core.ppo.config import DEFAULT_MODEL
        from marl_core.ppo.rollout import LearnedSpec, Sampler
        from examples.rock_paper_scissors import RockPaperScissors

        env = RockPaperScissors()
        spec = LearnedSpec(env.get_observation_space("player1"), env.get_action_space("player1"),
                           dict(DEFAULT_MODEL), 0.99, 0.95)
        sampler = Sampler(RockPaperScissors, {}, 2, seed=0)
        sampler.set_policies({"p": spec}, lambda agent_id, episode: "p", {"p"})
        probe = {"pi_body.0.weight": (64, 3), "pi_body.0.bias": (64,), "pi_body.2.weight": (64, 64),
                 "pi_body.2.bias": (64,), "vf_body.0.weight": (64, 3), "vf_body.0.bias": (64,),
                 "vf_body.2.weight": (64, 64), "vf_body.2.bias": (64,), "pi_head.weight": (3, 64),
                 "pi_head.bias": (3,), "vf_head.weight": (1, 64), "vf_head.bias": (1,)}
        import numpy as np
        rng = np.random.default_rng(0)
        sampler.set_weights({"p": {k: rng.normal(size=s).astype(np.float32) for k, s in probe.items()}})
        out = sampler.sample(40)
        assert out["env_steps"] == 40 and len(out["batches"]["p"]["actions"]) == 80
        print("torch" in sys.modules)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"

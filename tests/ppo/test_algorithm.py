from __future__ import annotations

import copy
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from examples.rock_paper_scissors import RockPaperScissors
from marl_core import MultiAgentEnv
from marl_core.errors import (
    CheckpointError,
    ConfigError,
    EnvContractError,
    EnvRunnerError,
    SpaceError,
    TrainingError,
)
from marl_core.grouping import GroupAgentsWrapper
from marl_core.ppo import PPO, PolicySpec, PPOConfig
from marl_core.ppo.presets import beat_last_move, rps_policy_mapping_fn
from marl_core.rollout import rollout
from marl_core.spaces import check_action_dict
from tests.fixtures.envs import HeterogeneousSpacesEnv, JoinLeaveEnv, ManyAgentsEnv, TicTacToe
from tests.ppo.helpers import (
    CorruptingRockPaperScissors,
    PaidAndLateEnv,
    StructuredActionsEnv,
    TwoMoveGame,
    WideBoxBandit,
)


def _rps_config(**training):
    return (
        PPOConfig()
        .environment(RockPaperScissors)
        .multi_agent(policies={"learned": None, "beat_last": beat_last_move},
                     policy_mapping_fn=rps_policy_mapping_fn, policies_to_train=["learned"])
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4)
        .training(train_batch_size=200, minibatch_size=100, num_epochs=2, **training)
    )


@pytest.mark.parametrize(("fragment", "sampled"), [("auto", 200), (5, 200), (15, 240), (200, 800)])
def test_fragments_are_the_unit_the_train_batch_is_sampled_in(fragment, sampled):
    # 4 envs: a fragment is 4 x fragment env steps, and the 200-step batch is rounded up to whole
    # fragments (an explicit fragment used to replace the batch size instead).
    config = _rps_config().env_runners(rollout_fragment_length=fragment)
    with config.build() as algo:
        assert algo.train()["num_env_steps_sampled"] == sampled


def test_an_agent_whose_spaces_its_shared_policy_cannot_take_is_named():
    # Every agent maps to default_policy, built from the first agent ("box"): the others' actions
    # used to reach their envs out of their spaces, or crash inside torch.
    config = (PPOConfig().environment(HeterogeneousSpacesEnv)
              .env_runners(num_env_runners=0, num_envs_per_env_runner=2).training(train_batch_size=40))
    with config.build() as algo, pytest.raises(SpaceError, match=(
        r"agent 'discrete' is mapped to policy 'default_policy', whose spaces are observation "
        r"Box\(-1.0, 1.0, \(3,\), float32\) and action Box\(-1.0, 1.0, \(2,\), float32\), but the agent's are "
        r"observation Discrete\(5\) and action Discrete\(3\)")):
        algo.train()


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # a float32 batch of 1e300
@pytest.mark.parametrize(("reward", "problem"), [
    (1e38, r"advantages of size 1e\+38 are too large: their squares overflow float32"),
    (1e300, r"advantages of size inf are too large: their squares overflow float32"),
])
def test_rewards_too_large_for_the_loss_stop_the_update_before_it_touches_the_weights(reward, problem):
    # Rewards this large are finite but overflow the float32 loss: the update used to go on and
    # turn every weight into NaN, and the run then saved NaN checkpoints.
    config = (PPOConfig().environment(CorruptingRockPaperScissors, env_config={"reward": reward})
              .env_runners(num_env_runners=0, num_envs_per_env_runner=2)
              .training(train_batch_size=64, minibatch_size=32, num_epochs=2))
    with config.build() as algo:
        before = algo.learners["default_policy"].policy.get_weights()
        with pytest.raises(TrainingError, match=(
                rf"PPO update of policy 'default_policy' stopped: {problem}; every policy's weights and optimizer "
                r"state are left as they were before this iteration's update\. The batch's returns reach \S+ in size: "
                r"scale the env's rewards down")):
            algo.train()
        after = algo.learners["default_policy"].policy.get_weights()
    assert before.keys() == after.keys()
    assert all(np.array_equal(before[key], after[key]) for key in before)


def _assert_same_state(expected, actual) -> None:
    if isinstance(expected, torch.Tensor):
        assert torch.equal(expected, actual)
    elif isinstance(expected, dict):
        assert expected.keys() == actual.keys()
        for key in expected:
            _assert_same_state(expected[key], actual[key])
    elif isinstance(expected, (list, tuple)):
        assert len(expected) == len(actual)
        for one, other in zip(expected, actual, strict=True):
            _assert_same_state(one, other)
    else:
        assert expected == actual


def test_a_diverging_update_is_undone_for_every_policy_and_the_model_left_in_eval_mode():
    # With lr=1e30 the first minibatches apply (weights near 1e30) before a loss turns infinite;
    # the error said the weights were left as before, but only the failing minibatch was skipped.
    config = (_rps_config(lr=1e30).multi_agent(policies={"learned": None, "other": None},
                                               policy_mapping_fn=lambda agent_id, episode: (
                                                   "learned" if agent_id == "player1" else "other"),
                                               policies_to_train=["learned", "other"])
              .training(train_batch_size=64, minibatch_size=16, num_epochs=4))
    with config.build() as algo:
        before = {p: copy.deepcopy(algo.learners[p].state_dict()) for p in ("learned", "other")}
        with pytest.raises(TrainingError, match=(
                r"PPO update of policy '(learned|other)' stopped: the loss is (inf|nan) \(policy \S+, value \S+, "
                r"entropy \S+\) at epoch \d+, minibatch \d+; every policy's weights and optimizer state are left as "
                r"they were before this iteration's update")):
            algo.train()
        for policy_id, state in before.items():
            learner = algo.learners[policy_id]
            _assert_same_state(state, learner.state_dict())  # weights and optimizer moments, exactly
            assert not learner.policy.module.training
        assert algo.iteration == 0


def test_overrides_of_a_restored_config_are_checked_too(tmp_path):
    with _rps_config().build() as algo:
        saved = algo.save(tmp_path / "checkpoint")
    with pytest.raises(ConfigError, match="gamma must be a number from 0 to 1, received 2"):
        PPO.from_checkpoint(saved, gamma=2)


def test_lossless_forms_of_settings_are_taken_in_their_fields_type():
    config = _rps_config().training(train_batch_size=200.0, num_epochs=np.int64(2), normalize_advantages=np.True_,
                                    grad_clip=float("inf"), vf_clip_param=float("inf"))
    config.resources(device=torch.device("cpu")).debugging(log_level="WARN")
    config.multi_agent(policies_to_train=("learned",))
    config.validate()
    assert (config.train_batch_size, config.num_epochs, config.normalize_advantages) == (200, 2, True)
    assert type(config.train_batch_size) is int and type(config.num_epochs) is int
    assert config.device == "cpu" and config.policies_to_train == ["learned"]
    with config.build() as algo:  # inf clip ranges: no clipping
        assert algo.train()["num_env_steps_sampled"] == 200


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"log_level": "info"}, "log_level must be a logging level"),  # logging's names are upper case
        ({"env_config": 5}, "env_config must be a dict, received 5"),
        ({"policy_mapping_fn": None}, "policy_mapping_fn must be a function"),
        ({"model": {"hiddens": 64}}, "policy 'learned': model hiddens must be a list of layer sizes"),
        ({"model": {"conv_filters": [[16, 8]]}}, "model conv_filters must be a list of [channels, kernel, stride] triples"),
        ({"model": {"fcnet_hiddens": [8]}}, "policy 'learned': model has unknown keys ['fcnet_hiddens']"),
    ],
)
def test_settings_of_the_wrong_form_are_refused_by_name(change, message):
    config = _rps_config()
    for name, value in change.items():
        setattr(config, name, value)
    with pytest.raises(ConfigError, match=re.escape(message)):
        config.build()


def test_a_checkpoint_saved_before_the_checks_still_loads(tmp_path):
    # Settings that were taken (and ignored) when it was saved must not lock it out now.
    with _rps_config().build() as algo:
        algo.train()
        saved = algo.save(tmp_path / "checkpoint")
    config = json.loads((saved / "config.json").read_text())
    config["model"]["fcnet_hiddens"] = [8]  # RLlib's name, ignored then
    config["log_level"] = "WARN"
    (saved / "config.json").write_text(json.dumps(config))
    with PPO.from_checkpoint(saved) as restored:
        assert restored.train()["training_iteration"] == 2


def _own_policy(agent_id, episode, **kwargs):
    return agent_id


def test_a_policy_of_another_box_dtype_or_bounds_still_takes_the_agents_observations():
    # Observation dtypes and bounds do not change the model; action bounds do (clipping).
    env = HeterogeneousSpacesEnv()
    box_obs = gym.spaces.Box(-5.0, 5.0, (3,), np.float64)
    spec = PolicySpec(observation_space=box_obs, action_space=env.get_action_space("box"))
    config = (PPOConfig().environment(HeterogeneousSpacesEnv)
              .multi_agent(policies={"box": spec, "discrete": None, "masked": None, "multi": None},
                           policy_mapping_fn=_own_policy)
              .env_runners(num_env_runners=0, num_envs_per_env_runner=2).training(train_batch_size=40))
    with config.build() as algo:
        assert algo.train()["num_env_steps_sampled"] == 40  # taken: it trains
    narrower = PolicySpec(observation_space=box_obs, action_space=gym.spaces.Box(-0.5, 0.5, (2,), np.float32))
    config.multi_agent(policies={"box": narrower, "discrete": None, "masked": None, "multi": None})
    with config.build() as algo, pytest.raises(SpaceError, match="agent 'box' is mapped to policy 'box'"):
        algo.train()


class _TwoBoxAgents(MultiAgentEnv):
    """Agents "box" and "other" acting at once for 5 steps, one Box space each; one policy
    (built from "box") serves both."""

    def __init__(self, obs_dtype=np.float32, act_dtype=np.float32):
        super().__init__()
        self.agents = self.possible_agents = ["box", "other"]
        self.observation_spaces = {"box": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
                                   "other": gym.spaces.Box(-1.0, 1.0, (3,), obs_dtype)}
        self.action_spaces = {"box": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                              "other": gym.spaces.Box(-1.0, 1.0, (2,), act_dtype)}
        self.t = 0

    def _obs(self):
        return {a: np.full(3, 0.5, self.observation_spaces[a].dtype) for a in self.agents}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action_dict):
        check_action_dict(self, action_dict, self.agents)
        self.t += 1
        done = self.t >= 5
        return self._obs(), dict.fromkeys(self.agents, 1.0), {"__all__": done}, {"__all__": False}, {}


@pytest.mark.parametrize(("obs_dtype", "act_dtype", "fits"), [
    (np.float16, np.float32, True),  # casts safely to the policy's float32
    (np.float64, np.float32, False),  # would be truncated
    (np.float32, np.float64, False),  # actions go out in the policy's float32
])
def test_a_shared_policy_takes_only_agents_whose_values_it_keeps(obs_dtype, act_dtype, fits):
    def factory(config):
        return _TwoBoxAgents(obs_dtype, act_dtype)

    config = PPOConfig().environment(factory).env_runners(num_env_runners=0, num_envs_per_env_runner=2).training(train_batch_size=20)
    with config.build() as algo:
        if fits:
            assert algo.train()["num_env_steps_sampled"] == 20
        else:
            with pytest.raises(SpaceError, match="agent 'other' is mapped to policy 'default_policy'"):
                algo.train()


def test_a_checkpoint_from_before_free_log_std_worked_says_how_to_load_it(tmp_path):
    config = (PPOConfig().environment(lambda config: _TwoBoxAgents())
              .env_runners(num_env_runners=0, num_envs_per_env_runner=1).training(train_batch_size=10, model={"hiddens": [8]}))
    with config.build() as algo:
        saved = algo.save(tmp_path / "checkpoint")
    data = json.loads((saved / "config.json").read_text())
    data["model"]["free_log_std"] = False  # a no-op before it was implemented: the weights have a free log std
    (saved / "config.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=re.escape("load it with model={'hiddens': [8], 'free_log_std': True}")):
        PPO.from_checkpoint(saved, env=lambda config: _TwoBoxAgents())
    with PPO.from_checkpoint(saved, env=lambda config: _TwoBoxAgents(), model={"hiddens": [8], "free_log_std": True}) as restored:
        assert restored.train()["num_env_steps_sampled"] == 10


def test_a_checkpoint_whose_model_saw_a_groups_masks_as_features_says_it_does_not_carry_over(tmp_path):
    config = (PPOConfig().environment(_grouped_masked, env_config={"length": 6})
              .multi_agent(policies={a: None for a in ("team", "box", "multi")}, policy_mapping_fn=_own_policy)
              .env_runners(num_env_runners=0).training(train_batch_size=12))
    with config.build() as algo:
        saved = algo.save(tmp_path / "checkpoint")
    original = torch.load(saved / "state.pt", weights_only=True)

    def widen(inputs: int) -> None:
        state = torch.load(saved / "state.pt", weights_only=True)
        module = state["policies"]["team"]["module"]
        for key in [k for k in original["policies"]["team"]["module"] if k.endswith("body.0.weight")]:
            weight = original["policies"]["team"]["module"][key]
            module[key] = torch.cat([weight, torch.zeros(weight.shape[0], inputs)], dim=1)
        torch.save(state, saved / "state.pt")

    widen(4)  # as built when the member's mask (4 entries) was a model input
    with pytest.raises(CheckpointError, match=r"policy 'team' do not fit .*groups with masked members.*train the policy anew"):
        PPO.from_checkpoint(saved)
    widen(3)  # some other change of the observations: the general hint
    with pytest.raises(CheckpointError, match=r"policy 'team' do not fit the model built from the config \(a different model config or spaces"):
        PPO.from_checkpoint(saved)


def test_a_config_without_an_env_round_trips_through_json():
    back = PPOConfig.from_json_dict(PPOConfig().training(lr=1e-3).to_json_dict())
    assert back.env is None and back.lr == 1e-3


def test_unnamed_fixed_policies_are_each_a_line_of_one_message(tmp_path):
    config = _rps_config().multi_agent(policies={"learned": None, "a": lambda obs: 0, "beat_last": lambda obs: 1})
    data = json.loads(json.dumps(config.to_json_dict()))
    with pytest.raises(CheckpointError) as caught:
        PPOConfig.from_json_dict(data)
    lines = str(caught.value).splitlines()
    assert lines[0] == "parts of the saved config cannot be restored:"
    assert [line[:22] for line in lines[1:]] == ["- fixed policy 'a' was", "- fixed policy 'beat_l"]


def test_model_keys_through_set_are_pointed_to_the_model_field():
    with pytest.raises(ConfigError, match=r"'model.hiddens': model keys are set through the model field, as a JSON "
                                          r"object: model='\{\"hiddens\": ...\}'"):
        PPOConfig().set("model.hiddens", "[64, 64]")
    with pytest.raises(ConfigError, match=r"unknown config section 'bogus' in 'bogus.nope'; sections: \[[^]]*\]$"):
        PPOConfig().set("bogus.nope", "1")


def test_each_field_belongs_to_one_builder_and_only_it_sets_the_field():
    from dataclasses import fields

    from marl_core.ppo.config import SECTIONS

    listed = [name for names in SECTIONS.values() for name in names]
    assert sorted(listed) == sorted(f.name for f in fields(PPOConfig))  # every field, once
    config = PPOConfig()
    with pytest.raises(ConfigError, match=r"^'training.num_env_runners': num_env_runners is in section env_runners, "
                                          r"not training \(env_runners.num_env_runners, or num_env_runners alone\)$"):
        config.set("training.num_env_runners", "2")
    with pytest.raises(ConfigError, match=r"^training\(\) does not set 'seed', debugging\(\) does$"):
        config.training(seed=3)
    with pytest.raises(ConfigError, match=r"^resources\(\) does not set 'lr', training\(\) does$"):
        config.resources(lr=0.1)
    assert (config.num_env_runners, config.seed, config.lr) == (0, 0, 3e-4)
    config.set("env_runners.num_env_runners", "2").set("seed", "3").debugging(log_level="INFO")
    assert (config.num_env_runners, config.seed, config.log_level) == (2, 3, "INFO")


def test_a_json_object_for_model_or_env_config_merges_into_what_is_there():
    # --set 'model={"hiddens": [64]}' replaced connect4's whole model dict: its tactical planes went.
    config = PPOConfig().training(model={"hiddens": [32], "activation": "relu"}).environment(env_config={"n": 2})
    config.set("model", '{"hiddens": [64]}').set("env_config", '{"max_cycles": 5}')
    assert config.model == {"hiddens": [64], "activation": "relu"}
    assert config.env_config == {"n": 2, "max_cycles": 5}
    config.set("training.lr", "0.001")
    assert config.lr == 0.001


def test_save_warns_about_what_the_running_script_defines(tmp_path):
    # Names in __main__ import in the saving process only: loading elsewhere would fail.
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        from examples.rock_paper_scissors import RockPaperScissors
        from marl_core.ppo import PPOConfig
        from marl_core.ppo.presets import beat_last_move

        class MyRPS(RockPaperScissors):
            '''The env of the training script itself.'''

        def my_map(agent_id, episode, **kwargs):
            return "learned" if agent_id == "player1" else "beat_last"

        config = (PPOConfig().environment(MyRPS).multi_agent(policies={{"learned": None, "beat_last": beat_last_move}},
                  policy_mapping_fn=my_map).env_runners(num_env_runners=0).training(train_batch_size=40))
        with config.build() as algo:
            algo.save({str(tmp_path / "ckpt")!r})
    """))
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'__main__:MyRPS' (config['env']) is defined in the script that runs (__main__)" in done.stderr
    assert "'__main__:my_map' (config['policy_mapping_fn'])" in done.stderr


def test_a_config_handed_to_ppo_directly_is_checked():
    with pytest.raises(ConfigError, match=r"gamma must be a number from 0 to 1, received 1\.5"):
        PPO(_rps_config().training(gamma=1.5))


def test_a_mapping_fn_may_be_given_by_its_import_path_anywhere():
    config = _rps_config().multi_agent(policy_mapping_fn="marl_core.ppo.presets:rps_policy_mapping_fn")
    with config.build() as algo:
        assert algo.config.policy_mapping_fn is rps_policy_mapping_fn


def test_a_restored_config_keeps_its_saved_model_through_overrides_and_new_policies(tmp_path):
    with _rps_config().build() as algo:
        algo.train()
        saved = algo.save(tmp_path / "checkpoint")
    config = json.loads((saved / "config.json").read_text())
    config["model"]["vf_share_layers"] = 0  # taken (as false) before the checks
    (saved / "config.json").write_text(json.dumps(config))
    with PPO.from_checkpoint(saved, lr=1e-4) as restored:
        restored.add_policy("extra", PolicySpec(model={"vf_share_layers": np.True_}))
        assert restored.train()["training_iteration"] == 2


def test_tiny_end_to_end_run_reports_metrics_per_policy():
    with _rps_config().build() as algo:
        result = algo.train()
    assert result["training_iteration"] == 1
    assert result["num_env_steps_sampled"] == 200
    assert result["num_episodes"] == 20
    learned, heuristic = result["policies"]["learned"], result["policies"]["beat_last"]
    assert learned["episode_len_mean"] == 10
    assert learned["episode_return_mean"] == pytest.approx(-heuristic["episode_return_mean"])
    for key in ("policy_loss", "vf_loss", "entropy", "approx_kl", "clip_fraction", "explained_variance"):
        assert math.isfinite(learned[key]), key
    assert "policy_loss" not in heuristic  # a fixed policy is not trained
    assert result["env_steps_per_s"] > 0 and result["num_env_errors"] == 0


def test_same_seed_gives_the_same_first_iteration_loss():
    losses = []
    for seed in (3, 3, 4):
        with _rps_config().debugging(seed=seed).build() as algo:
            losses.append(algo.train()["policies"]["learned"]["total_loss"])
    assert losses[0] == losses[1]
    assert losses[0] != losses[2]


def test_a_restored_run_samples_on_a_new_stream(tmp_path):
    with _rps_config().build() as algo:
        algo.train()
        first_ids = {episode.id_ for episode in algo.sampler.episodes}
        path = algo.save(tmp_path / "ck")
    with _rps_config().build() as fresh:
        fresh_draws = fresh.sampler.rng.random(4)
        fresh_act_draws = fresh.act_rng.random(4)
    with PPO.from_checkpoint(path) as restored:
        assert restored.sampling_stream == 1 and restored.restored_from == path
        # New exploration draws (compute_actions' too) and new episode ids, not the first run's again.
        assert not np.array_equal(restored.sampler.rng.random(4), fresh_draws)
        act_draws = restored.act_rng.random(4)
        assert not np.array_equal(act_draws, fresh_act_draws)
        from marl_core.ppo.rollout import Sampler

        runner_1 = Sampler(restored.env_creator, {}, 1, worker_index=1, seed=restored.config.seed, stream=1)
        assert not np.array_equal(runner_1.rng.random(4), act_draws)  # nor the first Ray runner's
        runner_1.close()
        restored.train()
        ids = {episode.id_ for episode in restored.sampler.episodes}
        assert all(i >> 32 == 1 for i in ids) and all(i >> 32 == 0 for i in first_ids)
        # Seats still alternate with the id's parity.
        assert {i % 2 for i in ids} == {0, 1}
        second = restored.save(tmp_path / "ck2")
    with PPO.from_checkpoint(second) as again:
        assert again.sampling_stream == 2
    with PPO.from_checkpoint(path) as twice:  # the same checkpoint twice: the same stream (a repeatable resume)
        assert twice.sampling_stream == 1


def test_save_and_restore_round_trip(tmp_path):
    algo = _rps_config().build()
    algo.train()
    algo.train()
    algo.callback_state["counter"] = {"games": 7, "seen": ["a", None], "mean": 0.5}
    path = algo.save(tmp_path / "ck")
    saved = json.loads((path / "config.json").read_text())
    assert saved["env"] == "marl_core.envs:RockPaperScissors"  # importable from any directory
    assert saved["policies"]["beat_last"] == {"kind": "fixed", "ref": "marl_core.ppo.presets:beat_last_move"}
    next_result = algo.train()
    algo.stop()
    restored = PPO.from_checkpoint(path)
    try:
        assert restored.iteration == 2
        assert restored.callback_state == {"counter": {"games": 7, "seen": ["a", None], "mean": 0.5}}
        # Restoring gives back weights, optimizer state and RNG: the next iteration's update uses
        # the same minibatch order and starting weights as the original run.
        resumed = restored.train()
        assert resumed["training_iteration"] == 3
        assert resumed["num_env_steps_sampled_lifetime"] == next_result["num_env_steps_sampled_lifetime"]
        assert restored.learners["learned"].optimizer.state_dict()["step"] > 0
    finally:
        restored.stop()
    # Weights equal right after loading.
    again = PPO.from_checkpoint(path)
    original = torch.load(path / "state.pt", weights_only=True)["policies"]["learned"]["module"]
    for key, value in again.get_weights(["learned"])["learned"].items():
        np.testing.assert_array_equal(value, original[key].numpy())
    again.stop()


def test_checkpoint_is_replaced_atomically_and_bad_paths_fail(tmp_path):
    with _rps_config().build() as algo:
        algo.train()
        algo.save(tmp_path / "ck")
        algo.train()
        (tmp_path / ".ck.old-deadbeef").mkdir()  # left by a writer killed after its second rename
        (tmp_path / ".ck.tmp-0badf00d").mkdir()  # left by one killed while writing (it stayed forever)
        algo.save(tmp_path / "ck")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]  # no temporary or old copies left
        (tmp_path / ".ck1.old-deadbeef").mkdir()  # another checkpoint's copy: a glob "[1]" would match it
        for _ in range(2):
            algo.save(tmp_path / "ck[1]")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ck1.old-deadbeef", "ck", "ck[1]"]
    with pytest.raises(CheckpointError, match="does not exist"):
        PPO.from_checkpoint(tmp_path / "missing")


@pytest.mark.parametrize(("raised", "hint"), [
    ("[enforce fail at inline_container.cc:672] . unexpected pos 9728 vs 9620", True),
    ("PytorchStreamWriter failed writing file data/0: file write failed", True),
    ("boom from inside the pickler", False),
    ("cannot overwrite a read-only tensor", False),
])
def test_only_torchs_writer_failing_is_taken_for_a_full_disk(tmp_path, monkeypatch, raised, hint):
    from marl_core.ppo import checkpoint

    def failing_save(*args, **kwargs):
        raise RuntimeError(raised)

    with _rps_config().build() as algo:
        monkeypatch.setattr(checkpoint.torch, "save", failing_save)
        with pytest.raises(CheckpointError, match="cannot write the checkpoint") as caught:
            algo.save(tmp_path / "ck")
    assert ("(is the disk full?)" in str(caught.value)) is hint and not (tmp_path / "ck").exists()


def test_save_never_deletes_what_is_not_a_checkpoints(tmp_path):
    # save() replaced the whole directory: a user's files in it, even a project's sources, were gone.
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "train.py").write_text("print('mine')")
    (project / "notes.txt").write_text("mine")
    (tmp_path / "a_file").write_text("mine")
    empty = tmp_path / "empty"
    empty.mkdir()
    with _rps_config().build() as algo:
        algo.train()
        with pytest.raises(CheckpointError, match=re.escape(
                f"cannot write the checkpoint {project}: it holds files that are not a checkpoint's (notes.txt, src), "
                "which replacing it would delete; pass a new or empty directory, or an earlier checkpoint to replace")):
            algo.save(project)
        with pytest.raises(CheckpointError, match=re.escape(
                f"cannot write the checkpoint {tmp_path / 'a_file'}: it is a file, not a directory")):
            algo.save(tmp_path / "a_file")
        (tmp_path / "link").symlink_to(tmp_path / "nowhere")
        with pytest.raises(CheckpointError, match=re.escape(
                f"cannot write the checkpoint {tmp_path / 'link'}: it is a link to nothing, not a directory")):
            algo.save(tmp_path / "link")
        (tmp_path / "link").unlink()
        assert algo.save(empty) == empty and PPO.from_checkpoint(empty).iteration == 1
        (empty / ".DS_Store").write_text("a file browser's note")
        algo.save(empty)  # a checkpoint now (with a file browser's note): replaced
    assert (project / "src" / "train.py").read_text() == "print('mine')" and (tmp_path / "a_file").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "empty", "project"]


def test_a_damaged_state_is_named_as_such_and_paths_that_are_not_checkpoints_say_what_they_are(tmp_path):
    import shutil

    with _rps_config().build() as algo:
        algo.train()
        path = algo.save(tmp_path / "run" / "final")
    state = torch.load(path / "state.pt", weights_only=True)
    module = state["policies"]["learned"]["module"]
    nan_weights = {**module, "pi_body.0.weight": torch.full_like(module["pi_body.0.weight"], math.nan)}
    optimizer = state["policies"]["learned"]["optimizer"]
    nan_moments = {**optimizer, "exp_avg": [optimizer["exp_avg"][0] * math.nan, *optimizer["exp_avg"][1:]]}
    edited = {
        # Each was taken: a negative iteration trained "it -4"; "abc" went in as three returns and
        # broke the next save; a torch RNG state of the wrong size and NaN weights were raw errors;
        # NaN optimizer moments showed up as a NaN loss, blamed on the rewards.
        "iteration is -5, where a count (an integer, 0 or more) belongs": {**state, "iteration": -5},
        "recent_returns['learned'] is 'abc', where a list of numbers (not NaN) belongs":
            {**state, "recent_returns": {"learned": "abc"}},
        "ValueError: rng_torch: ": {**state, "rng_torch": torch.zeros(7, dtype=torch.uint8)},
        "the saved weights (pi_body.0.weight) of policy 'learned' hold NaN or infinite values":
            {**state, "policies": {"learned": {**state["policies"]["learned"], "module": nan_weights}}},
        "the saved optimizer state (exp_avg[0]) of policy 'learned' hold NaN or infinite values":
            {**state, "policies": {"learned": {**state["policies"]["learned"], "optimizer": nan_moments}}},
        "callback_state is [1, 2], where a JSON object belongs": {**state, "callback_state": "[1, 2]"},
        "JSONDecodeError": {**state, "callback_state": "{not json"},
    }
    for index, (words, damaged) in enumerate(edited.items()):
        copy = shutil.copytree(path, tmp_path / f"edited_{index}")
        torch.save(damaged, copy / "state.pt")
        with pytest.raises(CheckpointError, match=re.escape(words)):
            PPO.from_checkpoint(copy)
    older = shutil.copytree(path, tmp_path / "older")  # saved before callback_state: none
    torch.save({key: value for key, value in state.items() if key != "callback_state"}, older / "state.pt")
    with PPO.from_checkpoint(older) as restored:
        assert restored.callback_state == {}
    # An infinite return is what an env paid, not damage: a run saves it and must resume from it.
    infinite = shutil.copytree(path, tmp_path / "infinite")
    torch.save({**state, "recent_returns": {"learned": [1.0, -math.inf]}}, infinite / "state.pt")
    PPO.from_checkpoint(infinite).stop()
    not_a_number = shutil.copytree(path, tmp_path / "not_a_number")  # a NaN reward stops a run: damage
    torch.save({**state, "recent_returns": {"learned": [1.0, math.nan]}}, not_a_number / "state.pt")
    with pytest.raises(CheckpointError, match=re.escape("recent_returns['learned'] is [1.0, nan], where a list of numbers (not NaN)")):
        PPO.from_checkpoint(not_a_number)
    # Optimizer states in torch.optim's layout (older checkpoints), keyed by parameter index, load
    # (their integer keys broke the finite check) and are checked too.
    params = [torch.nn.Parameter(torch.zeros(2))]
    adam = torch.optim.Adam(params)
    params[0].grad = torch.ones(2)
    adam.step()
    layout = adam.state_dict()
    assert list(layout["state"]) == [0]
    from marl_core.ppo.checkpoint import _tensors

    assert [where for where, _ in _tensors(layout, "optimizer state")] == [
        "optimizer state (state.0.step)", "optimizer state (state.0.exp_avg)", "optimizer state (state.0.exp_avg_sq)"]
    garbage = shutil.copytree(path, tmp_path / "garbage")
    (garbage / "state.pt").write_bytes(np.random.default_rng(0).bytes(5000))
    with pytest.raises(CheckpointError, match=r"state\.pt cannot be read") as caught:
        PPO.from_checkpoint(garbage)
    assert "weights_only" not in str(caught.value)  # torch's advice to load the file unsafely is left out
    with _rps_config().build() as algo:  # a RuntimeError that is not the writer's stays what it is
        algo.config.to_json_dict = lambda: (_ for _ in ()).throw(RuntimeError("not about the disk"))
        with pytest.raises(RuntimeError, match="not about the disk"):
            algo.save(tmp_path / "not_the_disk")
    assert not (tmp_path / "not_the_disk").exists()
    looped: list = []
    looped.append(looped)
    with _rps_config().build() as algo:  # a callback's state that would not come back as it is: said, nothing written
        for state, where in [({"when": object()}, "callback_state['mine']['when'] is an object"),
                             ({"seen": [1, (2, 3)]}, r"callback_state['mine']['seen'][1] is a tuple"),
                             ({"games": {3: 1}}, "callback_state['mine']['games'] has the key 3"),
                             (looped, "callback_state['mine'][0] holds itself")]:
            algo.callback_state["mine"] = state
            with pytest.raises(TypeError, match=re.escape(f"callback_state cannot be saved in a checkpoint: {where}; ")):
                algo.save(tmp_path / "unsavable")
    assert not (tmp_path / "unsavable").exists()
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(tmp_path / 'nothing'))} does not exist$"):
        PPO.from_checkpoint(tmp_path / "nothing")
    with pytest.raises(CheckpointError, match=re.escape(f"(a run directory: its checkpoints are {path})")):
        PPO.from_checkpoint(tmp_path / "run")


def test_a_save_interrupted_between_its_renames_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    import os

    from marl_core.ppo import checkpoint

    with _rps_config().build() as algo:
        algo.train()
        algo.save(tmp_path / "ck")
        saved = (tmp_path / "ck" / "state.pt").read_bytes()
        algo.train()
        real_replace, calls = os.replace, []

        def interrupted_replace(src, dst):
            calls.append(src)
            if len(calls) == 2:  # the new checkpoint's rename: Ctrl-C lands here
                raise KeyboardInterrupt
            real_replace(src, dst)

        monkeypatch.setattr(checkpoint.os, "replace", interrupted_replace)
        with pytest.raises(KeyboardInterrupt):
            algo.save(tmp_path / "ck")
        monkeypatch.setattr(checkpoint.os, "replace", real_replace)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    assert (tmp_path / "ck" / "state.pt").read_bytes() == saved
    # A writer killed outright leaves the old checkpoint aside: the next load puts it back.
    os.replace(tmp_path / "ck", tmp_path / ".ck.old-0123abcd")
    PPO.from_checkpoint(tmp_path / "ck").stop()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_checkpoints_keep_spec_spaces_and_refuse_what_they_could_not_save(tmp_path):
    import gymnasium as gym

    extra = PolicySpec(observation_space=gym.spaces.Box(-1.0, 1.0, (5,), np.float32), action_space=gym.spaces.Discrete(4))
    config = _rps_config().multi_agent(policies={"learned": None, "beat_last": beat_last_move, "extra": extra})
    with config.build() as algo:
        algo.train()
        algo.save(tmp_path / "spaces")
    with PPO.from_checkpoint(tmp_path / "spaces") as restored:
        assert restored.policies["extra"].observation_space == extra.observation_space
        assert restored.policies["extra"].action_space == extra.action_space
    # numpy values are saved as numbers; what has no JSON form must be passed back.
    config = _rps_config().environment(RockPaperScissors, env_config={"rounds": np.int64(3), "hook": object()})
    with config.build() as algo:
        algo.save(tmp_path / "config")
    with pytest.raises(CheckpointError, match=r"env_config\['hook'\] \(<object object.*pass env_config="):
        PPO.from_checkpoint(tmp_path / "config")
    with PPO.from_checkpoint(tmp_path / "config", env_config={"rounds": 3}) as restored:
        assert restored.config.env_config == {"rounds": 3}
    saved = json.loads((tmp_path / "config" / "config.json").read_text())
    assert saved["env_config"]["rounds"] == 3


def test_env_config_comes_back_exactly():
    # The env's own code reads env_config: tuples stay tuples, keys keep their types.
    env_config = {"board": (6, 7), 3: "three", (1, 2): [1, (2,), {"deep": ()}], "flag": True,
                  "plain": {"a": [1.5, None]}, "looks_like_a_marker": {"__tuple__": [1]}, "empty": {}}
    config = _rps_config().environment(RockPaperScissors, env_config=env_config)
    data = json.loads(json.dumps(config.to_json_dict()))
    back = PPOConfig.from_json_dict(data)
    assert back.env_config == env_config
    assert type(back.env_config["board"]) is tuple and type(back.env_config[(1, 2)][1]) is tuple
    assert back.env_config["looks_like_a_marker"] == {"__tuple__": [1]}
    # numpy arrays keep dtype and shape, gymnasium spaces come back as spaces (a list, and unsaved, before).
    shaped = {"weights": np.arange(6, dtype=np.float32).reshape(2, 3), "cells": np.array([[True], [False]]),
              "space": gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,)), "n": gym.spaces.Discrete(4, start=1)}),
              "like_an_array": {"__array__": {}}}
    data = json.loads(json.dumps(_rps_config().environment(RockPaperScissors, env_config=shaped).to_json_dict()))
    back = PPOConfig.from_json_dict(data).env_config
    assert back["weights"].dtype == np.float32 and back["weights"].shape == (2, 3)
    np.testing.assert_array_equal(back["weights"], shaped["weights"])
    assert back["cells"].dtype == np.bool_ and back["cells"].tolist() == [[True], [False]]
    assert back["space"] == shaped["space"] and back["like_an_array"] == {"__array__": {}}
    # Arrays JSON cannot hold as they are (objects, strings, records) are unsaved, not turned into lists.
    records = np.zeros(2, dtype=[("x", "i4"), ("y", "f4")])
    for odd in (np.array([object()]), np.array(["a", "b"]), records, records[0], np.ma.masked_array([1.0], [True])):
        data = json.loads(json.dumps(_rps_config().environment(RockPaperScissors, env_config={"odd": odd}).to_json_dict()))
        with pytest.raises(CheckpointError, match=r"env_config\['odd'\] \((array|masked_array|np.void)\("):
            PPOConfig.from_json_dict(data)
    # Checkpoints written before, without markers, read as they did.
    assert PPOConfig.from_json_dict({**data, "env_config": {"rounds": 3, "sizes": [1, 2]}}).env_config == {
        "rounds": 3, "sizes": [1, 2]}


def test_restoring_with_overrides_of_what_the_state_holds(tmp_path):
    env = RockPaperScissors()
    other = PolicySpec(observation_space=env.get_observation_space("player1"), action_space=env.get_action_space("player1"))
    config = _rps_config().multi_agent(policies={"learned": None, "beat_last": beat_last_move, "other": other},
                                       policies_to_train=["learned", "other"])
    with config.build() as algo:
        algo.train()
        algo.save(tmp_path / "ck")
    with PPO.from_checkpoint(tmp_path / "ck", policies_to_train=["learned"]) as restored:
        assert restored.to_train == ["learned"] and sorted(restored.learners) == ["learned"]
    with pytest.raises(CheckpointError, match="saved weights of policy 'learned' do not fit"):
        PPO.from_checkpoint(tmp_path / "ck", model={"hiddens": [32]})


def test_a_lambda_mapping_fn_must_be_passed_back_when_restoring(tmp_path):
    config = _rps_config().multi_agent(policy_mapping_fn=lambda agent_id, episode: rps_policy_mapping_fn(agent_id, episode))
    with config.build() as algo:
        algo.save(tmp_path / "ck")
    with pytest.raises(CheckpointError, match="policy_mapping_fn"):
        PPO.from_checkpoint(tmp_path / "ck")
    PPO.from_checkpoint(tmp_path / "ck", policy_mapping_fn=rps_policy_mapping_fn).stop()


def test_frozen_copy_added_during_training_and_removed():
    with _rps_config().build() as algo:
        algo.train()
        algo.add_policy("learned_v1", weights_from="learned",
                        policy_mapping_fn=lambda agent_id, episode: "learned" if agent_id == "player1" else "learned_v1")
        assert algo.to_train == ["learned"]
        before = algo.get_weights(["learned_v1"])["learned_v1"]
        result = algo.train()
        assert result["policies"]["learned_v1"]["num_episodes"] == 20
        assert result["policies"]["beat_last"]["num_episodes"] == 0
        after = algo.get_weights()
        for key, value in before.items():  # the copy is frozen...
            np.testing.assert_array_equal(after["learned_v1"][key], value)
        assert any(not np.array_equal(after["learned"][k], v) for k, v in before.items())  # ...main moved on
        algo.remove_policy("learned_v1", policy_mapping_fn=rps_policy_mapping_fn)
        assert "learned_v1" not in algo.train()["policies"]
        algo.add_policy("learned_v2", weights_from="learned")
        algo.remove_policy("learned_v2", policies_to_train=[])  # an empty list is a list: train none
        assert algo.to_train == []
        with pytest.raises(ConfigError, match="exists already"):
            algo.add_policy("learned")


def test_a_refused_add_or_remove_policy_changes_nothing(tmp_path):
    # A refused remove_policy left the policy removed but still trained, and the next checkpoint
    # did not load; a refused add_policy left the policy added, or the mapping fn replaced.
    with _rps_config().build() as algo:
        mapping = algo.config.policy_mapping_fn
        with pytest.raises(ConfigError, match="policies_to_train names 'nope', which is not a learned policy"):
            algo.add_policy("learned_v1", weights_from="learned", policies_to_train=["nope"])
        with pytest.raises(ConfigError, match="weights_from='beat_last' is not a learned policy"):
            algo.add_policy("learned_v1", weights_from="beat_last", policy_mapping_fn=lambda agent_id, episode: "learned")
        with pytest.raises(ConfigError, match="policies_to_train names 'zzz'"):
            algo.remove_policy("beat_last", policies_to_train=["zzz"])
        with pytest.raises(ConfigError, match="policies_to_train must be a list of policy ids, received 'learned'"):
            algo.remove_policy("beat_last", policies_to_train="learned")
        with pytest.raises(ConfigError, match=r"policy_mapping_fn must be a function .* received 7"):
            algo.remove_policy("beat_last", policy_mapping_fn=7)
        with pytest.raises(ConfigError, match="policy ids are strings, received 0"):
            algo.add_policy(0)
        assert sorted(algo.policies) == sorted(algo.config.policies) == ["beat_last", "learned"]
        assert algo.to_train == ["learned"] and sorted(algo.learners) == ["learned"]
        assert algo.config.policy_mapping_fn is mapping
        assert sorted(algo.train()["policies"]) == ["beat_last", "learned"]
        algo.save(tmp_path / "ck")
    PPO.from_checkpoint(tmp_path / "ck").stop()


def test_a_checkpoint_after_removing_a_trained_policy_restores_and_a_new_one_under_its_id_starts_afresh(tmp_path):
    # config.policies_to_train still named the removed policy: the checkpoint did not restore; and
    # a policy added under a removed one's id reported the removed one's episodes with its own.
    config = _rps_config().multi_agent(policies={"learned": None, "other": None, "beat_last": beat_last_move},
                                       policies_to_train=["learned", "other"])
    with config.build() as algo:
        algo.train()
        assert algo.train()["policies"]["beat_last"]["num_episodes"] == 20
        algo.remove_policy("other")
        algo.remove_policy("beat_last", policy_mapping_fn=lambda agent_id, episode: "learned")
        algo.add_policy("beat_last", lambda observation: 0, policy_mapping_fn=rps_policy_mapping_fn)
        result = algo.train()
        assert result["policies"]["beat_last"]["num_episodes"] == 20 and len(algo._returns["beat_last"]) == 20
        algo.save(tmp_path / "ck")
    with PPO.from_checkpoint(tmp_path / "ck", policies={"learned": None, "beat_last": beat_last_move}) as restored:
        assert restored.to_train == ["learned"] and restored.config.policies_to_train == ["learned"]
        with pytest.raises(ConfigError, match=r"weights_from='learned' is for learned policies .* policy 'rock' is a "
                                              r"function"):
            restored.add_policy("rock", lambda observation: 0, weights_from="learned")  # it was ignored


def test_collections_of_policy_ids_are_taken_as_rllib_takes_them():
    # Sets and dict views, as RLlib's builders take them (a set for policies_to_train, say).
    policies = {"learned": None, "beat_last": beat_last_move}
    with _rps_config().multi_agent(policies=policies, policies_to_train={"learned"}).build() as algo:
        assert algo.to_train == ["learned"]
        algo.add_policy("copy", weights_from="learned", policies_to_train={"learned"}.union({"copy"}))
        assert sorted(algo.to_train) == ["copy", "learned"]
    config = _rps_config().multi_agent(policies={"learned": None}.keys(), policies_to_train=policies.keys() - {"beat_last"},
                                       policy_mapping_fn=lambda agent_id, episode: "learned")
    assert config.policies == {"learned": None} and config.policies_to_train == ["learned"]


def test_a_mapping_fn_set_on_a_built_algorithm_is_checked_and_taken_by_import_path():
    # None or a path was taken, and failed at the next train() as "policy_mapping_fn raised TypeError".
    with _rps_config().build() as algo:
        with pytest.raises(ConfigError, match=r"policy_mapping_fn must be a function \(or its 'module:name' import "
                                              r"path\), received None"):
            algo.set_policy_mapping_fn(None)
        with pytest.raises(ConfigError, match="policy_mapping_fn 'nowhere:mapping' does not import"):
            algo.set_policy_mapping_fn("nowhere:mapping")
        algo.set_policy_mapping_fn("marl_core.ppo.presets:rps_policy_mapping_fn")
        assert algo.config.policy_mapping_fn is rps_policy_mapping_fn
        assert algo.train()["training_iteration"] == 1


def test_a_checkpoint_keeps_the_spaces_of_policies_no_agent_maps_to_any_more(tmp_path):
    # A frozen copy (weights_from) of a policy among agents of different spaces: its spaces were
    # inferred again at the restore, from agents mapped to it, and there were none.
    config = (PPOConfig().environment(HeterogeneousSpacesEnv).multi_agent(policy_mapping_fn=_own_policy)
              .multi_agent(policies={"box": None, "discrete": None, "masked": None, "multi": None})
              .env_runners(num_env_runners=0, num_envs_per_env_runner=1).training(train_batch_size=12))
    with config.build() as algo:
        algo.train()
        algo.add_policy("masked_v1", weights_from="masked")
        algo.save(tmp_path / "ck")
        saved = {pid: (p.observation_space, p.action_space) for pid, p in algo.policies.items()}
        weights = algo.get_weights(["masked_v1"])["masked_v1"]
    with PPO.from_checkpoint(tmp_path / "ck") as restored:
        assert {pid: (p.observation_space, p.action_space) for pid, p in restored.policies.items()} == saved
        for key, value in restored.get_weights(["masked_v1"])["masked_v1"].items():
            np.testing.assert_array_equal(value, weights[key])
        assert restored.train()["training_iteration"] == 2


@pytest.mark.parametrize(
    ("build", "message"),
    [
        # Split into characters: policies_to_train ['m', 'a', ...], policies {'m': None, ...}.
        (lambda c: c.multi_agent(policies_to_train="learned"),
         "policies_to_train must be None, a list of policy ids or RLlib's fn(policy_id, batch) -> bool, received "
         "'learned'"),
        (lambda c: c.multi_agent(policies="learned"),
         "policies must be a dict of policy id (a string) to None, a PolicySpec (or RLlib's) or a callable, "
         "received 'learned'"),
        (lambda c: c.multi_agent(policies={"learned": 3, "beat_last": beat_last_move}),
         "policy 'learned': expected None, a PolicySpec or a callable, received 3"),
        (lambda c: c.multi_agent(policies={"learned": (dict, None, None, {}), "beat_last": beat_last_move}),
         "policy 'learned': RLlib's policy class <class 'dict'> does not run here: this trainer's PPO learns every "
         "learned policy; give None as the class"),
        (lambda c: c.multi_agent(policies={"learned": dict, "beat_last": beat_last_move}),
         "policy 'learned': expected None, a PolicySpec or a callable fn(observation) -> action, received the class "
         "<class 'dict'>"),
        (lambda c: c.multi_agent(policies={"learned": (None, None, None, {"model": "x"}), "beat_last": beat_last_move}),
         "policy 'learned': the 'model' in its RLlib config must be a dict of model settings, received 'x'"),
        (lambda c: c.multi_agent(policies={"learned": (None, None, None, {"model": []}), "beat_last": beat_last_move}),
         "policy 'learned': the 'model' in its RLlib config must be a dict of model settings, received []"),
        (lambda c: c.multi_agent(policies={"learned": PolicySpec(model="x"), "beat_last": beat_last_move}),
         "policy 'learned': PolicySpec.model must be a dict, received 'x'"),  # a raw ValueError
        (lambda c: c.multi_agent(policies_to_train=list),  # callable, but a class: refused at build only
         "policies_to_train must be None, a list of policy ids or RLlib's fn(policy_id, batch) -> bool, received "
         "<class 'list'>"),
        (lambda c: c.multi_agent(policies={"learned": (None, None, None, PPOConfig()), "beat_last": beat_last_move}),
         "policy 'learned': the config of an RLlib PolicySpec must be a dict of training settings here, received a "
         "PPOConfig"),
        (lambda c: c.multi_agent(policies={0: None}), "policies must be a dict of policy id (a string)"),
        (lambda c: c.multi_agent(policies_to_train=5),
         "policies_to_train must be None, a list of policy ids or RLlib's fn(policy_id, batch) -> bool, received 5"),
        (lambda c: c.environment(env_config=[1]), "env_config must be a dict, received [1]"),
        (lambda c: c.training(model={"module": 5}), "policy 'learned': model module must be a factory"),
        (lambda c: c.training(model={"module": "nowhere:factory"}), "model['module'] 'nowhere:factory' does not import"),
    ],
)
def test_values_of_the_wrong_type_are_refused_by_name(build, message):
    # Each was a raw TypeError or AttributeError, or taken and misread.
    with pytest.raises(ConfigError, match=re.escape(message)):
        build(_rps_config()).build()


def test_rllibs_callable_policies_to_train_is_asked_once_per_learned_policy(tmp_path):
    # Refused: "policies_to_train must be None or a list of policy ids, received <function ...>".
    asked = []

    def only_main(policy_id, batch):
        asked.append((policy_id, batch))
        return policy_id == "main"

    config = _rps_config().multi_agent(
        policies={"main": None, "main_v1": None, "beat_last": beat_last_move}, policies_to_train=only_main,
        policy_mapping_fn=lambda agent_id, episode, **kwargs: {"player1": "main", "player2": "beat_last"}[agent_id])
    assert config.to_json_dict()["policies_to_train"] == ["main"]  # saved as what it accepts (a lambda: as None)
    asked.clear()
    with config.build() as algo:
        assert asked == [("main", None), ("main_v1", None)] and list(algo.to_train) == ["main"]
        # The user's config keeps the callable (it replaced it, and a reuse with new policies failed);
        # the algorithm's, which checkpoints save, holds the list.
        assert config.policies_to_train is only_main and algo.config.policies_to_train == ["main"]
        frozen = algo.get_weights(["main_v1"])["main_v1"]
        algo.train()
        for key, value in algo.get_weights(["main_v1"])["main_v1"].items():
            np.testing.assert_array_equal(value, frozen[key])
        algo.add_policy("main_v2", weights_from="main", policies_to_train=lambda policy_id, batch: policy_id != "main_v1")
        assert sorted(algo.to_train) == ["main", "main_v2"] and algo.config.policies_to_train == ["main", "main_v2"]
        # Asked of the policies kept only (this one raised KeyError when asked of the one removed).
        algo.remove_policy("main_v1", policies_to_train=lambda policy_id, batch: {"main": True, "main_v2": False}[policy_id])
        assert list(algo.to_train) == ["main"]

    def broken(policy_id, batch):
        raise KeyError(policy_id)

    with pytest.raises(ConfigError, match=re.escape("raised KeyError when asked policies_to_train('learned', None): "
                                                    "'learned'")):
        _rps_config().multi_agent(policies_to_train=broken).build()


def test_rllibs_policy_specs_and_their_tuples_are_taken(tmp_path):
    # Refused at build(): "expected None, a PolicySpec or a callable, received (None, ...)".
    from ray.rllib.policy.policy import PolicySpec as RLlibPolicySpec

    space = gym.spaces.Discrete(3)
    for learned in ((None, space, space, {"gamma": 0.5}), RLlibPolicySpec(None, space, space, {"gamma": 0.5})):
        config = _rps_config().multi_agent(policies={"learned": learned, "beat_last": beat_last_move})
        with config.build() as algo:
            assert config.policies["learned"] == PolicySpec(space, space, {"gamma": 0.5})
            assert algo.train()["training_iteration"] == 1
            algo.add_policy("learned_v2", (None, None, None, {"lr": 1e-3, "model": {"hiddens": [8]}}))
            assert algo.config.policies["learned_v2"] == PolicySpec(None, None, {"lr": 1e-3}, {"hiddens": [8]})
            algo.save(tmp_path / "ck")
        with PPO.from_checkpoint(tmp_path / "ck") as restored:
            assert restored.config.policies["learned"] == PolicySpec(space, space, {"gamma": 0.5})


def test_a_model_module_given_by_import_path_is_imported(tmp_path):
    # As checkpoints save it, and as --set can give it (JSON text only).
    config = _rps_config().set("model", '{"module": "tests.ppo.test_algorithm:_tiny_module"}')
    with config.build() as algo:
        assert config.model["module"] is _tiny_module
        assert isinstance(algo.policies["learned"].module, torch.nn.Linear)


def test_compute_actions_and_policy_callables():
    with _rps_config().build() as algo:
        actions = algo.compute_actions({"player1": 0, "player2": 2})
        assert actions["player2"] == beat_last_move(2)
        assert 0 <= int(actions["player1"]) < 3
        greedy = algo.get_policy_callable("learned")
        assert greedy(1) == algo.compute_actions({"x": 1}, policy_id="learned")["x"]
        assert algo.compute_single_action(1, policy_id="learned") == greedy(1)
        assert algo.compute_single_action(0, policy_id="beat_last") == beat_last_move(0)
        with pytest.raises(ConfigError, match="no policy 'default_policy'; policies: \\['beat_last', 'learned'\\]"):
            algo.compute_single_action(1)
    with PPOConfig().environment(RockPaperScissors).env_runners(num_env_runners=0).build() as algo:
        assert 0 <= int(algo.compute_single_action(1, explore=True)) < 3
        with pytest.raises(ConfigError, match="not a policy"):
            algo.compute_actions({"player1": 0}, policy_id="nope")


def test_observations_a_policy_cannot_take_are_named_not_raw_torch_errors():
    # They were torch's "Class values must be smaller than num_classes." and "mat1 and mat2 shapes cannot be multiplied".
    with _rps_config().build() as algo:
        with pytest.raises(SpaceError, match=r"observations that policy 'learned' cannot take: agent 'b': .*7"):
            algo.compute_actions({"a": 1, "b": 7}, policy_id="learned")
        with pytest.raises(SpaceError, match=r"policy 'learned' cannot take: agent 'a': .*shape"):
            algo.compute_actions({"a": np.zeros(4, np.float32)}, policy_id="learned")
        with pytest.raises(SpaceError, match=r"policy 'learned' cannot take: the observation: .*-1"):
            algo.get_policy_callable("learned")(-1)
        assert 0 <= int(algo.get_policy_callable("learned")(2)) < 3


def test_a_ctrl_c_during_the_update_leaves_states_that_match_the_iteration_count(monkeypatch):
    # A second Ctrl-C while policies updated saved a "final" checkpoint of iteration N whose
    # weights, Adam steps and generator had moved on into iteration N + 1.
    config = (_rps_config().multi_agent(policies={"learned": None, "other": None},
                                        policy_mapping_fn=lambda agent_id, episode: (
                                            "learned" if agent_id == "player1" else "other"),
                                        policies_to_train=["learned", "other"])
              .training(train_batch_size=64, minibatch_size=16, num_epochs=2))
    with config.build() as algo:
        algo.train()
        before = {p: copy.deepcopy(algo.learners[p].state_dict()) for p in ("learned", "other")}
        rng_before = copy.deepcopy(algo.rng.bit_generator.state)
        update = algo.learners["other"].update

        def interrupted(*args, **kwargs):
            update(*args, **kwargs)  # "other" updates fully ("learned" did before it), then Ctrl-C
            raise KeyboardInterrupt

        monkeypatch.setattr(algo.learners["other"], "update", interrupted)
        with pytest.raises(KeyboardInterrupt):
            algo.train()
        assert algo.iteration == 1
        for policy_id, state in before.items():
            _assert_same_state(state, algo.learners[policy_id].state_dict())
        assert algo.rng.bit_generator.state == rng_before


def test_a_mapping_fn_of_rllibs_older_form_is_named_at_build_and_in_compute_actions():
    # It was a bare TypeError from build() (which maps agents to find spaces) and compute_actions.
    old_style = lambda agent_id, episode, worker: "p"  # noqa: E731
    config = (PPOConfig().environment(RockPaperScissors).env_runners(num_env_runners=0)
              .multi_agent(policies={"p"}, policy_mapping_fn=old_style))
    message = (r"policy_mapping_fn raised TypeError for agent 'player1': .*missing 1 required positional argument: "
               r"'worker'; it is called as policy_mapping_fn\(agent_id, episode\)")
    with pytest.raises(ConfigError, match=message):
        config.build()
    with _rps_config().build() as algo:
        algo.config.policy_mapping_fn = old_style
        with pytest.raises(ConfigError, match=message):
            algo.compute_actions({"player1": 0})


def test_compute_actions_names_the_agents_whose_mask_allows_nothing():
    config = PPOConfig().environment(TwoMoveGame).env_runners(num_env_runners=0).training(train_batch_size=8)
    with config.build() as algo:
        legal = {"observation": np.zeros(2, np.float32), "action_mask": np.array([1, 1, 0], np.int8)}
        stuck = {**legal, "action_mask": np.zeros(3, np.int8)}
        with pytest.raises(EnvContractError, match=r"agents \['second'\] of policy 'default_policy' must act, but "
                                                   r"the action mask of each allows no action"):  # it named "batch rows [1]"
            algo.compute_actions({"first": legal, "second": stuck})
        with pytest.raises(EnvContractError, match=r"policy 'default_policy' was asked to act on an observation whose "
                                                   r"action mask allows no action"):  # "batch rows [0]"
            algo.compute_single_action(stuck)
        assert algo.compute_single_action(legal) in (0, 1)


def test_an_observation_space_without_an_encoder_names_the_policy_and_the_agent_briefly():
    # The message held a Text space's whole charset (hundreds of characters) and named no agent.
    from bridges import OpenSpielEnv

    config = (PPOConfig().environment(lambda config: OpenSpielEnv("kuhn_poker", observation_type="observation_string"))
              .env_runners(num_env_runners=0))
    with pytest.raises(SpaceError, match=r"^policy 'default_policy' \(its spaces from agent 'player_0', "
                                         r"which maps to it\): no encoder for observation space Text\(") as raised:
        config.build()
    assert "..." in str(raised.value) and len(str(raised.value)) < 400


def test_an_action_space_without_a_distribution_names_where_it_came_from():
    config = (PPOConfig().environment(RockPaperScissors).env_runners(num_env_runners=0)
              .multi_agent(policies={"p": PolicySpec(action_space=gym.spaces.Text(5))},
                           policy_mapping_fn=lambda agent_id, episode: "p"))
    with pytest.raises(SpaceError, match=r"^policy 'p' \(its observation space from agent 'player1', which maps to "
                                         r"it; its action space from its PolicySpec\): no action distribution for "
                                         r"Text\(1, 5, charset=[0-9A-Za-z]+\); supported"):
        config.build()


def test_an_algorithm_says_what_it_trains_in_its_repr():
    with _rps_config().build() as algo:
        assert repr(algo) == ("PPO(env='RockPaperScissors', policies=['learned', 'beat_last'], training=['learned'], "
                              "iteration=0)")
        algo.train()
        assert repr(algo).endswith("iteration=1)")
    assert repr(PPO.__new__(PPO)) == "<PPO, not built>"


def _seen_episode_ids(agent_id, episode, **kwargs):
    _seen_episode_ids.ids.append(episode.id_)
    return rps_policy_mapping_fn(agent_id, episode, **kwargs)


_seen_episode_ids.ids = []


def test_evaluate_plays_the_same_seeded_episodes_greedily_and_train_adds_it_every_interval(tmp_path):
    config = _rps_config().evaluation(evaluation_interval=2, evaluation_duration=3)
    with config.build() as algo:
        first = algo.train()
        second = algo.train()
        assert "evaluation" not in first and "evaluation" in second
        evaluation = second["evaluation"]
        again = algo.evaluate()
        saved = algo.save(tmp_path / "evaluated")
        # What rollout gives for the same policies: the figures are the episodes' own.
        learned, fixed = algo.get_policy_callable("learned"), algo.get_policy_callable("beat_last")
    assert evaluation["num_episodes"] == 3 and evaluation["num_env_steps"] == 30 and evaluation["explore"] is False
    lifetimes = [e["env_runners"].pop("num_env_steps_sampled_lifetime") for e in (evaluation, again)]
    assert lifetimes == [30, 60]  # evaluation steps over every call
    assert {k: v for k, v in again.items() if k != "time_s"} == {k: v for k, v in evaluation.items() if k != "time_s"}
    assert set(evaluation["policies"]) == {"learned", "beat_last"}
    learned_returns = evaluation["policies"]["learned"]
    assert learned_returns["num_episodes"] == 3 and learned_returns["episode_len_mean"] == 10.0
    assert learned_returns["episode_return_mean"] == evaluation["agent_episode_returns_mean"]["player1"]
    assert evaluation["episode_return_mean"] == pytest.approx(
        sum(evaluation["agent_episode_returns_mean"].values()))  # an episode's return: the sum over its agents
    # RockPaperScissors draws nothing and both policies are deterministic: every episode is this one.
    result = rollout(RockPaperScissors(), {"player1": learned, "player2": fixed}, seed=0)
    assert learned_returns["episode_return_min"] == learned_returns["episode_return_max"] == result.returns["player1"]
    assert evaluation["policies"]["beat_last"]["episode_return_mean"] == result.returns["player2"]
    with PPO.from_checkpoint(saved) as restored:  # the settings come back with the checkpoint
        assert (restored.config.evaluation_interval, restored.config.evaluation_duration) == (2, 3)


def test_evaluation_counts_timesteps_in_whole_episodes_explores_when_asked_and_maps_negative_ids():
    _seen_episode_ids.ids.clear()
    config = (_rps_config().multi_agent(policy_mapping_fn=_seen_episode_ids)
              .evaluation(evaluation_duration=25, evaluation_duration_unit="timesteps",
                          evaluation_config={"explore": True}))
    assert config.evaluation_explore is True
    with config.build() as algo:
        _seen_episode_ids.ids.clear()
        first = algo.evaluate()
        ids = sorted(set(_seen_episode_ids.ids))
        second = algo.evaluate()
    assert first["num_episodes"] == 3 and first["num_env_steps"] == 30 and first["explore"] is True  # 10 per episode
    assert ids == [-4, -3, -2]  # apart from training episodes (ids from 0) and compute_actions' -1
    assert first["policies"] == second["policies"]  # the same draws: a seeded evaluation repeats


def _to_p(agent_id, episode, **kwargs):
    return "p"


def _paid_and_late_config(**env_config):
    return (PPOConfig().environment(PaidAndLateEnv, env_config=env_config)
            .multi_agent(policies={"p": None}, policy_mapping_fn=_to_p)
            .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
            .training(train_batch_size=20, minibatch_size=10, num_epochs=1).evaluation(evaluation_duration=3))


def test_evaluation_counts_agent_episodes_as_training_does():
    # An agent seen only in the final observations (never acting, never paid) was counted.
    with _paid_and_late_config().build() as algo:
        trained = algo.train()
        evaluated = algo.evaluate()
    assert trained["policies"]["p"]["num_episodes"] == 2 * trained["num_episodes"]  # actor and paid, not late
    assert evaluated["policies"]["p"]["num_episodes"] == 2 * evaluated["num_episodes"] == 6
    assert evaluated["agent_episode_returns_mean"] == {"actor": 2.0, "paid": 1.0}
    assert evaluated["policies"]["p"]["episode_len_mean"] == 1.0  # actor's two actions, paid's none
    assert evaluated["episode_return_mean"] == 3.0


def test_evaluation_maps_paid_agents_as_training_does(caplog):
    def refuses_paid(agent_id, episode, **kwargs):
        if agent_id == "paid":
            raise KeyError(agent_id)
        return "p"

    with _paid_and_late_config().multi_agent(policy_mapping_fn=refuses_paid).build() as algo:
        evaluated = algo.evaluate()  # a paid agent the mapping fn refuses: left out of every figure, as in train()
        trained = algo.train()["env_runners"]
    assert evaluated["policies"]["p"]["num_episodes"] == 3
    assert evaluated["episode_return_mean"] == trained["episode_return_mean"] == 2.0  # actor's alone
    assert evaluated["agent_episode_returns_mean"] == trained["agent_episode_returns_mean"] == {"actor": 2.0}
    assert "agent 'paid' was paid but never asked to act" in caplog.text
    config = _paid_and_late_config().multi_agent(
        policy_mapping_fn=lambda agent_id, episode, **kwargs: "missing" if agent_id == "paid" else "p")
    with config.build() as algo:  # a paid agent mapped to no policy: refused, as train() refuses it
        with pytest.raises(ConfigError, match="mapped agent 'paid' to 'missing', which is not a policy"):
            algo.evaluate()
        with pytest.raises(ConfigError, match="mapped agent 'paid' to 'missing', which is not a policy"):
            algo.train()


def test_an_env_failing_while_evaluating_is_rebuilt_and_counted_and_stops_it_after_many_in_a_row(caplog):
    PaidAndLateEnv.failures = 0
    with _paid_and_late_config(fail_resets=2).build() as algo:
        evaluated = algo.evaluate()
        assert evaluated["num_episodes"] == 3 and evaluated["num_env_errors"] == 2
        assert "RuntimeError in evaluation episode -2" in caplog.text
    PaidAndLateEnv.failures = 0
    config = _paid_and_late_config(fail_resets=100).env_runners(max_env_errors_in_a_row=3).evaluation(evaluation_interval=1)
    with config.build() as algo:
        with pytest.raises(EnvContractError, match=r"the env failed 3 times in a row while evaluating; the last, in "
                                                   r"evaluation episode -4 \(seed \d+\): RuntimeError: evaluation env broken"):
            algo.train()
        assert algo.iteration == 1  # the iteration's update stays


def test_a_fixed_policys_own_failure_stops_evaluation_at_once_as_in_training():
    # Counted as the env's errors: the env was rebuilt 10 times, then "the env failed".
    def buggy(observation):
        raise TypeError("bug in my fixed policy")

    def mapping(agent_id, episode, **kwargs):
        return "learned" if agent_id == "player1" else "fixed"

    for fixed, error, message in [(buggy, TypeError, "bug in my fixed policy"),
                                  (lambda observation: 7, ConfigError, "fixed policy 'fixed' chose for agent 'player2'")]:
        config = _rps_config().multi_agent(policies={"learned": None, "fixed": fixed}, policy_mapping_fn=mapping)
        with config.build() as algo, pytest.raises(error, match=message):
            algo.evaluate()


class _LockedPolicy:
    """A fixed policy holding a lock: it cannot be pickled."""

    def __init__(self):
        import threading

        self.lock = threading.Lock()

    def __call__(self, observation):
        return 0


def test_a_fixed_policy_evaluate_cannot_copy_is_used_as_it_is_and_said_once(caplog):
    config = _rps_config().multi_agent(policies={"learned": None, "beat_last": _LockedPolicy()})
    with config.build() as algo:
        for _ in range(2):
            assert algo.evaluate()["num_episodes"] == 10
    assert caplog.text.count("fixed policy 'beat_last' cannot be copied") == 1


def test_evaluation_leaves_training_draws_alone_with_a_fixed_policy_that_draws_its_own():
    # evaluate() called the fixed policy the driver's sampler uses: its draws changed training.
    def run(interval):
        draws = np.random.default_rng(7)
        config = (_rps_config().multi_agent(policies={"learned": None, "beat_last": lambda obs: int(draws.integers(3))})
                  .evaluation(evaluation_interval=interval, evaluation_duration=2))
        with config.build() as algo:
            return [algo.train()["policies"]["learned"]["episode_return_mean"] for _ in range(3)]

    assert run(1) == run(None)


def test_results_carry_rllibs_env_runners_figures_over_whole_episodes_and_checkpoints_keep_their_window(tmp_path):
    with _paid_and_late_config().evaluation(evaluation_interval=1, evaluation_duration=2).build() as algo:
        result = algo.train()
        saved = algo.save(tmp_path / "windows")
    runners = result["env_runners"]  # each episode: actor paid 2 x 1.0, paid 2 x 0.5, in 2 env steps
    assert runners["episode_return_mean"] == runners["episode_return_min"] == runners["episode_return_max"] == 3.0
    assert runners["episode_len_mean"] == 2.0 and runners["num_episodes"] == result["num_episodes"] == 10
    assert runners["agent_episode_returns_mean"] == {"actor": 2.0, "paid": 1.0}
    assert runners["module_episode_returns_mean"] == {"p": result["policies"]["p"]["episode_return_mean"]} == {"p": 1.5}
    assert runners["num_env_steps_sampled"] == runners["num_env_steps_sampled_lifetime"] == 20
    assert result["evaluation"]["env_runners"]["episode_return_mean"] == 3.0  # RLlib's place for evaluate()'s
    assert result["evaluation"]["env_runners"]["num_env_steps_sampled_lifetime"] == 4  # 2 episodes of 2 steps
    with PPO.from_checkpoint(saved, env_config={"length": 4}) as restored:  # episodes of 6.0 from now on
        again = restored.train()
        after = again["env_runners"]
    # Evaluation steps add up over every call, across the checkpoint too: 4, then 2 episodes of 4 steps.
    assert again["evaluation"]["env_runners"]["num_env_steps_sampled_lifetime"] == 4 + 8
    assert 3.0 < after["episode_return_mean"] < 6.0 and after["episode_return_min"] == 3.0  # the old ones stay in


def test_rllibs_names_are_refused_with_what_to_write_and_its_no_op_builders_are_taken():
    cases = [(lambda: PPOConfig().training(sgd_minibatch_size=64), "'sgd_minibatch_size' is RLlib's name; write minibatch_size"),
             (lambda: PPOConfig().training(num_sgd_iter=5), "write num_epochs"),
             (lambda: PPOConfig().training(vf_loss_coeff=1.0), "write vf_coeff, twice RLlib's value"),
             (lambda: PPOConfig().training(lr_schedule=[[0, 1e-3]]), "write lr, which takes the schedule itself"),
             (lambda: PPOConfig().training(**{"lambda": 0.9}), "write lambda_"),
             (lambda: PPOConfig().env_runners(num_rollout_workers=2), "write num_env_runners"),
             (lambda: PPOConfig().rollouts(num_envs_per_worker=2), r"rollouts\(\) is RLlib's older name of env_runners"),
             (lambda: PPOConfig().multi_agent(policies={"p": PolicySpec(config={"num_sgd_iter": 3})}).validate(),
              r"PolicySpec.config has unknown keys \['num_sgd_iter'\].*write num_epochs"),
             (lambda: PPOConfig().callbacks(object), r"callbacks\(\) is RLlib's; this trainer takes no callbacks"),
             (lambda: PPOConfig().rl_module(), r"rl_module\(\) is RLlib's"),
             (lambda: PPOConfig().learners(num_learners=1), r"learners\(\) is RLlib's"),
             (lambda: PPOConfig().framework("tf2"), "this trainer runs torch only"),
             (lambda: PPOConfig().set("sgd_minibatch_size", "64"), "write minibatch_size"),  # marl-train --set's way
             (lambda: PPOConfig().resources(num_gpus=1), r"write resources\(device='cuda'\)"),
             (lambda: PPOConfig().multi_agent(count_steps_by="agent_steps"), "train_batch_size counts env steps"),
             (lambda: PPOConfig.overrides(explore="no"), "explore must be true or false"),
             (lambda: PPOConfig().set("rollouts.num_rollout_workers", "2"), "write num_env_runners"),
             (lambda: PPOConfig().set("fcnet_hiddens", "[64]"), r"write model=\{'hiddens': \[\.\.\.\]\}"),
             (lambda: PPOConfig().multi_agent(policies={"p": PolicySpec(config=PPOConfig.overrides(model={}))}).validate(),
              r"a policy's model goes in PolicySpec\(model=\{\.\.\.\}\)")]
    for build, message in cases:
        with pytest.raises(ConfigError, match=message):
            build()
    config = PPOConfig().framework("torch").api_stack(enable_rl_module_and_learner=True)
    assert config == PPOConfig()  # no-ops, as every RLlib example starts with them
    assert PPOConfig.overrides(lr=1e-4, num_epochs=2) == {"lr": 1e-4, "num_epochs": 2}  # a PolicySpec's config
    # RLlib's evaluation pattern, and a model in RLlib's PolicySpec form.
    assert PPOConfig().evaluation(evaluation_config=PPOConfig.overrides(explore=True)).evaluation_explore is True
    spec = PPOConfig.overrides(model={"hiddens": [16]}, lr=1e-3)
    built = PPOConfig().multi_agent(policies={"p": (None, None, None, spec)})
    built.validate()
    assert built.policies["p"].model == {"hiddens": [16]} and built.policies["p"].config == {"lr": 1e-3}
    assert PPOConfig().multi_agent(count_steps_by="env_steps") == PPOConfig()
    with pytest.raises(ConfigError, match=r"PolicySpec\.config has unknown keys \['vf_loss_coeff'\].*write vf_coeff"):
        PPOConfig.overrides(vf_loss_coeff=1.0)
    # Model settings merge over chained calls, as RLlib's do (the second call dropped the first's).
    merged = PPOConfig().training(model={"hiddens": [32]}).training(model={"activation": "relu"})
    assert merged.model == {"hiddens": [32], "activation": "relu"}
    # copy() copies dict and list fields, and keeps a wrong value for validate() to name (it raised a bare TypeError).
    copied = merged.copy()
    copied.model["hiddens"] = [8]
    assert merged.model["hiddens"] == [32]
    with pytest.raises(ConfigError, match="model must be a dict of model settings, received None"):
        PPOConfig().training(model=None).copy().validate()
    proxied = PPOConfig().environment(env_config=types.MappingProxyType({"rounds": 3}))
    proxied.env_config = types.MappingProxyType({"rounds": 3})  # any Mapping is taken
    assert proxied.copy().env_config == {"rounds": 3} and type(proxied.copy().env_config) is dict


@pytest.mark.parametrize(("change", "message"), [
    ({"evaluation_duration": 0}, "evaluation_duration must be an integer of at least 1, received 0"),
    ({"evaluation_duration_unit": "auto"}, "evaluation_duration_unit must be 'episodes' or 'timesteps', received 'auto'"),
    ({"evaluation_interval": 0}, "evaluation_interval must be None or an integer of at least 1, received 0"),
    ({"evaluation_config": {"explore": False, "env_config": {}}},
     r"evaluation_config takes only 'explore' here, received \['env_config'\]"),
    ({"evaluation_config": "greedy"}, "evaluation_config must be a dict such as"),
])
def test_evaluation_settings_are_checked_by_name(change, message):
    with pytest.raises(ConfigError, match=message):
        _rps_config().evaluation(**change).build()


def test_evaluate_after_stop_is_refused_and_the_setting_is_set_from_text():
    config = _rps_config().set("evaluation.evaluation_interval", "1")
    assert config.evaluation_interval == 1
    algo = config.build()
    algo.stop()
    with pytest.raises(EnvRunnerError, match=r"evaluate\(\) after stop\(\)"):
        algo.evaluate()


def test_lr_and_entropy_coeff_follow_rllibs_schedules_in_env_steps(tmp_path):
    lr = [[0, 1e-3], [400, 1e-4]]
    assert PPOConfig().set("training.lr", "[[0, 0.001], [400, 0.0001]]").lr == lr  # marl-train --set's form
    config = _rps_config(lr=lr, entropy_coeff=[[0, 0.1], [400, 0.0]]).set("training.train_batch_size", "200")
    with config.build() as algo:
        seen = [algo.train()["policies"]["learned"] for _ in range(2)]
        saved = algo.save(tmp_path / "scheduled")
    # At the env steps sampled so far, this iteration's included: 200, then 400.
    assert [m["curr_lr"] for m in seen] == pytest.approx([5.5e-4, 1e-4])
    assert [m["curr_entropy_coeff"] for m in seen] == pytest.approx([0.05, 0.0])
    with PPO.from_checkpoint(saved) as restored:  # the schedule comes back and goes on from 400 steps
        assert restored.config.lr == lr
        assert restored.train()["policies"]["learned"]["curr_lr"] == pytest.approx(1e-4)
    # One policy's own schedule, in its PolicySpec, with RLlib's float steps from JSON.
    own = _rps_config().multi_agent(policies={"learned": PolicySpec(config={"lr": [[0, 2e-3], [4e2, 0.0002]]}),
                                              "beat_last": beat_last_move})
    with own.build() as algo:
        assert algo.train()["policies"]["learned"]["curr_lr"] == pytest.approx(2e-3 - 1.8e-3 / 2)


@pytest.mark.parametrize("schedule", [[[100, 1e-3]], [[0, 1e-3], [0, 1e-4]], [[0, 1e-3], [50, -1.0]], [],
                                      [[0, 1e-3, 5]], [[-1, 1e-3]], [[0.5, 1e-3]]],
                         ids=["not-from-0", "steps-not-increasing", "negative-lr", "empty", "triple", "negative-step",
                              "fraction-step"])
def test_a_schedule_that_is_not_one_is_refused_by_name(schedule):
    with pytest.raises(ConfigError, match=r"lr must be a number above 0, or a schedule \[\[env_steps, lr\], \.\.\.\] "
                                          r"from step 0, its steps increasing"):
        _rps_config(lr=schedule).build()


@pytest.mark.parametrize(("kl_target", "coefficients"), [(1e-12, [0.2, 0.3, 0.45]), (10.0, [0.2, 0.1, 0.05])],
                         ids=["kl-above-target", "kl-below-target"])
def test_the_kl_penalty_adapts_its_coefficient_as_rllib_does_and_checkpoints_keep_it(tmp_path, kl_target, coefficients):
    config = _rps_config(use_kl_loss=True, kl_target=kl_target)
    with config.build() as algo:
        seen = [algo.train()["policies"]["learned"]["curr_kl_coeff"] for _ in range(2)]
        saved = algo.save(tmp_path / "kl")
    with PPO.from_checkpoint(saved) as restored:
        seen.append(restored.train()["policies"]["learned"]["curr_kl_coeff"])
    assert seen == pytest.approx(coefficients)
    with PPO.from_checkpoint(saved, kl_coeff=0.7) as restored:  # a coefficient given anew replaces the saved one
        assert restored.train()["policies"]["learned"]["curr_kl_coeff"] == pytest.approx(0.7)
    # The policies passed again (as a fixed policy without an import path makes a resume do): it goes on.
    with PPO.from_checkpoint(saved, policies={"learned": None, "beat_last": beat_last_move}) as restored:
        assert restored.train()["policies"]["learned"]["curr_kl_coeff"] == pytest.approx(coefficients[2])
    with _rps_config().build() as plain:  # saved without the penalty, resumed with it: the coefficient given
        off = plain.save(tmp_path / "off")
    with PPO.from_checkpoint(off, use_kl_loss=True) as restored:
        assert restored.train()["policies"]["learned"]["curr_kl_coeff"] == pytest.approx(0.2)


def test_a_checkpoint_saved_when_vf_clip_param_clipped_around_old_values_says_its_meaning_changed(tmp_path, caplog):
    import json

    for clip in (0.2, None, float("inf")):  # inf: no clipping, under either meaning
        with _rps_config(vf_clip_param=clip).build() as algo:
            saved = algo.save(tmp_path / f"clip-{clip}")
        config_file = saved / "config.json"
        data = json.loads(config_file.read_text())
        for newer in ("use_kl_loss", "kl_coeff", "kl_target", "evaluation_interval", "evaluation_duration",
                      "evaluation_duration_unit", "evaluation_explore"):
            del data[newer]  # as saved before them
        config_file.write_text(json.dumps(data))
        for overrides in ({}, {"vf_clip_param": 0.5}):
            caplog.clear()
            PPO.from_checkpoint(saved, **overrides).stop()
            said = "was saved when vf_clip_param clipped each value update around the old values" in caplog.text
            assert said is (clip == 0.2 and not overrides), (clip, overrides)
            assert ("Policies ['learned'] clip" in caplog.text) is said


def test_the_kl_penalty_enters_the_loss_only_when_asked():
    def first_losses(**training):
        with _rps_config(**training).build() as algo:
            return algo.train()["policies"]["learned"]

    plain = first_losses()
    assert "curr_kl_coeff" not in plain
    assert first_losses(use_kl_loss=True, kl_coeff=0.0)["total_loss"] == plain["total_loss"]
    penalized = first_losses(use_kl_loss=True, kl_coeff=1000.0)
    assert penalized["total_loss"] != plain["total_loss"] and penalized["approx_kl"] < plain["approx_kl"]
    with pytest.raises(ConfigError, match="kl_target must be a number above 0, received 0"):
        _rps_config(kl_target=0).build()


def _structured_config():
    return (PPOConfig().environment(StructuredActionsEnv)
            .multi_agent(policies={a: None for a in StructuredActionsEnv.ACTION_SPACES},
                         policy_mapping_fn=_own_policy)
            .env_runners(num_env_runners=0, num_envs_per_env_runner=2)
            .training(train_batch_size=80, minibatch_size=40, num_epochs=2).debugging(seed=0))


def test_multibinary_integer_box_and_dict_actions_train_save_and_act_in_their_spaces(tmp_path):
    # They were refused when the policies were built ("no action distribution").
    StructuredActionsEnv.received.clear()
    with _structured_config().build() as algo:
        for _ in range(2):
            result = algo.train()
        obs, _ = StructuredActionsEnv().reset(seed=1)
        greedy = algo.compute_actions(obs)
        saved = algo.save(tmp_path / "structured")
    assert result["num_env_errors_lifetime"] == 0 and len(StructuredActionsEnv.received) == 3 * 160
    assert {agent for agent, _ in StructuredActionsEnv.received} == set(StructuredActionsEnv.ACTION_SPACES)
    for policy_id in StructuredActionsEnv.ACTION_SPACES:
        assert math.isfinite(result["policies"][policy_id]["policy_loss"]), policy_id
    levels = np.array([action for agent, action in StructuredActionsEnv.received if agent == "level"])
    assert set(levels[:, 0].tolist()) == set(range(-3, 4))  # every value of the entry is drawn
    with PPO.from_checkpoint(saved) as restored:
        again = restored.compute_actions(obs)
    for agent_id, space in StructuredActionsEnv.ACTION_SPACES.items():
        assert space.contains(greedy[agent_id]) and space.contains(again[agent_id])
    assert again["pick"].keys() == greedy["pick"].keys() and again["pick"]["move"] == greedy["pick"]["move"]
    np.testing.assert_array_equal(again["switch"], greedy["switch"])
    np.testing.assert_array_equal(again["level"], greedy["level"])


def test_every_space_kind_trains_one_iteration():
    config = (PPOConfig().environment(HeterogeneousSpacesEnv)
              .multi_agent(policies={a: None for a in ("box", "discrete", "masked", "multi")},
                           policy_mapping_fn=lambda agent_id, episode: agent_id)
              .env_runners(num_envs_per_env_runner=2).training(train_batch_size=24, minibatch_size=8, num_epochs=1))
    with config.build() as algo:
        result = algo.train()
    for policy_id in ("box", "discrete", "masked", "multi"):
        assert math.isfinite(result["policies"][policy_id]["policy_loss"]), policy_id


def _grouped_masked(env_config):
    return GroupAgentsWrapper(HeterogeneousSpacesEnv(env_config), {"team": ["masked", "discrete"]})


def test_a_group_with_a_masked_member_trains_on_legal_actions_only():
    # The inner env raises on a masked-out action of "masked": the team's slot 0 must stay legal.
    config = (PPOConfig().environment(_grouped_masked, env_config={"length": 6})
              .multi_agent(policies={a: None for a in ("team", "box", "multi")},
                           policy_mapping_fn=_own_policy)
              .env_runners(num_envs_per_env_runner=2).training(train_batch_size=120, minibatch_size=30, num_epochs=2))
    with config.build() as algo:
        for _ in range(3):
            result = algo.train()
        assert math.isfinite(result["policies"]["team"]["policy_loss"])
        assert result["num_env_steps_sampled_lifetime"] == 360 and result["num_env_errors_lifetime"] == 0
        env = _grouped_masked({"length": 6})
        obs, _ = env.reset(seed=5)
        for _ in range(6):
            actions = algo.compute_actions(obs, explore=True)
            obs = env.step(actions)[0]


def _group_of_groups(env_config):
    return GroupAgentsWrapper(_grouped_masked(env_config), {"outer": ["team", "box"]})


def test_a_group_of_groups_with_a_masked_member_trains_on_legal_actions_only():
    config = (PPOConfig().environment(_group_of_groups, env_config={"length": 6})
              .multi_agent(policies={a: None for a in ("outer", "multi")}, policy_mapping_fn=_own_policy)
              .env_runners(num_envs_per_env_runner=2).training(train_batch_size=60, minibatch_size=30, num_epochs=1))
    with config.build() as algo:
        for _ in range(3):
            result = algo.train()
        assert math.isfinite(result["policies"]["outer"]["policy_loss"])
        assert result["num_env_errors_lifetime"] == 0  # the inner env raises on a masked-out action


def test_a_masked_member_that_cannot_be_read_is_refused_naming_policy_and_slot():
    config = (PPOConfig().environment(_grouped_masked, env_config={"length": 6})
              .multi_agent(policies={"team": PolicySpec(action_space=gym.spaces.Tuple(
                  [gym.spaces.Discrete(5), gym.spaces.Discrete(3)])), "box": None, "multi": None},
                           policy_mapping_fn=_own_policy))
    with pytest.raises(SpaceError, match=r"policy 'team' \(its observation space from agent 'team', which maps to "
                                         r"it; its action space from its PolicySpec\): slot \[0\] of the grouped agent's Tuple observation: "
                                         r"action_mask of shape \(4,\) does not fit Discrete\(5\)"):
        config.build()


def test_images_late_joiners_and_many_agents():
    config = (PPOConfig().environment(ManyAgentsEnv, env_config={"num_agents": 100, "length": 3})
              .multi_agent(policies={"robot": PolicySpec(model={"conv_filters": [[4, 2, 1]], "conv_hidden": 16}),
                                     "boss": None},
                           policy_mapping_fn=lambda agent_id, episode: "robot" if agent_id.startswith("robot") else "boss")
              .env_runners(num_envs_per_env_runner=1).training(train_batch_size=6, minibatch_size=64, num_epochs=1))
    with config.build() as algo:
        result = algo.train()
    assert result["num_agent_steps_sampled"] == 600
    assert result["policies"]["robot"]["num_episodes"] == 2 * 75
    with (PPOConfig().environment(JoinLeaveEnv).env_runners(num_envs_per_env_runner=2)
          .training(train_batch_size=16, minibatch_size=8).build()) as algo:
        assert algo.train()["policies"]["default_policy"]["episode_len_mean"] == pytest.approx(13 / 3)


def test_turn_based_game_learns_and_masks_hold():
    config = (PPOConfig().environment(TwoMoveGame).env_runners(num_envs_per_env_runner=8)
              .training(train_batch_size=256, minibatch_size=64, lr=1e-2, num_epochs=4))
    with config.build() as algo:
        for _ in range(6):
            algo.train()
        greedy = algo.compute_actions({"first": TwoMoveGame()._obs(0)})
    assert greedy["first"] == 1  # the best legal move (2 is larger but masked)


def _rps_without_config() -> RockPaperScissors:
    return RockPaperScissors()


def test_config_errors_name_the_problem():
    with pytest.raises(ConfigError, match="unknown training"):
        PPOConfig().training(learning_rate=1)
    with pytest.raises(ConfigError, match="no env"):
        PPOConfig().build()
    with pytest.raises(ConfigError, match="not a learned policy"):
        _rps_config().multi_agent(policies_to_train=["beat_last"]).build()
    with pytest.raises(SpaceError, match="cannot infer the spaces"):
        (PPOConfig().environment(HeterogeneousSpacesEnv)
         .multi_agent(policies={"x": None}, policy_mapping_fn=lambda agent_id, episode: "x" if agent_id == "y" else "x2")
         .build())
    # An env taking no argument cannot receive env_config: building refuses it rather than drop it.
    with pytest.raises(ConfigError, match=r"env_config \{'rounds': 4\} is set, but the env <function "
                                          r"_rps_without_config .*> takes no argument to receive it"):
        PPOConfig().environment(_rps_without_config, env_config={"rounds": 4}).build()
    config = PPOConfig().set("env_runners.num_envs_per_env_runner", "16").set("training.lr", "3e-4")
    assert config.num_envs_per_env_runner == 16 and config.lr == 3e-4
    for key in ("bogus.lr", "training.extra.lr"):
        with pytest.raises(ConfigError, match=rf"unknown config section '{key.rpartition('.')[0]}' in '{key}'; sections: "):
            config.set(key, "1e-3")
    assert config.lr == 3e-4


def test_tic_tac_toe_from_the_seeds_runs():
    with PPOConfig().environment(TicTacToe).training(train_batch_size=64, minibatch_size=32).build() as algo:
        result = algo.train()
    assert np.isfinite(result["policies"]["default_policy"]["vf_loss"])


def grouped_rock_paper_scissors(config):
    return RockPaperScissors(config).with_agent_groups({"team": ["player1", "player2"]})


def test_grouped_agents_use_tuple_spaces():
    config = (PPOConfig().environment(grouped_rock_paper_scissors)
              .env_runners(num_envs_per_env_runner=2).training(train_batch_size=40, minibatch_size=20))
    with config.build() as algo:
        result = algo.train()
        action = algo.compute_actions({"team": (0, 2)})["team"]
    assert result["policies"]["default_policy"]["episode_len_mean"] == 10
    assert isinstance(action, tuple) and len(action) == 2
    assert algo.policies["default_policy"].layout.num_columns == 2


def test_config_json_round_trip_keeps_specs_and_references():
    from tests.fixtures.envs import IrregularOrderEnv

    config = (PPOConfig().environment(IrregularOrderEnv, env_config={"length": 6})
              .multi_agent(policies={"a": PolicySpec(config={"lr": 1e-2}, model={"hiddens": [8]}),
                                     "b": beat_last_move},
                           policy_mapping_fn=rps_policy_mapping_fn)
              .training(model={"module": _tiny_module}))
    data = json.loads(json.dumps(config.to_json_dict()))
    assert data["model"]["module"] == "tests.ppo.test_algorithm:_tiny_module"
    back = PPOConfig.from_json_dict(data)
    assert back.env is IrregularOrderEnv and back.env_config == {"length": 6}
    assert back.policies["a"] == PolicySpec(config={"lr": 1e-2}, model={"hiddens": [8]})
    assert back.policies["b"] is beat_last_move
    assert back.policy_mapping_fn is rps_policy_mapping_fn
    assert back.model["module"] is _tiny_module
    assert back.for_policy(back.policies["a"])["lr"] == 1e-2


def _tiny_module(observation_space, action_space, model_config):
    return torch.nn.Linear(2, 3)


def test_sampling_uses_its_own_torch_threads_and_the_learner_keeps_its_own():
    seen = []

    def recording_beat_last(observation):
        seen.append(torch.get_num_threads())
        return beat_last_move(observation)

    before = torch.get_num_threads()
    config = _rps_config().multi_agent(policies={"learned": None, "beat_last": recording_beat_last})
    try:
        with config.resources(torch_threads=2).build() as algo:
            assert algo.config.sampling_torch_threads == 1 and algo.out_dir is None
            algo.train()
            assert set(seen) == {1}
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ConfigError, match="vector_mode must be 'sync' or 'async', received 'threads'"):
        _rps_config().env_runners(vector_mode="threads").build()


def test_the_mapping_fn_warning_is_logged_once_per_process(tmp_path, caplog):
    from marl_core.ppo import checkpoint

    checkpoint._warned.clear()
    config = _rps_config().multi_agent(policy_mapping_fn=lambda agent_id, episode: rps_policy_mapping_fn(agent_id, episode))
    with caplog.at_level("INFO", logger="marl_core.ppo.checkpoint"), config.build() as algo:
        algo.save(tmp_path / "a")
        algo.save(tmp_path / "b")
    levels = [r.levelname for r in caplog.records if "policy_mapping_fn was not importable by name" in r.getMessage()]
    assert levels == ["WARNING", "INFO"]


def test_a_checkpoint_of_unnamed_parts_says_all_of_them_when_saved_and_when_loaded(tmp_path, caplog):
    from marl_core.ppo import checkpoint

    checkpoint._warned.clear()
    config = (PPOConfig().environment(lambda cfg: RockPaperScissors(cfg))
              .multi_agent(policies={"learned": None, "heuristic": beat_last_move},
                           policy_mapping_fn=lambda agent_id, episode, **kw: "learned" if agent_id == "player1" else "heuristic",
                           policies_to_train=["learned"])
              .env_runners(num_env_runners=0).training(train_batch_size=40))
    with caplog.at_level("WARNING", logger="marl_core.ppo.checkpoint"), config.build() as algo:
        algo.train()
        saved = algo.save(tmp_path / "ckpt")
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "the saved env was not importable" in warning and "policy_mapping_fn was not importable" in warning
    with pytest.raises(CheckpointError) as caught:
        PPO.from_checkpoint(saved)
    assert str(caught.value).startswith("parts of the saved config cannot be restored:")
    assert "pass env=..." in str(caught.value) and "pass policy_mapping_fn=..." in str(caught.value)
    with PPO.from_checkpoint(saved, env=config.env, policy_mapping_fn=config.policy_mapping_fn) as restored:
        assert restored.iteration == 1 and restored.train()["training_iteration"] == 2


def test_env_errors_of_an_iteration_whose_update_fails_count_in_the_lifetime_total(monkeypatch):
    # They were added with the iteration's other counts, after the update: a failed update lost them.
    from tests.ppo.helpers import FlakyRockPaperScissors

    config = _rps_config().environment(FlakyRockPaperScissors, env_config={"fail_every": 23})
    with config.build() as algo:
        learner = algo.learners["learned"]
        update = learner.update

        def fails(*args, **kwargs):
            raise TrainingError("the loss is not finite")

        monkeypatch.setattr(learner, "update", fails)
        with pytest.raises(TrainingError):
            algo.train()
        assert algo.num_env_errors_lifetime > 0 and algo.iteration == 0
        lost_before = algo.num_env_errors_lifetime
        monkeypatch.setattr(learner, "update", update)
        result = algo.train()
        assert result["num_env_errors_lifetime"] == lost_before + result["num_env_errors"]


def test_train_after_stop_says_so():
    # It was an AttributeError ('NoneType' object has no attribute 'sample'); save() still works.
    from marl_core.errors import EnvRunnerError

    algo = _rps_config().build()
    algo.train()
    algo.stop()
    with pytest.raises(EnvRunnerError, match=r"train\(\) after stop\(\): the env runners and their envs are closed"):
        algo.train()
    assert algo.compute_actions({"player1": 0})["player1"] in range(3)


def test_an_unnamed_fixed_policy_asks_for_the_whole_policies_dict(tmp_path):
    # The message said "pass policies={...} with it"; passing only that one dropped the learned
    # policy ("policies_to_train names 'learned', which is not a learned policy").
    heuristic = lambda observation: beat_last_move(observation)  # noqa: E731
    config = _rps_config().multi_agent(policies={"learned": None, "beat_last": heuristic})
    with config.build() as algo:
        algo.train()
        saved = algo.save(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match=re.escape(
            "fixed policy 'beat_last' was not importable by name when saved; pass policies={...} with it to "
            "from_checkpoint (every policy, 'beat_last', 'learned': the dict replaces the saved one)")):
        PPO.from_checkpoint(saved)
    with PPO.from_checkpoint(saved, policies={"learned": None, "beat_last": heuristic}) as restored:
        assert restored.iteration == 1 and restored.train()["training_iteration"] == 2
    # The same for a policy whose spec held a space without a JSON form.
    from marl_core.ppo.config import _field_from_json

    unsaved = {"kind": "spec", "config": {}, "model": {}, "observation_space": {"__unsaved__": "Odd()"}}
    assert _field_from_json("policies", {"learned": {"kind": "learned"}, "odd": unsaved})[1] == [
        "policies['odd']['observation_space'] (Odd()) had no JSON form when the checkpoint was saved; pass "
        "policies=... to from_checkpoint (every policy, 'learned', 'odd': the dict replaces the saved one)"]


def test_a_ray_address_where_nothing_answers_is_refused_at_once():
    # ray.init would retry for minutes before giving up.
    config = _rps_config().env_runners(num_env_runners=1).resources(ray_address="127.0.0.1:1")
    with pytest.raises(ConfigError, match=r"cannot reach a Ray cluster at ray_address='127\.0\.0\.1:1': .*refused"):
        config.build()


@pytest.mark.parametrize("answer", [b"HTTP/1.1 400 Bad Request\r\n\r\n", None], ids=["http", "silent"])
def test_a_ray_address_where_something_else_answers_is_refused_at_once(answer, monkeypatch):
    # A TCP connection was all it checked: ray.init then retried for minutes, printing GCS timeouts.
    import socket
    import threading

    from marl_core.ppo import runners

    monkeypatch.setattr(runners, "_PROBE_TIMEOUT_S", 1.0)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(64)
            if answer is not None:
                connection.sendall(answer)
            else:
                connection.recv(64)  # silent until the client gives up

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    config = _rps_config().env_runners(num_env_runners=1).resources(ray_address=f"127.0.0.1:{port}")
    try:
        with pytest.raises(ConfigError, match=rf"ray_address='127\.0\.0\.1:{port}': something listens there, but "
                                              "it is not a Ray cluster"):
            config.build()
    finally:
        server.join(timeout=10)
        listener.close()


def _wide_box_config(**environment):
    return (PPOConfig().environment(WideBoxBandit, **environment)
            .env_runners(num_env_runners=0, num_envs_per_env_runner=4)
            .training(train_batch_size=200, minibatch_size=100, num_epochs=2).debugging(seed=0))


def test_actions_are_normalized_as_rllib_does_unless_turned_off_and_old_checkpoints_keep_their_units(tmp_path, caplog):
    assert PPOConfig().normalize_actions is True  # RLlib's default
    assert PPOConfig.from_json_dict({"lr": 1e-3}).normalize_actions is True  # a config, not a checkpoint
    assert PPOConfig().set("environment.normalize_actions", "false").normalize_actions is False
    with pytest.raises(ConfigError, match="normalize_actions"):
        _wide_box_config(normalize_actions="yes").build()
    obs = {"agent": np.zeros(2, np.float32)}
    for normalize in (True, False):
        WideBoxBandit.received.clear()
        with _wide_box_config(normalize_actions=normalize).build() as algo:
            algo.train()
            greedy = float(algo.compute_actions(obs)["agent"][0])
            saved = algo.save(tmp_path / f"normalize-{normalize}")
        sampled = np.array(WideBoxBandit.received)
        if normalize:  # the sampler and compute_actions both map [-1, 1] onto [0, 100]
            assert 30.0 < sampled.mean() < 70.0 and 30.0 < greedy < 70.0
        else:  # a Gaussian at 0 in the env's units: half its draws clipped to 0
            assert (sampled == 0.0).mean() > 0.3 and greedy < 5.0
        with PPO.from_checkpoint(saved) as restored:
            assert restored.config.normalize_actions is normalize
            assert float(restored.compute_actions(obs)["agent"][0]) == pytest.approx(greedy)
    # Loaded the other way, its Box actions mean other values than it learned: said (and only then).
    with caplog.at_level("WARNING", logger="marl_core.ppo.checkpoint"):
        for saved_with in (True, False):
            for loaded_with in (None, saved_with, not saved_with):
                caplog.clear()
                options = {} if loaded_with is None else {"normalize_actions": loaded_with}
                with PPO.from_checkpoint(tmp_path / f"normalize-{saved_with}", **options) as loaded:
                    assert loaded.config.normalize_actions is (saved_with if loaded_with is None else loaded_with)
                said = f"learned with normalize_actions={saved_with} and now act with {not saved_with}"
                assert (said in caplog.text) is (loaded_with is (not saved_with)), (saved_with, loaded_with)
        with _rps_config().build() as discrete:  # no Box action: nothing to say
            saved = discrete.save(tmp_path / "discrete")
        caplog.clear()
        with PPO.from_checkpoint(saved, normalize_actions=False):
            assert "normalize_actions" not in caplog.text
    # Saved before the option existed, its policy learned in the env's units: it loads with False
    # (here the weights of a normalized run, so its greedy action, the Gaussian's mean, is near 0).
    older = tmp_path / "normalize-True"
    data = json.loads((older / "config.json").read_text())
    del data["normalize_actions"]
    (older / "config.json").write_text(json.dumps(data))
    with PPO.from_checkpoint(older) as restored:
        assert restored.config.normalize_actions is False
        assert float(restored.compute_actions(obs)["agent"][0]) < 5.0

"""Tests of marl_core.vector: VectorMultiAgentEnv (sync and async), gather, scatter, stack."""

from __future__ import annotations

import collections
import copy
import functools
import gc
import importlib
import logging
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from marl_core.env import ALL, MultiAgentEnv
from marl_core.errors import MultiAgentEnvError, ResetNeededError, SpaceError, VectorEnvError
from marl_core.rollout import RandomPolicy
from marl_core.spaces import check_action_dict
from marl_core.vector import PolicyBatch, VectorMultiAgentEnv, gather, scatter, stack
from tests.fixtures.envs import (
    CORRECT_ENVS,
    HeterogeneousSpacesEnv,
    IrregularOrderEnv,
    JoinLeaveEnv,
    RockPaperScissors,
    TicTacToe,
)

REPO = Path(__file__).resolve().parents[2]


# Helpers ------------------------------------------------------------------------------------


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Deep equality of nested dicts / tuples / lists / arrays, dtypes included."""
    if isinstance(a, Mapping):
        assert isinstance(b, Mapping) and list(a) == list(b), f"{where}: keys {list(a)} vs {b!r}"
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), f"{where}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, f"{where}: {a!r} vs {b!r}"
        assert np.array_equal(a, b), f"{where}: {a!r} vs {b!r}"
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} vs {b!r}"


def play(venv: VectorMultiAgentEnv, env_cls: type, seed: int, steps: int) -> tuple[list, list]:
    """Reset with ``seed`` and step with seeded random legal actions; return outputs and actions."""
    policies = [RandomPolicy(env_cls(), seed=100 + i) for i in range(venv.num_envs)]
    obs_list, infos_list = venv.reset(seed=seed)
    outputs: list[Any] = [(obs_list, infos_list)]
    actions_used = []
    for _ in range(steps):
        actions = [
            {agent_id: policies[i](agent_id, obs_list[i][agent_id]) for agent_id in venv.acting[i]}
            for i in range(venv.num_envs)
        ]
        result = venv.step(actions)
        outputs.append((result, list(venv.autoreset)))
        actions_used.append(actions)
        obs_list = result[0]
    return outputs, actions_used


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    """Poll until none of ``pids`` is alive; return those still alive at the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [pid for pid in pids if alive(pid)]
        if not left:
            return []
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


class ExplodingEnv(RockPaperScissors):
    """Rock-paper-scissors whose step raises at move ``fail_at``."""

    def __init__(self, fail_at: int = 2) -> None:
        super().__init__()
        self.fail_at = fail_at

    def step(self, action_dict):
        if self.num_moves + 1 >= self.fail_at:
            raise RuntimeError(f"boom at move {self.num_moves + 1}")
        return super().step(action_dict)


class DyingEnv(RockPaperScissors):
    """Rock-paper-scissors whose process exits hard on the first step."""

    def step(self, action_dict):
        os._exit(3)


class SleepingEnv(RockPaperScissors):
    """Rock-paper-scissors whose step sleeps 10 s (a call to interrupt)."""

    def step(self, action_dict):
        time.sleep(10)
        return super().step(action_dict)


class BigObsEnv(MultiAgentEnv):
    """Three agents seeing 200 KB images (large enough for the shared-memory path)."""

    def __init__(self) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["a", "b", "c"]
        self.observation_spaces = {a: gym.spaces.Box(0, 255, (200, 250, 4), np.uint8) for a in self.agents}
        self.action_spaces = {a: gym.spaces.Box(-1.0, 1.0, (2,), np.float32) for a in self.agents}
        self.t = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {a: self.np_random.integers(0, 256, (200, 250, 4), dtype=np.uint8) for a in self.agents}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action_dict):
        self.t += 1
        rewards = {a: float(np.sum(action_dict[a])) for a in self.agents}
        return self._obs(), rewards, {ALL: self.t >= 4}, {ALL: False}, {}


def broken_factory() -> MultiAgentEnv:
    raise OSError("no such game file")


# Semantics ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CORRECT_ENVS))
def test_sync_and_async_give_identical_results(name: str) -> None:
    env_cls = CORRECT_ENVS[name]
    with VectorMultiAgentEnv([env_cls] * 2, "sync") as sync_env:
        sync_out, _ = play(sync_env, env_cls, seed=7, steps=25)
    with VectorMultiAgentEnv([env_cls] * 2, "async") as async_env:
        async_out, _ = play(async_env, env_cls, seed=7, steps=25)
    assert_same(sync_out, async_out)
    assert any(any(flags) for _, flags in sync_out[1:]), "the run should cover an autoreset"


class ReusedBufferEnv(MultiAgentEnv):
    """Writes every observation and info into arrays it keeps, as fast envs do; the episode ends
    after ``length`` steps, or, with ``fail_at``, its step raises there (the rebuilt env's reset
    then writes into its own arrays)."""

    def __init__(self, length: int = 3, fail_at: int | None = None) -> None:
        super().__init__()
        self.possible_agents = ["a"]
        self.observation_spaces = {"a": gym.spaces.Box(0.0, 100.0, (2,), np.float32)}
        self.action_spaces = {"a": gym.spaces.Discrete(2)}
        self.length, self.fail_at = length, fail_at
        self.buffer, self.info = np.zeros(2, np.float32), {"step": np.zeros(1)}

    def _write(self, value: float) -> tuple[dict, dict]:
        self.buffer[:] = value
        self.info["step"][:] = value
        return {"a": self.buffer}, {"a": self.info}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.agents, self.t = ["a"], 0
        return self._write(0.0)

    def step(self, action_dict):
        self.t += 1
        if self.t == self.fail_at:
            raise RuntimeError("step failed")
        obs, infos = self._write(float(self.t))
        return obs, {"a": 0.0}, {ALL: self.t >= self.length}, {ALL: False}, infos


def _kept_observations(venv: VectorMultiAgentEnv, steps: int) -> list[float]:
    """The first observation of every call's results, read after all ``steps`` steps."""
    kept = [venv.reset(seed=0)[0][0]]
    for _ in range(steps):
        kept.append(venv.step([{"a": 0}])[0][0])
        kept.extend([venv.reset_results[0][0]] if venv.reset_results[0] is not None else [])
    return [float(obs["a"][0]) for obs in kept]


@pytest.mark.parametrize("autoreset_mode", ["next_step", "same_step"])
def test_a_sync_vector_returns_copies_as_an_async_one_does(autoreset_mode: str) -> None:
    # The env's own arrays came back in sync mode: results kept from an earlier step changed.
    factory = functools.partial(ReusedBufferEnv, length=2)
    with VectorMultiAgentEnv([factory], "sync", autoreset_mode=autoreset_mode) as sync_env:
        from_sync = _kept_observations(sync_env, 4)
        infos = sync_env.reset(seed=0)[1]
        sync_env.step([{"a": 0}])
        assert infos[0]["a"]["step"][0] == 0.0
    with VectorMultiAgentEnv([factory], "async", autoreset_mode=autoreset_mode) as async_env:
        from_async = _kept_observations(async_env, 4)
    assert from_sync == from_async
    assert from_sync == ([0.0, 1.0, 2.0, 0.0, 1.0] if autoreset_mode == "next_step"
                         else [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0])


def test_a_rebuilt_sync_env_returns_copies_too() -> None:
    factory = functools.partial(ReusedBufferEnv, length=10, fail_at=2)
    with VectorMultiAgentEnv([factory], "sync", on_error="rebuild") as venv:
        kept = [venv.reset(seed=0), venv.step([{"a": 0}]), venv.step([{"a": 0}])]  # the second rebuilds
        assert venv.autoreset == [True]
        venv.step([{"a": 0}])  # the rebuilt env: its step 1... and step 2 fails again, rebuilt again
        venv.step([{"a": 0}])
    assert [float(result[0][0]["a"][0]) for result in kept] == [0.0, 1.0, 0.0]


class KeepsActionsAndSets(MultiAgentEnv):
    """Shows each step's action (the array it received, kept) at the next step, and returns one
    set and one deque it keeps adding to in its infos."""

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["a"]
        self.observation_spaces = {"a": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)}
        self.action_spaces = {"a": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.agents, self.t, self.last = ["a"], 0, np.zeros(2, np.float32)
        self.seen, self.history = set(), collections.deque(maxlen=5)
        return {"a": self.last}, {"a": {"seen": self.seen, "history": self.history}}

    def step(self, action_dict):
        shown, self.last = self.last, action_dict["a"]  # kept as it came
        self.t += 1
        self.seen.add(self.t)
        self.history.append(self.t)
        return ({"a": shown}, {"a": 0.0}, {ALL: False}, {ALL: False},
                {"a": {"seen": self.seen, "history": self.history}})


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_envs_keep_copies_of_their_actions_and_results_keep_their_sets(mode: str) -> None:
    # Sync mode sent the caller's arrays and returned the env's sets: a caller reusing one action
    # buffer changed what the env had kept, and kept infos changed with later steps (not in async).
    with VectorMultiAgentEnv([KeepsActionsAndSets], mode) as venv:
        _, kept_infos = venv.reset(seed=0)
        action = np.zeros(2, np.float32)
        shown = []
        for value in (0.1, 0.2, 0.3):
            action[:] = value  # one buffer, written again before every step
            obs, *_ = venv.step([{"a": action}])
            shown.append(float(obs[0]["a"][0]))
        infos = venv.step([{"a": action}])[4]
    assert shown == pytest.approx([0.0, 0.1, 0.2])
    assert kept_infos[0]["a"]["seen"] == set() and list(kept_infos[0]["a"]["history"]) == []
    assert infos[0]["a"]["seen"] == {1, 2, 3, 4} and infos[0]["a"]["history"].maxlen == 5


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_vector_refuses_to_be_pickled_or_copied(mode: str) -> None:
    # A sync copy shared the envs and closed none of them; an async one failed inside multiprocessing.
    with VectorMultiAgentEnv([KeepsActionsAndSets], mode) as venv:
        for clone in (pickle.dumps, copy.deepcopy):
            with pytest.raises(VectorEnvError, match="cannot be pickled or copied: its envs and worker processes"):
                clone(venv)


def test_a_sync_vector_without_copies_returns_the_envs_own_objects() -> None:
    with VectorMultiAgentEnv([ReusedBufferEnv], "sync", copy=False) as venv:
        obs_list, _ = venv.reset(seed=0)
        assert obs_list[0]["a"] is venv.call("buffer")[0]
    with pytest.raises(VectorEnvError, match=r"copy=False applies to mode='sync' only: async results always "
                                             r"arrive as copies"):
        VectorMultiAgentEnv([ReusedBufferEnv], "async", copy=False)


@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_fewer_workers_than_envs_give_identical_results(num_workers: int) -> None:
    with VectorMultiAgentEnv([JoinLeaveEnv] * 5) as sync_env:
        sync_out, _ = play(sync_env, JoinLeaveEnv, seed=2, steps=12)
    with VectorMultiAgentEnv([JoinLeaveEnv] * 5, "async", num_workers=num_workers) as async_env:
        assert len(set(async_env._workers.pids)) == num_workers
        async_out, _ = play(async_env, JoinLeaveEnv, seed=2, steps=12)
    assert_same(sync_out, async_out)


def test_large_observations_travel_through_shared_memory() -> None:
    with VectorMultiAgentEnv([BigObsEnv] * 2) as sync_env:
        sync_out, _ = play(sync_env, BigObsEnv, seed=0, steps=9)
    with VectorMultiAgentEnv([BigObsEnv] * 2, "async") as async_env:
        async_out, _ = play(async_env, BigObsEnv, seed=0, steps=9)
        blocks = [shm.name for shm in async_env._workers.shms]
        assert all(blocks), "replies of 600 KB should have moved to shared memory"
    assert_same(sync_out, async_out)
    obs = async_out[-1][0][0][1]["b"]
    assert obs.flags.writeable  # a private copy, not a view of the block
    obs[0, 0, 0] = 7
    assert not [name for name in blocks if Path(f"/dev/shm/{name.lstrip('/')}").exists()]


def test_without_shared_memory_replies_go_through_the_pipe(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_space(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    with VectorMultiAgentEnv([BigObsEnv] * 2) as sync_env:
        sync_out, _ = play(sync_env, BigObsEnv, seed=1, steps=6)
    monkeypatch.setattr("marl_core._vector_workers.shared_memory.SharedMemory", no_space)
    with (
        caplog.at_level(logging.WARNING, logger="marl_core.vector"),
        VectorMultiAgentEnv([BigObsEnv] * 2, "async", num_workers=1) as async_env,
    ):
        async_out, _ = play(async_env, BigObsEnv, seed=1, steps=6)
        assert async_env._workers.shms == [None]
    assert_same(sync_out, async_out)
    assert caplog.text.count("No space left on device") == 1


def test_a_block_without_room_in_dev_shm_leaves_replies_in_the_pipe(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # /dev/shm creates sparse blocks: one it had no room for was made, and the worker writing into it
    # died of SIGBUS ("exited unexpectedly with code -7"), all envs with it. Its pages are now
    # reserved first; posix_fallocate fails with ENOSPC where a small /dev/shm (Docker's 64 MB) is full.
    created: list[str] = []
    real_shared_memory = shared_memory.SharedMemory

    def recording(*args: Any, **kwargs: Any) -> shared_memory.SharedMemory:
        block = real_shared_memory(*args, **kwargs)
        created.append(block.name)
        return block

    def no_room(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("marl_core._vector_workers.shared_memory.SharedMemory", recording)
    monkeypatch.setattr("marl_core._vector_workers.os.posix_fallocate", no_room)
    with VectorMultiAgentEnv([BigObsEnv] * 2) as sync_env:
        sync_out, _ = play(sync_env, BigObsEnv, seed=1, steps=6)
    with (
        caplog.at_level(logging.WARNING, logger="marl_core._vector_workers"),
        VectorMultiAgentEnv([BigObsEnv] * 2, "async", num_workers=1) as async_env,
    ):
        async_out, _ = play(async_env, BigObsEnv, seed=1, steps=6)
        assert async_env._workers.shms == [None]
    assert_same(sync_out, async_out)
    assert "replies go through its pipe" in caplog.text
    assert created and not [name for name in created if Path(f"/dev/shm/{name.lstrip('/')}").exists()]


@pytest.mark.parametrize("env_cls", [IrregularOrderEnv, JoinLeaveEnv, HeterogeneousSpacesEnv])
def test_each_env_behaves_as_if_run_alone_with_seed_plus_index(env_cls: type) -> None:
    with VectorMultiAgentEnv([env_cls] * 3) as venv:
        outputs, actions_used = play(venv, env_cls, seed=11, steps=20)
    for i in range(3):
        env = env_cls()
        assert_same(env.reset(seed=11 + i), (outputs[0][0][i], outputs[0][1][i]))
        for step, actions in enumerate(actions_used, start=1):
            result, autoreset = outputs[step]
            mine = tuple(column[i] for column in result)
            if autoreset[i]:
                obs, infos = env.reset()
                expected: tuple = (obs, {}, {ALL: False}, {ALL: False}, infos)
            else:
                expected = env.step(actions[i])
            assert_same(expected, mine, f"env {i} step {step}")


def test_autoreset_ignores_the_action_dict_and_reports_the_new_episode() -> None:
    with VectorMultiAgentEnv([RockPaperScissors, lambda: RockPaperScissors()]) as venv:
        venv.reset(seed=0)
        for _ in range(9):
            venv.step([{"player1": 0, "player2": 1}] * 2)
        obs_list, rewards_list, terminateds_list, truncateds_list, _ = venv.step([{"player1": 0, "player2": 1}] * 2)
        assert terminateds_list == [{ALL: True}, {ALL: True}]
        assert venv.acting == [[], []]
        assert venv.autoreset == [False, False]
        # Ended envs reset on this step: the action dict is ignored (empty here, junk in env 1).
        obs_list, rewards_list, terminateds_list, truncateds_list, _ = venv.step([{}, {"nobody": 5}])
        assert obs_list == [{"player1": 0, "player2": 0}] * 2
        assert rewards_list == [{}, {}]
        assert terminateds_list == truncateds_list == [{ALL: False}, {ALL: False}]
        assert venv.autoreset == [True, True]
        assert venv.acting == [["player1", "player2"]] * 2
        venv.step([{"player1": 2, "player2": 1}] * 2)
        assert venv.autoreset == [False, False]


class EndsAfter(RockPaperScissors):
    """Rock-paper-scissors ending after ``length`` moves; its reset reports the seed it got."""

    def __init__(self, length: int) -> None:
        super().__init__()
        self.length = length

    def reset(self, *, seed=None, options=None):
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {"player1": {"seed": seed}}

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if self.num_moves >= self.length:
            terminateds = {**terminateds, ALL: True}
        return obs, rewards, terminateds, truncateds, infos


@pytest.mark.parametrize(("mode", "num_workers"), [("sync", None), ("async", None), ("async", 1)])
def test_same_step_autoreset_resets_ended_envs_within_the_step(mode: str, num_workers: int | None) -> None:
    with VectorMultiAgentEnv([lambda: EndsAfter(2), lambda: EndsAfter(3)], mode, num_workers=num_workers,
                             autoreset_mode="same_step") as venv:
        venv.reset(seed=0)
        assert venv.reset_results == [None, None]
        venv.step([{"player1": 0, "player2": 1}] * 2)
        assert venv.reset_results == [None, None]
        _, rewards_list, terminateds_list, _, _ = venv.step([{"player1": 0, "player2": 1}] * 2)
        # env 0 ended: the final results come back, and the new episode is ready in reset_results.
        assert terminateds_list[0][ALL] is True and rewards_list[0] == {"player1": -1, "player2": 1}
        assert venv.reset_results[0] == ({"player1": 0, "player2": 0}, {"player1": {"seed": None}})
        assert venv.reset_results[1] is None
        assert venv.autoreset == [False, False]
        assert venv.acting == [["player1", "player2"]] * 2
        # Both envs step on the next call: no call is spent on a reset.
        _, rewards_list, terminateds_list, _, _ = venv.step([{"player1": 1, "player2": 0}] * 2)
        assert rewards_list == [{"player1": 1, "player2": -1}] * 2
        assert terminateds_list[1][ALL] is True and venv.reset_results[1] is not None
        # reset() starts new episodes everywhere: no env holds an autoreset result any more.
        venv.reset(seed=1)
        assert venv.reset_results == [None, None]
    with pytest.raises(VectorEnvError, match="autoreset_mode must be 'next_step' or 'same_step'"):
        VectorMultiAgentEnv([RockPaperScissors], autoreset_mode="never")  # type: ignore[arg-type]


class EndsThenResetFails(EndsAfter):
    """Ends after one move; its second reset (the same-step autoreset) raises."""

    def __init__(self) -> None:
        super().__init__(1)
        self.resets = 0

    def reset(self, *, seed=None, options=None):
        self.resets += 1
        if self.resets == 2:
            raise RuntimeError("reset refused after the episode")
        return super().reset(seed=seed, options=options)


@pytest.mark.parametrize(("mode", "num_workers"), [("sync", None), ("async", None), ("async", 1)])
def test_a_failing_same_step_reset_keeps_the_ended_episode_results(mode: str, num_workers: int | None) -> None:
    moves = [{"player1": 1, "player2": 0}] * 2
    with VectorMultiAgentEnv([RockPaperScissors, EndsThenResetFails], mode, num_workers=num_workers,
                             autoreset_mode="same_step", on_error="rebuild") as venv:
        venv.reset(seed=0)
        _, rewards_list, terminateds_list, _, _ = venv.step(moves)
        # The step that ended the episode comes back whole; the env was rebuilt for the next one.
        assert rewards_list == [{"player1": 1, "player2": -1}] * 2
        assert terminateds_list[1][ALL] is True
        assert [index for index, _ in venv.last_failures] == [1]
        assert "reset refused after the episode" in venv.last_failures[0][1]
        first_obs, first_infos = venv.reset_results[1]
        assert first_obs == {"player1": 0, "player2": 0}
        assert isinstance(first_infos["player1"]["seed"], int)  # the rebuilt env, seeded from its own stream
        assert venv.autoreset == [False, False] and venv.acting[1] == ["player1", "player2"]
        assert venv.step(moves)[1][1] == {"player1": 1, "player2": -1}
    with VectorMultiAgentEnv([RockPaperScissors, EndsThenResetFails], mode, num_workers=num_workers,
                             autoreset_mode="same_step") as venv:
        venv.reset(seed=0)
        with pytest.raises(VectorEnvError, match=r"^env 1 raised RuntimeError during reset\(\) \(the same-step autoreset "
                           r"after its episode ended\): reset refused after the episode") as error:
            venv.step(moves)
        assert isinstance(error.value.__cause__, RuntimeError)  # the env's exception (or, async, the worker's copy)
        assert mode == "async" or error.value.__cause__.__traceback__ is not None
        assert mode == "sync" or "reset refused" in error.value.remote_traceback
        with pytest.raises(ResetNeededError):
            venv.step(moves)
    with VectorMultiAgentEnv([RockPaperScissors, EndsThenResetFails], mode, num_workers=num_workers,
                             autoreset_mode="same_step") as venv:
        venv.on_error = "rebuild"  # read at every step
        venv.reset(seed=0)
        assert venv.step(moves)[1][1] == {"player1": 1, "player2": -1}
        assert [index for index, _ in venv.last_failures] == [1]


@pytest.mark.parametrize(("mode", "num_workers"), [("sync", None), ("async", None), ("async", 1)])
def test_a_failing_step_reports_a_same_step_reset_that_failed_beside_it(mode: str, num_workers: int | None) -> None:
    # Only env 1's step failure was reported; env 0's failed autoreset went unmentioned.
    with VectorMultiAgentEnv([EndsThenResetFails, lambda: ExplodingEnv(1)], mode, num_workers=num_workers,
                             autoreset_mode="same_step") as venv:
        venv.reset(seed=0)
        with pytest.raises(VectorEnvError, match=r"^env 1 raised RuntimeError during step\(\): boom at move 1; env 0's "
                           r"same-step autoreset raised RuntimeError: reset refused after the episode, too") as error:
            venv.step([{"player1": 1, "player2": 0}] * 2)
        assert error.value.index == 1 and isinstance(error.value.__cause__, RuntimeError)
        with pytest.raises(ResetNeededError):
            venv.step([{"player1": 1, "player2": 0}] * 2)


class PicklingCounted(RuntimeError):
    pickled = 0

    def __reduce__(self):
        PicklingCounted.pickled += 1
        return super().__reduce__()


class EndsThenResetRaisesCounted(EndsThenResetFails):
    def reset(self, *, seed=None, options=None):
        if self.resets == 1:
            self.resets += 1
            raise PicklingCounted("reset refused after the episode")
        return super().reset(seed=seed, options=options)


def test_a_failed_same_step_reset_in_sync_mode_is_not_pickled() -> None:
    # Its exception was pickled (and unpickled) for nothing: an env it refers to went with it.
    moves = [{"player1": 1, "player2": 0}]
    with VectorMultiAgentEnv([EndsThenResetRaisesCounted], "sync", autoreset_mode="same_step") as venv:
        venv.reset(seed=0)
        with pytest.raises(VectorEnvError, match="during reset") as error:
            venv.step(moves)
        assert isinstance(error.value.__cause__, PicklingCounted)
    assert PicklingCounted.pickled == 0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_env_error_names_the_call_that_raised(mode: str) -> None:
    # The messages said "env 1 raised RuntimeError: ..." whether step() or reset() raised.
    moves = [{"player1": 1, "player2": 0}] * 2
    with VectorMultiAgentEnv([RockPaperScissors, EndsThenResetFails], mode) as venv:
        venv.reset(seed=0)
        assert venv.step(moves)[2][1][ALL] is True
        with pytest.raises(VectorEnvError, match=r"^env 1 raised RuntimeError during reset\(\): reset refused"):
            venv.step(moves)  # the next-step autoreset
    with VectorMultiAgentEnv([RockPaperScissors, lambda: ExplodingEnv(fail_at=1)], mode) as venv:
        venv.reset(seed=0)
        with pytest.raises(VectorEnvError, match=r"^env 1 raised RuntimeError during step\(\): boom at move 1"):
            venv.step(moves)


def connect_four() -> MultiAgentEnv:
    from pettingzoo.classic.connect_four import connect_four as module

    from bridges.pettingzoo import PettingZooEnv

    return PettingZooEnv(module.env())


def test_bridged_turn_based_game_with_masks_in_both_modes() -> None:
    with VectorMultiAgentEnv([connect_four] * 3) as sync_env:
        sync_out, _ = play(sync_env, connect_four, seed=5, steps=60)
    with VectorMultiAgentEnv([connect_four] * 3, "async", num_workers=2) as async_env:
        async_out, _ = play(async_env, connect_four, seed=5, steps=60)
    assert_same(sync_out, async_out)
    assert sum(any(flags) for _, flags in sync_out[1:]) >= 1, "60 moves in 3 games should finish one"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_masked_out_moves_of_a_bridged_game_are_refused_before_any_env_steps(mode: str) -> None:
    with VectorMultiAgentEnv([connect_four] * 2, mode) as venv:
        venv.reset(seed=0)
        for _ in range(6):  # alternating pieces fill column 0 without a winner
            obs_list = venv.step([{a: 0 for a in acting} for acting in venv.acting])[0]
        player = venv.acting[1][0]
        assert obs_list[1][player]["action_mask"].tolist() == [0, 1, 1, 1, 1, 1, 1]
        with pytest.raises(VectorEnvError, match=rf"env 0: illegal action for agent '{player}': received 0, legal actions now: \[1, 2, 3, 4, 5, 6\]"):
            venv.step([{a: 0 for a in acting} for acting in venv.acting])
        with pytest.raises(VectorEnvError, match=rf"env 1: invalid action for agent '{player}'"):
            venv.step([{player: 1}, {player: 7}])
        obs_list = venv.step([{player: 1}, {player: 1}])[0]
        assert obs_list[0] and all(obs[a]["observation"][5, 1].any() for obs in obs_list for a in obs)


def test_turn_based_envs_ask_only_the_player_to_move() -> None:
    with VectorMultiAgentEnv([TicTacToe] * 4) as venv:
        obs_list, _ = venv.reset(seed=3)
        assert all(len(obs) == 1 for obs in obs_list)
        assert venv.acting == [list(obs) for obs in obs_list]
        starters = [next(iter(obs)) for obs in obs_list]
        assert starters == [next(iter(TicTacToe().reset(seed=3 + i)[0])) for i in range(4)]


def test_spaces_and_agents_are_those_of_env_zero_in_both_modes() -> None:
    for mode in ("sync", "async"):
        with VectorMultiAgentEnv([HeterogeneousSpacesEnv] * 2, mode) as venv:
            env = HeterogeneousSpacesEnv()
            assert venv.possible_agents == env.possible_agents
            for agent_id in env.possible_agents:
                assert venv.get_observation_space(agent_id) == env.get_observation_space(agent_id)
                assert venv.get_action_space(agent_id) == env.get_action_space(agent_id)
            assert venv.call("length") == [6, 6]
            assert venv.call("get_action_space", "discrete") == [gym.spaces.Discrete(3)] * 2


# Bad input ----------------------------------------------------------------------------------


def _bad_inputs() -> list[tuple[Any, str]]:
    ok = {"player1": 0, "player2": 1}
    return [
        ([ok], "one action dict per env (2), received 1"),
        # One env's dict with as many keys as envs: its keys are not the envs' action dicts.
        (ok, "step() needs a list of action dicts, one per env (2), received dict {'player1': 0, 'player2': 1}"),
        (None, "step() needs a list of action dicts, one per env (2), received NoneType None"),
        ([ok, {**ok, "player3": 0}], "env 1: action for agent 'player3' which is not expected to act"),
        ([{"player1": 0}, ok], "env 0: no action for ['player2']"),
        ([ok, {"player1": 0, "player2": 7}], "env 1: invalid action for agent 'player2'"),
        ([ok, {"player1": 0, "player2": 1.0}], "env 1: invalid action for agent 'player2'"),
    ]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_bad_action_lists_raise_before_any_env_steps(mode: str) -> None:
    with VectorMultiAgentEnv([RockPaperScissors] * 2, mode) as venv:
        venv.reset(seed=0)
        for actions, message in _bad_inputs():
            with pytest.raises(VectorEnvError, match=re.escape(message)):
                venv.step(actions)
        # Nothing moved: ten valid steps still end the episode exactly at the tenth (any sequence
        # of dicts with a length is one action dict per env: a numpy object array too).
        for step in range(1, 11):
            terminateds_list = venv.step(np.array([{"player1": 0, "player2": 1}] * 2, dtype=object))[2]
            assert terminateds_list[0][ALL] is (step == 10)


def test_masked_actions_are_checked_against_the_current_mask() -> None:
    with VectorMultiAgentEnv([HeterogeneousSpacesEnv] * 2) as venv:
        obs_list, _ = venv.reset(seed=5)
        mask = obs_list[1]["masked"]["action_mask"]
        illegal = int(np.flatnonzero(mask == 0)[0])
        policy = RandomPolicy(HeterogeneousSpacesEnv(), seed=0)
        actions = [{a: policy(a, obs[a]) for a in obs} for obs in obs_list]
        actions[1]["masked"] = illegal
        with pytest.raises(VectorEnvError, match=r"env 1: illegal action for agent 'masked'") as info:
            venv.step(actions)
        assert info.value.index == 1
        assert isinstance(info.value, MultiAgentEnvError)


def test_step_before_reset_and_after_close() -> None:
    venv = VectorMultiAgentEnv([RockPaperScissors])
    with pytest.raises(ResetNeededError):
        venv.step([{}])
    venv.close()
    venv.close()
    with pytest.raises(VectorEnvError, match="closed"):
        venv.reset(seed=0)


def test_constructor_arguments_are_validated() -> None:
    with pytest.raises(VectorEnvError, match="at least one env factory"):
        VectorMultiAgentEnv([])
    with pytest.raises(VectorEnvError, match="mode must be"):
        VectorMultiAgentEnv([RockPaperScissors], mode="threads")  # type: ignore[arg-type]
    with pytest.raises(VectorEnvError, match="env 0: its factory raised OSError: no such game file"):
        VectorMultiAgentEnv([broken_factory])
    for mode in ("sync", "async"):  # an env where its factory belongs ("... object is not callable" when built)
        with pytest.raises(VectorEnvError, match=r"env 1: expected an env factory \(a callable returning a new env\), "
                                                 r"received a RockPaperScissors \(an env, built already: pass a function"):
            VectorMultiAgentEnv([RockPaperScissors, RockPaperScissors()], mode)
    with pytest.raises(VectorEnvError, match="num_workers and context apply to mode='async' only"):
        VectorMultiAgentEnv([RockPaperScissors] * 2, num_workers=1)
    with pytest.raises(VectorEnvError, match="num_workers must be between 1 and 2"):
        VectorMultiAgentEnv([RockPaperScissors] * 2, "async", num_workers=3)
    lock = threading.Lock()
    with pytest.raises(VectorEnvError, match=r"env 1: its factory .* cannot be pickled for a worker process"):
        VectorMultiAgentEnv([RockPaperScissors, lambda: lock and RockPaperScissors()], "async")


# Failures in sub-envs and worker processes --------------------------------------------------


@pytest.mark.parametrize(("mode", "num_workers"), [("sync", None), ("async", None), ("async", 1)])
def test_sub_env_exception_names_the_env_and_needs_reset(mode: str, num_workers: int | None) -> None:
    factories = [RockPaperScissors, lambda: ExplodingEnv(fail_at=2), lambda: ExplodingEnv(fail_at=3)]
    with VectorMultiAgentEnv(factories, mode, num_workers=num_workers) as venv:
        venv.reset(seed=0)
        venv.step([{"player1": 0, "player2": 0}] * 3)
        with pytest.raises(VectorEnvError, match=r"env 1 raised RuntimeError during step\(\): boom at move 2") as info:
            venv.step([{"player1": 0, "player2": 0}] * 3)
        assert info.value.index == 1
        if mode == "async":
            assert "Traceback in its worker process" in str(info.value)
            assert "in step" in info.value.remote_traceback
            assert "boom at move 2" in info.value.remote_traceback
            assert isinstance(info.value.__cause__, RuntimeError)
        else:
            assert isinstance(info.value.__cause__, RuntimeError)
        # It said "step() called before reset()" although reset() had been called.
        with pytest.raises(ResetNeededError, match=r"VectorMultiAgentEnv.step\(\) needs reset\(\) after the error "
                                                   r"of its last call \(env 1 raised RuntimeError during step\(\): boom at move 2"):
            venv.step([{"player1": 0, "player2": 0}] * 3)
        obs_list, _ = venv.reset(seed=0)
        assert obs_list == [{"player1": 0, "player2": 0}] * 3


class SeedEchoEnv(ExplodingEnv):
    """An :class:`ExplodingEnv` whose reset reports its seed in player1's infos."""

    def reset(self, *, seed=None, options=None):
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {"player1": {"seed": seed}}


class BadResetEnv(RockPaperScissors):
    """Rock-paper-scissors whose reset raises on the first ``failures`` instances built (per process)."""

    built = [0]

    def __init__(self, failures: int) -> None:
        super().__init__()
        BadResetEnv.built[0] += 1
        self.fails = BadResetEnv.built[0] <= failures

    def reset(self, *, seed=None, options=None):
        if self.fails:
            raise RuntimeError("reset refused")
        return super().reset(seed=seed, options=options)


MODES = [("sync", None), ("async", None), ("async", 1)]


def _rebuild_run(mode: str, num_workers: int | None) -> tuple[list, VectorMultiAgentEnv]:
    factories = [RockPaperScissors, lambda: SeedEchoEnv(fail_at=2), RockPaperScissors]
    moves = [{"player1": 1, "player2": 0}] * 3
    with VectorMultiAgentEnv(factories, mode, num_workers=num_workers, on_error="rebuild") as venv:
        venv.reset(seed=7)
        first = venv.step(moves)
        assert venv.last_failures == [] and venv.num_env_errors == 0
        failed = venv.step(moves)
        failures, autoreset = list(venv.last_failures), list(venv.autoreset)
        after = venv.step(moves)
        return [first, failed, failures, autoreset, after, venv.num_env_errors, venv.last_failures], venv


@pytest.mark.parametrize(("mode", "num_workers"), MODES)
def test_rebuild_isolates_a_failing_env_and_reports_it(mode: str, num_workers: int | None) -> None:
    (first, failed, failures, autoreset, after, errors, last), _ = _rebuild_run(mode, num_workers)
    assert first[1] == [{"player1": 1, "player2": -1}] * 3
    obs_list, rewards_list, terminateds_list, truncateds_list, infos_list = failed
    # The other envs stepped as usual; env 1 was rebuilt and answers with its new first observations.
    assert rewards_list[0] == rewards_list[2] == {"player1": 1, "player2": -1}
    assert obs_list[1] == {"player1": 0, "player2": 0}
    assert rewards_list[1] == {} and terminateds_list[1] == truncateds_list[1] == {ALL: False}
    assert isinstance(infos_list[1]["player1"]["seed"], int)  # seeded from the env's own stream
    assert autoreset == [False, True, False]
    assert [index for index, _ in failures] == [1]
    assert "RuntimeError: boom at move 2" in failures[0][1] and "in step" in failures[0][1]
    # The rebuilt env plays on (until it fails again at its own second move), the others too.
    assert after[1][0] == after[1][2] == {"player1": 1, "player2": -1}
    assert after[1][1] == {"player1": 1, "player2": -1}
    assert errors == 1 and last == []


def test_rebuild_seeds_repeat_with_the_reset_seed_and_agree_across_modes() -> None:
    seeds = []
    for mode, num_workers in MODES:
        (_, failed, *_), _ = _rebuild_run(mode, num_workers)
        seeds.append(failed[4][1]["player1"]["seed"])
    assert len(set(seeds)) == 1
    (_, again, *_), _ = _rebuild_run("sync", None)
    assert again[4][1]["player1"]["seed"] == seeds[0]


@pytest.mark.parametrize(("mode", "num_workers"), MODES)
def test_rebuild_covers_reset_and_gives_up_after_max_attempts(mode: str, num_workers: int | None) -> None:
    BadResetEnv.built[0] = 0  # sync mode: this process's count

    def flaky_once():
        return BadResetEnv(failures=1)

    with VectorMultiAgentEnv([RockPaperScissors, flaky_once], mode, num_workers=num_workers,
                             on_error="rebuild") as venv:
        obs_list, _ = venv.reset(seed=0)
        assert obs_list == [{"player1": 0, "player2": 0}] * 2
        assert [index for index, _ in venv.last_failures] == [1] and "reset refused" in venv.last_failures[0][1]
        assert venv.step([{"player1": 0, "player2": 2}] * 2)[1][1] == {"player1": 1, "player2": -1}

    def always_broken():
        return BadResetEnv(failures=10**9)

    with VectorMultiAgentEnv([RockPaperScissors, always_broken], mode, num_workers=num_workers,
                             on_error="rebuild", max_rebuild_attempts=2) as venv:
        with pytest.raises(VectorEnvError, match=r"env 1 could not be rebuilt in 2 attempts; last error:"):
            venv.reset(seed=0)
        assert venv.num_env_errors == 3  # the reset, then two failed rebuilds
        with pytest.raises(ResetNeededError):
            venv.step([{"player1": 0, "player2": 0}] * 2)


class LevelEnv(RockPaperScissors):
    """Rock-paper-scissors whose reset needs ``options["level"]`` and fails the first time
    (per process), whatever the options."""

    resets = [0]

    def reset(self, *, seed=None, options=None):
        LevelEnv.resets[0] += 1
        if LevelEnv.resets[0] == 2:
            raise RuntimeError("transient")
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {"player1": {"level": options["level"]}}


@pytest.mark.parametrize(("mode", "num_workers"), [("sync", None), ("async", 1)])
def test_an_env_rebuilt_during_reset_gets_the_callers_options(mode: str, num_workers: int | None) -> None:
    LevelEnv.resets[0] = 0  # sync mode: this process's count (async: the one worker's)
    with VectorMultiAgentEnv([LevelEnv, LevelEnv], mode, num_workers=num_workers, on_error="rebuild") as venv:
        _, infos = venv.reset(seed=0, options={"level": 7})
        assert [info["player1"]["level"] for info in infos] == [7, 7]  # env 1 was rebuilt, with the options
        assert [index for index, _ in venv.last_failures] == [1]
        with pytest.raises(VectorEnvError, match=r"(?s)env 0 could not be rebuilt in 3 attempts.*KeyError: 'level'"):
            venv.reset(seed=0, options={"levle": 7})  # a typo fails every rebuild too: not an accepted reset


class ClosingCount(RockPaperScissors):
    closed = [0]

    def close(self) -> None:
        ClosingCount.closed[0] += 1


def test_a_failing_factory_closes_the_envs_built_before_it() -> None:
    ClosingCount.closed[0] = 0
    with pytest.raises(VectorEnvError, match="env 2: its factory raised OSError"):
        VectorMultiAgentEnv([ClosingCount, ClosingCount, broken_factory], "sync")
    assert ClosingCount.closed[0] == 2


class ScalarBoxEnv(MultiAgentEnv):
    """Rock-paper-scissors played with shape-() Box actions (rock below 0, paper above)."""

    def __init__(self) -> None:
        super().__init__()
        self.game = RockPaperScissors()
        self.agents = self.possible_agents = list(self.game.possible_agents)
        self.observation_spaces = self.game.observation_spaces
        self.action_spaces = {a: gym.spaces.Box(-1.0, 1.0, (), np.float32) for a in self.possible_agents}

    def reset(self, *, seed=None, options=None):
        return self.game.reset(seed=seed, options=options)

    def step(self, action_dict):
        check_action_dict(self, action_dict, self.agents)
        return self.game.step({a: int(action > 0) for a, action in action_dict.items()})


def test_scatter_gives_a_shape_0_box_zero_dimensional_arrays() -> None:
    with VectorMultiAgentEnv([ScalarBoxEnv, ScalarBoxEnv]) as venv:
        obs_list, _ = venv.reset(seed=0)
        batches = gather(obs_list, lambda i, a: "p")
        actions = scatter({"p": np.linspace(-0.5, 0.5, len(batches["p"].keys), dtype=np.float32)}, batches, 2)
        assert all(type(action) is np.ndarray and action.shape == () for row in actions for action in row.values())
        venv.step(actions)  # refused before: np.float32 is not in Box(-1.0, 1.0, (), float32)


def test_rebuild_arguments_are_validated() -> None:
    with pytest.raises(VectorEnvError, match="on_error must be 'raise' or 'rebuild', received 'ignore'"):
        VectorMultiAgentEnv([RockPaperScissors], on_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(VectorEnvError, match="max_rebuild_attempts must be at least 1, received 0"):
        VectorMultiAgentEnv([RockPaperScissors], on_error="rebuild", max_rebuild_attempts=0)


def test_a_dead_worker_is_still_an_error_with_rebuild() -> None:
    with VectorMultiAgentEnv([RockPaperScissors, DyingEnv], "async", on_error="rebuild") as venv:
        venv.reset(seed=0)
        with pytest.raises(VectorEnvError, match=r"worker process of env 1 \(pid \d+\) exited unexpectedly with code 3 during step\(\)"):
            venv.step([{"player1": 0, "player2": 0}] * 2)
        with pytest.raises(VectorEnvError, match="unusable"):
            venv.reset(seed=0)


class LockedEnv(RockPaperScissors):
    """Rock-paper-scissors holding something that cannot be pickled."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()


def test_results_that_cannot_leave_the_worker_are_reported() -> None:
    with VectorMultiAgentEnv([LockedEnv, LockedEnv]) as venv:
        assert isinstance(venv.call("lock")[1], type(threading.Lock()))
    with VectorMultiAgentEnv([LockedEnv, LockedEnv], "async") as venv:
        with pytest.raises(VectorEnvError, match=r"env 0 raised TypeError during call\('lock'\): cannot pickle '_thread\.lock' object"):
            venv.call("lock")
        assert venv.call("num_moves") == [0, 0]


@pytest.mark.parametrize("num_workers", [None, 1])
def test_async_factory_exception_comes_back_with_its_traceback(num_workers: int | None) -> None:
    factories = [RockPaperScissors, RockPaperScissors, broken_factory]
    with pytest.raises(VectorEnvError, match="env 2: its factory raised OSError") as info:
        VectorMultiAgentEnv(factories, "async", num_workers=num_workers)
    assert info.value.index == 2
    assert "broken_factory" in info.value.remote_traceback


def _explodes_at_once() -> MultiAgentEnv:
    return ExplodingEnv(fail_at=1)


@pytest.mark.parametrize(
    ("first", "error"),
    [
        (RockPaperScissors, r"worker process of env 1 \(pid \d+\) exited unexpectedly with code 3"),
        # An env error beside the dead worker: the vector is unusable at once, and the error says why.
        (_explodes_at_once, r"(?s)env 0 raised RuntimeError.*envs \[0, 1\] failed.*worker process of env 1"),
    ],
)
def test_a_dead_worker_makes_the_vector_unusable_but_closable(first: Any, error: str) -> None:
    venv = VectorMultiAgentEnv([first, DyingEnv], "async")
    pids = venv._workers.pids
    venv.reset(seed=0)
    with pytest.raises(VectorEnvError, match=error):
        venv.step([{"player1": 0, "player2": 0}] * 2)
    with pytest.raises(VectorEnvError, match="unusable"):
        venv.reset(seed=0)
    venv.close()
    assert wait_gone(pids) == []


def test_after_an_interrupted_call_the_vector_says_it_was_interrupted() -> None:
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    venv = VectorMultiAgentEnv([SleepingEnv, SleepingEnv], "async")
    pids = venv._workers.pids
    venv.reset(seed=0)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            venv.step([{"player1": 0, "player2": 0}] * 2)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert wait_gone(pids) == []
    # It used to say that a worker "exited unexpectedly with code 0".
    with pytest.raises(VectorEnvError, match=r"unusable: a call was interrupted by KeyboardInterrupt, so its "
                                             r"worker processes were stopped; create a new one"):
        venv.step([{"player1": 0, "player2": 0}] * 2)
    with pytest.raises(VectorEnvError, match="interrupted by KeyboardInterrupt"):
        venv.reset(seed=0)
    venv.close()


class BrokenResultEnv(RockPaperScissors):
    """Rock-paper-scissors that breaks the API as ``how`` says, from its second step on."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def reset(self, *, seed=None, options=None):
        obs, infos = super().reset(seed=seed, options=options)
        if self.how == "reset_obs_only":
            return obs
        return ({}, infos) if self.how == "reset_nobody" else (obs, infos)

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if self.num_moves < 2:
            return obs, rewards, terminateds, truncateds, infos
        if self.how == "four":
            return obs, rewards, terminateds, infos
        if self.how == "no_all":
            return obs, rewards, {"player1": False, "player2": False}, truncateds, infos
        if self.how == "all_ended":  # every agent ends, but "__all__" stays False
            return obs, rewards, {"player1": True, "player2": True, ALL: False}, truncateds, infos
        return obs, rewards, terminateds, truncateds, infos


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("reset_obs_only", r"BrokenResultEnv.reset\(\) returned a dict; expected \(obs, infos\), two dicts"),
        ("reset_nobody", r"BrokenResultEnv.reset\(\) asked no agent to act \(empty obs dict\)"),
        ("four", r"BrokenResultEnv.step\(\) returned a tuple of 4 \(dict, dict, dict, dict\); expected \(obs, "
                 r"rewards, terminateds, truncateds, infos\)"),
        ("no_all", r"BrokenResultEnv.step\(\) returned terminateds without '__all__' \(keys: \['player1', "
                   r"'player2'\]\)"),
        ("all_ended", r"BrokenResultEnv.step\(\) asks no agent to act and does not end the episode \(its obs dict "
                      r"holds \['player1', 'player2'\], '__all__' is False\)"),
    ],
)
def test_results_that_break_the_api_are_named_not_stepped_on_forever(mode: str, how: str, message: str) -> None:
    # These gave "'str' object has no attribute 'items'", "not enough values to unpack", or (the
    # last two) an env stepped with empty action dicts forever.
    with (VectorMultiAgentEnv([lambda: BrokenResultEnv(how)], mode) as venv,
          pytest.raises(VectorEnvError, match=r"env 0 raised EnvContractError during (reset|step)\(\): " + message)):
        venv.reset(seed=0)
        for _ in range(3):
            venv.step([{"player1": 0, "player2": 0}])


_Step = collections.namedtuple("_Step", "obs rewards terminateds truncateds infos")


class SequenceResultsEnv(RockPaperScissors):
    """Rock-paper-scissors returning a list from reset() and a named tuple from step(): both work."""

    def reset(self, *, seed=None, options=None):
        return list(super().reset(seed=seed, options=options))

    def step(self, action_dict):
        return _Step(*super().step(action_dict))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_results_as_a_list_or_a_named_tuple_are_taken(mode: str) -> None:
    with VectorMultiAgentEnv([SequenceResultsEnv, SequenceResultsEnv], mode) as venv:
        venv.reset(seed=0)
        for _ in range(12):  # past an episode's end: the autoreset takes the list too
            venv.step([{"player1": 0, "player2": 1}] * 2)


# No orphan processes ------------------------------------------------------------------------


def test_close_stops_every_worker() -> None:
    venv = VectorMultiAgentEnv([RockPaperScissors] * 2, "async")
    pids = venv._workers.pids
    assert all(alive(pid) for pid in pids) and os.getpid() not in pids
    venv.reset(seed=0)
    venv.close()
    assert wait_gone(pids, timeout=5.0) == []


def test_an_exception_in_a_with_block_stops_every_worker() -> None:
    with pytest.raises(KeyError), VectorMultiAgentEnv([RockPaperScissors] * 2, "async") as venv:
        pids = venv._workers.pids
        venv.reset(seed=0)
        raise KeyError("user code failed")
    assert wait_gone(pids, timeout=5.0) == []


def test_garbage_collection_stops_every_worker() -> None:
    venv = VectorMultiAgentEnv([RockPaperScissors] * 2, "async")
    pids = venv._workers.pids
    del venv
    assert wait_gone(pids, timeout=5.0) == []


def test_garbage_collection_closes_a_sync_vectors_envs_once() -> None:
    # The docs said so; a sync vector left its envs open (a window, a file, a simulator).
    ClosingCount.closed[0] = 0
    venv = VectorMultiAgentEnv([ClosingCount] * 3, "sync")
    venv.reset(seed=0)
    del venv
    gc.collect()
    assert ClosingCount.closed[0] == 3
    with VectorMultiAgentEnv([ClosingCount] * 2, "sync") as venv:
        venv.reset(seed=0)
    venv.close()  # and again: closed once
    del venv
    gc.collect()
    assert ClosingCount.closed[0] == 5


_SCRIPT = """
import sys, time
from marl_core.vector import VectorMultiAgentEnv
from tests.core.test_vector import BigObsEnv
venv = VectorMultiAgentEnv([BigObsEnv] * 2, "async")
venv.reset(seed=0)
venv.step([{a: venv.get_action_space(a).sample() for a in acting} for acting in venv.acting])
print(" ".join(str(pid) for pid in venv._workers.pids), flush=True)
print(" ".join(shm.name.lstrip("/") for shm in venv._workers.shms), flush=True)
if sys.argv[1] == "raise":
    raise RuntimeError("the program crashed")
time.sleep(60)
"""


def _start_script(how: str) -> tuple[subprocess.Popen, list[int], list[Path]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, how], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    pids = [int(pid) for pid in process.stdout.readline().split()]
    blocks = [Path("/dev/shm") / name for name in process.stdout.readline().split()]
    assert len(pids) == 2 and len(blocks) == 2, process.stderr.read()
    assert all(block.exists() for block in blocks)
    return process, pids, blocks


def wait_removed(blocks: list[Path], timeout: float = 15.0) -> list[Path]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(block.exists() for block in blocks):
        time.sleep(0.05)
    return [block for block in blocks if block.exists()]


def test_interpreter_exit_after_an_uncaught_exception_stops_every_worker() -> None:
    process, pids, blocks = _start_script("raise")
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1 and "the program crashed" in stderr
    assert "leaked" not in stderr and "KeyError" not in stderr
    assert wait_gone(pids) == []
    assert wait_removed(blocks) == []


def test_workers_exit_when_the_parent_is_killed() -> None:
    process, pids, blocks = _start_script("sleep")
    assert all(alive(pid) for pid in pids)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    assert wait_gone(pids) == []
    assert wait_removed(blocks) == []


# Batched helpers ----------------------------------------------------------------------------


def test_stack_is_leaf_wise() -> None:
    rows = [
        {"observation": np.array([1.0, 2.0], np.float32), "action_mask": np.array([1, 0], np.int8)},
        {"observation": np.array([3.0, 4.0], np.float32), "action_mask": np.array([0, 1], np.int8)},
    ]
    batch = stack(rows)
    assert batch["observation"].dtype == np.float32 and batch["observation"].shape == (2, 2)
    assert batch["action_mask"].tolist() == [[1, 0], [0, 1]]
    pairs = stack([(1, np.zeros(3)), (2, np.ones(3))])
    assert isinstance(pairs, tuple) and pairs[0].tolist() == [1, 2] and pairs[1].shape == (2, 3)
    assert stack([3, 4, 5]).tolist() == [3, 4, 5]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([], "at least one observation"),
        ([{"a": 1}, {"b": 1}], r"row 1 is a dict with keys \['b'\]"),
        ([(1, 2), (1,)], "row 1 is a tuple of 1, row 0 a tuple of 2"),
        ([{"a": 1}, 5], "row 1 is an int"),
        ([np.float32(1), {"x": 1}], r"row 1 is a dict with keys \['x'\], row 0 a float32"),
        ([0, None], "row 1 is None, row 0 an int"),
        ([np.zeros(2), np.zeros(3)], r"different shapes \[\(2,\), \(3,\)\]"),
        # A Tuple observation sent as a list: numpy cannot give its shape (this error path crashed).
        ([[np.zeros(2), 3], [np.zeros(2), 4]], r"different shapes \[a list of 2 parts of different shapes\]"),
    ],
)
def test_stack_refuses_rows_that_do_not_match(rows: list, message: str) -> None:
    with pytest.raises(SpaceError, match=message):
        stack(rows)


def test_gather_and_scatter_round_trip_over_heterogeneous_agents() -> None:
    with VectorMultiAgentEnv([HeterogeneousSpacesEnv] * 3) as venv:
        obs_list, _ = venv.reset(seed=0)
        batches = gather(obs_list, lambda i, agent_id: "masked" if agent_id == "masked" else f"p_{agent_id}")
        assert list(batches) == ["p_box", "p_discrete", "masked", "p_multi"]
        masked = batches["masked"]
        assert isinstance(masked, PolicyBatch) and len(masked) == 3
        assert masked.keys == [(0, "masked"), (1, "masked"), (2, "masked")]
        assert masked.obs["action_mask"].shape == (3, 4)
        for row, (i, _) in enumerate(masked.keys):
            assert np.array_equal(masked.obs["action_mask"][row], obs_list[i]["masked"]["action_mask"])
        actions = {
            "p_box": np.zeros((3, 2), np.float32),
            "p_discrete": np.array([0, 1, 2]),
            "masked": np.array([int(np.flatnonzero(obs["masked"]["action_mask"])[0]) for obs in obs_list]),
            "p_multi": [np.array([1, 2]), np.array([0, 0]), np.array([1, 1])],
        }
        action_list = scatter(actions, batches, venv.num_envs)
        assert [sorted(a) for a in action_list] == [sorted(HeterogeneousSpacesEnv().possible_agents)] * 3
        assert action_list[1]["discrete"] == 1 and action_list[2]["multi"].tolist() == [1, 1]
        actions["p_box"][0, 0] = 0.5  # rows were copied out of the array
        assert action_list[0]["box"].tolist() == [0.0, 0.0]
        rewards_list = venv.step(action_list)[1]
        assert [r["discrete"] for r in rewards_list] == [0.0, 1.0, 0.0]


def test_gather_leaves_unstacked_policies_as_lists_of_observations() -> None:
    obs_list = [{"a": np.array([1.0, 2.0]), "b": {"x": 1}}, {"a": np.array([3.0, 4.0]), "b": {"x": 2}}]
    batches = gather(obs_list, lambda i, agent_id: agent_id, unstacked={"b"})
    np.testing.assert_array_equal(batches["a"].obs, [[1.0, 2.0], [3.0, 4.0]])
    assert batches["b"].obs == [{"x": 1}, {"x": 2}] and batches["b"].obs[0] is obs_list[0]["b"]
    actions = scatter({"a": np.array([0, 1]), "b": [5, 6]}, batches, 2)
    assert actions == [{"a": 0, "b": 5}, {"a": 1, "b": 6}]


def test_gather_filter_keeps_only_acting_agents() -> None:
    with VectorMultiAgentEnv([JoinLeaveEnv] * 2) as venv:
        obs_list, _ = venv.reset(seed=0)
        for _ in range(4):  # at step 4 the scout terminates: final obs, but it does not act
            actions = [{a: 1 for a in acting} for acting in venv.acting]
            obs_list = venv.step(actions)[0]
        assert "scout" in obs_list[0] and "scout" not in venv.acting[0]
        everyone = gather(obs_list, lambda i, a: "shared")
        acting = gather(obs_list, lambda i, a: "shared", where=lambda i, a: a in venv.acting[i])
        assert len(everyone["shared"]) == 6 and len(acting["shared"]) == 4
        assert acting["shared"].keys == [(0, "runner"), (0, "keeper"), (1, "runner"), (1, "keeper")]
        actions = scatter({"shared": np.ones(4, np.int64)}, acting, venv.num_envs)
        venv.step(actions)


def test_scatter_unstacks_dict_and_tuple_actions() -> None:
    batches = {"team": PolicyBatch([(0, "a"), (1, "a")], obs=None)}
    out = scatter({"team": (np.array([1, 2]), np.array([[0.5], [1.5]]))}, batches, 2)
    assert out[0]["a"][0] == 1 and out[1]["a"][1].tolist() == [1.5]
    out = scatter({"team": {"move": np.array([3, 4])}}, batches, 3)
    assert out == [{"a": {"move": 3}}, {"a": {"move": 4}}, {}]


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        ({}, r"actions for policies \[\] but batches for \['p'\]"),
        ({"p": [1], "q": [1]}, r"actions for policies \['p', 'q'\]"),
        ({"p": [1]}, "1 actions for policy 'p' but its batch has 2 rows"),
        ({"p": np.zeros(3)}, "3 actions for policy 'p' but its batch has 2 rows"),
    ],
)
def test_scatter_refuses_mismatched_actions(actions: dict, message: str) -> None:
    batches = {"p": PolicyBatch([(0, "a"), (1, "a")], obs=None)}
    with pytest.raises(VectorEnvError, match=message):
        scatter(actions, batches, 2)


def test_scatter_refuses_rows_of_unknown_envs() -> None:
    batches = {"p": PolicyBatch([(0, "a"), (4, "a")], obs=None)}
    with pytest.raises(VectorEnvError, match="row for env 4 but num_envs is 2"):
        scatter({"p": [0, 1]}, batches, 2)


# Inside Ray -----------------------------------------------------------------------------------


def _run_in_ray_worker() -> tuple[list[int], list[dict]]:
    with VectorMultiAgentEnv([TicTacToe] * 2, "async") as venv:
        venv.reset(seed=0)
        pids = venv._workers.pids
        rewards_list = venv.step([{a: 4 for a in acting} for acting in venv.acting])[1]
    return pids, rewards_list


@pytest.mark.ray
@pytest.mark.slow
def test_async_vector_inside_a_ray_worker() -> None:
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)  # never a running cluster
    try:
        runner = ray.remote(_run_in_ray_worker)
        pids, rewards_list = ray.get(runner.remote(), timeout=300)
    finally:
        ray.shutdown()
    assert len(pids) == 2 and len(rewards_list) == 2
    assert all(list(rewards.values()) == [0.0] for rewards in rewards_list)
    assert wait_gone(pids) == []


@pytest.mark.slow
def test_a_script_without_a_main_guard_is_told_to_add_one(tmp_path: Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from marl_core import VectorMultiAgentEnv\n"
        "from tests.fixtures.envs import RockPaperScissors\n"
        "venv = VectorMultiAgentEnv([RockPaperScissors] * 2, 'async')\n"
        "venv.close()\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode != 0
    assert "while starting; a likely cause: with the 'forkserver' start method every worker imports the main module" in done.stderr
    assert 'must guard its entry point with `if __name__ == "__main__":`' in done.stderr


class PointerInInfo(RockPaperScissors):
    """Rock-paper-scissors whose step infos hold a ctypes pointer (pickling it raises ValueError)."""

    def step(self, action_dict: Mapping[str, Any]) -> tuple:
        import ctypes

        obs, rewards, terminateds, truncateds, _ = super().step(action_dict)
        return obs, rewards, terminateds, truncateds, {"player1": {"handle": ctypes.pointer(ctypes.c_int(3))}}


def test_a_result_whose_pickling_raises_anything_is_that_envs_error_and_the_worker_lives() -> None:
    # Only PicklingError, TypeError and AttributeError were caught: a ValueError killed the worker.
    both = {"player1": 0, "player2": 1}
    with VectorMultiAgentEnv([RockPaperScissors, PointerInInfo], "async") as venv:
        venv.reset(seed=0)
        with pytest.raises(VectorEnvError, match=r"^env 1 raised ValueError during step\(\): ctypes objects containing pointers "
                                                 r"cannot be pickled") as info:
            venv.step([both, both])
        assert info.value.index == 1
        with pytest.raises(ResetNeededError):
            venv.step([both, both])
        venv.reset(seed=0)
        assert venv.call("num_moves") == [0, 0]


def _env_of_a_module_only_its_worker_imports(folder: str, module: str) -> MultiAgentEnv:
    sys.path.insert(0, folder)
    return importlib.import_module(module).Env()


def _worker_only_env_factory(folder: Path, module: str, classes: str, step_body: str) -> Any:
    """A factory of rock-paper-scissors with ``step_body``, from a module that only the worker
    process imports (it puts ``folder`` on its path), beside ``classes`` defined there."""
    (folder / f"{module}.py").write_text(
        f"from examples.rock_paper_scissors import RockPaperScissors\n{classes}"
        f"class Env(RockPaperScissors):\n    def step(self, action_dict):\n{step_body}"
    )
    return functools.partial(_env_of_a_module_only_its_worker_imports, str(folder), module)


@pytest.mark.parametrize("num_workers", [None, 1])
def test_results_this_process_cannot_unpickle_are_that_envs_error(tmp_path: Path, num_workers: int | None) -> None:
    # The parent got a bare ModuleNotFoundError and every worker was stopped; then, with both envs
    # in one worker, env 0 was blamed too (and rebuilt, with on_error="rebuild").
    factory = _worker_only_env_factory(
        tmp_path, "elsewhere_infos", "class Thing:\n    pass\n",
        "        obs, rewards, terminateds, truncateds, _ = super().step(action_dict)\n"
        "        return obs, rewards, terminateds, truncateds, {'player1': {'thing': Thing()}}\n",
    )
    both = {"player1": 0, "player2": 1}
    with VectorMultiAgentEnv([RockPaperScissors, factory], "async", num_workers=num_workers) as venv:
        venv.reset(seed=0)
        with pytest.raises(VectorEnvError, match=r"^env 1 raised ModuleNotFoundError during step\(\): its results cannot be unpickled "
                                                 r"in this process: No module named 'elsewhere_infos'\n") as info:
            venv.step([both, both])
        assert info.value.index == 1
        venv.reset(seed=0)
        assert venv.call("num_moves") == [0, 0]
    with VectorMultiAgentEnv([RockPaperScissors, factory], "async", num_workers=num_workers,
                             on_error="rebuild") as venv:
        venv.reset(seed=0)
        venv.step([both, both])
        assert [index for index, _ in venv.last_failures] == [1]


def test_an_env_error_of_a_class_this_process_cannot_import_keeps_its_name_and_message(tmp_path: Path) -> None:
    # The exception travelled in one pickle with its type name and message: all of them were lost.
    factory = _worker_only_env_factory(tmp_path, "elsewhere_errors", "class CustomError(Exception):\n    pass\n",
                                       "        raise CustomError('the real reason')\n")
    both = {"player1": 0, "player2": 1}
    with VectorMultiAgentEnv([RockPaperScissors, factory], "async", num_workers=1) as venv:
        venv.reset(seed=0)
        with pytest.raises(VectorEnvError, match=r"^env 1 raised CustomError during step\(\): the real reason\n") as info:
            venv.step([both, both])
        assert info.value.index == 1 and "elsewhere_errors.py" in info.value.remote_traceback
        assert info.value.__cause__ is None  # the exception itself cannot come back here


def test_an_action_its_worker_cannot_unpickle_is_that_envs_error_and_the_worker_lives(tmp_path: Path,
                                                                                       monkeypatch) -> None:
    # The worker died on it ("exited unexpectedly with code 1") and the vector was unusable.
    (tmp_path / "parent_only_actions.py").write_text("class Act(int):\n    pass\n")
    both = {"player1": 0, "player2": 1}
    with VectorMultiAgentEnv([RockPaperScissors] * 2, "async", check_actions=False) as venv:
        venv.reset(seed=0)
        monkeypatch.syspath_prepend(str(tmp_path))
        import parent_only_actions  # type: ignore[import-not-found]

        with pytest.raises(VectorEnvError, match=r"^env 1 raised ModuleNotFoundError during step\(\): its action dict cannot be "
                                                 r"unpickled in its worker process: No module named "
                                                 r"'parent_only_actions'") as info:
            venv.step([both, {"player1": parent_only_actions.Act(0), "player2": 1}])
        assert info.value.index == 1
        venv.reset(seed=0)
        venv.step([both, both])
        assert venv.call("num_moves") == [1, 1]


def test_an_action_that_cannot_be_sent_to_its_worker_is_named_and_nothing_steps() -> None:
    # A bare PicklingError, after which the vector was unusable; in sync mode the env's own error.
    with VectorMultiAgentEnv([RockPaperScissors] * 3, "async", num_workers=2, check_actions=False) as venv:
        venv.reset(seed=0)
        good = {"player1": 0, "player2": 1}
        with pytest.raises(VectorEnvError, match=r"^env 2: its action dict cannot be sent to its worker process "
                                                 r"\(TypeError: cannot pickle '_thread.lock' object\); nothing was sent "
                                                 r"to any env$") as info:
            venv.step([good, good, {"player1": threading.Lock(), "player2": 0}])
        assert info.value.index == 2
        assert venv.call("num_moves") == [0, 0, 0]
        venv.step([good, good, good])  # no reset needed: nothing moved
        assert venv.call("num_moves") == [1, 1, 1]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_reset_takes_numpy_integer_seeds_and_refuses_others_before_anything_resets(mode: str) -> None:
    # np.int64 seeds raised OverflowError; with on_error="rebuild" a negative seed was taken.
    from marl_core.errors import SeedError

    for on_error in ("raise", "rebuild"):
        with VectorMultiAgentEnv([RockPaperScissors] * 2, mode, on_error=on_error) as venv:
            assert_same(venv.reset(seed=np.int64(3)), venv.reset(seed=3))
            for bad in (-1, 1.0, "3"):
                with pytest.raises(SeedError):
                    venv.reset(seed=bad)
            assert venv.last_failures == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_reset_takes_a_seed_per_env_as_gymnasium_vectors_do(mode: str) -> None:
    from marl_core.errors import SeedError

    with VectorMultiAgentEnv([lambda: EndsAfter(3)] * 3, mode) as venv:
        _, infos_list = venv.reset(seed=[4, None, np.int64(9)])
        assert [infos["player1"]["seed"] for infos in infos_list] == [4, None, 9]
        assert type(infos_list[2]["player1"]["seed"]) is int
        assert_same(venv.reset(seed=np.array([5, 6, 7])), venv.reset(seed=5))
        assert_same(venv.reset(seed=range(5, 8)), venv.reset(seed=5))
        with pytest.raises(SeedError):
            venv.reset(seed=np.array(5))  # a 0-d array: "len() of unsized object"
        for bad, error, message in (([1, 2], VectorEnvError, r"one seed \(or None\) per env \(3\), received a list of 2"),
                                    ((1, -2, 3), SeedError, "received -2")):
            with pytest.raises(error, match=message):
                venv.reset(seed=bad)
        venv.step([{"player1": 0, "player2": 1}] * 3)  # the refused resets reset nothing
        assert venv.call("num_moves") == [1, 1, 1]
    # A rebuilt env draws its seed from the stream its own seed started: a list gives the same.
    failed_seeds = []
    for seed in (7, [7, 8, 9]):
        factories = [RockPaperScissors, lambda: SeedEchoEnv(fail_at=2), RockPaperScissors]
        with VectorMultiAgentEnv(factories, mode, on_error="rebuild") as venv:
            venv.reset(seed=seed)
            venv.step([{"player1": 1, "player2": 0}] * 3)
            failed_seeds.append(venv.step([{"player1": 1, "player2": 0}] * 3)[4][1]["player1"]["seed"])
    assert failed_seeds[0] == failed_seeds[1]


class InterruptedAtStep(RockPaperScissors):
    """Rock-paper-scissors that raises KeyboardInterrupt (as Ctrl-C would) in its third step."""

    def step(self, action_dict: Mapping[str, Any]) -> tuple:
        if self.num_moves == 2:
            raise KeyboardInterrupt
        return super().step(action_dict)


def test_a_sync_call_interrupted_halfway_needs_a_reset() -> None:
    # Env 0 had stepped, env 1 not, and the next step() was taken as if nothing had happened.
    both = {"player1": 0, "player2": 1}
    with VectorMultiAgentEnv([RockPaperScissors, InterruptedAtStep]) as venv:
        venv.reset(seed=0)
        venv.step([both, both])
        venv.step([both, both])
        with pytest.raises(KeyboardInterrupt):
            venv.step([both, both])
        assert venv.call("num_moves") == [3, 2]
        with pytest.raises(ResetNeededError, match="needs reset\\(\\) after its last call was interrupted by "
                                                   "KeyboardInterrupt"):
            venv.step([both, both])
        venv.reset(seed=0)
        assert venv.call("num_moves") == [0, 0]


_SHARED: list[MultiAgentEnv] = []


def _one_shared_env() -> MultiAgentEnv:
    if not _SHARED:
        _SHARED.append(RockPaperScissors())
    return _SHARED[0]


@pytest.mark.parametrize(("mode", "num_workers"), [("sync", None), ("async", 1)])
def test_factories_returning_one_and_the_same_env_are_refused(mode: str, num_workers: int | None) -> None:
    # That one env was stepped once per slot (in async mode, where a worker holds both).
    with pytest.raises(VectorEnvError, match=r"env 1: its factory raised SharedEnvError: returned the very env object "
                                             r"of env 0; each env needs its own instance"):
        VectorMultiAgentEnv([_one_shared_env] * 2, mode, num_workers=num_workers)


class _FailsOnce(RockPaperScissors):
    def step(self, action_dict: Mapping[str, Any]) -> tuple:
        raise RuntimeError("first step fails")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_rebuild_whose_factory_returns_another_slots_env_is_refused(mode: str) -> None:
    _SHARED[:] = []
    first = [True]

    def flaky_then_shared() -> MultiAgentEnv:  # a failing env first; its rebuild returns env 0's object
        if first[0]:
            first[0] = False
            return _FailsOnce()
        return _one_shared_env()

    factories = [_one_shared_env, flaky_then_shared] if mode == "sync" else [_one_shared_env, _flaky_then_shared_of_worker]
    both = {"player1": 0, "player2": 1}
    kwargs = {"num_workers": 1} if mode == "async" else {}
    with VectorMultiAgentEnv(factories, mode, on_error="rebuild", max_rebuild_attempts=1, **kwargs) as venv:
        venv.reset(seed=0)
        with pytest.raises(VectorEnvError, match=r"(?s)env 1 could not be rebuilt in 1 attempts; .*SharedEnvError: returned "
                                                 r"the very env object of env 0"):
            venv.step([both, both])


_BUILT: list[int] = []


def _flaky_then_shared_of_worker() -> MultiAgentEnv:
    _BUILT.append(1)
    return _FailsOnce() if len(_BUILT) == 1 else _one_shared_env()


class KillsItsSenderWhenUnpickled:
    """Built in a worker; unpickled in the parent, it kills that worker (and waits for it to go)."""

    def __reduce__(self) -> tuple:
        return (os.system, (f"kill -9 {os.getpid()}; sleep 0.3",))


def test_a_worker_that_dies_while_its_reply_is_asked_again_is_a_dead_worker(tmp_path: Path) -> None:
    # Asking again (RESEND) wrote to the dead worker's pipe: a bare BrokenPipeError, no env index.
    factory = _worker_only_env_factory(
        tmp_path, "elsewhere_killer", "from tests.core.test_vector import KillsItsSenderWhenUnpickled\n"
        "class Thing:\n    pass\n",
        "        obs, rewards, terminateds, truncateds, _ = super().step(action_dict)\n"
        "        return obs, rewards, terminateds, truncateds,"
        " {'player1': {'x': [KillsItsSenderWhenUnpickled(), Thing()]}}\n",
    )
    both = {"player1": 0, "player2": 1}
    with VectorMultiAgentEnv([RockPaperScissors, factory], "async") as venv:
        venv.reset(seed=0)
        with pytest.raises(VectorEnvError, match=r"^the worker process of env 1 \(pid \d+\) exited unexpectedly with "
                                                 r"code -9 during step\(\)") as info:
            venv.step([both, both])
        assert info.value.index == 1
        with pytest.raises(VectorEnvError, match="unusable"):
            venv.step([both, both])


_SCRIPT_CLASSES = '''
import gymnasium as gym
from marl_core import MultiAgentEnv
from marl_core.vector import VectorMultiAgentEnv


class Note:  # defined in the script: a worker has it only as the factory brought it
    def __init__(self, t):
        self.t = t


class ScriptEnv(MultiAgentEnv):
    def __init__(self):
        super().__init__()
        self.agents = self.possible_agents = ["a"]
        self.observation_spaces = {"a": gym.spaces.Discrete(3)}
        self.action_spaces = {"a": gym.spaces.Discrete(3)}

    def reset(self, *, seed=None, options=None):
        return {"a": 0}, {"a": Note(0)}

    def step(self, action_dict):
        return {"a": 0}, {"a": 0.0}, {"__all__": False}, {"__all__": False}, {"a": Note(1)}


if __name__ == "__main__":
    for mode in ("sync", "async"):
        with VectorMultiAgentEnv([ScriptEnv, ScriptEnv], mode) as vector:
            infos = vector.reset(seed=0)[1] + vector.step([{"a": 0}] * 2)[4]
            print(mode, [type(info["a"]) is Note and info["a"].t for info in infos])
'''


def test_an_async_vector_returns_instances_of_classes_defined_in_the_users_script(tmp_path: Path) -> None:
    # The workers' replies were pickled by reference: "Can't pickle <class '__main__.Note'>: it's not
    # the same object as __main__.Note", in async mode only.
    script = tmp_path / "train_script.py"
    script.write_text(_SCRIPT_CLASSES)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["sync [0, 0, 1, 1]", "async [0, 0, 1, 1]"]


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str broke")


class _RaisesUnprintable(RockPaperScissors):
    def step(self, action_dict: Mapping[str, Any]) -> tuple:
        raise _UnprintableError()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_env_error_whose_str_raises_is_still_reported_and_rebuilt(mode: str) -> None:
    # The async worker died on str(error) ("exited unexpectedly"), even under on_error="rebuild";
    # sync raised the bare RuntimeError of its __str__, without the env's index.
    both = {"player1": 0, "player2": 1}
    with VectorMultiAgentEnv([RockPaperScissors, _RaisesUnprintable], mode) as venv:
        venv.reset(seed=0)
        with pytest.raises(VectorEnvError, match=r"^env 1 raised _UnprintableError during step\(\): <its str\(\) raised "
                                                 r"RuntimeError>"):
            venv.step([both, both])
    with VectorMultiAgentEnv([RockPaperScissors, _RaisesUnprintable], mode, on_error="rebuild",
                             max_rebuild_attempts=1) as venv:
        venv.reset(seed=0)
        assert venv.step([both, both])[1][0] == {"player1": -1, "player2": 1}
        assert [index for index, _ in venv.last_failures] == [1]


class _ReusesItsBuffer(MultiAgentEnv):
    """Writes the step count into one array it hands out every time; the episode ends at step 2."""

    def __init__(self) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["a"]
        self.observation_spaces = {"a": gym.spaces.Box(0, 9, (2,), np.float32)}
        self.action_spaces = {"a": gym.spaces.Discrete(2)}
        self.buffer = np.zeros(2, np.float32)
        self.rewards: dict[str, float] = {}
        self.terminateds = {ALL: False}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        self.buffer[:] = 0
        self.rewards.clear()  # the dicts it hands out, emptied in place
        self.terminateds[ALL] = False
        return {"a": self.buffer}, {"a": {"t": self.buffer}}

    def step(self, action_dict):
        self.t += 1
        self.buffer[:] = self.t
        self.rewards["a"], self.terminateds[ALL] = float(self.t), self.t >= 2
        return {"a": self.buffer}, self.rewards, self.terminateds, {ALL: False}, {"a": {"t": self.buffer}}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_same_step_autoreset_keeps_the_final_observation_of_an_env_reusing_its_buffer(mode: str) -> None:
    # The reset wrote into the array the final step had returned: the final observation came back as
    # the new episode's first, [0, 0], with terminated=True.
    with VectorMultiAgentEnv([_ReusesItsBuffer], mode, autoreset_mode="same_step") as venv:
        venv.reset(seed=0)
        venv.step([{"a": 0}])
        obs_list, rewards_list, terminateds_list, _, infos_list = venv.step([{"a": 0}])
        assert terminateds_list[0][ALL] is True and rewards_list[0] == {"a": 2.0}
        np.testing.assert_array_equal(obs_list[0]["a"], [2.0, 2.0])
        np.testing.assert_array_equal(infos_list[0]["a"]["t"], [2.0, 2.0])
        np.testing.assert_array_equal(venv.reset_results[0][0]["a"], [0.0, 0.0])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_after_a_failed_step_every_other_env_has_stepped_in_both_modes(mode: str) -> None:
    # Sync mode stopped at the failing env, async stepped every env: the envs after it differed.
    both = {"player1": 0, "player2": 1}
    envs = [RockPaperScissors, lambda: ExplodingEnv(2), lambda: ExplodingEnv(2), RockPaperScissors]
    with VectorMultiAgentEnv(envs, mode) as venv:
        venv.reset(seed=0)
        venv.step([both] * 4)
        with pytest.raises(VectorEnvError, match=r"^env 1 raised RuntimeError during step\(\): boom at move 2 "
                                                 r"\(envs \[1, 2\] failed\)"):
            venv.step([both] * 4)
        assert venv.call("num_moves") == [2, 1, 1, 2]


class _PopsItsLevel(RockPaperScissors):
    def reset(self, *, seed=None, options=None):
        level = (options or {}).pop("level", 0)
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {"player1": {"level": level}}


@pytest.mark.parametrize(("mode", "num_workers"), [("sync", None), ("async", None), ("async", 1)])
def test_each_env_resets_with_its_own_copy_of_the_options(mode: str, num_workers: int | None) -> None:
    # One dict went to every env: in sync mode (and async with one worker) env 0 popped the level
    # for all; the caller's dict was emptied too. Async with a worker per env gave each a copy.
    options = {"level": 5}
    with VectorMultiAgentEnv([_PopsItsLevel] * 3, mode, num_workers=num_workers) as venv:
        _, infos = venv.reset(seed=0, options=options)
    assert [info["player1"]["level"] for info in infos] == [5, 5, 5]
    assert options == {"level": 5}


_ONLY_ONE: list[MultiAgentEnv] = []


def _always_the_same_failing_env() -> MultiAgentEnv:
    if not _ONLY_ONE:
        _ONLY_ONE.append(_FailsOnce())
    return _ONLY_ONE[0]


@pytest.mark.parametrize(("mode", "num_workers"), [("sync", None), ("async", 1)])
def test_a_rebuild_whose_factory_returns_the_failed_env_itself_is_refused(mode: str, num_workers: int | None) -> None:
    # The closed env came back at every rebuild, failed again at every step and was "rebuilt" again, forever.
    _ONLY_ONE[:] = []
    both = {"player1": 0, "player2": 1}
    with VectorMultiAgentEnv([RockPaperScissors, _always_the_same_failing_env], mode, num_workers=num_workers,
                             on_error="rebuild", max_rebuild_attempts=2) as venv:
        venv.reset(seed=0)
        with pytest.raises(VectorEnvError, match=r"(?s)env 1 could not be rebuilt in 2 attempts; .*SharedEnvError: returned "
                                                 r"the very env object that failed \(closed now\)"):
            venv.step([both, both])


def test_bad_vector_arguments_are_vector_env_errors() -> None:
    # Each was a raw TypeError; max_rebuild_attempts=1.5 only at the first failure, in the middle of a step.
    for kwargs, words in [({"num_workers": 1.5}, "num_workers must be an integer, received 1.5"),
                          ({"num_workers": "2"}, "num_workers must be an integer, received '2'"),
                          ({"max_rebuild_attempts": 1.5}, "max_rebuild_attempts must be an integer, received 1.5")]:
        with pytest.raises(VectorEnvError, match=re.escape(words)):
            VectorMultiAgentEnv([RockPaperScissors] * 2, "async" if "num_workers" in kwargs else "sync", **kwargs)
    with pytest.raises(VectorEnvError, match="env_fns must be a list of env factories, received a generator"):
        VectorMultiAgentEnv(factory for factory in [RockPaperScissors])


def test_stack_gather_and_scatter_say_what_they_cannot_take() -> None:
    # stack turned [1, "a"] into array(['1', 'a']); gather's error named no policy or row; scatter of a
    # tuple of ints said "object of type 'int' has no len()"; [None, None] said "row 0 ..., row 0 ...".
    with pytest.raises(SpaceError, match=r"^stack\(\): row 0 is an int, row 1 a str; strings and other values"):
        stack([1, "a"])
    with pytest.raises(SpaceError, match=r"^stack\(\): row 0 is None, which cannot be stacked$"):
        stack([None, None])
    assert stack(["x", "yz"]).tolist() == ["x", "yz"]
    with pytest.raises(SpaceError, match=r"^gather\(\): the observations of policy 'shared' cannot be stacked \(rows "
                                         r"0: env 0 agent 'a', 1: env 0 agent 'b', 2: env 1 agent 'a', 3: env 1 agent 'b'\): "
                                         r"stack\(\): observations of different shapes \[\(3,\), \(4,\)\]"):
        gather([{"a": np.zeros(3), "b": np.zeros(3)}, {"a": np.zeros(3), "b": np.zeros(4)}], lambda i, a: "shared")
    batches = gather([{"a": 0, "b": 1}], lambda i, a: "p")
    with pytest.raises(VectorEnvError, match=r"^scatter\(\): the actions of policy 'p' must be a list of 2, an array "
                                             r"with 2 rows, or a dict or tuple of such .*received an int \(0\)"):
        scatter({"p": (0, 1)}, batches, 1)


class _PopsItsLevelThenFailsOnce(_PopsItsLevel):
    """Pops ``options["level"]``, and raises in the second reset of its process (env 1's first)."""

    resets = [0]

    def reset(self, *, seed=None, options=None):
        obs, infos = super().reset(seed=seed, options=options)
        _PopsItsLevelThenFailsOnce.resets[0] += 1
        if _PopsItsLevelThenFailsOnce.resets[0] == 2:
            raise RuntimeError("transient")
        return obs, infos


@pytest.mark.parametrize(("mode", "num_workers"), [("sync", None), ("async", 1)])
def test_a_rebuild_after_a_failed_reset_gets_the_callers_options_not_the_failed_envs_copy(
    mode: str, num_workers: int | None
) -> None:
    # In sync mode the rebuilt env got the copy that the failed env had emptied: level 0, not 3.
    _PopsItsLevelThenFailsOnce.resets[0] = 0
    with VectorMultiAgentEnv([_PopsItsLevelThenFailsOnce] * 2, mode, num_workers=num_workers,
                             on_error="rebuild") as venv:
        _, infos = venv.reset(seed=0, options={"level": 3})
        assert [info["player1"]["level"] for info in infos] == [3, 3]
        assert [index for index, _ in venv.last_failures] == [1]


class _EndsThenAutoresetFailsOnce(_PopsItsLevel):
    """Ends after one move; the next reset of its process (the next step's autoreset) raises once."""

    resets = [0]

    def reset(self, *, seed=None, options=None):
        obs, infos = super().reset(seed=seed, options=options)
        infos["player1"]["options"] = options
        _EndsThenAutoresetFailsOnce.resets[0] += 1
        if _EndsThenAutoresetFailsOnce.resets[0] == 2:
            raise RuntimeError("transient")
        return obs, infos

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        return obs, rewards, {**terminateds, ALL: True}, truncateds, infos


def test_an_env_rebuilt_after_a_failed_autoreset_gets_no_options() -> None:
    # It got the options of the last reset(): an autoreset has none.
    _EndsThenAutoresetFailsOnce.resets[0] = 0
    both = {"player1": 0, "player2": 1}
    with VectorMultiAgentEnv([_EndsThenAutoresetFailsOnce], on_error="rebuild") as venv:
        venv.reset(seed=0, options={"level": 3})
        venv.step([both])
        _, _, _, _, infos_list = venv.step([both])  # the autoreset raises; the env is rebuilt
        assert venv.autoreset == [True] and [index for index, _ in venv.last_failures] == [0]
        assert infos_list[0]["player1"]["options"] is None

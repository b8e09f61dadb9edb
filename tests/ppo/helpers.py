"""Small envs for the trainer's tests: a two-move turn-based game and an env that fails on purpose."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from examples.rock_paper_scissors import RockPaperScissors
from marl_core import MultiAgentEnv
from marl_core.spaces import check_action_dict, masked_space


class TwoMoveGame(MultiAgentEnv):
    """``first`` moves, then ``second``; the game ends after the second move.

    Whoever played the larger number wins (+1, the other -1; a tie pays 0). Every reward arrives
    after ``second``'s move, so ``first``'s reward is credited to the move it made one step earlier.
    ``second`` also receives a bystander reward of 0.25 after ``first``'s move (before it ever
    acted: that reward cannot be credited to any action). Actions are masked: action 2 is never legal.
    """

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.possible_agents = ["first", "second"]
        inner = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.observation_spaces = {a: masked_space(inner, 3) for a in self.possible_agents}
        self.action_spaces = {a: gym.spaces.Discrete(3) for a in self.possible_agents}
        self.moves: dict[str, int] = {}

    def _obs(self, turn: int) -> dict[str, np.ndarray]:
        return {"observation": np.array([turn, 1 - turn], np.float32), "action_mask": np.array([1, 1, 0], np.int8)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.moves = {}
        self.agents = ["first"]
        return {"first": self._obs(0)}, {}

    def step(self, action_dict):
        check_action_dict(self, action_dict, self.agents)
        (agent_id, action), = action_dict.items()
        self.moves[agent_id] = int(action)
        if agent_id == "first":
            self.agents = ["second"]
            return {"second": self._obs(1)}, {"second": 0.25}, {"__all__": False}, {"__all__": False}, {}
        diff = np.sign(self.moves["first"] - self.moves["second"])
        rewards = {"first": float(diff), "second": float(-diff)}
        obs = {"first": self._obs(0), "second": self._obs(1)}
        done = {"first": True, "second": True, "__all__": True}
        self.agents = []
        return obs, rewards, done, {"first": False, "second": False, "__all__": False}, {}


def install_policies(sampler: Any, policies: dict[str, Any], mapping: Any, to_train: set[str], seed: int = 0) -> None:
    """``sampler.set_policies(...)``, then the initial weights of a fresh torch model for each learned policy.

    Runners receive weights from the learner before they sample; a bare sampler needs them too.
    """
    import torch

    from marl_core.ppo.model import TorchPolicy
    from marl_core.ppo.rollout import LearnedSpec

    sampler.set_policies(policies, mapping, to_train)
    weights = {}
    for policy_id, spec in policies.items():
        if isinstance(spec, LearnedSpec):
            torch.manual_seed(seed)
            weights[policy_id] = TorchPolicy(spec.observation_space, spec.action_space, spec.model_config).get_weights()
    sampler.set_weights(weights)


class FlakyRockPaperScissors(RockPaperScissors):
    """Rock-paper-scissors whose every ``fail_every``-th step (per instance) raises RuntimeError."""

    def __init__(self, config=None):
        super().__init__(config)
        self.fail_every = int((config or {}).get("fail_every", 25))
        self.calls = 0

    def step(self, action_dict):
        self.calls += 1
        if self.calls % self.fail_every == 0:
            raise RuntimeError(f"flaky env fails at its step call {self.calls}")
        return super().step(action_dict)


class SlowRockPaperScissors(RockPaperScissors):
    """Rock-paper-scissors that sleeps ``sleep`` seconds in every step (to stretch an iteration)."""

    def __init__(self, config=None):
        super().__init__(config)
        self.sleep = float((config or {}).get("sleep", 0.01))

    def step(self, action_dict):
        import time

        time.sleep(self.sleep)
        return super().step(action_dict)


class FailsOutsideTheDriver(RockPaperScissors):
    """Rock-paper-scissors that cannot be built in any process but ``driver_pid``'s (an env that
    needs something only the driver has): the driver's probe passes, every env runner fails."""

    def __init__(self, config=None):
        import os

        if os.getpid() != int((config or {})["driver_pid"]):
            raise RuntimeError("factory fails in runner")
        super().__init__(config)


class SlowStartRockPaperScissors(RockPaperScissors):
    """Rock-paper-scissors whose first instance in a process other than ``config["driver_pid"]``
    sleeps ``config["start_sleep"]`` seconds while it is built: an env runner slow to start."""

    started_in: set[int] = set()

    def __init__(self, config=None):
        import os
        import time

        super().__init__(config)
        config = config or {}
        if os.getpid() != int(config["driver_pid"]) and os.getpid() not in SlowStartRockPaperScissors.started_in:
            SlowStartRockPaperScissors.started_in.add(os.getpid())
            time.sleep(float(config["start_sleep"]))


class HangingRockPaperScissors(RockPaperScissors):
    """Rock-paper-scissors whose step never returns (a 1000 s sleep) once the file
    ``config["arm"]`` exists; with ``config["once"]`` (a path) only the first env to create that
    file hangs, so a replacement runner samples normally."""

    def __init__(self, config=None):
        super().__init__(config)
        self.arm = (config or {}).get("arm")
        self.once = (config or {}).get("once")

    def step(self, action_dict):
        import os
        import time

        if self.arm and os.path.exists(self.arm):
            hang = True
            if self.once:
                try:
                    os.close(os.open(self.once, os.O_CREAT | os.O_EXCL))
                except FileExistsError:
                    hang = False
            if hang:
                time.sleep(1000)
        return super().step(action_dict)


class CorruptingRockPaperScissors(RockPaperScissors):
    """Rock-paper-scissors whose 3rd step gives ``player2`` the observation ``config["obs"]`` (if
    given) and the reward ``config["reward"]`` (if given)."""

    def __init__(self, config=None):
        super().__init__(config)
        self.corrupt = dict(config or {})
        self.calls = 0

    def step(self, action_dict):
        self.calls += 1
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if self.calls == 3:
            if "obs" in self.corrupt:
                obs = {**obs, "player2": self.corrupt["obs"]}
            if "reward" in self.corrupt:
                rewards = {**rewards, "player2": self.corrupt["reward"]}
        return obs, rewards, terminateds, truncateds, infos


class FloatObservationGame(TwoMoveGame):
    """:class:`TwoMoveGame` whose ``second`` observes ``config["observation"]`` at its turn."""

    def __init__(self, config=None):
        super().__init__(config)
        self.observation = (config or {}).get("observation", np.zeros(2, np.float32))

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if "second" in obs and not terminateds.get("second"):
            obs = {"second": {**obs["second"], "observation": self.observation}}
        return obs, rewards, terminateds, truncateds, infos


class WideBoxBandit(MultiAgentEnv):
    """One agent, one step: an action in Box(0, 100) pays ``-|action - 70| / 100``.

    Every action it receives is kept in the class's ``received`` list (the trainer builds the env).
    """

    received: list[float] = []

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["agent"]
        self.observation_spaces = {"agent": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)}
        self.action_spaces = {"agent": gym.spaces.Box(0.0, 100.0, (1,), np.float32)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return {"agent": np.zeros(2, np.float32)}, {}

    def step(self, action_dict):
        check_action_dict(self, action_dict, ["agent"])
        action = float(action_dict["agent"][0])
        WideBoxBandit.received.append(action)
        return ({"agent": np.zeros(2, np.float32)}, {"agent": -abs(action - 70.0) / 100.0},
                {"agent": True, "__all__": True}, {"__all__": False}, {})


class StructuredActionsEnv(MultiAgentEnv):
    """Three agents acting together for ``config["length"]`` steps (default 4), each with a
    structured action space: ``pick`` a Dict (a Discrete starting at 1, a MultiBinary, a float Box),
    ``switch`` a MultiBinary, ``level`` a bounded integer Box. Every action is checked against its
    space (types, dtypes and shapes too) and kept in the class's ``received`` list; ``level`` is paid
    for its first entry, so it has something to learn."""

    ACTION_SPACES = {
        "pick": gym.spaces.Dict({"move": gym.spaces.Discrete(3, start=1), "bits": gym.spaces.MultiBinary([2, 2]),
                                 "push": gym.spaces.Box(0.0, 10.0, (2,), np.float32)}),
        "switch": gym.spaces.MultiBinary(3),
        "level": gym.spaces.Box(np.array([-3, 0]), np.array([3, 9]), (2,), np.int32),
    }
    received: list[tuple[str, Any]] = []

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.length = int((config or {}).get("length", 4))
        self.agents = self.possible_agents = list(self.ACTION_SPACES)
        self.observation_spaces = {a: gym.spaces.Box(-1.0, 1.0, (3,), np.float32) for a in self.agents}
        self.action_spaces = dict(self.ACTION_SPACES)
        self.t = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {a: np.full(3, self.t / self.length, np.float32) for a in self.agents}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action_dict):
        check_action_dict(self, action_dict, self.agents)
        StructuredActionsEnv.received.extend(action_dict.items())
        self.t += 1
        rewards = {"pick": float(action_dict["pick"]["move"] == 2), "switch": float(np.sum(action_dict["switch"])),
                   "level": float(action_dict["level"][0])}
        done = self.t >= self.length
        flags = {a: done for a in self.agents}
        return self._obs(), rewards, {**flags, "__all__": done}, {"__all__": False}, {}


class PaidAndLateEnv(MultiAgentEnv):
    """``actor`` acts for ``config["length"]`` steps (default 2) and is paid 1 per step; ``paid``
    never acts and is paid 0.5 per step; ``late`` appears only in the final observations (ended,
    never acting, never paid). ``config["fail_resets"]``: reset() raises for seeds above 10**6
    (evaluation's) that many times, counted over every instance of the class."""

    failures = 0

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        config = config or {}
        self.length = int(config.get("length", 2))
        self.fail_resets = int(config.get("fail_resets", 0))
        self.possible_agents = ["actor", "paid", "late"]
        self.agents = []
        self.observation_spaces = {a: gym.spaces.Box(0.0, 1.0, (1,), np.float32) for a in self.possible_agents}
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.possible_agents}
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None and seed > 10**6 and PaidAndLateEnv.failures < self.fail_resets:
            PaidAndLateEnv.failures += 1
            raise RuntimeError("evaluation env broken")
        super().reset(seed=seed)
        self.t = 0
        self.agents = ["actor"]
        return {"actor": np.zeros(1, np.float32)}, {}

    def step(self, action_dict):
        check_action_dict(self, action_dict, ["actor"])
        self.t += 1
        done = self.t >= self.length
        obs = {"actor": np.zeros(1, np.float32)}
        if done:
            obs["late"] = np.ones(1, np.float32)
            self.agents = []
        flags = {"actor": done, "late": done} if done else {}
        return obs, {"actor": 1.0, "paid": 0.5}, {**flags, "__all__": done}, {"__all__": False}, {}

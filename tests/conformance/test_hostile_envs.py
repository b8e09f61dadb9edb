"""Whatever an env does, the checker reports it and never raises."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from marl_core.conformance import check_env


class Hostile:
    """A protocol look-alike whose every part can be made to misbehave."""

    def __init__(self, **bad: Any) -> None:
        self.bad = bad
        self.observation_spaces = {"a": spaces.Box(0.0, 1.0, (2,), np.float32)}
        self.action_spaces = {"a": spaces.Discrete(2)}
        self._agents = ["a"]

    @property
    def possible_agents(self) -> Any:
        if "possible_agents" in self.bad:
            if self.bad["possible_agents"] == "unhashable":
                return ["a", ["b"]]
            raise RuntimeError("possible_agents exploded")
        return ["a"]

    @property
    def agents(self) -> Any:
        if self.bad.get("agents") == "unhashable":
            return ["a", ["b"]]
        if "agents" in self.bad:
            raise RuntimeError("agents exploded")
        return self._agents

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        return self.bad.get("reset", ({"a": self.bad.get("obs", np.zeros(2, np.float32))}, {}))

    def step(self, action_dict: dict) -> Any:
        if "step" in self.bad:
            return self.bad["step"]
        obs = {"a": self.bad.get("obs", np.zeros(2, np.float32))}
        terminateds = {"__all__": True, **self.bad.get("terminateds", {})}
        return obs, {"a": self.bad.get("reward", 0.0)}, terminateds, {"__all__": False}, {}

    def close(self) -> None:
        if "close" in self.bad:
            raise self.bad["close"]


def _rules(**bad: Any) -> set[str]:
    return check_env(Hostile(**bad), episodes=2, max_steps=50).rules


def test_hostile_results_become_findings() -> None:
    assert _rules() == set()
    assert _rules(reset=None) == {"api.reset"}
    assert _rules(reset=({"a": 1}, None)) == {"api.reset"}
    assert _rules(step=None) == {"api.step"}
    assert _rules(step=(1, 2, 3, 4, 5)) == {"api.step"}
    assert _rules(obs=np.array(["x", "y"], dtype=object)) == {"spaces.obs-contains"}
    assert _rules(obs=(x for x in range(2))) >= {"spaces.obs-contains"}
    assert _rules(reward="1.0") == {"rewards.numeric"}
    assert _rules(reward=np.array([1.0])) == {"rewards.numeric"}
    assert _rules(reward=True) == {"rewards.numeric"}
    assert _rules(reward=10**400) == {"rewards.numeric"}
    assert _rules(terminateds={"a": np.array([True, False])}) == {"api.step"}
    assert _rules(terminateds={"__all__": np.array([True, True])}) == {"api.all-key", "termination.bounded"}
    assert _rules(close=SystemError("close exploded")) == {"close.idempotent"}


def test_raising_properties_become_findings() -> None:
    assert _rules(agents=True) == {"ids.agents-attr"}
    report = check_env(Hostile(agents="unhashable"), episodes=1, max_steps=5)
    assert report.rules == {"ids.agents-attr"}
    assert any("cannot be an agent id" in finding.message for finding in report.findings)
    assert _rules(possible_agents=True) >= {"ids.agents-attr"}
    assert _rules(possible_agents="unhashable") == {"ids.agents-attr"}

"""The pistonball example runs with a tiny budget and reports every piston."""

from __future__ import annotations

import pytest

from examples.pistonball_random import env_creator, main, play_random


def test_pistonball_example_plays_an_episode(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--n-pistons", "4", "--max-cycles", "3", "--seed", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("pistonball_v6, 4 pistons: 12 steps in")
    assert lines[0].endswith(("truncated", "terminated"))  # 3 cycles, unless the ball reached the wall
    assert [line.split(":")[0].strip() for line in lines[1:]] == [f"piston_{i}" for i in range(4)]
    assert all(" 3 actions" in line for line in lines[1:])


def test_pistonball_example_is_seeded_and_uses_the_seeds_creator() -> None:
    env = env_creator({"n_pistons": 3, "max_cycles": 2})
    assert env.possible_agents == ["piston_0", "piston_1", "piston_2"]
    assert play_random(3, 2, seed=5).returns == play_random(3, 2, seed=5).returns

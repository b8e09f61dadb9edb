"""``marl-check``: exit status 0 / 1 / 2, text and JSON output, and ``python -O`` still catches bugs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from marl_core.conformance import check_env
from marl_core.conformance.cli import main
from marl_core.conformance.rules import RULES, catalog_markdown
from marl_core.envs import RockPaperScissors
from tests.fixtures import broken_envs
from tests.fixtures.broken_envs import Duel

ROOT = Path(__file__).resolve().parents[2]


def test_clean_env_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["examples.rock_paper_scissors:RockPaperScissors"]) == 0
    assert ": OK, 0 errors" in capsys.readouterr().out


def test_the_report_names_the_target_as_typed(capsys: pytest.CaptureFixture[str]) -> None:
    # A factory that returns an inner function would otherwise be named after that function.
    assert main(["pettingzoo.classic.rps_v2:parallel_env", "--episodes", "1"]) == 0
    assert capsys.readouterr().out.startswith("marl-check pettingzoo.classic.rps_v2:parallel_env: OK")
    assert main(["pettingzoo.classic.rps_v2:parallel_env", "--episodes", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["target"] == "pettingzoo.classic.rps_v2:parallel_env"


def test_errors_exit_1_with_json(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["tests.fixtures.broken_envs:NanReward", "--json", "--episodes", "2", "--seed", "7"])
    assert status == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["seed"] == 7 and data["episodes"] == 2
    assert [f["rule"] for f in data["findings"]] == ["rewards.numeric"]
    assert "seed 7" in data["findings"][0]["message"]


def test_an_env_calling_sys_exit_is_an_error_not_a_pass(capsys: pytest.CaptureFixture[str]) -> None:
    # SystemExit is no Exception: uncaught, it ended the check with status 0 and no report.
    assert main(["tests.fixtures.broken_envs:ExitsInStep", "--json", "--episodes", "1"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [f["rule"] for f in data["findings"]] == ["api.step"]
    assert "SystemExit: simulation diverged" in data["findings"][0]["message"]


class Cancelled(BaseException):
    """Not an Exception, as trio's and anyio's cancellations are not."""


class CancelledInStep(Duel):
    def step(self, action_dict):
        raise Cancelled("the env gave up")


class HangsInStep(Duel):
    def step(self, action_dict):
        import time

        time.sleep(10**6)


def test_a_base_exception_of_the_env_is_an_error_with_a_report(capsys: pytest.CaptureFixture[str]) -> None:
    # It escaped check_env: a traceback, status 1 and no JSON on stdout.
    assert main(["tests.conformance.test_cli:CancelledInStep", "--json", "--episodes", "1"]) == 1
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert finding["rule"] == "api.step"
    assert finding["message"].startswith("the env raised Cancelled, which is not an Exception; the check stopped there")


class HangsAfterItsFloat64Observations(broken_envs.Float64Observations):
    def step(self, action_dict):
        if self.t == 2:
            HangsInStep.step(self, action_dict)
        return super().step(action_dict)


class HangsInClose(Duel):
    def close(self):
        HangsInStep.step(self, {})


class InterruptedInStep(Duel):
    def step(self, action_dict):
        if self.t == 2:
            raise KeyboardInterrupt  # as Ctrl-C lands, inside the env's code
        return super().step(action_dict)


def test_a_check_past_its_timeout_reports_what_it_found_until_then(capsys: pytest.CaptureFixture[str]) -> None:
    # An env call that never returned hung marl-check forever, with no output; then it was "no
    # report", the errors found before the hang thrown away.
    assert main(["tests.conformance.test_cli:HangsInStep", "--json", "--timeout", "0.5"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["error"] == ("the check did not finish within --timeout 0.5 s (an env call that never returns, or "
                             "an env too slow for the limit: raise --timeout, or lower --episodes or --max-steps)")
    assert data["stopped"] == "stopped by its time limit while exploring episode 0, after 0 steps"
    assert data["ok"] is False and data["findings"] == []
    assert main(["tests.conformance.test_cli:HangsAfterItsFloat64Observations", "--timeout", "0.5"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("marl-check tests.conformance.test_cli:HangsAfterItsFloat64Observations: FAILED, 2 errors")
    assert "the check stopped by its time limit while exploring episode 0, after 2 steps: the findings until then" in out
    assert "error spaces.obs-contains (agent 'a', step 0)" in out
    # Where it stopped, past the replays too (it named the last replay).
    assert main(["tests.conformance.test_cli:HangsInClose", "--json", "--episodes", "1", "--timeout", "0.5"]) == 2
    assert json.loads(capsys.readouterr().out)["stopped"].startswith(
        "stopped by its time limit while closing the fresh instance, after ")
    assert main(["tests.conformance.test_cli:HangsInStep", "--timeout", "-1"]) == 2
    assert "--timeout must be a number of seconds of at least 0, received -1.0" in capsys.readouterr().err
    assert main(["tests.conformance.test_cli:HangsInStep", "--timeout", "-1", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["target"] == "tests.conformance.test_cli:HangsInStep"


def test_ctrl_c_reports_what_was_found_until_then_with_status_130(capsys: pytest.CaptureFixture[str]) -> None:
    # It was a traceback through the checker, and nothing on stdout with --json.
    assert main(["tests.conformance.test_cli:InterruptedInStep", "--json", "--episodes", "1"]) == 130
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert (data["ok"], data["error"], data["stopped"]) == (False, "interrupted",
                                                            "interrupted while exploring episode 0, after 2 steps")
    assert "marl-check: interrupted; the findings until then follow" in captured.err
    assert main(["tests.conformance.test_cli:InterruptedInStep", "--episodes", "1"]) == 130
    assert "INCOMPLETE, 0 errors" in capsys.readouterr().out
    with pytest.raises(KeyboardInterrupt) as caught:  # in Python: passed on, with the partial report
        check_env(InterruptedInStep)
    assert caught.value.partial_report.stopped == "interrupted while exploring episode 0, after 2 steps"
    assert not caught.value.partial_report.ok


class SwallowsTheFirstInterrupt(Duel):
    def step(self, action_dict):
        import time

        try:
            time.sleep(10**6)
        except BaseException:  # a bare except: the timer fires again a second later
            time.sleep(10**6)


def test_the_timeout_fires_again_and_gives_back_the_callers_timer(capsys: pytest.CaptureFixture[str]) -> None:
    import signal

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    signal.setitimer(signal.ITIMER_REAL, 60.0)  # the caller's own timer, armed before
    try:
        assert main(["tests.conformance.test_cli:SwallowsTheFirstInterrupt", "--json", "--timeout", "0.3"]) == 2
        assert "did not finish within --timeout 0.3 s" in json.loads(capsys.readouterr().out)["error"]
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 50.0 < left <= 60.0  # armed again for what it had left (it was cancelled)
        assert main(["examples.rock_paper_scissors:RockPaperScissors", "--timeout", "inf"]) == 0  # inf: never
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert fired == []


def test_warnings_only_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tests.fixtures.broken_envs:NeverEnds", "--max-steps", "10", "--episodes", "1"]) == 0
    assert "warning termination.bounded" in capsys.readouterr().out


def test_skip_takes_several_rules(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["tests.fixtures.broken_envs:NanReward", "--skip", "rewards.numeric", "pickle"])
    assert status == 0
    assert "skipped rules: rewards.numeric, pickle" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("no_such_module_here:Env", "cannot import module 'no_such_module_here'"),
        ("tests.fixtures.broken_envs", "expected MODULE:ATTR"),
        ("tests.fixtures.broken_envs:NoSuchEnv", "has no attribute 'NoSuchEnv'"),
        ("tests.fixtures.broken_envs:exploding_factory", "license server is unreachable"),
        ("tests.fixtures.broken_envs:BROKEN", "is not a multi-agent env"),
    ],
)
def test_unbuildable_target_exits_2_saying_why(target: str, reason: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import bridges

    monkeypatch.delitem(bridges._EXPORTS, "wrap", raising=False)
    assert main([target]) == 2
    assert reason in capsys.readouterr().err


def test_a_target_module_missing_a_module_of_an_extra_says_which_extra(tmp_path, capsys, monkeypatch) -> None:
    # It was "No module named 'pygame'" alone, for PettingZoo's classic envs in an install without the envs extra.
    (tmp_path / "needs_pygame.py").write_text("import pygame\n")
    monkeypatch.setitem(sys.modules, "pygame", None)  # as in an install without it
    assert main([f"{tmp_path / 'needs_pygame.py'}:Env"]) == 2
    assert 'import of pygame halted; None in sys.modules (`pip install "marl-bridges[envs]"` installs it)' in (
        capsys.readouterr().err)


def test_unbuildable_target_with_json_prints_the_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no_such_module_here:Env", "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["findings"] == [] and "no_such_module_here" in data["error"]


_RPS = "examples.rock_paper_scissors:RockPaperScissors"


def test_unknown_rule_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["examples.rock_paper_scissors:RockPaperScissors", "--skip", "rewards.finite"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "unknown rule id(s) 'rewards.finite'" in err and "rewards.numeric" in err


@pytest.mark.parametrize(
    ("argv", "reason", "target"),
    [
        (["--json", "--episodes", "x"], "invalid int value: 'x'", _RPS),
        (["--jso", "--skip", "rewards.finite"], "unknown rule id(s) 'rewards.finite'", _RPS),
        (["--json", "--no-such-option"], "unrecognized arguments: --no-such-option", _RPS),
    ],
)
def test_usage_error_with_json_prints_json(
    argv: list[str], reason: str, target: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    # A CI parser reading --json output gets JSON even when the arguments are wrong.
    with pytest.raises(SystemExit) as exited:
        main([_RPS, *argv])
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["ok"] is False and data["findings"] == [] and data["target"] == target
    assert reason in data["error"] and reason in err


def test_a_usage_error_before_the_target_is_read_has_no_target(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--json", "--episodes", "x", _RPS])
    assert json.loads(capsys.readouterr().out)["target"] is None
    with pytest.raises(SystemExit):  # the unknown option is refused once every argument is read
        main(["--json", "--no-such-option", _RPS])
    assert json.loads(capsys.readouterr().out)["target"] == _RPS
    with pytest.raises(SystemExit):  # the target is still in --skip's list then
        main(["--json", "--skip", "pickle", _RPS, "--no-such-option"])
    assert json.loads(capsys.readouterr().out)["target"] == _RPS


def test_usage_error_without_json_prints_no_json(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["examples.rock_paper_scissors:RockPaperScissors", "--episodes", "x"])
    out, err = capsys.readouterr()
    assert out == "" and "invalid int value" in err


def test_target_after_skip_is_the_target(capsys: pytest.CaptureFixture[str]) -> None:
    # --skip takes several ids; the target written after them must not be swallowed as one.
    status = main(["--skip", "rewards.numeric", "pickle", "tests.fixtures.broken_envs:NanReward"])
    assert status == 0
    assert "skipped rules: rewards.numeric, pickle" in capsys.readouterr().out
    assert main(["--skip", "pickle", "tests.fixtures.broken_envs:NanReward"]) == 1
    assert "error rewards.numeric" in capsys.readouterr().out


def test_list_rules_prints_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list-rules"]) == 0
    assert capsys.readouterr().out == catalog_markdown()
    assert main(["--list-rules", "--json"]) == 0
    rules = json.loads(capsys.readouterr().out)
    assert [rule["id"] for rule in rules] == list(RULES)
    assert rules[0] == {"id": "api.reset", "severity": "error", "summary": RULES["api.reset"].summary,
                        "example": RULES["api.reset"].example, "fix": RULES["api.reset"].fix}


class TalkativeDuel(Duel):
    """A correct env that prints at every step, from Python and (as C code does) to descriptor 1."""

    def step(self, action_dict):
        print(f"debug: step {self.t}")
        os.write(1, b"native debug line\n")
        return super().step(action_dict)


def test_json_stays_alone_on_stdout_whatever_the_env_prints() -> None:
    done = _run(str(Path(sys.executable).parent / "marl-check"), "tests.conformance.test_cli:TalkativeDuel", "--json",
                "--episodes", "1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ok"] is True
    assert "debug: step 0" in done.stderr and "native debug line" in done.stderr


def test_sys_exit_while_importing_the_target_is_no_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "quits_on_import.py").write_text("import sys\nsys.exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["quits_on_import:Env", "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["error"].startswith("importing module 'quits_on_import' raised SystemExit: 0")


def test_json_stays_alone_on_stdout_after_the_report_too(tmp_path: Path) -> None:
    # An instance target lives until the interpreter exits: its goodbyes come after the report.
    (tmp_path / "says_goodbye.py").write_text(textwrap.dedent("""
        import atexit
        from tests.fixtures.broken_envs import Duel

        class Farewell(Duel):
            def __del__(self):
                print("Farewell released")

        env = Farewell()
        atexit.register(print, "says_goodbye: bye")
    """))
    done = subprocess.run([str(Path(sys.executable).parent / "marl-check"), "says_goodbye:env", "--json", "--episodes", "1"],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ok"] is True
    assert "says_goodbye: bye" in done.stderr and "Farewell released" in done.stderr


@pytest.mark.slow  # waits out --timeout and the grace after it: about 12 s
def test_an_env_that_swallows_the_timeout_still_ends_the_command(tmp_path: Path) -> None:
    # Its bare `except:` caught every stop --timeout raised: the command ran on for good.
    (tmp_path / "swallows.py").write_text(textwrap.dedent("""
        import time
        from tests.fixtures.broken_envs import Duel

        class Swallows(Duel):
            def step(self, action_dict):
                while True:
                    try:
                        time.sleep(0.05)
                    except:  # noqa: E722
                        pass
    """))
    done = subprocess.run([str(Path(sys.executable).parent / "marl-check"), "swallows:Swallows", "--json", "--timeout",
                           "1"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    message = ("the check did not stop within 10 s after --timeout 1 s: the env's code catches the stop (a bare "
               "`except:` or `except BaseException` in a loop, say) or is stuck where Python cannot interrupt it; "
               "exiting without a report")
    assert json.loads(done.stdout) == {"target": "swallows:Swallows", "ok": False, "error": message, "findings": []}
    assert f"marl-check: {message}" in done.stderr


@pytest.mark.slow  # a check of about 13 s, past --timeout and the grace after it
def test_where_no_time_limit_can_be_armed_a_slow_check_is_not_cut(tmp_path: Path) -> None:
    # Without an interval timer (Windows) --timeout arms nothing, but the watchdog killed the
    # check 10 s after it, blaming a bare `except:`.
    (tmp_path / "slow.py").write_text(textwrap.dedent("""
        import signal
        import sys
        import time
        from tests.fixtures.broken_envs import Duel
        from marl_core.conformance.cli import main

        class Slow(Duel):
            def step(self, action_dict):
                time.sleep(0.7)
                return super().step(action_dict)

        if __name__ == "__main__":
            del signal.setitimer
            sys.argv = ["marl-check", "slow:Slow", "--json", "--timeout", "1", "--episodes", "1"]
            sys.exit(main())
    """))
    done = subprocess.run([sys.executable, "slow.py"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["seconds"] > 11


def test_a_crash_of_the_checker_itself_is_no_report(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Exit status 1 would say "errors found"; the checker failing says nothing about the env.
    import marl_core.conformance.cli as cli

    def broken_check(*args: object, **kwargs: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(cli, "check_env", broken_check)
    assert main(["examples.rock_paper_scissors:RockPaperScissors", "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["findings"] == []
    assert data["error"].startswith("the check itself failed, a marl-check bug") and "RecursionError" in data["error"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def test_broken_env_is_still_caught_under_python_O() -> None:
    done = _run(sys.executable, "-O", "-m", "marl_core.conformance", "tests.fixtures.broken_envs:Float64Observations", "--json")
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert {f["rule"] for f in data["findings"]} == {"spaces.obs-contains"}
    flags = _run(sys.executable, "-O", "-c", "import sys; print(sys.flags.optimize)")
    assert flags.stdout.strip() == "1"


def test_installed_script_runs() -> None:
    script = Path(sys.executable).parent / "marl-check"
    done = _run(str(script), "tests.fixtures.broken_envs:CloseTwiceFails")
    assert done.returncode == 0, done.stderr
    assert "warning close.idempotent" in done.stdout


class CancelledInSeededReset(Duel):
    def reset(self, *, seed=None, options=None):
        if seed == 1:
            raise Cancelled("the env gave up")
        return super().reset(seed=seed, options=options)


def test_a_base_exception_in_reset_is_an_api_reset_finding_and_skipping_it_is_no_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["tests.conformance.test_cli:CancelledInSeededReset", "--json"]) == 1
    assert [f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["api.reset"]
    # With its rule skipped, the unfinished check passed (ok, no findings): it is no report.
    assert main(["tests.conformance.test_cli:CancelledInSeededReset", "--json", "--skip", "api.reset"]) == 2
    assert "the env raised Cancelled, which is not an Exception" in json.loads(capsys.readouterr().out)["error"]


class BuiltWith(RockPaperScissors):
    """Records the config it is built with (``--config``)."""

    calls: list[Any] = []

    def __init__(self, config):
        super().__init__()
        BuiltWith.calls.append(config)


def built_with_keywords(*, n_moves, label="default"):
    """A PettingZoo-style env function of keyword arguments (``--kwargs``)."""
    if n_moves < 0:
        raise ValueError(f"n_moves {n_moves}")
    BuiltWith.calls.append({"n_moves": n_moves, "label": label})
    return RockPaperScissors()


class ConsumesItsConfig(RockPaperScissors):
    """Takes its settings out of the config it is given (``config.pop``)."""

    def __init__(self, config):
        moves = config.pop("moves")
        super().__init__()
        self.moves = moves.pop()


AN_INSTANCE = RockPaperScissors()


def test_config_and_kwargs_build_the_target_with_the_users_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    BuiltWith.calls.clear()
    assert main(["tests.conformance.test_cli:BuiltWith", "--config", '{"size": 4}', "--episodes", "1"]) == 0
    assert len(BuiltWith.calls) > 1 and all(call == {"size": 4} for call in BuiltWith.calls)  # fresh envs too
    BuiltWith.calls.clear()
    assert main(["tests.conformance.test_cli:built_with_keywords", "--kwargs", '{"n_moves": 4}', "--episodes", "1"]) == 0
    assert len(BuiltWith.calls) > 1 and all(call == {"n_moves": 4, "label": "default"} for call in BuiltWith.calls)
    capsys.readouterr()
    # A PettingZoo env function with its keyword arguments: 4 pistons for 20 cycles, not 20 for 125.
    assert main(["pettingzoo.butterfly.pistonball_v6:env", "--kwargs", '{"n_pistons": 4, "max_cycles": 20}',
                 "--episodes", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 4 * 20 * 3  # the episode and its two replays
    # Without them, a target that needs arguments says how to give them.
    assert main(["tests.conformance.test_cli:built_with_keywords"]) == 2
    assert ("needs arguments (signature (*, n_moves, label='default')); pass a zero-argument factory, e.g. "
            "`lambda: built_with_keywords(...)`; marl-check passes arguments with --config JSON (one config "
            "argument, as RLlib passes env_config) or --kwargs JSON") in capsys.readouterr().err
    # What they cannot build with: refused by name, with no report.
    assert main(["tests.conformance.test_cli:built_with_keywords", "--config", '{"n_moves": 4}']) == 2
    assert ("--config: tests.conformance.test_cli:built_with_keywords cannot be called with one config argument: "
            "too many positional arguments (signature (*, n_moves, label='default'))") in capsys.readouterr().err
    assert main(["tests.conformance.test_cli:BuiltWith", "--kwargs", "{}"]) == 2  # BuiltWith(), not BuiltWith({})
    assert ("--kwargs: tests.conformance.test_cli:BuiltWith cannot be called with keyword arguments []: missing a "
            "required argument: 'config' (signature (config))") in capsys.readouterr().err
    # Every env built gets its own copy, as RLlib gives each env its own config: one that takes
    # keys out of it was built with {} from the second build on (a false determinism.seed error).
    assert main(["tests.conformance.test_cli:ConsumesItsConfig", "--config", '{"moves": [3]}', "--episodes", "1"]) == 0
    # What the checker says of the factory names the target, not a wrapper of it.
    assert main(["tests.conformance.test_cli:built_with_keywords", "--kwargs", '{"n_moves": -1}']) == 2
    assert ("calling tests.conformance.test_cli.built_with_keywords to build the env raised ValueError: n_moves -1"
            in capsys.readouterr().err)
    assert main(["tests.conformance.test_cli:AN_INSTANCE", "--kwargs", "{}", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"].startswith(
        "--kwargs needs a class or factory to call, but tests.conformance.test_cli:AN_INSTANCE is RockPaperScissors "
        "instance")
    for argv, reason in ((["--config", "[1]"], "argument --config: expected a JSON object, received '[1]'"),
                         (["--kwargs", "{"], "argument --kwargs: not JSON (Expecting property name"),
                         (["--config", "{}", "--kwargs", "{}"], "argument --kwargs: not allowed with argument --config")):
        with pytest.raises(SystemExit) as stop:
            main(["tests.conformance.test_cli:BuiltWith", *argv])
        assert stop.value.code == 2 and reason in capsys.readouterr().err


_USER_ENVS = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from marl_core.envs import RockPaperScissors


class Mine(RockPaperScissors):
    """A user's env, in a file of its own."""


class GymStyle(gym.Env):
    """RLlib's old style: a gymnasium.Env whose spaces are Dicts keyed by agent."""

    def __init__(self, config=None):
        self.agents = self.possible_agents = ["a", "b"]
        self.observation_space = spaces.Dict({a: spaces.Box(0.0, 1.0, (3,), np.float32) for a in self.agents})
        self.action_space = spaces.Dict({a: spaces.Discrete(3) for a in self.agents})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {a: np.zeros(3, np.float32) for a in self.agents}, {}

    def step(self, action_dict):
        return {a: np.zeros(3, np.float32) for a in self.agents}, {"a": 0.0, "b": 0.0}, {"__all__": True}, {}, {}


class GymStyleWithoutPossibleAgents(GymStyle):
    def __init__(self, config=None):
        super().__init__()
        del self.possible_agents


class NAgents(RockPaperScissors):
    def __init__(self, n_agents):
        super().__init__()
        self.possible_agents = [f"p{i}" for i in range(n_agents)]
'''


def test_a_file_path_target_and_what_the_checker_made_of_the_target(tmp_path, capsys) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "user_file_envs.py").write_text(_USER_ENVS)
    target = str(tmp_path / "sub" / "user_file_envs.py")
    # A file path was "No module named 'user_file_envs.py'".
    assert main([f"{target}:Mine", "--episodes", "1"]) == 0
    assert f"marl-check {target}:Mine: OK" in capsys.readouterr().out
    assert main([str(tmp_path / "nothing.py") + ":Mine"]) == 2
    assert f"cannot import '{tmp_path / 'nothing.py'}': no such file" in capsys.readouterr().err
    # A file named like a module already imported loaded that module ("'signal' has no attribute 'Mine'").
    (tmp_path / "signal.py").write_text(_USER_ENVS)
    assert main([f"{tmp_path / 'signal.py'}:Mine"]) == 2
    assert "the module name 'signal' is taken by" in capsys.readouterr().err
    # A file of a package that imports its siblings relatively: a bare "attempted relative import
    # with no known parent package"; now it says how to name the module (which then works).
    package = tmp_path / "userpkg" / "envs"
    package.mkdir(parents=True)
    for folder in (package, package.parent):
        (folder / "__init__.py").write_text("")
    (package / "helpers.py").write_text(_USER_ENVS)
    (package / "mine.py").write_text("from .helpers import Mine\n")
    assert main([f"{package / 'mine.py'}:Mine"]) == 2
    assert (f"is part of package 'userpkg.envs': name it as a module of its package, `marl-check "
            f"userpkg.envs.mine:Mine`, from '{tmp_path}'") in capsys.readouterr().err
    (package / "broken.py").write_text("from math import nosuch\n")  # no relative import: no such advice
    assert main([f"{package / 'broken.py'}:Mine"]) == 2
    assert "cannot import name 'nosuch'" in (err := capsys.readouterr().err) and "part of package" not in err
    sys.path.insert(0, str(tmp_path))
    try:
        assert main(["userpkg.envs.mine:Mine", "--episodes", "1"]) == 0
    finally:
        sys.path.remove(str(tmp_path))
        for name in [name for name in sys.modules if name.startswith("userpkg")]:
            del sys.modules[name]
    capsys.readouterr()
    # A gymnasium.Env with possible_agents was checked as a one-agent env, and failed on a traceback
    # inside the bridge; now it is refused, saying what it lacks and what to do.
    assert main([f"{target}:GymStyle"]) == 2
    err = capsys.readouterr().err
    assert ("is not a multi-agent env: it lacks observation_spaces or get_observation_space(), action_spaces or "
            "get_action_space(), and bridges.wrap cannot convert it: UnsupportedEnvError: from_gymnasium takes a "
            "single-agent env, but GymStyle is a gymnasium.Env with possible_agents ['a', 'b']") in err
    assert "subclass marl_core.MultiAgentEnv" in err
    # Without possible_agents it is a one-agent Gymnasium env: the report says so.
    assert main([f"{target}:GymStyleWithoutPossibleAgents", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["via"] == ("checked through bridges.wrap, as GymnasiumEnv, a one-agent env (GymStyleWithoutPossible"
                           "Agents is a gymnasium.Env without possible_agents, observation_spaces or "
                           "get_observation_space(), action_spaces or get_action_space())")
    assert main([f"{target}:GymStyleWithoutPossibleAgents"]) == 1
    assert capsys.readouterr().out.splitlines()[1] == data["via"]
    # A class whose one argument is not a config got {} without a word about it.
    assert main([f"{target}:NAgents"]) == 2
    assert ("raised TypeError: 'dict' object cannot be interpreted as an integer (it was called with an empty "
            "config, {}, for its parameter 'n_agents', as RLlib calls env classes; if it needs other arguments, "
            "pass a zero-argument factory, e.g. `lambda: NAgents(...)`); marl-check passes arguments with --config "
            "JSON") in capsys.readouterr().err


def test_a_bridged_target_names_its_bridge_and_a_native_one_nothing(capsys) -> None:
    assert main(["pettingzoo.classic.rps_v2:env", "--episodes", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["via"] == "checked through bridges.wrap, as PettingZooEnv"
    assert main(["marl_core.envs:RockPaperScissors", "--episodes", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["via"] == ""

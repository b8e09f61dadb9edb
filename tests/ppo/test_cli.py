from __future__ import annotations

import csv
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from marl_core.errors import ConfigError
from marl_core.ppo import PPO, PPOConfig
from marl_core.ppo.cli import main
from marl_core.ppo.evaluation import load_history
from marl_core.ppo.presets import PRESETS, load_preset

ROOT = Path(__file__).resolve().parents[2]


def test_presets_are_lazy_references_and_build_configs():
    assert set(PRESETS) >= {"rps", "pistonball", "connect4"}
    assert all(":" in reference for reference in PRESETS.values())
    rps = load_preset("rps")
    assert rps.build_config().policies_to_train == ["learned"]
    pistonball = load_preset("pistonball").build_config()
    assert pistonball.policy_mapping_fn("piston_3", None) == "shared"
    with pytest.raises(ConfigError, match="unknown preset"):
        load_preset("chess")


def test_train_two_iterations_with_overrides(tmp_path, capsys):
    code = main(["rps", "--iterations", "2", "--out", str(tmp_path), "--no-progress", "--seed", "5",
                 "--set", "env_runners.num_env_runners=0", "--set", "training.train_batch_size=160",
                 "--set", "num_envs_per_env_runner=4", "--checkpoint-every", "1",
                 "--set", "evaluation.evaluation_interval=2", "--set", "evaluation_duration=2"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "learned_vs_beat_last_mean_return" in printed
    rows = list(csv.DictReader((tmp_path / "progress.csv").read_text().splitlines()))
    assert [row["training_iteration"] for row in rows] == ["1", "2"]
    # The evaluation of iteration 2 is logged beside its training figures (none in iteration 1).
    assert rows[0]["evaluation/num_episodes"] == "" and rows[1]["evaluation/num_episodes"] == "2"
    assert rows[1]["evaluation/policies/learned/episode_len_mean"] == "10.0"
    assert rows[0]["num_env_steps_sampled"] == "160"
    assert "policies/learned/episode_return_mean" in rows[0]
    assert (tmp_path / "learning_curve.png").stat().st_size > 0
    assert any((tmp_path / "tb").iterdir())
    assert json.loads((tmp_path / "final_result.json").read_text())["episodes"] == 20
    config = json.loads((tmp_path / "final" / "config.json").read_text())
    assert config["seed"] == 5 and config["train_batch_size"] == 160
    restored = PPO.from_checkpoint(tmp_path / "final")
    assert restored.iteration == 2
    restored.stop()


def test_the_iteration_line_shows_the_evaluation():
    from marl_core.ppo.cli import _summary

    result = {"training_iteration": 2, "env_steps_per_s": 100.0, "policies": {"learned": {"episode_return_mean": 1.5}},
              "evaluation": {"policies": {"learned": {"episode_return_mean": 3.0},
                                          "beat_last": {"episode_return_mean": float("nan")}}}}
    assert _summary(result) == "it 2 | 100 steps/s | learned 1.50 | evaluation: learned 3.00"
    del result["evaluation"]
    assert _summary(result) == "it 2 | 100 steps/s | learned 1.50"


def test_resume_continues_the_run_and_its_logs(tmp_path, capsys):
    base = ["--out", str(tmp_path), "--no-progress", "--set", "num_env_runners=0",
            "--set", "train_batch_size=80", "--set", "num_envs_per_env_runner=2"]
    assert main(["rps", "--iterations", "3", "--checkpoint-every", "2", *base]) == 0
    assert json.loads((tmp_path / "final_result.json").read_text())["iteration"] == 3
    saved = torch.load(tmp_path / "final" / "state.pt", weights_only=True)
    with (tmp_path / "progress.csv").open("a") as handle:
        handle.write("4,0.")  # a crash while writing a row
    capsys.readouterr()
    # From checkpoint/ (iteration 2): iteration 3 is trained again, its old row and the cut-off
    # line go; --iterations counts from the checkpoint; --set applies on top of the saved config.
    assert main(["rps", "--resume", str(tmp_path / "checkpoint"), "--iterations", "2", *base,
                 "--set", "training.lr=0.0005"]) == 0
    out, err = capsys.readouterr()
    assert "resumed from" in out
    # The final_result.json of the discarded iteration 3 went at once: a run stopped before its
    # final step left it beside a final checkpoint of another iteration.
    assert f"removed {tmp_path / 'final_result.json'} (iteration 3), which the run resumed from iteration 2" in err
    assert json.loads((tmp_path / "final_result.json").read_text())["iteration"] == 4
    rows = list(csv.DictReader((tmp_path / "progress.csv").read_text().splitlines()))
    assert [row["training_iteration"] for row in rows] == ["1", "2", "3", "4"]
    assert [int(row["num_env_steps_sampled_lifetime"]) for row in rows] == [80, 160, 240, 320]
    restored = PPO.from_checkpoint(tmp_path / "final")
    try:
        assert restored.iteration == 4 and restored.config.lr == 0.0005
        assert restored.env_steps_lifetime == 320 and restored.restored_from == tmp_path / "final"
        learned = restored.get_weights(["learned"])["learned"]
        assert any(not torch.equal(torch.as_tensor(learned[k]), v) for k, v in saved["policies"]["learned"]["module"].items())
    finally:
        restored.stop()


def test_a_new_run_refuses_a_directory_holding_a_run_or_written_by_another(tmp_path, capsys):
    # A second run into the same --out mixed its logs and checkpoints with the first's, silently.
    base = ["--iterations", "1", "--no-progress", "--set", "num_env_runners=0", "--set", "train_batch_size=40"]
    assert main(["rps", "--out", str(tmp_path), *base]) == 0
    assert not (tmp_path / ".marl-train.pid").exists()  # released at the end
    before = (tmp_path / "progress.csv").read_text()
    capsys.readouterr()
    assert main(["rps", "--out", str(tmp_path), *base]) == 2
    # It named checkpoint/ too, which this run (no --checkpoint-every) never wrote.
    assert (f"{tmp_path} already holds a run (progress.csv, final): continue it with --resume "
            f"{tmp_path / 'final'}, or pick another --out") in capsys.readouterr().err
    assert (tmp_path / "progress.csv").read_text() == before
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / ".marl-train.pid").write_text(str(os.getppid()))  # a live process holds it
    assert main(["rps", "--out", str(busy), *base]) == 2
    assert (f"another marl-train (pid {os.getppid()}) is writing to {busy}; pick another --out (or, if no "
            f"marl-train runs there, remove {busy / '.marl-train.pid'})") in capsys.readouterr().err
    assert (busy / ".marl-train.pid").read_text() == str(os.getppid())
    # A lock naming a live pid with another start time: a killed run's pid, now another process's.
    reused = tmp_path / "reused"
    reused.mkdir()
    started = Path(f"/proc/{os.getppid()}/stat").read_text().rpartition(")")[2].split()[19]
    (reused / ".marl-train.pid").write_text(f"{os.getppid()} {started}")
    assert main(["rps", "--out", str(reused), *base]) == 2  # the same process: still held
    (reused / ".marl-train.pid").write_text(f"{os.getppid()} {int(started) + 1}")
    assert main(["rps", "--out", str(reused), *base]) == 0
    assert not (reused / ".marl-train.pid").exists()
    stale = tmp_path / "stale"
    stale.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (stale / ".marl-train.pid").write_text(gone.stdout.strip())  # a killed run's lock: taken over
    assert main(["rps", "--out", str(stale), *base]) == 0


def test_resume_into_an_out_that_is_a_file_is_refused_before_anything_starts(tmp_path, capsys):
    assert main(["rps", "--iterations", "1", "--out", str(tmp_path / "run"), "--no-progress",
                 "--set", "num_env_runners=0", "--set", "train_batch_size=40"]) == 0
    (tmp_path / "a-file").write_text("")
    capsys.readouterr()
    # It was a FileExistsError traceback, after Ray had started.
    assert main(["rps", "--resume", str(tmp_path / "run" / "final"), "--out", str(tmp_path / "a-file")]) == 2
    assert "cannot be a run directory: it is a file" in capsys.readouterr().err


def test_a_resumed_run_refuses_an_out_holding_another_run(tmp_path, capsys):
    # Resuming run a into b's directory replaced b's final checkpoint and cut its progress.csv to a's rows.
    base = ["--iterations", "1", "--no-progress", "--set", "num_env_runners=0", "--set", "train_batch_size=40"]
    for run in ("a", "b"):
        assert main(["rps", "--out", str(tmp_path / run), *base]) == 0
    before = {name: (tmp_path / "b" / name).read_bytes() for name in ("progress.csv", "final/state.pt")}
    capsys.readouterr()
    assert main(["rps", "--resume", str(tmp_path / "a" / "final"), "--out", str(tmp_path / "b"), *base]) == 2
    assert (f"{tmp_path / 'b'} already holds another run (progress.csv, final), which resuming "
            f"{tmp_path / 'a' / 'final'} there would overwrite: continue it with --resume {tmp_path / 'b' / 'final'}, "
            f"or pick another --out for the resumed run") in capsys.readouterr().err
    assert before == {name: (tmp_path / "b" / name).read_bytes() for name in before}
    # A link in b to a's checkpoint is a's checkpoint: refused too (the link's own directory was compared).
    (tmp_path / "b" / "latest").symlink_to(tmp_path / "a" / "final")
    assert main(["rps", "--resume", str(tmp_path / "b" / "latest"), "--out", str(tmp_path / "b"), *base]) == 2
    assert "already holds another run" in capsys.readouterr().err
    # Its own directory, under another spelling of the path or through a link, is where a resumed run goes on.
    assert main(["rps", "--resume", str(tmp_path / "a" / "final"), "--out", str(tmp_path / "b" / ".." / "a"), *base]) == 0
    (tmp_path / "latest").symlink_to(tmp_path / "a" / "final")
    assert main(["rps", "--resume", str(tmp_path / "latest"), "--out", str(tmp_path / "a"), *base]) == 0
    # A run directory given as the checkpoint: its load says what it is, not "another run".
    capsys.readouterr()
    assert main(["rps", "--resume", str(tmp_path / "a"), "--out", str(tmp_path / "a"), *base]) == 2
    assert f"(a run directory: its checkpoints are {tmp_path / 'a' / 'final'})" in capsys.readouterr().err


def test_a_bad_override_on_resume_is_named_as_such_not_as_a_damaged_checkpoint(tmp_path, capsys):
    assert main(["rps", "--out", str(tmp_path / "a"), "--iterations", "1", "--no-progress",
                 "--set", "num_env_runners=0", "--set", "train_batch_size=40"]) == 0
    capsys.readouterr()
    # It said "the settings in .../config.json cannot build the trainer (a damaged checkpoint?)".
    assert main(["rps", "--resume", str(tmp_path / "a" / "final"), "--out", str(tmp_path / "b"),
                 "--set", "num_env_runners=1", "--ray-address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert f"cannot resume from {tmp_path / 'a' / 'final'}: cannot reach a Ray cluster at ray_address='127.0.0.1:1'" in err
    assert "damaged" not in err


def test_a_checkpoint_that_cannot_be_written_ends_the_run_with_one_line_each(tmp_path, capsys, monkeypatch):
    # A full disk at a periodic checkpoint: two chained OSError tracebacks and no word of the final checkpoint.
    from marl_core.ppo import checkpoint

    real_save, calls = torch.save, []

    def disk_full_from_the_second_save(obj, path, *args, **kwargs):
        calls.append(path)
        if len(calls) >= 2:  # what torch's writer raises when the disk is full
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 9728 vs 9620")
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "save", disk_full_from_the_second_save)
    status = main(["rps", "--out", str(tmp_path), "--iterations", "4", "--checkpoint-every", "1", "--no-progress",
                   "--set", "num_env_runners=0", "--set", "train_batch_size=40"])
    err = capsys.readouterr().err
    assert status == 1
    assert (f"training stopped at iteration 2: CheckpointError: cannot write the checkpoint {tmp_path / 'checkpoint'} "
            "(the previous checkpoint there is kept): RuntimeError: [enforce fail at inline_container.cc:672] . "
            "unexpected pos 9728 vs 9620 (is the disk full?)") in err
    assert f"no final checkpoint at iteration 2: cannot write the checkpoint {tmp_path / 'final'}: RuntimeError" in err
    assert "Traceback" not in err
    monkeypatch.setattr(checkpoint.torch, "save", real_save)
    with PPO.from_checkpoint(tmp_path / "checkpoint") as kept:
        assert kept.iteration == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary copies left


_FILE_SIZE_LIMIT = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (8_000, 8_000))  # room for the logs, not for a checkpoint
from marl_core.ppo.cli import main
sys.exit(main(["rps", "--out", sys.argv[1], "--iterations", "3", "--checkpoint-every", "1", "--no-progress",
               "--set", "num_env_runners=0", "--set", "train_batch_size=40"]))
"""


def test_files_that_cannot_be_written_end_the_run_with_status_1_and_one_line_each(tmp_path):
    # A real write failure (a file size limit, as a full disk): torch's writer raised a RuntimeError that
    # went out as four chained tracebacks, and the learning curve's OSError after them.
    done = subprocess.run([sys.executable, "-c", _FILE_SIZE_LIMIT, str(tmp_path / "run")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr
    assert any(line.startswith(f"marl-train: training stopped at iteration 1: CheckpointError: cannot write the "
                               f"checkpoint {tmp_path / 'run' / 'checkpoint'}: RuntimeError: ") for line in lines)
    assert any(line.startswith(f"marl-train: no final checkpoint at iteration 1: cannot write the checkpoint "
                               f"{tmp_path / 'run' / 'final'}: ") for line in lines)
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]  # no temporary copies left


def test_resume_refuses_what_it_cannot_continue(tmp_path, capsys):
    assert main(["rps", "--resume", str(tmp_path / "nothing"), "--out", str(tmp_path / "run")]) == 2
    assert f"cannot resume from {tmp_path / 'nothing'}" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    assert main(["rps", "--iterations", "1", "--out", str(tmp_path / "rps"), "--no-progress",
                 "--set", "num_env_runners=0", "--set", "train_batch_size=40"]) == 0
    capsys.readouterr()
    final = tmp_path / "rps" / "final"
    status = main(["pistonball", "--resume", str(final), "--out", str(tmp_path / "pb")])
    err = capsys.readouterr().err
    assert status == 2 and "trains env marl_core.envs:RockPaperScissors" in err
    assert "preset 'pistonball' trains marl_core.ppo.presets:pistonball_env" in err
    assert not (tmp_path / "pb").exists()
    # Logs that cannot be read back: exit 2, nothing overwritten or removed (a final_result.json of
    # a later iteration than the checkpoint went before the logs refused the resume).
    (tmp_path / "rps" / "progress.csv").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "rps" / "final_result.json").write_text('{"iteration": 9}')
    assert main(["rps", "--resume", str(final), "--iterations", "1", "--out", str(tmp_path / "rps"),
                 "--no-progress"]) == 2
    assert "cannot continue the logs" in capsys.readouterr().err
    assert (tmp_path / "rps" / "progress.csv").read_bytes() == b"\xff\xfe\x00garbage"
    assert (tmp_path / "rps" / "final_result.json").read_text() == '{"iteration": 9}'
    # A name in the checkpoint that no longer imports (code renamed since the save): exit 2, saying which.
    config = json.loads((final / "config.json").read_text())
    config["policy_mapping_fn"] = "marl_core.ppo.presets:renamed_mapping_fn"
    (final / "config.json").write_text(json.dumps(config))
    assert main(["rps", "--resume", str(final), "--out", str(tmp_path / "renamed")]) == 2
    err = capsys.readouterr().err
    assert "'marl_core.ppo.presets:renamed_mapping_fn' (policy_mapping_fn), which does not import now" in err
    assert ("marl-train: --set passes policy_mapping_fn to from_checkpoint as an import path, e.g. "
            "--set policy_mapping_fn=my_module:my_function") in err
    # ... which the command line then passes:
    assert main(["rps", "--resume", str(final), "--out", str(tmp_path / "renamed"), "--iterations", "1",
                 "--no-progress", "--set", "policy_mapping_fn=marl_core.ppo.presets:rps_policy_mapping_fn"]) == 0
    with PPO.from_checkpoint(tmp_path / "renamed" / "final") as resumed:
        assert resumed.iteration == 2
    # A fixed policy's function the command line cannot pass: said so, not "use --set".
    config["policy_mapping_fn"] = "marl_core.ppo.presets:rps_policy_mapping_fn"
    config["policies"]["beat_last"]["ref"] = "marl_core.ppo.presets:renamed_heuristic"
    (final / "config.json").write_text(json.dumps(config))
    assert main(["rps", "--resume", str(final), "--out", str(tmp_path / "renamed_policy")]) == 2
    err = capsys.readouterr().err
    assert "policies cannot come from the command line: load the checkpoint in Python" in err
    assert "--set passes" not in err


def test_a_new_run_whose_out_dir_cannot_be_made_fails_before_starting(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    for out in (tmp_path / "a-file", tmp_path / "a-file" / "run"):
        assert main(["rps", "--iterations", "1", "--out", str(out), "--no-progress", "--set", "num_env_runners=0"]) == 2
        assert f"--out {str(out)!r} cannot be a run directory: " in capsys.readouterr().err


def test_ctrl_c_while_the_trainer_starts_exits_130_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    def interrupted(self):  # Ctrl-C lands while Ray starts
        raise KeyboardInterrupt

    monkeypatch.setattr(PPOConfig, "build", interrupted)
    out = tmp_path / "run"
    assert main(["rps", "--iterations", "1", "--out", str(out), "--no-progress", "--set", "num_env_runners=0"]) == 130
    assert "interrupted while starting: nothing was trained" in capsys.readouterr().err and not out.exists()


def test_sigterm_while_the_trainer_starts_exits_143_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    # It was Python's default (killed, status -15) before Ray started, and Ray's handler after (status
    # 1, Ray's "Draining" log): the run directory and its lock were left behind.
    from marl_core.ppo.progress import RunLogger

    build, start_logs = PPOConfig.build, RunLogger.__init__

    def build_like_ray(self):  # Ray's start installs a SIGTERM handler of its own
        algo = build(self)
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))
        return algo

    def terminated(self, *args, **kwargs):  # SIGTERM lands after Ray started, before training
        os.kill(os.getpid(), signal.SIGTERM)
        start_logs(self, *args, **kwargs)

    monkeypatch.setattr(PPOConfig, "build", build_like_ray)
    monkeypatch.setattr(RunLogger, "__init__", terminated)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "run"
    assert main(["rps", "--iterations", "1", "--out", str(out), "--no-progress", "--set", "num_env_runners=0"]) == 143
    assert "terminated while starting: nothing was trained" in capsys.readouterr().err and not out.exists()
    assert signal.getsignal(signal.SIGTERM) is before  # given back

    def terminated_in_build(self):
        os.kill(os.getpid(), signal.SIGTERM)
        return build(self)

    monkeypatch.setattr(PPOConfig, "build", terminated_in_build)
    monkeypatch.setattr(RunLogger, "__init__", start_logs)
    assert main(["rps", "--iterations", "1", "--out", str(out), "--no-progress", "--set", "num_env_runners=0"]) == 143
    assert not out.exists()


class _BreaksWhenBuilt:
    def __init__(self, config=None) -> None:
        raise RuntimeError("no licence server")


def _needs_the_rllib_extra(config=None) -> None:
    try:
        importlib.import_module("tree")  # ray.rllib's first import that fails without the rllib extra
    except ModuleNotFoundError as error:
        raise RuntimeError("this env needs RLlib") from error


def _not_an_env(config=None) -> str:
    return "an env, honestly"


def test_an_env_missing_a_module_of_an_extra_says_which_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tree", None)  # as in an install without dm-tree
    out = tmp_path / "run"
    assert main(["rps", "--iterations", "1", "--out", str(out), "--no-progress", "--set", "num_env_runners=0",
                 "--set", f"env={__name__}:_needs_the_rllib_extra"]) == 2
    assert ('raised RuntimeError when built with env_config {}: this env needs RLlib (`pip install '
            '"marl-bridges[rllib]"` installs it)') in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (f"env={__name__}:_BreaksWhenBuilt",
         "the env 'tests.ppo.test_cli:_BreaksWhenBuilt' raised RuntimeError when built with env_config {}: no licence"),
        (f"env={__name__}:_not_an_env", "the env 'tests.ppo.test_cli:_not_an_env' built a str without ['possible_agents'"),
        ("ray_address=bogus", "ray_address must be 'host:port', 'ray://host:port', 'auto' or 'local', received 'bogus'"),
    ],
)
def test_an_env_that_cannot_be_built_or_a_bad_address_is_one_line_and_leaves_nothing(tmp_path, capsys, setting, message):
    out = tmp_path / "run"
    runners = "num_env_runners=1" if setting.startswith("ray_address") else "num_env_runners=0"
    assert main(["rps", "--iterations", "1", "--out", str(out), "--no-progress", "--set", runners, "--set", setting]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()


def test_bad_arguments_are_refused_with_status_2(tmp_path, capsys):
    status = main(["rps", "--iterations", "1", "--out", str(tmp_path), "--set", "training.learning_rate=1"])
    assert status == 2 and "unknown config field 'training.learning_rate'" in capsys.readouterr().err
    assert main(["rps", "--out", str(tmp_path), "--set", "lr"]) == 2
    capsys.readouterr()
    assert main(["rps", "--iterations", "1", "--out", str(tmp_path), "--set", "bogus.lr=1e-3"]) == 2
    assert "unknown config section 'bogus' in 'bogus.lr'" in capsys.readouterr().err
    for flag, value, expected in [
        ("--iterations", "-3", "an integer above 0"), ("--iterations", "0", "an integer above 0"),
        ("--iterations", "2.5", "an integer, received '2.5'"), ("--minutes", "nan", "a number above 0"),
        ("--minutes", "-1", "a number above 0"), ("--num-cpus", "0", "an integer above 0"),
        ("--checkpoint-every", "x", "an integer, received 'x'"),
        ("--checkpoint-every", "-1", "an integer 0 or more (0: none but the final one), received '-1'"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(["rps", flag, value, "--out", str(tmp_path)])
        assert exit_info.value.code == 2
        assert f"argument {flag}: expected {expected}" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing was started


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("training.lr=fast", "lr must be a number above 0, or a schedule [[env_steps, lr], ...] from step 0, its steps increasing, received 'fast'"),
        ("training.lr=-1", "lr must be a number above 0, or a schedule [[env_steps, lr], ...] from step 0, its steps increasing, received -1"),
        ("training.gamma=1.5", "gamma must be a number from 0 to 1, received 1.5"),
        ("training.num_epochs=2.5", "num_epochs must be an integer of at least 1, received 2.5"),
        ("training.minibatch_size=0", "minibatch_size must be an integer of at least 1, received 0"),
        ("num_envs_per_env_runner=0", "num_envs_per_env_runner must be an integer of at least 1, received 0"),
        ("rollout_fragment_length=auto2", "rollout_fragment_length must be 'auto' or an integer of at least 1"),
        ("env_runners.sample_timeout_s=0", "sample_timeout_s must be None or a number above 0, received 0"),
        ("device=tpu", "device must be 'auto', 'cpu', 'cuda' or 'cuda:N', received 'tpu'"),
        ("ray_address=123", "ray_address must be None or a string (host:port, ray://host:port, auto or local), "
                            "received 123"),  # it was an AttributeError traceback
        ('model={"fcnet_hiddens": [8]}', "model has unknown keys ['fcnet_hiddens']"),
        ('model={"activation": "elu"}', "activation must be one of ['tanh', 'relu', 'silu'], received 'elu'"),
        ("policy_mapping_fn=no_such_module:fn", "policy_mapping_fn 'no_such_module:fn' does not import: ModuleNotFoundError"),
        ("policy_mapping_fn=no_colon", "policy_mapping_fn must be a 'module:name' import path, received 'no_colon'"),
    ],
)
def test_bad_settings_are_refused_with_status_2_before_anything_starts(tmp_path, capsys, setting, message):
    # These used to train anyway (lr=-1, gamma=1.5), or end in a traceback with status 1.
    out = tmp_path / "run"
    assert main(["rps", "--iterations", "1", "--out", str(out), "--set", "num_env_runners=0", "--set", setting]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_an_env_that_does_not_import_is_refused_with_status_2(tmp_path, capsys):
    # After the config checks passed: the run directory made for the run goes again, parents too.
    out = tmp_path / "runs" / "run"
    assert main(["rps", "--iterations", "1", "--out", str(out), "--set", "num_env_runners=0",
                 "--set", "env=no_such_package.envs:Env"]) == 2
    err = capsys.readouterr().err
    assert ("env 'no_such_package.envs:Env' does not import: ModuleNotFoundError: No module named 'no_such_package'; "
            "is its package installed") in err
    assert not (tmp_path / "runs").exists()


def test_a_directory_that_existed_is_never_removed(tmp_path, monkeypatch):
    # "scratch/../runs/r1" is runs/r1: runs/ existed, so only r1 was made for the run.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert main(["rps", "--out", "scratch/../runs/r1", "--set", "num_env_runners=0", "--set", "env=no_such_package:Env"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"] and not any((tmp_path / "runs").iterdir())


def test_env_errors_are_shown_and_an_env_failing_every_episode_stops_the_run(tmp_path, capsys):
    base = ["rps", "--no-progress", "--set", "num_env_runners=0", "--set", "env=tests.ppo.helpers:FlakyRockPaperScissors"]
    assert main([*base, "--iterations", "1", "--out", str(tmp_path / "sometimes"),
                 "--set", 'env_config={"fail_every": 23}']) == 0
    out, err = capsys.readouterr()
    assert " env errors" in out  # in the iteration's summary line
    assert "marl-train: iteration 1: " in err and "each env rebuilt and its episode dropped; the first: env " in err
    assert "RuntimeError: flaky env fails at its step call 23" in err
    assert main([*base, "--iterations", "3", "--out", str(tmp_path / "always"),
                 "--set", 'env_config={"fail_every": 5}']) == 1  # it said 0: every episode was dropped
    err = capsys.readouterr().err
    assert "marl-train: training stopped at iteration 0: EnvContractError: env " in err
    assert "failed 10 times in a row; last error: RuntimeError" in err
    # Nothing was trained: no checkpoint of it claims the --out, which a rerun takes (it was refused,
    # told to resume an untrained checkpoint that would fail the same way).
    assert "marl-train: no final checkpoint: nothing was trained" in err
    assert not (tmp_path / "always" / "final").exists()
    assert main([*base, "--iterations", "1", "--out", str(tmp_path / "always"),
                 "--set", 'env_config={"fail_every": 23}']) == 0


def test_the_mapping_fn_can_be_set_by_its_import_path(tmp_path):
    from marl_core.ppo.config import PPOConfig
    from marl_core.ppo.presets import rps_policy_mapping_fn

    assert PPOConfig().set("policy_mapping_fn", "marl_core.ppo.presets:rps_policy_mapping_fn").policy_mapping_fn is rps_policy_mapping_fn
    assert main(["rps", "--iterations", "1", "--no-progress", "--out", str(tmp_path), "--set", "num_env_runners=0",
                 "--set", "policy_mapping_fn=marl_core.ppo.presets:rps_policy_mapping_fn"]) == 0


def test_the_rps_preset_runs_and_resumes_from_any_directory(tmp_path):
    # Its env lived in the repository's examples/: outside the repository root the run stopped
    # with "No module named 'examples'", and its checkpoints could not be loaded.
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    command = [sys.executable, "-m", "marl_core.ppo.cli", "rps", "--iterations", "1", "--no-progress",
               "--set", "num_env_runners=0", "--set", "train_batch_size=80"]
    first = subprocess.run([*command, "--out", "run"], cwd=tmp_path, env=environ, capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "learned_vs_beat_last_mean_return" in first.stdout
    saved = json.loads((tmp_path / "run" / "final" / "config.json").read_text())
    assert saved["env"] == "marl_core.envs:RockPaperScissors"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    resumed = subprocess.run([*command, "--resume", str(tmp_path / "run" / "final"), "--out", "more"],
                             cwd=elsewhere, env=environ, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (elsewhere / "more" / "final" / "state.pt").is_file()


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_saves_a_final_checkpoint(tmp_path, signum, status):
    command = [sys.executable, "-m", "marl_core.ppo.cli", "rps", "--minutes", "5", "--out", str(tmp_path),
               "--no-progress", "--set", "num_env_runners=0", "--set", "train_batch_size=80"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "progress.csv").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (tmp_path / "progress.csv").exists()
        process.send_signal(signum)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == status, err.decode()[-2000:]
    assert signal.Signals(signum).name.encode() + b": finishing this iteration" in err
    restored = PPO.from_checkpoint(tmp_path / "final")
    assert restored.iteration >= 1
    restored.stop()


@pytest.mark.slow
def test_sigterm_during_the_final_evaluation_stops_it_with_status_143(tmp_path):
    # Ray's own handler used to exit with status 15 here, and the message was lost.
    command = [sys.executable, "-m", "marl_core.ppo.cli", "connect4", "--iterations", "1", "--out", str(tmp_path),
               "--no-progress", "--set", "num_env_runners=0", "--set", "num_envs_per_env_runner=4",
               "--set", "train_batch_size=200"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen = []
    try:
        for line in process.stdout:  # the final checkpoint is saved just before the final evaluation
            seen.append(line)
            if line.startswith(b"final evaluation: random"):  # its first match: MCTS-25's 100 games follow
                break
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 143, err.decode()[-2000:]
    assert b"interrupted: the final evaluation stopped (the final checkpoint is saved)" in err
    assert any(line.startswith(b"final checkpoint:") for line in seen)
    assert (tmp_path / "final" / "state.pt").exists() and not (tmp_path / "final_result.json").exists()
    # The match it finished is kept, as the final point of the evaluation history (seed 2i + 1).
    last = load_history(tmp_path / "evaluation.jsonl")[-1]
    assert (last.iteration, last.seed, list(last.results)) == (1, 1_030_000, ["random"])
    assert last.results["random"].games == 200 and (tmp_path / "win_rate.png").exists()


def out_dir_preset():
    """The rps preset plus a callback that writes a file into ``algo.out_dir``."""
    from marl_core.ppo.presets import Preset

    def callback(algo, result):
        (algo.out_dir / f"seen-{algo.iteration}.txt").write_text(algo.config.vector_mode)

    rps = load_preset("rps")
    return Preset(name="out-dir", description="rps with a callback writing into algo.out_dir",
                  build_config=rps.build_config, callbacks=(callback,))


def test_callbacks_know_the_out_dir_and_the_vector_mode_can_be_overridden(tmp_path, monkeypatch):
    monkeypatch.setitem(PRESETS, "out-dir", "tests.ppo.test_cli:out_dir_preset")
    code = main(["out-dir", "--iterations", "1", "--out", str(tmp_path), "--no-progress",
                 "--set", "num_env_runners=0", "--set", "train_batch_size=40", "--set", "num_envs_per_env_runner=2",
                 "--set", "env_runners.vector_mode=async"])
    assert code == 0
    assert (tmp_path / "seen-1.txt").read_text() == "async"
    assert PPOConfig().vector_mode == "sync"  # the default


_FAST = ["--no-progress", "--set", "num_env_runners=0", "--set", "train_batch_size=80",
         "--set", "num_envs_per_env_runner=2"]


def test_a_resume_merges_json_objects_into_the_checkpoints_settings(tmp_path, capsys):
    # They merged into the preset's: the resumed run lost hiddens=[16] and could not load its weights
    # (for env_config, it silently trained another env).
    assert main(["rps", "--iterations", "1", "--out", str(tmp_path / "a"), *_FAST, "--set", 'model={"hiddens": [16]}']) == 0
    assert main(["rps", "--iterations", "1", "--resume", str(tmp_path / "a" / "final"), "--out", str(tmp_path / "b"),
                 *_FAST, "--set", 'model={"activation": "relu"}']) == 0
    model = json.loads((tmp_path / "b" / "final" / "config.json").read_text())["model"]
    assert (model["hiddens"], model["activation"]) == ([16], "relu")


def _three_iterations_checkpointed_at_two(out: Path) -> None:
    assert main(["rps", "--iterations", "3", "--checkpoint-every", "2", "--out", str(out), *_FAST]) == 0


def _iterations_logged(out: Path) -> list[str]:
    return [row["training_iteration"] for row in csv.DictReader((out / "progress.csv").read_text().splitlines())]


def test_a_resume_stopped_while_starting_leaves_the_logs_as_they_were(tmp_path, monkeypatch, capsys):
    # Its logs were cut back to the checkpoint before it started: rows trained since, and kept in
    # final/ and final_result.json, were lost for good.
    import marl_core.ppo.cli as cli

    _three_iterations_checkpointed_at_two(tmp_path)
    resume = ["rps", "--iterations", "1", "--resume", str(tmp_path / "checkpoint"), "--out", str(tmp_path), *_FAST]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    for target in ("_resume", "_train"):  # while loading; after the logs are opened, before training
        with monkeypatch.context() as patch:
            patch.setattr(cli, target, interrupted)
            assert main(resume) == 130
        assert _iterations_logged(tmp_path) == ["1", "2", "3"]
    assert "interrupted while starting: nothing was trained" in capsys.readouterr().err
    # Nor does a resume stopped before it trains: final/ stays at iteration 3.
    with monkeypatch.context() as patch:
        patch.setattr(cli, "_iterate", lambda *args, **kwargs: None)
        assert main(resume) == 0
    assert "marl-train: no final checkpoint: nothing was trained" in capsys.readouterr().err
    assert _iterations_logged(tmp_path) == ["1", "2", "3"] and PPO.from_checkpoint(tmp_path / "final").iteration == 3
    assert json.loads((tmp_path / "final_result.json").read_text())["iteration"] == 3
    assert main(resume) == 0  # a resume that trains cuts them, and goes on from the checkpoint
    assert _iterations_logged(tmp_path) == ["1", "2", "3"] and json.loads(
        (tmp_path / "final_result.json").read_text())["iteration"] == 3


def test_checkpoint_every_0_writes_only_the_final_checkpoint(tmp_path):
    # Refused ("expected an integer above 0"), though the loop took 0 for "never".
    assert main(["rps", "--iterations", "2", "--checkpoint-every", "0", "--out", str(tmp_path), *_FAST]) == 0
    assert not (tmp_path / "checkpoint").exists() and PPO.from_checkpoint(tmp_path / "final").iteration == 2


def test_a_time_budget_spent_on_starting_still_trains_one_iteration(tmp_path, capsys):
    # It trained nothing, said so and exited with 0: Ray's start-up had used the budget.
    assert main(["rps", "--minutes", "0.0000001", "--out", str(tmp_path), *_FAST]) == 0
    assert "nothing was trained" not in capsys.readouterr().err
    assert _iterations_logged(tmp_path) == ["1"] and PPO.from_checkpoint(tmp_path / "final").iteration == 1


def test_an_out_whose_logs_cannot_be_written_is_refused_with_status_2(tmp_path, capsys):
    (tmp_path / "tb").write_text("a file where the TensorBoard logs go")  # was a FileExistsError traceback
    assert main(["rps", "--iterations", "1", "--out", str(tmp_path), *_FAST]) == 2
    assert f"--out {str(tmp_path)!r} cannot be a run directory: " in capsys.readouterr().err
    assert not (tmp_path / "final").exists() and not (tmp_path / ".marl-train.pid").exists()


def test_a_signal_while_the_final_checkpoint_is_written_waits_for_it(tmp_path, monkeypatch, capfd):
    # It interrupted torch.save: a traceback, status -2 and no final/ at all.
    save = PPO.save

    def save_with_a_signal(self, path):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs at the next bytecode: inside the save
        return save(self, path)

    monkeypatch.setattr(PPO, "save", save_with_a_signal)
    assert main(["rps", "--iterations", "1", "--out", str(tmp_path), *_FAST]) == 130
    assert "SIGINT: finishing the final checkpoint and logs first" in capfd.readouterr().err  # os.write: fd 2
    assert PPO.from_checkpoint(tmp_path / "final").iteration == 1
    assert (tmp_path / "learning_curve.png").exists()
    # A second signal there abandons it (a save that hangs on a stalled disk must be stoppable).
    def save_with_two_signals(self, path):
        for _ in range(2):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        return save(self, path)

    monkeypatch.setattr(PPO, "save", save_with_two_signals)
    assert main(["rps", "--iterations", "1", "--out", str(tmp_path / "abandoned"), *_FAST]) == 130
    assert "SIGINT: finishing the final checkpoint and logs first (interrupt again to abandon it)" in capfd.readouterr().err
    assert not (tmp_path / "abandoned" / "final").exists()


def interrupted_callback_preset():
    """The rps preset with a callback that Ctrl-C interrupts after iteration 2 (an evaluation, say)."""
    from marl_core.ppo.presets import Preset

    def callback(algo, result):
        if algo.iteration == 2:
            raise KeyboardInterrupt

    rps = load_preset("rps")
    return Preset(name="interrupted-callback", description="rps, interrupted in a callback",
                  build_config=rps.build_config, callbacks=(callback,))


def test_an_iteration_whose_callback_is_interrupted_still_has_its_row(tmp_path, monkeypatch):
    # The final checkpoint held iteration 2, progress.csv ended at 1, and no resume wrote row 2.
    monkeypatch.setitem(PRESETS, "interrupted-callback", "tests.ppo.test_cli:interrupted_callback_preset")
    assert main(["interrupted-callback", "--iterations", "3", "--out", str(tmp_path), *_FAST]) == 130
    assert _iterations_logged(tmp_path) == ["1", "2"]
    assert PPO.from_checkpoint(tmp_path / "final").iteration == 2


def test_first_ctrl_c_asks_to_stop_and_the_second_interrupts():
    from marl_core.ppo.cli import StopRequest

    before = signal.getsignal(signal.SIGINT)
    with StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs in the main thread at the next bytecode
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)
    assert signal.getsignal(signal.SIGINT) is before
    assert stop.exit_status == 130


def test_sigterm_asks_to_stop_like_ctrl_c():
    from marl_core.ppo.cli import StopRequest

    before = signal.getsignal(signal.SIGTERM)
    with StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert stop.requested and stop.signal == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before
    assert stop.exit_status == 143

"""``marl-eval`` and ``marl-play`` on a real (small) checkpoint of the Connect-4 preset."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
import torch

from marl_core.ppo.selfplay import connect4_config, random_legal_action
from marl_core.ppo.selfplay_cli import eval_main, load_policy, play_main

PLAY = "import sys; from marl_core.ppo.selfplay_cli import play_main; sys.exit(play_main())"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    config = connect4_config(num_envs=4).training(
        train_batch_size=200, minibatch_size=100, num_epochs=1, model={"hiddens": [32]}
    )
    algo = config.build()
    try:
        algo.train()
        return algo.save(tmp_path_factory.mktemp("c4") / "final")
    finally:
        algo.stop()


def test_load_policy_acts_legally(checkpoint):
    from bridges.openspiel import OpenSpielEnv

    policy, release = load_policy(checkpoint)
    try:
        env = OpenSpielEnv("connect_four")
        obs, _ = env.reset(seed=0)
        assert 0 <= int(policy(obs["player_0"])) < 7
    finally:
        release()


def test_eval_prints_one_line_per_opponent(checkpoint, capsys):
    code = eval_main([str(checkpoint), "--opponent", "random", "--opponent", "MCTS:5", "--games", "4", "--seed", "2"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0] == "4 games per opponent (2 moving first, 2 second), seed 2"
    assert out[1].startswith("random ") and "(4 games" in out[1]
    assert out[2].startswith("mcts:5 ") and "W " in out[2] and " D " in out[2] and " L " in out[2]


def test_ctrl_c_during_eval_is_one_line_and_status_130(checkpoint, capsys, monkeypatch):
    import marl_core.ppo.selfplay_cli as cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "evaluate", interrupted)  # as if Ctrl-C came during the games
    assert eval_main([str(checkpoint), "--games", "2"]) == 130  # it was a 40-line traceback
    assert capsys.readouterr().err.strip() == "marl-eval: interrupted"


def test_ctrl_c_while_loading_is_one_line_and_status_130(checkpoint, capsys, monkeypatch):
    import marl_core.ppo.selfplay_cli as cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "load_policy", interrupted)  # as if Ctrl-C came while torch imports
    assert eval_main([str(checkpoint), "--games", "2"]) == 130  # it was a traceback
    assert capsys.readouterr().err.strip() == "marl-eval: interrupted"
    assert play_main(["connect4", str(checkpoint)]) == 130
    assert capsys.readouterr().err.strip() == "marl-play: interrupted"


def test_play_main_stops_with_status_130_on_ctrl_c_after_saying_the_score(checkpoint, monkeypatch, capsys):
    from tests.ppo.test_selfplay_play import CtrlCAfter

    monkeypatch.setattr(sys, "stdin", CtrlCAfter("1\n"))
    assert play_main(["connect4", str(checkpoint)]) == 130  # it was 0, as if the person had quit
    assert capsys.readouterr().out.endswith("\nBye. You won 0, drew 0, lost 0.\n")


@pytest.mark.parametrize("unnamed", ["policy_mapping_fn", "env"])
def test_eval_plays_a_checkpoint_whose_mapping_or_env_was_saved_without_a_name(checkpoint, tmp_path, capsys, unnamed):
    # A lambda is saved as null; the evaluation games build their env and pick their players themselves.
    import json
    import shutil

    from marl_core.errors import CheckpointError
    from marl_core.ppo import PPO

    lambda_made = shutil.copytree(checkpoint, tmp_path / "lambda_made")
    settings = json.loads((lambda_made / "config.json").read_text())
    (lambda_made / "config.json").write_text(json.dumps({**settings, unnamed: None}))
    with pytest.raises(CheckpointError, match=f"{unnamed} was not importable by name"):
        PPO.from_checkpoint(lambda_made, num_env_runners=0)
    assert eval_main([str(lambda_made), "--games", "2"]) == 0  # it was refused, with advice that looped
    assert capsys.readouterr().out.splitlines()[1].startswith("random ")


def test_eval_rejects_a_bad_opponent_before_loading(checkpoint, capsys):
    with pytest.raises(SystemExit) as caught:
        eval_main([str(checkpoint), "--opponent", "mcts:zero"])
    assert caught.value.code == 2
    assert "unknown opponent 'mcts:zero'" in capsys.readouterr().err


def test_eval_and_play_report_a_missing_checkpoint_with_status_2(tmp_path, capsys):
    # As marl-train --resume does: status 2 is "nothing could start".
    assert eval_main([str(tmp_path / "nothing")]) == 2
    assert f"{tmp_path / 'nothing'} does not exist" in capsys.readouterr().err
    assert play_main(["connect4", str(tmp_path / "nothing")]) == 2
    assert "cannot load" in capsys.readouterr().err


def test_play_main_reads_the_person_from_stdin(checkpoint, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("z\n2\nabc\n42\n\u00b2\n4\nq\n"))  # \u00b2: isdigit(), not int()
    assert play_main(["connect4", str(checkpoint)]) == 0
    out = capsys.readouterr().out
    assert "Please type 1 to move first or 2 to move second." in out
    assert "You play o (second)." in out
    assert out.count("The policy plays column") == 2  # its opening move and its reply to column 4
    assert "'abc' is not a column" in out and "'42' is not a column" in out and "'\u00b2' is not a column" in out
    assert out.count("  1 2 3 4 5 6 7") == 4  # before each of the four moves
    assert out.rstrip().endswith("Bye. You won 0, drew 0, lost 0.")


@pytest.mark.parametrize("script", ["", "1\n3\n3\n"])
def test_play_main_ends_cleanly_at_end_of_input(checkpoint, monkeypatch, capsys, script):
    monkeypatch.setattr(sys, "stdin", io.StringIO(script))
    assert play_main(["connect4", str(checkpoint), "--seat", "first"]) == 0
    out = capsys.readouterr().out
    assert out.count("You play x (first).") == 1
    assert out.rstrip().endswith("lost 0.")


@pytest.mark.slow
def test_marl_play_as_a_process_with_piped_input(checkpoint):
    done = subprocess.run(
        [sys.executable, "-c", PLAY, "connect4", str(checkpoint)],
        input="z\n1\nabc\n4\n", capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Please type 1 to move first or 2 to move second." in done.stdout
    assert "'abc' is not a column" in done.stdout and "The policy plays column" in done.stdout
    assert done.stdout.rstrip().endswith("Bye. You won 0, drew 0, lost 0.")
    assert "Traceback" not in done.stderr


def test_eval_reports_damaged_checkpoints_and_other_games(checkpoint, tmp_path, capsys):
    import json
    import shutil

    from marl_core.ppo import PPOConfig

    broken_json = shutil.copytree(checkpoint, tmp_path / "broken_json")
    (broken_json / "config.json").write_text('{"x":')
    broken_state = shutil.copytree(checkpoint, tmp_path / "broken_state")
    with open(broken_state / "state.pt", "r+b") as state:
        state.truncate(100)
    empty = shutil.copytree(checkpoint, tmp_path / "empty")
    (empty / "config.json").write_text("{}")
    with PPOConfig().environment("marl_core.ppo.selfplay:make_env", env_config={"game": "tic_tac_toe"}).env_runners(
            num_env_runners=0).multi_agent(policies={"main": None, "fixed": random_legal_action},
                                           policy_mapping_fn=_everyone_main).build() as algo:
        other_game = algo.save(tmp_path / "tic_tac_toe")
    foreign = shutil.copytree(other_game, tmp_path / "foreign")  # as an rps checkpoint read outside the repository
    data = json.loads((foreign / "config.json").read_text())
    (foreign / "config.json").write_text(json.dumps({**data, "env": "examples_elsewhere.rps:RockPaperScissors"}))
    garbage = shutil.copytree(checkpoint, tmp_path / "garbage")  # torch's loader raises UnpicklingError
    (garbage / "state.pt").write_bytes(np.random.default_rng(0).bytes(5000))
    text_state = shutil.copytree(checkpoint, tmp_path / "text_state")  # torch's loader raises KeyError: 101
    (text_state / "state.pt").write_bytes(b"hello world\n")
    noise_state = shutil.copytree(checkpoint, tmp_path / "noise_state")  # ... IndexError: pop from empty list
    (noise_state / "state.pt").write_bytes(np.random.default_rng(17).bytes(2000))
    wrong_state = shutil.copytree(checkpoint, tmp_path / "wrong_state")
    torch.save([1, 2], wrong_state / "state.pt")
    partial_state = shutil.copytree(checkpoint, tmp_path / "partial_state")
    torch.save({"format": 1}, partial_state / "state.pt")
    settings = json.loads((checkpoint / "config.json").read_text())
    edited = {}
    for name, value in {"policies": 5, "lr": -1, "gamma": "high", "model": "x"}.items():
        edited[name] = shutil.copytree(checkpoint, tmp_path / f"edited_{name}")
        (edited[name] / "config.json").write_text(json.dumps({**settings, name: value}))
    expected = {broken_json: "config.json is not valid JSON", broken_state: "state.pt cannot be read",
                garbage: "state.pt cannot be read (a damaged checkpoint?)",
                text_state: "state.pt cannot be read (a damaged checkpoint?): KeyError: 101",
                noise_state: "state.pt cannot be read (a damaged checkpoint?): IndexError: pop from empty list",
                wrong_state: "state.pt holds a list, not a checkpoint's state",
                partial_state: "state.pt does not hold what a checkpoint holds (a damaged checkpoint?): KeyError",
                edited["policies"]: "config.json does not hold a trainer config (a damaged checkpoint?)",
                edited["lr"]: "config.json holds a setting this version refuses: lr must be a number above 0, or a schedule [[env_steps, lr], ...] from step 0, its steps increasing, received -1",
                edited["gamma"]: "holds a setting this version refuses: gamma must be a number from 0 to 1",
                edited["model"]: "cannot build the trainer (a damaged checkpoint?): ",
                empty: "holds no trainer config", other_game: "a checkpoint of another game?",
                foreign: "it trained env 'examples_elsewhere.rps:RockPaperScissors', which does not import here "
                         "(ModuleNotFoundError: No module named 'examples_elsewhere'): a checkpoint of another game?"}
    for path, words in expected.items():
        assert eval_main([str(path), "--games", "2"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"marl-eval: cannot load {path}: ") and words in err
        # Advice to pass a setting to from_checkpoint (or --set), which marl-eval cannot take: said how instead.
        follows = "marl-eval: it takes no settings for the checkpoint: load it in Python, algo = PPO.from_checkpoint("
        assert (follows in err) == ("from_checkpoint" in err.splitlines()[0]), err
    assert eval_main([str(edited["lr"]), "--games", "2"]) == 2
    assert "give marl-eval new_path" in capsys.readouterr().err
    # A fixed policy of another game (it played Connect-4 and crashed there with a TypeError) ...
    assert eval_main([str(other_game), "--games", "2", "--policy", "fixed"]) == 2
    assert (f"policy 'fixed' of {other_game} observes Dict('action_mask': Box(0, 1, (9,), int8), "
            "'observation': Box(") in capsys.readouterr().err
    # ... and one of Connect-4, which plays.
    assert eval_main([str(checkpoint), "--games", "2", "--policy", "random"]) == 0
    assert "random" in capsys.readouterr().out


def test_eval_plays_a_checkpoint_trained_on_a_gpu_on_the_cpu(checkpoint, tmp_path, capsys):
    # Training on a GPU and evaluating on a laptop is the ordinary path; the config says "cuda".
    import json
    import shutil

    trained_on_gpu = shutil.copytree(checkpoint, tmp_path / "gpu")
    config = json.loads((trained_on_gpu / "config.json").read_text())
    config["device"] = "cuda"
    (trained_on_gpu / "config.json").write_text(json.dumps(config))
    assert eval_main([str(trained_on_gpu), "--games", "2"]) == 0
    assert "random" in capsys.readouterr().out


def _everyone_main(agent_id, episode, **kwargs):
    return "main"


def test_eval_refuses_a_negative_seed(checkpoint, capsys):
    with pytest.raises(SystemExit) as caught:
        eval_main([str(checkpoint), "--seed", "-5"])
    assert caught.value.code == 2
    assert "seeds cannot be negative" in capsys.readouterr().err


def test_eval_names_a_checkpoint_of_another_game_without_a_main_policy(tmp_path, capsys):
    # It said only "no policy 'main'; policies: ['beat_last', 'learned']".
    from marl_core.ppo import PPOConfig
    from marl_core.ppo.presets import beat_last_move, rps_policy_mapping_fn

    config = (PPOConfig().environment("marl_core.envs:RockPaperScissors")
              .multi_agent(policies={"learned": None, "beat_last": beat_last_move}, policy_mapping_fn=rps_policy_mapping_fn)
              .env_runners(num_env_runners=0))
    with config.build() as algo:
        path = algo.save(tmp_path / "rps")
    assert eval_main([str(path), "--games", "2"]) == 2
    err = capsys.readouterr().err
    assert f"{path} has no policy 'main', and its players observe Discrete(3), but this game's players observe Dict(" in err
    assert err.rstrip().endswith("a checkpoint of another game?")

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from marl_core.ppo import PPOConfig
from marl_core.ppo import runners as runners_module
from marl_core.ppo.presets import beat_last_move, rps_policy_mapping_fn
from tests.ppo.helpers import (
    FlakyRockPaperScissors,
    HangingRockPaperScissors,
    SlowRockPaperScissors,
    SlowStartRockPaperScissors,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # each starts Ray: 15-45 s on a busy 2-core machine


def _config(env, env_config=None, runners=2, batch=400):
    return (
        PPOConfig()
        .environment(env, env_config=env_config or {})
        .multi_agent(policies={"learned": None, "beat_last": beat_last_move},
                     policy_mapping_fn=rps_policy_mapping_fn, policies_to_train=["learned"])
        .env_runners(num_env_runners=runners, num_envs_per_env_runner=4)
        .training(train_batch_size=batch, minibatch_size=100, num_epochs=1)
        .resources(num_cpus=2)
    )


def test_a_killed_runner_is_replaced_and_the_iteration_completes(tmp_path):
    import ray

    algo = _config(SlowRockPaperScissors, {"sleep": 0.02}).build()
    try:
        algo.train()  # warm: both runners up
        victim = algo.runners.runners[0]
        box = {}
        worker = threading.Thread(target=lambda: box.setdefault("result", algo.train()))
        worker.start()
        time.sleep(0.5)  # the iteration is sampling now (50 steps of 20 ms per runner)
        ray.kill(victim)
        worker.join(timeout=120)
        result = box["result"]
        assert result["num_runner_restarts"] == 1
        assert result["num_env_steps_sampled"] == 400
        assert algo.runners.runners[0] is not victim
        after = algo.train()
        assert after["num_runner_restarts"] == 0 and after["num_runner_restarts_lifetime"] == 1  # the replacement works
        saved = algo.save(tmp_path / "checkpoint")
    finally:
        algo.stop()
    assert not ray.is_initialized()
    # The lifetime counters go on from the checkpoint, this one as the others.
    from marl_core.ppo import PPO

    with PPO.from_checkpoint(saved, num_env_runners=0) as restored:
        assert restored.train()["num_runner_restarts_lifetime"] == 1


def test_a_hung_runner_is_replaced_after_sample_timeout_s(tmp_path):
    import ray

    arm, once = tmp_path / "arm", tmp_path / "hung"
    config = _config(HangingRockPaperScissors, {"arm": str(arm), "once": str(once)})
    algo = config.env_runners(sample_timeout_s=15).build()
    try:
        algo.train()  # warm: both runners up, nothing hangs
        arm.touch()
        started = time.monotonic()
        result = algo.train()  # one env hangs in its step: its runner is killed and replaced
        waited = time.monotonic() - started
        assert once.exists()
        assert result["num_runner_restarts"] == 1
        assert result["num_env_steps_sampled"] == 400
        assert waited >= 15
    finally:
        algo.stop()
    assert not ray.is_initialized()


def test_a_runners_start_does_not_count_toward_sample_timeout_s():
    # It did: a runner slower to start (4 s) than sample_timeout_s (2 s) was replaced at every
    # attempt, so the first iteration, and every one after a runner died, failed for good.
    import os

    import ray

    config = _config(SlowStartRockPaperScissors, {"driver_pid": os.getpid(), "start_sleep": 4.0}, runners=1)
    algo = config.env_runners(sample_timeout_s=2, max_runner_restarts=1).build()
    try:
        assert algo.train()["num_runner_restarts"] == 0
        ray.kill(algo.runners.runners[0])  # its replacement starts slowly too
        result = algo.train()
        assert result["num_runner_restarts"] == 1 and result["num_env_steps_sampled"] == 400
    finally:
        algo.stop()
    assert not ray.is_initialized()


def test_a_runner_that_hangs_more_often_than_max_runner_restarts_stops_the_iteration(tmp_path):
    import ray

    from marl_core.errors import EnvRunnerError

    arm = tmp_path / "arm"
    config = _config(HangingRockPaperScissors, {"arm": str(arm)})
    algo = config.env_runners(sample_timeout_s=5, max_runner_restarts=1).build()
    try:
        algo.train()
        arm.touch()  # every env hangs from now on
        with pytest.raises(EnvRunnerError, match=r"env runner [01] did not return its samples within "
                                                 r"sample_timeout_s=5 s \(failure 2 of this iteration; max_runner_restarts=1\)"):
            algo.train()
        # The runners replaced in the failed iteration count in the lifetime total (they did not).
        assert algo.runners.num_restarts >= 1 and algo.num_runner_restarts_lifetime == algo.runners.num_restarts
    finally:
        algo.stop()
    assert not ray.is_initialized()


def test_the_local_ray_leaves_the_machines_ray_address_file_as_it_was():
    # Ray's Cluster wrote its private head's address there (a plain ray.init() elsewhere joined it)
    # and deleted the file at shutdown (ray.init() no longer found the machine's own cluster).
    from ray._private.utils import get_ray_address_file

    path = Path(get_ray_address_file(None))
    saved = path.read_text() if path.exists() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.write_text("192.0.2.2:6379")  # another cluster's address (nothing answers there)
        algo = _config(SlowRockPaperScissors, {"sleep": 0.0}, runners=1).build()
        try:
            assert path.read_text() == "192.0.2.2:6379"
        finally:
            algo.stop()
        assert path.read_text() == "192.0.2.2:6379"
    finally:
        if saved is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(saved)


def test_ray_shutdown_without_stop_leaves_no_ray_for_the_next_ray_init():
    # RLlib's habit: build, train, ray.shutdown(). The private head kept running, and the next
    # ray.init(num_cpus=...) found it ("When connecting to an existing cluster, num_cpus ... must not
    # be provided"); the next trainer shuts it down.
    import ray

    from marl_core.errors import EnvRunnerError

    first = _config(SlowRockPaperScissors, {"sleep": 0.0}, runners=1).build()
    first.train()
    orphan = runners_module._started_ray["cluster"]
    ray.shutdown()
    ray.init(num_cpus=1, include_dashboard=False)
    ray.shutdown()
    second = _config(SlowRockPaperScissors, {"sleep": 0.0}, runners=1).build()
    try:
        assert orphan is not None and orphan.head_node is None  # shut down when the second started
        assert second.train()["num_env_steps_sampled"] == 400
    finally:
        first.stop()
        second.stop()
    assert not ray.is_initialized()
    # With a Ray of the user's own started in between, the next trainer used it and its stop()
    # shut it down (it counted the users of the Ray shut down before), next to the orphaned head.
    third = _config(SlowRockPaperScissors, {"sleep": 0.0}, runners=1).build()
    orphan = runners_module._started_ray["cluster"]
    ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        # Its runners were on the Ray shut down: said, not Ray's "actor ... from a different cluster".
        with pytest.raises(EnvRunnerError, match=r"Ray was shut down under this trainer's env runners"):
            third.train()
        fourth = _config(SlowRockPaperScissors, {"sleep": 0.0}, runners=1).build()
        assert orphan.head_node is None and fourth.train()["num_env_steps_sampled"] == 400
        fourth.stop()
        third.stop()
        assert ray.is_initialized()  # the user's Ray is theirs to shut down
    finally:
        ray.shutdown()
    # stop() after the user's ray.shutdown() started a Ray of its own (ray.kill of its runners).
    fifth = _config(SlowRockPaperScissors, {"sleep": 0.0}, runners=1).build()
    ray.shutdown()
    fifth.stop()
    assert not ray.is_initialized()


def test_a_sample_timeout_longer_than_ray_can_wait_is_waited_for_in_steps():
    import ray

    # ray.wait takes int64 milliseconds: 1e16 s was an OverflowError in train().
    algo = _config(SlowRockPaperScissors, {"sleep": 0.0}, runners=1).env_runners(sample_timeout_s=1e16).build()
    try:
        assert algo.train()["num_env_steps_sampled"] == 400
    finally:
        algo.stop()
    assert not ray.is_initialized()


def test_a_runner_that_dies_more_often_than_max_runner_restarts_is_named():
    import ray

    from marl_core.errors import EnvRunnerError

    algo = _config(SlowRockPaperScissors, {"sleep": 0.0}).env_runners(max_runner_restarts=0).build()
    try:
        algo.train()
        ray.kill(algo.runners.runners[1])
        with pytest.raises(EnvRunnerError, match=r"env runner 1 died \(.*\(failure 1 of this iteration; "
                                                 r"max_runner_restarts=0\)") as raised:
            algo.train()
        assert isinstance(raised.value.__cause__, ray.exceptions.RayActorError)
        # The budget is per iteration: the next one starts a new runner in the slot (it kept the
        # dead one, so every later iteration failed the same way).
        assert algo.train()["num_env_steps_sampled"] == 400
    finally:
        algo.stop()
    assert not ray.is_initialized()


def test_trainers_share_the_ray_they_start_and_a_failed_build_leaves_none():
    import ray

    from marl_core.errors import ConfigError

    lock = threading.Lock()  # cloudpickle cannot send it: a build failing after Ray started
    unpicklable = _config(lambda config: SlowRockPaperScissors(config) if lock else None, runners=1)
    with pytest.raises(ConfigError, match=r"cannot be sent to env runners: it must pickle \(cloudpickle\): "
                                          r"TypeError: cannot pickle '_thread.lock' object"):
        unpicklable.build()
    assert not ray.is_initialized()  # it was left running, and later trainers took it for the user's
    first = _config(SlowRockPaperScissors, {"sleep": 0.0}, runners=1).build()
    second = _config(SlowRockPaperScissors, {"sleep": 0.0}, runners=1).build()
    try:
        first.stop()  # it shut Ray down under the second, whose train() then started a Ray of its own
        assert ray.is_initialized() and second.train()["num_env_steps_sampled"] == 400
    finally:
        first.stop()
        second.stop()
    assert not ray.is_initialized()


def test_seeded_runs_with_several_runners_repeat_and_an_interrupted_call_leaves_nothing_behind():
    import _thread

    import numpy as np
    import ray

    def trained_weights() -> list:
        algo = _config(SlowRockPaperScissors, {"sleep": 0.002}).debugging(seed=0).build()
        try:
            for _ in range(2):
                algo.train()
            return algo.get_weights(["learned"])["learned"]
        finally:
            algo.stop()

    first, second = trained_weights(), trained_weights()  # the runners' batches came in finishing order
    assert all(np.array_equal(first[key], second[key]) for key in first)
    algo = _config(SlowRockPaperScissors, {"sleep": 0.02}).build()
    # Python's own Ctrl-C handler, as a terminal's Ctrl-C meets a script (interrupt_main does nothing
    # while SIGINT is left to the OS), restored after.
    previous_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        algo.train()
        stop_pressing = threading.Event()

        def press_ctrl_c() -> None:  # while the runners sample, and again each 0.5 s, as a user would
            while not stop_pressing.wait(0.5):
                _thread.interrupt_main()

        pressing = threading.Thread(target=press_ctrl_c, daemon=True)
        pressing.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                algo.train()
                time.sleep(30)  # not reached: the interrupt comes during train()
        finally:
            stop_pressing.set()
            _let_presses_end(pressing)
        started = time.monotonic()
        result = algo.train()  # the abandoned calls neither hold the runners nor time them out
        assert result["num_env_steps_sampled"] == 400 and result["num_runner_restarts"] == 0
        assert time.monotonic() - started < 30
    finally:
        algo.stop()
        signal.signal(signal.SIGINT, previous_handler)
    assert not ray.is_initialized()


def _let_presses_end(pressing: threading.Thread) -> None:
    """Wait for the thread pressing Ctrl-C to end, absorbing a press that crossed the catch."""
    while True:
        try:
            pressing.join()
            time.sleep(0.2)  # a press made just before the thread ended arrives here at the latest
            return
        except KeyboardInterrupt:
            continue


def test_a_runner_whose_env_cannot_be_built_is_named_at_once_not_restarted():
    import os

    import ray

    from marl_core.errors import EnvRunnerError
    from tests.ppo.helpers import FailsOutsideTheDriver

    algo = _config(FailsOutsideTheDriver, {"driver_pid": os.getpid()}, runners=1).build()
    try:
        with pytest.raises(EnvRunnerError, match=r"^env runner 0 could not start: .*RuntimeError: factory fails in "
                                                 r"runner$") as raised:
            algo.train()
        assert "\x1b[" not in str(raised.value) and algo.runners.num_restarts == 0
    finally:
        algo.stop()
    assert not ray.is_initialized()


def test_remote_env_errors_are_counted_and_policy_changes_reach_the_runners():
    import ray

    algo = _config(FlakyRockPaperScissors, {"fail_every": 23}, runners=1).build()
    try:
        result = algo.train()
        assert result["num_env_errors"] >= 1
        assert result["num_env_errors_lifetime"] == result["num_env_errors"]
        assert {result["policies"]["learned"]["episode_len_mean"]} == {10}
        algo.add_policy("learned_v1", weights_from="learned",
                        policy_mapping_fn=lambda agent_id, episode: "learned" if agent_id == "player1" else "learned_v1")
        result = algo.train()
        assert result["policies"]["learned_v1"]["num_episodes"] > 0
        # Episodes running when the mapping changed keep their mapping (one per env at most).
        assert result["policies"]["beat_last"]["num_episodes"] <= 4
        assert algo.train()["policies"]["beat_last"]["num_episodes"] == 0
        # Built-in models run in numpy in the runner: it never imported torch.
        runner = algo.runners.runners[0]
        assert ray.get(runner.__ray_call__.remote(lambda actor: "torch" in sys.modules)) is False
        # The local Ray is lean: no dashboard server, autoscaler monitor or log monitor.
        commands = _commands_of_session(runners_module._started_ray["cluster"].head_node.get_session_dir_path())
        assert any("raylet" in command for command in commands), commands
        for unused in ("dashboard/dashboard.py", "/monitor.py", "_private/log_monitor.py"):
            assert not any(unused in command for command in commands), (unused, commands)
    finally:
        algo.stop()


def _commands_of_session(session_dir: str) -> list[str]:
    """Command lines of every process whose arguments name Ray's session directory."""
    commands = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            command = path.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if session_dir in command:
            commands.append(command)
    return commands


def test_two_node_cluster_runs_one_iteration():
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        cluster.wait_for_nodes()
        config = _config("examples.rock_paper_scissors:RockPaperScissors", runners=2, batch=80)
        algo = config.resources(ray_address=cluster.address, num_cpus=None).build()
        try:
            result = algo.train()
            nodes = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
        finally:
            algo.stop()
        assert len(nodes) == 2
        assert result["num_env_steps_sampled"] == 80
        assert result["policies"]["learned"]["num_episodes"] == 8
    finally:
        cluster.shutdown()


def test_build_starts_the_runners_before_torch_loads_and_stops_them_when_it_fails():
    # In a fresh interpreter: when Ray starts, torch is not loaded yet (the actors come up while it
    # loads). A device this machine does not have fails the build after Ray started: Ray stops again.
    script = (
        "import sys, ray\n"
        "import marl_core.ppo.runners as runners\n"
        "from marl_core.ppo import PPOConfig\n"
        "from marl_core.ppo.presets import beat_last_move, rps_policy_mapping_fn\n"
        "start = runners._start_local_ray\n"
        "def recording(num_cpus):\n"
        "    print('torch loaded when Ray started:', 'torch' in sys.modules)\n"
        "    return start(num_cpus)\n"
        "runners._start_local_ray = recording\n"
        "config = (PPOConfig().environment('examples.rock_paper_scissors:RockPaperScissors')\n"
        "          .multi_agent(policies={'learned': None, 'beat_last': beat_last_move},\n"
        "                       policy_mapping_fn=rps_policy_mapping_fn)\n"
        "          .env_runners(num_env_runners=1).training(train_batch_size=40, minibatch_size=20)\n"
        "          .resources(num_cpus=1))\n"
        "algo = config.build()\n"
        "print('steps:', algo.train()['num_env_steps_sampled'])\n"
        "algo.stop()\n"
        "config.device = 'cuda:63'\n"
        "try:\n"
        "    config.build()\n"
        "except Exception as error:  # no CUDA device, or no 64th GPU\n"
        "    print('failed:', 'cuda:63' in str(error) or 'device' in str(error).lower())\n"
        "print('Ray up after the failed build:', ray.is_initialized())\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        "torch loaded when Ray started: False",
        "steps: 40",
        "torch loaded when Ray started: True",
        "failed: True",
        "Ray up after the failed build: False",
    ]


def test_an_env_failing_in_every_episode_of_a_runner_stops_the_run_with_its_own_error(tmp_path, capsys):
    from marl_core.ppo.cli import main

    status = main(["rps", "--no-progress", "--iterations", "2", "--out", str(tmp_path), "--num-cpus", "2",
                   "--set", "num_env_runners=1", "--set", "env=tests.ppo.helpers:FlakyRockPaperScissors",
                   "--set", 'env_config={"fail_every": 5}'])
    err = capsys.readouterr().err
    assert status == 1
    # The runner's own error, not Ray's wrapper around it.
    assert "marl-train: training stopped at iteration 0: EnvContractError: env " in err
    assert "of runner 1 failed 10 times in a row" in err and "RayTaskError" not in err
    # Nothing was trained: no untrained checkpoint claims the --out.
    assert "marl-train: no final checkpoint: nothing was trained" in err and not (tmp_path / "final").exists()


def test_restored_runners_sample_on_a_new_stream(tmp_path):
    import cloudpickle
    import ray

    from marl_core.ppo import PPO

    algo = _config(SlowRockPaperScissors, {"sleep": 0.0}, runners=1, batch=80).build()
    try:
        algo.train()
        path = algo.save(tmp_path / "ck")
    finally:
        algo.stop()
    restored = PPO.from_checkpoint(path)
    try:
        assert restored.sampling_stream == 1
        blob = cloudpickle.dumps(restored._runner_state())
        samples = restored.runners.sample(restored._state_version, blob, restored.get_weights(), 80)
        ids = {episode["episode_id"] for sample in samples for episode in sample["episodes"]}
        # Runner 1 on stream 1: (1 << 40) + (1 << 32) + its episode count.
        assert ids and all(i >> 32 == (1 << 8) + 1 for i in ids)
    finally:
        restored.stop()
    assert not ray.is_initialized()


def test_the_plain_ray_start_is_a_ray_of_its_own_beside_a_running_cluster():
    # Where Ray's developer API refuses the lean head, ray.init() starts Ray: with a cluster already
    # running on the machine it tried to join that one, and failed on num_cpus.
    script = (
        "import ray, ray.cluster_utils\n"
        "import marl_core.ppo.runners as runners\n"
        "other = ray.cluster_utils.Cluster(initialize_head=True, head_node_args={'num_cpus': 1, 'include_dashboard': False})\n"
        "try:\n"
        "    def refuses(*args, **kwargs):\n"
        "        raise TypeError('no lean head here')\n"
        "    ray.cluster_utils.Cluster = refuses\n"
        "    print('lean head:', runners._start_local_ray(1) is not None)\n"
        "    print('its own Ray:', ray.get_runtime_context().gcs_address != other.address)\n"
        "    ray.shutdown()\n"
        "finally:\n"
        "    other.shutdown()\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["lean head: False", "its own Ray: True"]


def test_a_ray_address_that_cannot_be_used_because_ray_runs_already_is_named(caplog):
    # The runners started on the Ray already running, without a word about the address.
    import ray

    first = _config(SlowRockPaperScissors, {"sleep": 0.0}, runners=1).build()
    try:
        port = ray.get_runtime_context().gcs_address.rpartition(":")[2]
        with caplog.at_level("WARNING", logger="marl_core.ppo.runners"):
            for address in (f"localhost:{port}", f"127.0.0.1:{port}", "auto"):  # this Ray: nothing to say
                _config(SlowRockPaperScissors, {"sleep": 0.0}, runners=1).resources(ray_address=address).build().stop()
            assert caplog.text == ""
            second = _config(SlowRockPaperScissors, {"sleep": 0.0}, runners=1).resources(ray_address="192.0.2.2:6379")
            second.build().stop()
    finally:
        first.stop()
    assert not ray.is_initialized()
    assert ("Ray is already running in this process (at " in caplog.text
            and "the runners start there; ray_address='192.0.2.2:6379' is used only by a trainer that starts Ray"
            in caplog.text)


def test_localhost_names_only_a_ray_on_this_machine():
    # Ray gives a head started here the node's IP, never "localhost": any other host is another cluster.
    node_ip = runners_module._node_ip()
    assert runners_module._may_be("localhost:6379", f"{node_ip}:6379")
    assert runners_module._may_be("127.0.0.1:6379", "127.0.0.1:6379")
    assert not runners_module._may_be("localhost:6379", "198.51.100.7:6379")
    assert not runners_module._may_be("localhost:6379", f"{node_ip}:6380")
    assert runners_module._may_be("auto", "198.51.100.7:6379")

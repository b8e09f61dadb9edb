"""Presets of ``marl-train``: a named default config plus optional callbacks and a final step.

:data:`PRESETS` maps a name to a lazy ``"module:function"`` returning a :class:`Preset`, so a
preset's heavy imports (PettingZoo, pyspiel) happen only when it is chosen.

Example:
    >>> from marl_core.ppo.presets import load_preset
    >>> preset = load_preset("rps")
    >>> preset.name, sorted(preset.build_config().policy_entries())
    ('rps', ['beat_last', 'learned'])
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from marl_core.errors import ConfigError
from marl_core.ppo.config import TRUE_OR_FALSE, PPOConfig, _check_fields, _int_at_least

if TYPE_CHECKING:
    from marl_core.ppo.algorithm import PPO


@dataclass(frozen=True)
class Preset:
    """A named training setup of ``marl-train``.

    Attributes:
        name: the preset's name on the command line.
        description: one line for ``marl-train --help``.
        build_config: the default config (command-line overrides are applied after).
        callbacks: called after every ``algo.train()`` with ``(algo, result)``; they may add
            entries to ``result`` (logged like the rest), add or remove policies, and keep state
            in checkpoints under a key of their own in ``algo.callback_state``.
        start: called once with the algorithm before its first iteration, whether it is new or
            restored from a checkpoint (``--resume``): callbacks take their state back from
            ``algo.callback_state`` there, or rebuild what lives outside the checkpoint.
        final: called once at the end with ``(algo, out_dir)``; its dict is printed and saved.
        default_minutes: the time budget when neither ``--minutes`` nor ``--iterations`` is given.
    """

    name: str
    description: str
    build_config: Callable[[], PPOConfig]
    callbacks: tuple[Callable[[PPO, dict], None], ...] = ()
    start: tuple[Callable[[PPO], None], ...] = ()
    final: Callable[[PPO, Path], dict[str, Any]] | None = None
    default_minutes: float = 5.0


PRESETS: dict[str, str] = {
    "rps": "marl_core.ppo.presets:rps",
    "pistonball": "marl_core.ppo.presets:pistonball",
    "connect4": "marl_core.ppo.selfplay:connect4_preset",
}


def load_preset(name: str) -> Preset:
    """The preset called ``name`` (its module is imported now)."""
    reference = PRESETS.get(name)
    if reference is None:
        raise ConfigError(f"unknown preset {name!r}; presets: {sorted(PRESETS)}")
    module_name, _, function = reference.partition(":")
    return getattr(importlib.import_module(module_name), function)()


# Rock-paper-scissors: a learned policy against the "beat the last move" heuristic ----------------


def beat_last_move(observation: Any) -> int:
    """RLlib's BeatLastHeuristic: play what beats the opponent's last move (the observation)."""
    return (int(observation) + 1) % 3


def rps_policy_mapping_fn(agent_id: str, episode: Any, **kwargs: Any) -> str:
    """player1 learns; player2 plays the heuristic."""
    return "learned" if agent_id == "player1" else "beat_last"


def rps_config() -> PPOConfig:
    """The rock-paper-scissors config: 1 runner, small batches, a small MLP."""
    return (
        PPOConfig()
        .environment("marl_core.envs:RockPaperScissors")
        .multi_agent(
            policies={"learned": None, "beat_last": beat_last_move},
            policy_mapping_fn=rps_policy_mapping_fn,
            policies_to_train=["learned"],
        )
        .env_runners(num_env_runners=1, num_envs_per_env_runner=8)
        .training(lr=3e-3, gamma=0.9, train_batch_size=800, minibatch_size=200, num_epochs=4,
                  entropy_coeff=0.01, model={"hiddens": [32]})
        .resources(num_cpus=2)
    )


def _rps_final(algo: PPO, out_dir: Path) -> dict[str, Any]:
    from marl_core.envs import RockPaperScissors
    from marl_core.rollout import rollout

    learned = algo.get_policy_callable("learned")
    returns = [
        rollout(RockPaperScissors(), {"player1": learned, "player2": beat_last_move}, seed=seed).returns["player1"]
        for seed in range(20)
    ]
    return {"learned_vs_beat_last_mean_return": sum(returns) / len(returns), "episodes": len(returns)}


def rps() -> Preset:
    """Rock-paper-scissors, learned vs the beat-last-move heuristic (seconds on a laptop)."""
    return Preset("rps", "rock-paper-scissors: a learned policy against the beat-last-move heuristic",
                  rps_config, final=_rps_final, default_minutes=1.0)


# Pistonball: parameter sharing over SuperSuit-preprocessed frames ----------------------------------


#: The ``env_config`` keys :func:`pistonball_env` reads -> (what each must be, the test of a value).
PISTONBALL_ENV_RULES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "n_pistons": ("an integer of at least 2", _int_at_least(2)),
    "continuous": TRUE_OR_FALSE,
    "max_cycles": ("an integer of at least 1", _int_at_least(1)),
}


def pistonball_env(config: dict[str, Any]) -> Any:
    """Pistonball (parallel API) with SuperSuit: grayscale, 84x84, 3 stacked frames (uint8 HWC).

    ``config`` keys (PettingZoo's defaults otherwise): ``n_pistons`` (20), ``continuous`` (True),
    ``max_cycles`` (125). Another key, or a value outside :data:`PISTONBALL_ENV_RULES`, is a
    :class:`ConfigError` naming it.
    """
    unknown = sorted(set(config) - set(PISTONBALL_ENV_RULES), key=str)
    if unknown:
        raise ConfigError(f"pistonball env_config has unknown keys {unknown}; it reads {list(PISTONBALL_ENV_RULES)}")
    _check_fields(config, "pistonball env_config ", PISTONBALL_ENV_RULES)
    import supersuit as ss
    from pettingzoo.butterfly.pistonball import pistonball as pistonball_v6  # no deprecation warning

    from bridges.pettingzoo import ParallelPettingZooEnv

    # pistonball_v6 redraws its screen, which every observation is cut from, only when a render
    # mode is set: with render_mode=None each piston would see the frame of the reset forever.
    env = pistonball_v6.parallel_env(
        n_pistons=int(config.get("n_pistons", 20)), continuous=bool(config.get("continuous", True)),
        max_cycles=int(config.get("max_cycles", 125)), render_mode="rgb_array")  # numpy types to plain ones
    env = ss.color_reduction_v0(env, mode="B")
    env = ss.resize_v1(env, x_size=84, y_size=84)
    env = ss.frame_stack_v1(env, 3)
    return ParallelPettingZooEnv(env)


def shared_policy_mapping_fn(agent_id: str, episode: Any, **kwargs: Any) -> str:
    """Parameter sharing: every agent uses ``"shared"``."""
    return "shared"


#: The preset's env: 10 pistons (half of PettingZoo's 20, so the ball travels half as far and an
#: env step costs half as much) with discrete moves (down, stay, up).
PISTONBALL_ENV_CONFIG: dict[str, Any] = {"n_pistons": 10, "max_cycles": 125, "continuous": False}


def pistonball_config() -> PPOConfig:
    """Pistonball with one shared CNN policy for all pistons, sized for a 2-core machine.

    Sampling runs in the driver: sampling and learning take turns, so on 2 cores a runner process
    would gain nothing and every frame would cross processes. The CNN has the first two layers of
    RLlib's classic 84x84 filters (16 8x8 stride 4, 32 4x4 stride 2) and a 256-unit layer; the
    value function has its own copy, so value errors do not reach the policy's features. The learner uses one torch thread: on a busy 2-core machine two
    threads wait on each other and an update can take ten times longer.
    """
    return (
        PPOConfig()
        .environment(pistonball_env, env_config=dict(PISTONBALL_ENV_CONFIG))
        .multi_agent(policies={"shared": None}, policy_mapping_fn=shared_policy_mapping_fn)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4)
        .training(lr=3e-4, gamma=0.95, lambda_=0.9, train_batch_size=512, minibatch_size=128,
                  num_epochs=4, entropy_coeff=0.01, vf_coeff=0.1, clip_param=0.2, grad_clip=0.9,
                  model={"conv_filters": [[16, 8, 4], [32, 4, 2]], "conv_hidden": 256, "hiddens": [],
                         "vf_share_layers": False})
        .resources(num_cpus=2, torch_threads=1)
    )


def pistonball() -> Preset:
    """Pistonball, 10 pistons sharing one CNN policy."""
    return Preset("pistonball", "pistonball: 10 pistons sharing one CNN policy (SuperSuit 84x84x3 frames)",
                  pistonball_config, default_minutes=24.0)

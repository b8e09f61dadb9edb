"""Checkpoints: a directory with ``config.json`` and ``state.pt``, written atomically.

``config.json`` is the JSON form of the config (callables by ``"module:qualname"``, never
pickled). ``state.pt`` holds every learned policy's module state, the optimizer states of trained
policies, the iteration and step counters, recent episode returns and the RNG states; it is read
with ``torch.load(..., weights_only=True)``. The directory is written under a temporary name and
renamed into place, so a crash never leaves a half-written checkpoint under the final name.
Replacing a checkpoint renames the old one aside first: if the process dies between the two
renames, the next load (or save) under that name puts the old checkpoint back. A path holding
anything but a checkpoint (a file, a directory with other files) is refused, never replaced.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from marl_core.errors import CheckpointError, ConfigError, MultiAgentEnvError, a_type, short_repr
from marl_core.ppo.actions import normalized_box
from marl_core.ppo.config import PPOConfig, reference_of, restore_error
from marl_core.ppo.model import TorchPolicy

if TYPE_CHECKING:
    from marl_core.ppo.algorithm import PPO

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
_warned: set[str] = set()  # each warning about what a checkpoint cannot name: a WARNING once per process, then INFO


def save_checkpoint(algo: PPO, path: Path) -> Path:
    """Write ``algo`` to the directory ``path`` (replacing it atomically) and return ``path``."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    old: Path | None = None
    writing_state = False  # torch's writer says RuntimeError where a file write fails (a full disk)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _recover(path)
        _check_replaceable(path)
        tmp.mkdir()
        config = algo.config.to_json_dict()
        if config["policy_mapping_fn"] is None:
            config["policy_mapping_fn"] = reference_of(algo._build_mapping_fn)
            if config["policy_mapping_fn"] is not None:
                _warn_once(f"the current policy_mapping_fn cannot be imported by name; checkpoints keep "
                           f"{config['policy_mapping_fn']}, the one the config was built with")
        _keep_policy_spaces(config["policies"], algo)
        _warn_once(_unrestorable(config))
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
        policies = {}
        for policy_id, policy in algo.policies.items():
            if isinstance(policy, TorchPolicy):
                learner = algo.learners.get(policy_id)
                policies[policy_id] = {
                    "module": policy.module.state_dict(),
                    "optimizer": learner.optimizer.state_dict() if learner is not None else {},
                }
                if learner is not None and learner.params["use_kl_loss"]:  # adapted from the configured start
                    policies[policy_id]["kl_coeff"] = learner.kl_coeff
                    policies[policy_id]["kl_coeff_start"] = float(learner.params["kl_coeff"])
        state = {
            "format": FORMAT_VERSION,
            "iteration": algo.iteration,
            "env_steps_lifetime": algo.env_steps_lifetime,
            "num_env_errors_lifetime": algo.num_env_errors_lifetime,
            "num_runner_restarts_lifetime": algo.num_runner_restarts_lifetime,
            "evaluation_env_steps_lifetime": algo.evaluation_env_steps_lifetime,
            "time_total_s": algo.time_total_s,
            "to_train": list(algo.to_train),
            "sampling_stream": algo.sampling_stream,
            "policies": policies,
            "recent_returns": {p: [float(x) for x in r] for p, r in algo._returns.items()},
            "recent_lengths": {p: [float(x) for x in r] for p, r in algo._lengths.items()},
            "recent_episodes": {"returns": [float(x) for x in algo._episode_returns],
                                "lengths": [float(x) for x in algo._episode_lengths],
                                "agents": {a: [float(x) for x in r] for a, r in algo._agent_returns.items()}},
            "rng_numpy": json.dumps(algo.rng.bit_generator.state),
            "rng_torch": torch.get_rng_state(),
            "callback_state": _callback_state_json(algo.callback_state),
        }
        writing_state = True
        torch.save(state, tmp / "state.pt")
        writing_state = False
        if path.exists():
            old = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(path, old)
            os.replace(tmp, path)
        else:
            os.replace(tmp, path)
        for stale in [*_aside(path), *_unfinished(path)]:  # ours, and any a killed writer left
            shutil.rmtree(stale, ignore_errors=True)
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and old.exists() and not path.exists():
            os.replace(old, path)  # interrupted between the two renames: the old checkpoint stays
        # A full disk, a directory that went read-only, ...
        if isinstance(error, OSError) or (writing_state and isinstance(error, RuntimeError)):
            kept = " (the previous checkpoint there is kept)" if (path / "state.pt").exists() else ""
            # torch's stream writer names itself (or its inline_container.cc) for a full disk;
            # other RuntimeErrors (from inside the pickler, say) are not the disk's.
            hint = " (is the disk full?)" if isinstance(error, RuntimeError) and any(
                words in str(error) for words in ("inline_container", "PytorchStreamWriter", "write failed")) else ""
            raise CheckpointError(f"cannot write the checkpoint {path}{kept}: {type(error).__name__}: "
                                  f"{error}{hint}") from error
        raise
    return path


def _unrestorable(config: dict[str, Any]) -> str:
    """What restoring ``config`` (a :meth:`PPOConfig.to_json_dict`) will need passed again ("": nothing)."""
    _, problems = PPOConfig._restore(config, {}, require_env=True)
    problems += [f"{reference!r} ({where}) is defined in the script that runs (__main__), which another process "
                 f"cannot import; define it in a module, or pass it again to from_checkpoint"
                 for where, reference in _main_references(config)]
    return f"this checkpoint does not keep everything by name: {restore_error(problems)}" if problems else ""


def _main_references(value: Any, where: str = "config") -> list[tuple[str, str]]:
    """The ``"__main__:..."`` import paths in a saved config, with where they are."""
    if isinstance(value, str):
        return [(where, value)] if value.startswith("__main__:") else []
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _main_references(item, f"{where}[{key!r}]")]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in _main_references(item, f"{where}[{index}]")]
    return []


def _warn_once(message: str) -> None:
    if message:
        logger.log(logging.INFO if message in _warned else logging.WARNING, "%s", message)
        _warned.add(message)


_CHECKPOINT_FILES = frozenset({"config.json", "state.pt"})
_OS_LITTER = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})  # file browsers' notes, rebuilt at will


def _check_replaceable(path: Path) -> None:
    """Raise unless ``path`` may become a checkpoint: missing, an empty directory or a checkpoint
    (replaced whole): saving never deletes what is not a checkpoint's."""
    if not os.path.lexists(path):
        return
    if not path.is_dir():
        what = "a link to nothing" if path.is_symlink() and not path.exists() else "a file"
        raise CheckpointError(f"cannot write the checkpoint {path}: it is {what}, not a directory; "
                              "pass a new or empty directory, or an earlier checkpoint to replace")
    others = sorted(name for name in os.listdir(path) if name not in _CHECKPOINT_FILES and name not in _OS_LITTER)
    if others:
        shown = ", ".join(others[:5]) + (f", ... ({len(others)} in all)" if len(others) > 5 else "")
        raise CheckpointError(f"cannot write the checkpoint {path}: it holds files that are not a checkpoint's "
                              f"({shown}), which replacing it would delete; pass a new or empty directory, or "
                              "an earlier checkpoint to replace")


def _aside(path: Path) -> list[Path]:
    """The copies of the checkpoint ``path`` set aside while replacing it (exact names only)."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.old-[0-9a-f]{{8}}")
    return [p for p in path.parent.iterdir() if pattern.fullmatch(p.name)] if path.parent.is_dir() else []


def _unfinished(path: Path) -> list[Path]:
    """The temporary directories of writers of the checkpoint ``path`` that were killed while writing."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.tmp-[0-9a-f]{{8}}")
    return [p for p in path.parent.iterdir() if pattern.fullmatch(p.name)] if path.parent.is_dir() else []


def _recover(path: Path) -> Path:
    """Put back a checkpoint that a process killed in the middle of replacing it left aside;
    return where the checkpoint is (``path``, or the one aside where it cannot be moved back)."""
    if path.exists():
        return path
    aside = sorted(_aside(path), key=lambda p: p.stat().st_mtime)
    if not aside:
        return path
    logger.warning("%s was being replaced when its writer stopped; restoring the previous checkpoint %s",
                   path, aside[-1].name)
    try:
        os.replace(aside[-1], path)
    except OSError:  # a read-only directory, say: read it where it is
        return aside[-1]
    return path


def saved_setting(path: str | Path, name: str) -> Any:
    """The config field ``name`` saved in the checkpoint at ``path`` (as ``from_checkpoint``
    restores it), or None when it cannot be read: ``from_checkpoint`` then says why."""
    from marl_core.ppo.config import _field_from_json

    try:
        data = json.loads((_recover(Path(path)) / "config.json").read_text())
        value, problems = _field_from_json(name, data[name])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, MultiAgentEnvError):
        return None
    return None if problems else value


# Settings that versions before the config checks took (and ignored) more loosely: RLlib's model
# keys, "WARN" as a log level. Loading does not check them again, so such checkpoints still load.
_TAKEN_LOOSELY_BEFORE = frozenset({"model", "policies", "log_level"})


def _keep_policy_spaces(saved: dict[str, Any], algo: PPO) -> None:
    """Write the spaces of learned policies into their saved entries (``saved``: the config
    JSON's ``"policies"``) where they were inferred, from an agent or ``weights_from``: at a
    restore no agent may map to them any more (a league's frozen snapshots), and nothing else
    says what they observe. Spaces without a JSON form are left to inference, as before."""
    from marl_core.spaces import space_to_json

    for policy_id, policy in algo.policies.items():
        entry = saved.get(policy_id)
        if not isinstance(policy, TorchPolicy) or not isinstance(entry, dict) or entry.get("kind") not in ("learned", "spec"):
            continue
        spaces = {"observation_space": space_to_json(policy.observation_space),
                  "action_space": space_to_json(policy.action_space)}
        if None in spaces.values():
            continue
        if entry["kind"] == "learned":  # a PolicySpec of the same defaults, with the spaces
            entry = saved[policy_id] = {"kind": "spec", "config": {}, "model": {}}
        for name, value in spaces.items():
            entry.setdefault(name, value)


def load_checkpoint(cls: type[PPO], path: Path, overrides: dict[str, Any]) -> PPO:
    """Build ``cls`` from the checkpoint at ``path``; ``overrides`` replace config fields."""
    path = _recover(path)
    config_file, state_file = path / "config.json", path / "state.pt"
    if not path.exists():
        raise CheckpointError(f"{path} does not exist")
    if not config_file.is_file() or not state_file.is_file():
        inside = [str(path / name) for name in ("checkpoint", "final") if (path / name / "state.pt").is_file()]
        hint = f" (a run directory: its checkpoints are {' and '.join(inside)})" if inside else ""
        raise CheckpointError(f"{path} is not a checkpoint: expected {config_file.name} and {state_file.name} in it{hint}")
    try:
        data = json.loads(config_file.read_text())
    except ValueError as error:
        raise CheckpointError(f"{config_file} is not valid JSON (a damaged checkpoint?): {error}") from error
    if not isinstance(data, dict) or ("env" not in data and "env" not in overrides):
        raise CheckpointError(f"{config_file} holds no trainer config (no 'env' entry): a damaged checkpoint?")
    try:
        config, problems = PPOConfig._restore(data, overrides, require_env=True)
    except MultiAgentEnvError:
        raise
    except _SHAPE_ERRORS as error:  # an entry of the wrong shape
        raise CheckpointError(f"{config_file} does not hold a trainer config (a damaged checkpoint?): "
                              f"{type(error).__name__}: {error}") from error
    if problems:
        raise restore_error(problems)
    if "normalize_actions" not in data:  # saved before the option: its policies learned in the env's units
        config.normalize_actions = False
    config = config._update("from_checkpoint", overrides)
    try:
        config.validate(overrides)  # a bad override is the caller's: a ConfigError as such
    except MultiAgentEnvError:
        raise
    except _SHAPE_ERRORS as error:  # a saved value of the wrong shape that an override's check reads
        raise _cannot_build(config_file, error) from error
    try:  # the saved values too, but for those that older versions took more loosely (model keys, ...)
        config.validate([field.name for field in dataclasses.fields(config)
                         if field.name not in overrides and field.name not in _TAKEN_LOOSELY_BEFORE])
    except ConfigError as error:  # a saved value changed by hand
        raise CheckpointError(f"{config_file} holds a setting this version refuses: {error}; pass the setting "
                              f"again (--set, or from_checkpoint(path, name=value)) to load it") from error
    except _SHAPE_ERRORS as error:  # one of the wrong shape ("model": "x")
        raise _cannot_build(config_file, error) from error
    try:
        state = torch.load(state_file, weights_only=True, map_location="cpu")
    except Exception as error:  # a damaged file: torch's unpickler raises KeyError, IndexError, ... on garbage
        raise CheckpointError(f"{state_file} cannot be read (a damaged checkpoint?): {type(error).__name__}: "
                              f"{_load_failure(error)}") from error
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{state_file} holds {a_type(state)}, not a checkpoint's state (a damaged checkpoint?)"
        )
    if state.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint format {state.get('format')!r}; this version reads {FORMAT_VERSION}")
    try:
        algo = cls(config, sampling_stream=int(state.get("sampling_stream", 0)) + 1, check=False)
    except MultiAgentEnvError:  # a device or Ray address that is not there, an env that fails: as such
        raise
    except _SHAPE_ERRORS as error:  # settings edited by hand, say
        raise _cannot_build(config_file, error) from error
    try:
        missing = sorted(set(state["policies"]) - set(algo.policies))
        if missing:
            raise CheckpointError(f"the checkpoint has policies {missing} that the config does not define; "
                                  f"pass policies=... to from_checkpoint")
        if "policies_to_train" not in overrides:
            algo._set_to_train(state["to_train"])
        for policy_id, saved in state["policies"].items():
            try:
                algo.policies[policy_id].module.load_state_dict(saved["module"])
            except RuntimeError as error:  # torch's shape or key mismatch
                why = "a different model config or spaces than when saved?"
                if "log_std" in saved["module"] and getattr(algo.policies[policy_id].module, "log_std", 0) is None:
                    why = ("saved with a free log std, which free_log_std=False did not change in versions before it "
                           f"was implemented: load it with model={ {**config.model, 'free_log_std': True} !r}")
                elif _saw_slot_masks(saved["module"], algo.policies[policy_id]):
                    why = ("its agents are groups with masked members: the model sees the members' observations "
                           "without their masks, which steer the actions, while versions before that fed the masks "
                           "to the model as features; such weights do not carry over, so train the policy anew")
                raise CheckpointError(
                    f"the saved weights of policy {policy_id!r} do not fit the model built from the config ({why}): {error}"
                ) from error
            if saved["optimizer"] and policy_id in algo.learners:
                algo.learners[policy_id].optimizer.load_state_dict(saved["optimizer"])
            # The adapted coefficient goes on, unless the policy now starts from another one (an override).
            learner = algo.learners.get(policy_id)
            if "kl_coeff" in saved and learner is not None and learner.params["kl_coeff"] == saved.get("kl_coeff_start"):
                learner.kl_coeff = float(_number(saved, "kl_coeff"))
            _check_finite(policy_id, saved)
        algo.iteration = _count(state, "iteration")
        algo.env_steps_lifetime = _count(state, "env_steps_lifetime")
        algo.num_env_errors_lifetime = _count(state, "num_env_errors_lifetime")
        algo.num_runner_restarts_lifetime = _count(state, "num_runner_restarts_lifetime", 0)  # older checkpoints
        algo.evaluation_env_steps_lifetime = _count(state, "evaluation_env_steps_lifetime", 0)
        algo.time_total_s = float(_number(state, "time_total_s"))
        for key, recent in (("recent_returns", algo._returns), ("recent_lengths", algo._lengths)):
            for policy_id, values in state[key].items():
                recent.setdefault(policy_id, _deque()).extend(_numbers(values, f"{key}[{policy_id!r}]"))
        episodes = state.get("recent_episodes", {"returns": [], "lengths": [], "agents": {}})  # older: none
        algo._episode_returns.extend(_numbers(episodes["returns"], "recent_episodes['returns']"))
        algo._episode_lengths.extend(_numbers(episodes["lengths"], "recent_episodes['lengths']"))
        for agent_id, values in episodes["agents"].items():
            algo._agent_returns.setdefault(agent_id, _deque()).extend(_numbers(values, f"recent_episodes[{agent_id!r}]"))
        algo.callback_state = _saved_callback_state(state.get("callback_state", "{}"))  # older: none
        algo.rng = np.random.default_rng()
        algo.rng.bit_generator.state = json.loads(state["rng_numpy"])
        try:
            torch.set_rng_state(state["rng_torch"])
        except RuntimeError as error:  # a state of the wrong size or type
            raise ValueError(f"rng_torch: {error}") from error
        clipping = _clipping_policies(algo)
        if "use_kl_loss" not in data and "vf_clip_param" not in overrides and clipping:  # saved before RLlib's meaning
            logger.warning("%s was saved when vf_clip_param clipped each value update around the old values (PPO2's); "
                           "it now caps each squared value error, as RLlib's does. Policies %s clip: pass "
                           "vf_clip_param=None to from_checkpoint (or --set vf_clip_param=null), and policies=... "
                           "without it in the PolicySpec config of a policy that sets its own, to train without it",
                           path, clipping)
        learned_with = data.get("normalize_actions", False)  # what its policies learned with (False before the option)
        if config.normalize_actions != learned_with and _maps_box_actions(algo):
            logger.warning("the policies of %s learned with normalize_actions=%s and now act with %s: their Box "
                           "actions reach the env in other units than they learned", path, learned_with,
                           config.normalize_actions)
        algo._sync_state()
        algo.restored_from = path
    except MultiAgentEnvError:
        algo.stop()
        raise
    except (KeyError, AttributeError, TypeError, ValueError, IndexError) as error:  # entries of the wrong shape
        algo.stop()
        raise CheckpointError(f"{state_file} does not hold what a checkpoint holds (a damaged checkpoint?): "
                              f"{type(error).__name__}: {error}") from error
    except BaseException:
        algo.stop()
        raise
    return algo


def _clipping_policies(algo: PPO) -> list[str]:
    """The policies whose learners clip their value loss (a finite ``vf_clip_param``)."""
    return [policy_id for policy_id, learner in algo.learners.items()
            if learner.params["vf_clip_param"] is not None and math.isfinite(learner.params["vf_clip_param"])]


def _maps_box_actions(algo: PPO) -> bool:
    """Whether ``normalize_actions`` maps the actions of one of ``algo``'s learned policies."""
    return any(leaf.kind == "gauss" and normalized_box(leaf.space) for policy in algo.policies.values()
               if isinstance(policy, TorchPolicy) for leaf in policy.layout.leaves)


def _callback_state_json(callback_state: dict[str, Any]) -> str:
    """``callback_state`` as JSON, refusing what would not come back as it is (a tuple as a list,
    an integer key as a string, an object)."""
    where = _not_json(callback_state, "callback_state")
    if where:
        raise TypeError(f"callback_state cannot be saved in a checkpoint: {where}; it holds JSON values only "
                        "(dicts with string keys, lists, strings, numbers, booleans, None), which come back "
                        "as they are")
    return json.dumps(callback_state)


def _not_json(value: Any, where: str, inside: tuple[int, ...] = ()) -> str:
    """Where in ``value`` something is not a JSON value ("" when all is); ``inside``: the ids of
    the containers it is in (one that holds itself is no JSON value)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return ""
    if type(value) in (list, dict) and id(value) in inside:
        return f"{where} holds itself"
    inside = (*inside, id(value))
    if type(value) is list:
        return next((found for i, item in enumerate(value) if (found := _not_json(item, f"{where}[{i}]", inside))), "")
    if type(value) is dict:
        for key, item in value.items():
            found = (_not_json(item, f"{where}[{key!r}]", inside) if isinstance(key, str)
                     else f"{where} has the key {key!r}")
            if found:
                return found
        return ""
    return f"{where} is {a_type(value)}"


def _saved_callback_state(text: Any) -> dict[str, Any]:
    """The saved ``callback_state``: a JSON object (ValueError: a damaged state)."""
    value = json.loads(text) if isinstance(text, str) else text
    if not isinstance(value, dict):
        raise ValueError(f"callback_state is {short_repr(value)}, where a JSON object belongs")
    return value


def _count(state: dict[str, Any], key: str, default: int | None = None) -> int:
    """The saved counter ``key``: an integer, 0 or more (ValueError: a damaged state)."""
    value = state[key] if default is None else state.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{key} is {value!r}, where a count (an integer, 0 or more) belongs")
    return int(value)


def _number(state: dict[str, Any], key: str) -> float:
    value = state[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise ValueError(f"{key} is {value!r}, where a finite number, 0 or more, belongs")
    return float(value)


def _numbers(values: Any, where: str) -> list[float]:
    """Saved recent returns or lengths: a list of numbers (ValueError: a damaged state). An env
    may have paid an infinite reward: that is what the run saw, not damage; a NaN reward stops a
    run, so a NaN here is."""
    if not isinstance(values, list) or not all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and x == x for x in values  # x == x: not NaN
    ):
        raise ValueError(f"{where} is {short_repr(values)}, where a list of numbers (not NaN) belongs")
    return [float(x) for x in values]


def _check_finite(policy_id: str, saved: dict[str, Any]) -> None:
    """Saved weights or optimizer moments with NaN or infinite values cannot be trained on:
    refuse them by name."""
    tensors = [*_tensors(saved["module"], "weights"), *_tensors(saved["optimizer"], "optimizer state")]
    for where, tensor in tensors:
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(
                f"the saved {where} of policy {policy_id!r} hold NaN or infinite values: a damaged checkpoint, "
                f"or one saved after training diverged; resume from an earlier checkpoint"
            )


def _tensors(value: Any, where: str) -> list[tuple[str, torch.Tensor]]:
    """The tensors in a saved state (dicts and lists of them), each with where it is:
    ``weights (pi_body.0.weight)``, ``optimizer state (exp_avg[3])``."""
    return [(f"{where} ({path})", tensor) for path, tensor in _tensor_paths(value, "")]


def _tensor_paths(value: Any, path: str) -> list[tuple[str, torch.Tensor]]:
    if torch.is_tensor(value):
        return [(path, value)]
    if isinstance(value, dict):  # torch.optim's state is keyed by parameter index: str() the keys
        inner = [(f"{path}.{key}" if path else str(key), item) for key, item in value.items()]
    elif isinstance(value, (list, tuple)):
        inner = [(f"{path}[{index}]", item) for index, item in enumerate(value)]
    else:
        return []
    return [found for where, item in inner for found in _tensor_paths(item, where)]


def _load_failure(error: Exception) -> str:
    """What torch says of a file it cannot load, without its advice to load it unsafely."""
    text = str(error)
    if "weights_only" not in text:
        return text
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text)]
    reasons = [p for p in paragraphs if p and not p.startswith(("Weights only load failed", "Check the documentation"))]
    return " ".join(reasons) or "not a state that this version wrote"


def _saw_slot_masks(saved: dict[str, Any], policy: Any) -> bool:
    """Whether ``saved`` weights are those of ``policy``'s default model as versions built it
    when a group's slot masks were model inputs: first layers wider by the masks' entries."""
    if not policy.masks.grouped:
        return False
    current = policy.module.state_dict()
    keys = [key for key in ("pi_body.0.weight", "vf_body.0.weight") if key in current]
    extra = policy.masks.slot_mask_size
    return bool(keys) and all(
        key in saved and tuple(saved[key].shape) == (current[key].shape[0], current[key].shape[1] + extra) for key in keys
    )


def _deque() -> Any:
    from collections import deque

    return deque(maxlen=100)


# What settings of the wrong shape raise while a trainer is built from them.
_SHAPE_ERRORS = (TypeError, ValueError, KeyError, AttributeError)


def _cannot_build(config_file: Path, error: Exception) -> CheckpointError:
    return CheckpointError(f"the settings in {config_file} cannot build the trainer (a damaged checkpoint?): "
                           f"{type(error).__name__}: {error}")

"""Errors cross process boundaries intact: pickled (process pools, Ray actors) they keep their
type, message and attributes."""

from __future__ import annotations

import inspect
import pickle
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import cloudpickle
import pytest

from marl_core import errors

# Constructor arguments of every error class whose __init__ takes more than a message.
ARGUMENTS: dict[type[BaseException], tuple[Any, ...]] = {
    errors.UnknownAgentError: ("ghost", ["a", "b"]),
    errors.ActionDictError: (4, ["a"]),
    errors.UnexpectedActionError: (["b"], ["a"]),
    errors.MissingActionError: (["a"], ["b"]),
    errors.InvalidActionError: ("a", "Discrete(3)", 7, "out of range"),
    errors.IllegalActionError: ("a", 2, [0, 1], "square taken"),
    errors.DependencyNotInstalled: ("open_spiel", "openspiel"),
    errors.VectorEnvError: ("env 1 raised", 1, "Traceback ..."),
    errors.ConformanceError: ("2 errors", ["finding"]),
    errors.TargetBuildError: ("not an env", []),
}
ERROR_CLASSES = sorted(
    (cls for _, cls in inspect.getmembers(errors, inspect.isclass)
     if issubclass(cls, BaseException) and cls.__module__ == errors.__name__),
    key=lambda cls: cls.__name__,
)


def test_every_error_class_is_covered() -> None:
    assert len(ERROR_CLASSES) >= 19
    assert set(ARGUMENTS) <= set(ERROR_CLASSES)


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_error_survives_pickling(cls: type[BaseException], dumps: Any) -> None:
    error = cls(*ARGUMENTS.get(cls, ("a message naming agent 'a'",)))
    copy = pickle.loads(dumps(error))
    assert type(copy) is cls
    assert str(copy) == str(error) and copy.args == error.args
    assert vars(copy) == vars(error)
    if isinstance(error, ImportError):  # its message attribute, set by ImportError's __init__
        assert copy.msg == error.msg


def _play_an_occupied_square() -> None:
    from bridges.openspiel import OpenSpielEnv

    env = OpenSpielEnv("tic_tac_toe")
    env.reset(seed=0)
    env.step({"player_0": 4})
    env.step({"player_1": 4})


def test_an_env_error_raised_in_a_worker_process_arrives_whole() -> None:
    # Before errors pickled, this broke the pool ("terminated abruptly") and lost the message.
    with ProcessPoolExecutor(1) as pool, pytest.raises(errors.IllegalActionError) as raised:
        pool.submit(_play_an_occupied_square).result(timeout=120)
    assert raised.value.agent_id == "player_1" and 4 not in raised.value.legal
    assert "illegal action for agent 'player_1': received 4" in str(raised.value)


def test_install_hint_names_the_extra_of_a_missing_module_anywhere_in_the_chain(monkeypatch) -> None:
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "mpe2", None)  # what an install without the envs extra lacks
    with pytest.raises(errors.ConfigError) as chained:
        try:
            importlib.import_module("mpe2")
        except ModuleNotFoundError as missing:
            raise errors.ConfigError("the env could not be built") from missing
    assert errors.install_hint(chained.value) == ' (`pip install "marl-bridges[envs]"` installs it)'
    monkeypatch.setitem(sys.modules, "ray", None)  # importing a module of ray then fails on "ray"
    with pytest.raises(ModuleNotFoundError) as no_ray:
        importlib.import_module("ray.rllib_not_imported_yet")  # (ray.rllib may be in sys.modules already)
    assert errors.install_hint(no_ray.value) == ' (`pip install "marl-bridges[rllib]"` installs it)'
    monkeypatch.undo()
    with pytest.raises(ModuleNotFoundError) as inside:  # mpe2 is installed: reinstalling it is no fix
        importlib.import_module("mpe2.no_such_module_in_this_install")
    with pytest.raises(ModuleNotFoundError) as other:
        importlib.import_module("no_such_top_level_module_here")
    assert errors.install_hint(inside.value) == errors.install_hint(other.value) == ""
    assert errors.install_hint(RuntimeError("no module at all")) == errors.install_hint(None) == ""

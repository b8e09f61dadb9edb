"""Loading OpenSpiel games for :class:`~bridges.openspiel.OpenSpielEnv`: names with parameters,
OpenSpiel's Python games, the observation type to use, reseeding games that sample chance inside
pyspiel, and how a copy of an env refers to a game written in Python."""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np

from marl_core.env import AgentID
from marl_core.errors import UnsupportedEnvError

if TYPE_CHECKING:
    import pyspiel

ObservationType = Literal[
    "auto", "observation_tensor", "information_state_tensor", "observation_string", "information_state_string"
]
"""Which view of the state the ``"observation"`` entry holds (see :class:`~bridges.openspiel.OpenSpielEnv`)."""

AUTO_ORDER: tuple[ObservationType, ...] = (
    "observation_tensor",
    "information_state_tensor",
    "observation_string",
    "information_state_string",
)


class PythonGame(NamedTuple):
    """How a copy of an env refers to a game written in Python: the module that registers it,
    and its name with parameters (``str(game)``)."""

    module: str
    name: str


def copied_without_init(game: pyspiel.Game) -> bool:
    """Whether ``game`` is written in Python and left to pyspiel's own pickling, which rebuilds
    it without calling its ``__init__``. Games that define how they pickle (those exported by
    :func:`bridges.openspiel_game.to_openspiel`) are not."""
    cls = type(game)
    pyspiel_game = pyspiel_module().Game
    return cls is not pyspiel_game and cls.__reduce__ is pyspiel_game.__reduce__ and cls.__reduce_ex__ is pyspiel_game.__reduce_ex__


def reseeded(game: pyspiel.Game) -> bool:
    """Whether ``game`` samples chance inside pyspiel from a seed parameter (``rng_seed``, or
    ``add_noise``'s ``seed``), its own or that of a game in its parameters
    (``misere(game=negotiation())``). A loaded ``add_noise`` game reports the chance mode of the
    game it wraps, so the registered types say which parameter seeds what."""
    return with_rng_seed(game.get_parameters(), game.get_type().short_name, 0) is not None


def reloaded_with_seed(game: pyspiel.Game, seed: int) -> pyspiel.Game:
    """``game`` loaded again with its chance seed parameters set to ``seed`` (a game for which
    :func:`reseeded` holds, checked by :func:`check_reloadable`)."""
    short_name = game.get_type().short_name
    return pyspiel_module().load_game(short_name, with_rng_seed(game.get_parameters(), short_name, seed))


def check_reloadable(game: pyspiel.Game) -> None:
    """Raise unless pyspiel can load ``game`` again with another chance seed (see :func:`reseeded`).

    Raises:
        UnsupportedEnvError: it cannot (``restricted_nash_response(game=negotiation())`` is
            ``rnr_negotiation``, a name pyspiel does not know), so its chance events cannot be seeded.
    """
    pyspiel = pyspiel_module()
    short_name = game.get_type().short_name
    # Checked first: loading an unknown name makes pyspiel print every registered name.
    if short_name not in {game_type.short_name for game_type in pyspiel.registered_games()}:
        reason = f"pyspiel has no game registered as {short_name!r}"
    else:
        try:
            reloaded_with_seed(game, 0)
            return
        except pyspiel.SpielError as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    raise UnsupportedEnvError(
        f"OpenSpiel game {str(game)!r} draws its chance events inside pyspiel from a seed parameter, but cannot "
        f"be loaded again with another seed by its short name {short_name!r} and parameters ({reason}), so "
        f"reset(seed=...) could not seed it"
    )


def with_rng_seed(params: Mapping[str, Any], short_name: str, seed: int) -> dict[str, Any] | None:
    """``params`` of the game ``short_name`` with its chance seed set to ``seed`` wherever a game in
    them (the game itself or one nested in a parameter) takes one; None when none does. A nested
    game's parameters may list only its name, so its type says which seed parameter it takes."""
    params = dict(params)
    name = "rng_seed" if "rng_seed" in params else _chance_seed_parameter(short_name)
    found = name is not None
    if name is not None:
        params[name] = seed
    for key, value in params.items():
        if isinstance(value, Mapping) and isinstance(value.get("name"), str):
            nested = with_rng_seed(value, value["name"], seed)
            if nested is not None:
                params[key], found = nested, True
    return params if found else None


@functools.cache
def _chance_seed_parameter(short_name: str) -> str | None:
    """The parameter that seeds the chance draws of the registered game type ``short_name``:
    ``rng_seed``; or ``seed`` for a type that samples chance inside pyspiel (``add_noise``'s
    noise; in other games, ``deep_sea``'s or ``hanabi``'s, ``seed`` picks the game itself). None:
    it takes none, or the type is unknown."""
    pyspiel = pyspiel_module()
    for game_type in pyspiel.registered_games():
        if game_type.short_name == short_name:
            spec = game_type.parameter_specification
            if "rng_seed" in spec:
                return "rng_seed"
            sampled = game_type.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC
            return "seed" if sampled and "seed" in spec else None
    return None


def pyspiel_module() -> Any:
    """pyspiel, imported on first use so that ``import bridges`` stays light."""
    import pyspiel

    return pyspiel


def player_id(player: int) -> AgentID:
    """The agent id of OpenSpiel player ``player`` (``"player_0"``, ``"player_1"``, ...)."""
    return f"player_{player}"


def load_game(game: str | pyspiel.Game) -> pyspiel.Game:
    """A ``pyspiel.Game`` from a game or a name with optional parameters (``"goofspiel(num_cards=4)"``).

    OpenSpiel's Python games (``"python_kuhn_poker"``, ...) are registered on first use.

    Raises:
        UnsupportedEnvError: the name does not load (unknown game, missing parameter).
    """
    import pyspiel

    if isinstance(game, pyspiel.Game):
        return game
    if not isinstance(game, str):
        raise UnsupportedEnvError(
            f"OpenSpielEnv needs a pyspiel.Game or a game name such as 'connect_four', received "
            f"{type(game).__name__} {game!r}"
        )
    if "python_" in game:  # also inside a wrapper game's parameters: "turn_based_simultaneous_game(game=python_...)"
        import open_spiel.python.games  # noqa: F401  (registers OpenSpiel's Python games)
    short_name = game.split("(", 1)[0]
    known = pyspiel.registered_names()
    if short_name not in known:  # refused before pyspiel prints every registered game to stderr
        close = difflib.get_close_matches(short_name, known, n=3)
        guess = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
        raise UnsupportedEnvError(f"OpenSpiel game {game!r} does not load: {short_name!r} is not a registered "
                                  f"game{guess}; pyspiel.registered_names() lists the games")
    try:
        return pyspiel.load_game(game)
    except Exception as error:  # pyspiel raises SpielError, and IndexError or RuntimeError from C++
        # pyspiel's "Unknown game" message lists every registered game, one a line.
        reason = re.sub(r"Available games are:\n.*", "pyspiel.registered_names() lists the games", str(error),
                        flags=re.DOTALL)
        raise UnsupportedEnvError(f"OpenSpiel game {game!r} does not load: {reason}") from error


def _provides(game: pyspiel.Game, kind: ObservationType) -> bool:
    """Whether ``game`` provides ``kind``; a tensor whose declared shape holds nothing does not count."""
    if not getattr(game.get_type(), f"provides_{kind}"):
        return False
    if kind.endswith("_tensor"):
        try:
            shape = getattr(game, f"{kind}_shape")()
        except pyspiel_module().SpielError:  # declared, but the game cannot tell its shape
            return False
        if len(shape) == 0:  # a Python game's []: one number, or (python_dynamic_routing) none at all
            return _observer_size(game, kind) == 1
        return int(np.prod(shape)) > 0
    return True


def _observer_size(game: pyspiel.Game, kind: ObservationType) -> int | None:
    """The size of the tensor of ``game``'s observer for ``kind`` (None: no observer)."""
    from open_spiel.python.observation import make_observation

    iig = pyspiel_module().IIGObservationType(perfect_recall=True) if kind == "information_state_tensor" else None
    try:
        observer = make_observation(game, iig)
    except pyspiel_module().SpielError:
        return None
    return None if observer is None or observer.tensor is None else int(observer.tensor.size)


def choose_observation_type(game: pyspiel.Game, requested: ObservationType = "auto") -> ObservationType:
    """The observation type used for ``game``: ``requested``, or for ``"auto"`` the first one the
    game provides among observation tensor, information-state tensor, observation string,
    information-state string.

    Raises:
        UnsupportedEnvError: the game does not provide the requested type, or provides none.
    """
    game_type = game.get_type()
    if requested != "auto":
        if requested not in AUTO_ORDER:
            raise UnsupportedEnvError(
                f"unknown observation_type {requested!r}; expected one of {['auto', *AUTO_ORDER]}"
            )
        if not _provides(game, requested):
            offered = [kind for kind in AUTO_ORDER if _provides(game, kind)]
            raise UnsupportedEnvError(
                f"OpenSpiel game {game_type.short_name!r} does not provide {requested} (or declares it empty); "
                f"it provides {offered}"
            )
        return requested
    for kind in AUTO_ORDER:
        if _provides(game, kind):
            return kind
    raise UnsupportedEnvError(f"OpenSpiel game {game_type.short_name!r} provides no observation at all")

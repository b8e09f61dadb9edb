"""MultiAgentEnvs as OpenSpiel games: :func:`to_openspiel` (the other direction is
:class:`bridges.openspiel.OpenSpielEnv`).

The exported game is a registered Python game, so OpenSpiel's own tools (MCTS, CFR on small games,
``pyspiel.random_sim_test``, ``pyspiel.load_game(name)``) run on our envs. Each ``pyspiel.State``
owns one env built by the factory. Cloning a state replays its history (the seed, then every
action) on a fresh env, which is exact because a MultiAgentEnv repeats its trajectory from
``reset(seed=...)`` and the same actions.

Example:
    >>> import pyspiel
    >>> from bridges.openspiel import OpenSpielEnv
    >>> from bridges.openspiel_game import to_openspiel
    >>> game = to_openspiel(lambda: OpenSpielEnv("tic_tac_toe"), name="doc_tic_tac_toe")
    >>> state = game.new_initial_state()
    >>> state.current_player(), state.legal_actions()
    (0, [0, 1, 2, 3, 4, 5, 6, 7, 8])
    >>> for action in [4, 0, 2, 6, 3, 5, 1, 7, 8]:
    ...     state.apply_action(action)
    >>> state.is_terminal(), state.returns()
    (True, [0.0, 0.0])
    >>> pyspiel.load_game("doc_tic_tac_toe").num_players()
    2
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import cloudpickle
import numpy as np
import pyspiel
from gymnasium import spaces

from bridges.wrapping import require_multi_agent_env
from marl_core.env import ALL, AgentID, MultiAgentEnv, seed_value
from marl_core.errors import (
    EnvContractError,
    IllegalActionError,
    InvalidActionError,
    MultiAgentEnvError,
    SeedError,
    UnsupportedEnvError,
)
from marl_core.spaces import OBS_KEY, action_mask_of, is_masked, snapshot

logger = logging.getLogger(__name__)
# Exported games whose env ran past max_game_length (warned once per game name and process).
_CUT_WARNED: set[str] = set()

Dynamics = Literal["auto", "sequential", "simultaneous"]
Utility = Literal["zero_sum", "constant_sum", "general_sum", "identical"]
RewardModel = Literal["rewards", "terminal"]

_INT32_MAX = 2**31 - 1
_POOL_SIZE = 64  # envs kept for reuse per exported game
_REGISTERED: dict[str, tuple[_Spec, pyspiel.GameType, pyspiel.GameInfo]] = {}
# A name pyspiel's load_game reads as a name alone: "(" starts its parameters.
_NAME = re.compile(r"[^()]+")


@dataclass(frozen=True)
class _Spec:
    """Everything the game, its states and observers share."""

    factory: Callable[[], MultiAgentEnv]
    agents: tuple[AgentID, ...]
    sizes: tuple[int, ...]  # number of actions of each agent
    starts: tuple[int, ...]  # the Discrete ``start`` of each agent's action space
    seeds: tuple[int, ...]
    max_game_length: int
    terminal_rewards: bool
    tensor_shape: tuple[int, ...] | None
    export: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # to_openspiel's arguments
    pool: list[MultiAgentEnv] = field(default_factory=list, compare=False, repr=False)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (with a serialized state) as its game's export, not with its envs.
        return _spec_from, (cloudpickle.dumps(self.export),)


def _seed_of(seed: Any, seeds: Any) -> int:
    """One of ``to_openspiel``'s ``seeds`` as an int (a float would be cut silently by ``int()``)."""
    try:
        value = seed_value(seed)
    except SeedError:
        value = None
    if value is None:
        raise UnsupportedEnvError(f"to_openspiel's seeds must be non-negative integers, received {seed!r} in {seeds!r}")
    return value


def _no_argument(factory: Callable[..., MultiAgentEnv]) -> Callable[[], MultiAgentEnv]:
    """``factory`` as a call without arguments; factories that need a config get ``{}``."""
    try:
        inspect.signature(factory).bind()
    except TypeError:
        return functools.partial(factory, {})
    except ValueError:  # no signature to inspect (some builtins): call it bare
        pass
    return factory


def _utility_of(
    probe: MultiAgentEnv, utility: Utility | None, utility_range: tuple[float, float] | None, utility_sum: float | None
) -> tuple[Utility, tuple[float, float], float | None]:
    """The utility type, range and sum to declare: those given, else the wrapped OpenSpiel game's."""
    game = getattr(probe, "game", None)
    source = game if isinstance(game, pyspiel.Game) else None
    if utility is None:
        utility = str(source.get_type().utility.name).lower() if source is not None else "general_sum"  # type: ignore[assignment]
    if utility not in ("zero_sum", "constant_sum", "general_sum", "identical"):
        raise UnsupportedEnvError(
            f"utility must be 'zero_sum', 'constant_sum', 'general_sum' or 'identical', received {utility!r}"
        )
    if utility_range is None:
        utility_range = (source.min_utility(), source.max_utility()) if source is not None else (-np.inf, np.inf)
    elif not (len(utility_range) == 2 and float(utility_range[0]) <= float(utility_range[1])):  # NaN fails
        raise UnsupportedEnvError(
            f"utility_range must be (min_utility, max_utility) with min <= max, received {utility_range!r}"
        )
    constant = utility == "constant_sum" or (utility == "zero_sum" and utility_sum == 0)
    if utility_sum is not None and not constant:
        raise UnsupportedEnvError(
            f"utility_sum={utility_sum!r} contradicts utility={utility!r}: the sum is declared for constant-sum "
            f"games only (0 for zero sum); pass utility='constant_sum' with it"
        )
    if utility == "zero_sum":
        utility_sum = 0.0
    elif utility == "constant_sum" and utility_sum is None:
        if source is None or source.get_type().utility != pyspiel.GameType.Utility.CONSTANT_SUM:
            raise UnsupportedEnvError("utility='constant_sum' needs utility_sum, the players' constant total")
        utility_sum = source.utility_sum()
    return utility, (float(utility_range[0]), float(utility_range[1])), utility_sum  # type: ignore[return-value]


def _inner_space(space: spaces.Space) -> spaces.Space:
    return space[OBS_KEY] if is_masked(space) else space


def _tensor_shape(env: MultiAgentEnv, agents: Sequence[AgentID]) -> tuple[int, ...] | None:
    """The common shape of every agent's Box observation, the flat size if shapes differ in
    layout only, or None when there is no common tensor."""
    inner = [_inner_space(env.get_observation_space(agent_id)) for agent_id in agents]
    if not all(isinstance(space, spaces.Box) for space in inner):
        return None
    shapes = {space.shape for space in inner}
    if len(shapes) == 1:
        return next(iter(shapes))
    sizes = {int(np.prod(shape)) for shape in shapes}
    return (sizes.pop(),) if len(sizes) == 1 else None


def to_openspiel(
    env_factory: Callable[[], MultiAgentEnv],
    *,
    name: str = "marl_bridges_env",
    long_name: str | None = None,
    seeds: Sequence[int] = (0,),
    dynamics: Dynamics = "auto",
    reward_model: RewardModel = "rewards",
    max_game_length: int = 1000,
    utility_range: tuple[float, float] | None = None,
    perfect_information: bool = False,
    utility: Utility | None = None,
    utility_sum: float | None = None,
) -> pyspiel.Game:
    """Expose a turn-based or simultaneous MultiAgentEnv as a registered OpenSpiel game.

    Args:
        env_factory: builds a fresh env, called without arguments (or with ``{}`` when it needs a
            config); called here once to read the spaces, then whenever a state needs an env
            (envs of discarded states are reused). Every agent needs a ``Discrete`` action space.
        name: the game's short name (without parentheses), registered with pyspiel so
            ``pyspiel.load_game(name)`` works. Exporting again under the same name replaces the
            previous export for ``load_game``; ``pyspiel.registered_games()`` keeps listing the
            first export's game type, which pyspiel cannot replace.
        long_name: the game's long name (default: ``name``).
        seeds: the seeds an episode may start from. With one seed the game starts at a decision
            node; with several, the initial state is a chance node choosing one uniformly.
        dynamics: ``"sequential"`` (one agent acts at a time), ``"simultaneous"``, or ``"auto"``:
            simultaneous when the first reset asks more than one agent to act.
        reward_model: ``"rewards"`` passes each step's rewards through ``state.rewards()``;
            ``"terminal"`` pays each player's summed rewards at the end (what MCTS needs).
        max_game_length: the game ends (terminal) after this many env steps.
        utility_range: the game's ``min_utility`` and ``max_utility``. Default: those of the
            wrapped game when the env is an :class:`~bridges.openspiel.OpenSpielEnv`, else
            unbounded.
        perfect_information: declare the game as perfect information (the env's observations must
            then show the whole state); imperfect by default.
        utility: ``"zero_sum"``, ``"constant_sum"``, ``"general_sum"`` or ``"identical"`` (what
            OpenSpiel's solvers check, e.g. exploitability needs zero or constant sum). Default:
            the wrapped game's when the env is an :class:`~bridges.openspiel.OpenSpielEnv`, else
            general sum. Declared, not checked: the env's returns must honour it.
        utility_sum: the sum of the players' returns of a constant-sum game (0 for zero sum).

    Returns:
        The ``pyspiel.Game``.

    Raises:
        UnsupportedEnvError: an action space is not Discrete, ``seeds`` is empty or holds
            something other than non-negative integers, ``env_factory`` is an env rather than a
            factory, builds something other than a marl_core MultiAgentEnv or returns the same
            env object on two calls (each state needs its own), ``name`` is not
            a plain name or is taken by a game that pyspiel already knows, or arguments contradict
            each other (``max_game_length`` below 1, ``utility_range`` min above max, a
            ``utility_sum`` for a game that is not constant sum).

    Semantics:
        - **Players**: ``env.possible_agents`` in order are players 0..n-1. A node where one agent
          acts is that player's turn; a node where several act is simultaneous, and players not
          acting there have no legal actions (their entry of the joint action is ignored).
        - **Masks**: legal actions are the ``"action_mask"`` of the agent's observation, or every
          action of its space when it has no mask. OpenSpiel actions are 0-based; an agent's
          ``Discrete(n, start)`` action ``start + k`` is OpenSpiel action ``k``.
        - **Rewards**: ``state.rewards()`` are the env's step rewards (agents not named get 0),
          ``state.returns()`` their running sums; with ``reward_model="terminal"`` both are zero
          until the end, where they are the sums, and ``state.paid_returns()`` tells the running
          sums (:class:`~bridges.openspiel.OpenSpielEnv` pays them when its ``max_steps`` cuts
          the game short). Nothing is lost or invented.
        - **"__all__"**: the game is terminal when the env sets ``"__all__"`` in terminateds or
          truncateds, or after ``max_game_length`` steps (logged as a warning, once per game).
          OpenSpiel has no truncation; ``state.is_truncated()`` tells (and
          :class:`~bridges.openspiel.OpenSpielEnv` then reports truncation, not termination).
          Agents that end before the game does simply have no more turns: OpenSpiel gives every
          player its final observation at the end.
        - **Infos**: OpenSpiel states have none: the env's infos (``"__common__"`` too) stay
          behind, and an :class:`~bridges.openspiel.OpenSpielEnv` over the game gives ``{}``.
        - **Observations**: a player's observation is the last one its agent received (zeros or
          ``""`` before the first); the tensor is its ``"observation"`` entry flattened, provided
          when every agent observes a Box of the same size. The information state string lists
          everything the agent observed and did, in order (perfect recall).
        - **Chance and seeding**: the only chance event is the seed (see ``seeds``); everything
          random in the env follows from it, so cloning a state replays its history exactly.
        - **Errors**: an action outside a player's actions or not legal now, ``apply_action`` at
          a simultaneous node, ``apply_actions`` on a sequential game or at the chance node, and
          any action after the end raise a :class:`~marl_core.errors.MultiAgentEnvError` before
          the env is stepped: the state and its history stay as they were (pyspiel itself
          refuses ``kInvalidAction``, -1, with its ``SpielError``, before the game sees it).
        - **Pickling**: a game pickles as its export, and a state as its game and history, so
          both unpickle in a process that never exported the game (pyspiel's own
          ``serialize_game_and_state`` names the game only: load it by name there first).
    """
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise UnsupportedEnvError(
            f"to_openspiel name must be a non-empty string without '(' or ')' (pyspiel reads "
            f"'name(...)' as a name with parameters), received {name!r}"
        )
    if name in pyspiel.registered_names() and name not in _REGISTERED:
        raise UnsupportedEnvError(f"to_openspiel name {name!r} is already a pyspiel game; choose another name")
    spec, game_type, game_info = _define(
        env_factory, name=name, long_name=long_name, seeds=seeds, dynamics=dynamics, reward_model=reward_model,
        max_game_length=max_game_length, utility_range=utility_range, perfect_information=perfect_information,
        utility=utility, utility_sum=utility_sum,
    )
    first = name not in _REGISTERED
    _REGISTERED[name] = (spec, game_type, game_info)
    if first:
        # A class per name, not a closure: pyspiel keeps the factory until the interpreter exits,
        # and releasing a plain function there aborts the process (a class is only freed by the
        # garbage collector, before that).
        class RegisteredGame(_EnvGame):
            def __init__(self, params: dict[str, Any] | None = None) -> None:
                super().__init__(*_REGISTERED[name], params)

        RegisteredGame.__name__ = RegisteredGame.__qualname__ = f"RegisteredGame_{name}"
        pyspiel.register_game(game_type, RegisteredGame)
    return pyspiel.load_game(name)


def _define(
    env_factory: Callable[[], MultiAgentEnv],
    *,
    name: str,
    long_name: str | None,
    seeds: Sequence[int],
    dynamics: Dynamics,
    reward_model: RewardModel,
    max_game_length: int,
    utility_range: tuple[float, float] | None,
    perfect_information: bool,
    utility: Utility | None,
    utility_sum: float | None,
) -> tuple[_Spec, pyspiel.GameType, pyspiel.GameInfo]:
    """Check :func:`to_openspiel`'s arguments, probe the env and build what the game is made of."""
    try:  # a numpy array of seeds too; a lone number (seeds=7, for seed=7) is not a sequence
        listed = [] if isinstance(seeds, (str, bytes, Mapping)) else list(seeds)
    except TypeError:
        listed = []
    if not listed:
        raise UnsupportedEnvError(f"to_openspiel needs a sequence of one or more seeds, received {seeds!r}")
    whole_seeds = tuple(_seed_of(seed, seeds) for seed in listed)
    if not callable(env_factory):
        raise UnsupportedEnvError(
            f"to_openspiel takes a factory that builds a MultiAgentEnv (a class or function: every game "
            f"state builds its own env), received the {type(env_factory).__qualname__} instance {env_factory!r:.80}; "
            "pass its class, or a function that returns a new one"
        )
    if dynamics not in ("auto", "sequential", "simultaneous"):
        raise UnsupportedEnvError(f"dynamics must be 'auto', 'sequential' or 'simultaneous', received {dynamics!r}")
    if reward_model not in ("rewards", "terminal"):
        raise UnsupportedEnvError(f"reward_model must be 'rewards' or 'terminal', received {reward_model!r}")
    whole = isinstance(max_game_length, (int, np.integer)) and not isinstance(max_game_length, bool)
    if not whole or max_game_length < 1:
        raise UnsupportedEnvError(f"max_game_length must be a positive int, received {max_game_length!r}")
    if max_game_length > _INT32_MAX:  # pyspiel keeps it in a C int
        raise UnsupportedEnvError(f"max_game_length must be at most {_INT32_MAX}, received {max_game_length!r}")
    if long_name is not None and not isinstance(long_name, str):
        raise UnsupportedEnvError(f"long_name must be text or None, received {long_name!r}")
    if not isinstance(perfect_information, (bool, np.bool_)):
        raise UnsupportedEnvError(f"perfect_information must be True or False, received {perfect_information!r}")
    build = _no_argument(env_factory)
    probe = build()
    try:
        require_multi_agent_env(probe, "to_openspiel (through env_factory)", "openspiel")
        agents = tuple(probe.possible_agents)
        sizes, starts = [], []
        for agent_id in agents:
            space = probe.get_action_space(agent_id)
            if not isinstance(space, spaces.Discrete):
                raise UnsupportedEnvError(
                    f"to_openspiel needs a Discrete action space for every agent; agent {agent_id!r} has {space}"
                )
            sizes.append(int(space.n))
            starts.append(int(space.start))
        utility, utility_range, utility_sum = _utility_of(probe, utility, utility_range, utility_sum)
        if dynamics == "auto":
            obs, _ = probe.reset(seed=whole_seeds[0])
            dynamics = "simultaneous" if len(obs) > 1 else "sequential"
        spec = _Spec(
            factory=build,
            agents=agents,
            sizes=tuple(sizes),
            starts=tuple(starts),
            seeds=whole_seeds,
            max_game_length=int(max_game_length),
            terminal_rewards=reward_model == "terminal",
            tensor_shape=_tensor_shape(probe, agents),
            export=dict(
                env_factory=env_factory, name=name, long_name=long_name, seeds=tuple(seeds), dynamics=dynamics,
                reward_model=reward_model, max_game_length=max_game_length, utility_range=tuple(utility_range),
                perfect_information=perfect_information, utility=utility, utility_sum=utility_sum,
            ),
        )
    except BaseException:  # refused: the probe holds nothing any longer (a port, a window)
        close = getattr(probe, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()
        raise
    probe.close()  # first: an env may hold what a second one needs (a port, a window)
    try:
        game_type = pyspiel.GameType(
            short_name=name,
            long_name=long_name or name,
            dynamics=(
                pyspiel.GameType.Dynamics.SIMULTANEOUS if dynamics == "simultaneous" else pyspiel.GameType.Dynamics.SEQUENTIAL
            ),
            chance_mode=(
                pyspiel.GameType.ChanceMode.EXPLICIT_STOCHASTIC if len(spec.seeds) > 1 else pyspiel.GameType.ChanceMode.DETERMINISTIC
            ),
            information=(
                pyspiel.GameType.Information.PERFECT_INFORMATION
                if perfect_information
                else pyspiel.GameType.Information.IMPERFECT_INFORMATION
            ),
            utility=getattr(pyspiel.GameType.Utility, utility.upper()),
            reward_model=pyspiel.GameType.RewardModel.TERMINAL if spec.terminal_rewards else pyspiel.GameType.RewardModel.REWARDS,
            max_num_players=len(agents),
            min_num_players=len(agents),
            provides_information_state_string=True,
            provides_information_state_tensor=False,
            provides_observation_string=True,
            provides_observation_tensor=spec.tensor_shape is not None,
            parameter_specification={},
        )
        game_info = pyspiel.GameInfo(
            num_distinct_actions=max(sizes),
            max_chance_outcomes=len(spec.seeds) if len(spec.seeds) > 1 else 0,
            num_players=len(agents),
            min_utility=utility_range[0],
            max_utility=utility_range[1],
            utility_sum=utility_sum,
            max_game_length=spec.max_game_length,
        )
    except (TypeError, ValueError, OverflowError) as error:  # pyspiel's own checks, past those above
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UnsupportedEnvError(f"pyspiel refused the description of game {name!r}: {reason}") from None
    fresh = build()
    if fresh is probe:  # states sharing one env would step each other's games
        raise UnsupportedEnvError(
            f"to_openspiel's env_factory {getattr(env_factory, '__qualname__', env_factory)!r:.80} returned the same "
            "env object twice: every game state needs an env of its own; return a new env on every call"
        )
    spec.pool.append(fresh)  # the first state's
    return spec, game_type, game_info


def _exported_game(export: dict[str, Any]) -> pyspiel.Game:
    """The game that :func:`to_openspiel` exported with the arguments ``export``: the registered
    one when it was exported with equal arguments (factories compare as Python compares them:
    functions by identity), else exported here (unpickling in another process), else (another
    export holds its name now) built again without registering it."""
    registered = _REGISTERED.get(export["name"])
    if registered is None:
        return to_openspiel(**export)
    if registered[0].export == export:
        return pyspiel.load_game(export["name"])
    return _EnvGame(*_define(**export), None)


@functools.lru_cache(maxsize=64)
def _exported_game_from(pickled_export: bytes) -> pyspiel.Game:
    """:func:`_exported_game` of an export pickled with cloudpickle; one game per pickle, so
    states deserialized again and again share their game."""
    return _exported_game(cloudpickle.loads(pickled_export))


def _replayed_state(pickled_export: bytes, replay: Sequence[Any]) -> pyspiel.State:
    """A state of the game :func:`_exported_game_from` gives, after the actions in ``replay``
    (ints: chance outcomes and turns; lists: joint actions)."""
    state = _exported_game_from(pickled_export).new_initial_state()
    _replay(replay, state.apply_action, state.apply_actions)
    return state


def _replay(replay: Sequence[Any], apply: Callable[[int], Any], apply_joint: Callable[[list[int]], Any]) -> None:
    """Apply a recorded history: ints (chance outcomes, turns) with ``apply``, lists (joint
    actions) with ``apply_joint``."""
    for applied in replay:
        if isinstance(applied, list):
            apply_joint(applied)
        else:
            apply(applied)


def _spec_from(pickled_export: bytes) -> _Spec:
    """The spec of the game :func:`_exported_game_from` gives."""
    return _exported_game_from(pickled_export).spec


class _EnvGame(pyspiel.Game):
    """An exported MultiAgentEnv (see :func:`to_openspiel`)."""

    def __init__(
        self, spec: _Spec, game_type: pyspiel.GameType, game_info: pyspiel.GameInfo, params: dict[str, Any] | None
    ) -> None:
        super().__init__(game_type, game_info, params or {})
        self.spec = spec

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as its export: another process exports it again. cloudpickle takes factories
        # that pickle cannot name (a lambda), and names importable ones as pickle would.
        return _exported_game_from, (cloudpickle.dumps(self.spec.export),)

    def __copy__(self) -> _EnvGame:
        return self  # games are immutable, as pyspiel's own

    def __deepcopy__(self, memo: dict[int, Any]) -> _EnvGame:
        return self

    def new_initial_state(self) -> _EnvState:
        """A fresh state: a chance node choosing the seed, or the env reset with the only seed."""
        return _EnvState(self, self.spec)

    def make_py_observer(self, iig_obs_type: Any = None, params: Any = None) -> _EnvObserver:
        """The observer of the last observations, or of the whole record with perfect recall."""
        perfect_recall = bool(iig_obs_type is not None and iig_obs_type.perfect_recall)
        return _EnvObserver(self.spec, perfect_recall)


class _Position:
    """The Python side of a state: the env and what OpenSpiel asks about it.

    pyspiel clones a Python state by building a new initial state and deep-copying each attribute
    of the original; this object is the state's only attribute, and its ``__deepcopy__`` records
    the history instead of copying the env. The copy builds its env when first asked (so a clone
    that is only read never steps an env) by replaying that history on a fresh one.
    """

    def __init__(self, spec: _Spec, sequential: bool, replay: Sequence[Any] = ()) -> None:
        self.spec = spec
        self.sequential = sequential
        self.replay: list[Any] = list(replay)  # what was applied: ints (turns, chance), lists (joint)
        self._ready = False

    def __deepcopy__(self, memo: dict[int, Any]) -> _Position:
        return _Position(self.spec, self.sequential, self.replay)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (pyspiel's serialize_state) as its history, as copied: the env is built again.
        return _Position, (self.spec, self.sequential, self.replay)

    def __del__(self) -> None:
        # Envs of discarded positions are reset and reused: a reset env is as good as a new one.
        env = self.__dict__.get("env")
        if env is not None and len(self.spec.pool) < _POOL_SIZE:
            self.spec.pool.append(env)

    # Building the env --------------------------------------------------------------------------

    def ready(self) -> _Position:
        """Build the env and replay the history on it, once."""
        if not self._ready:
            count = len(self.spec.agents)
            self._ready = True
            self.env: MultiAgentEnv | None = None
            self.acting: list[int] = []
            self.last_obs: list[Any] = [None] * count
            self.record: list[list[tuple[str, Any]]] = [[] for _ in range(count)]
            self.rewards = [0.0] * count
            self.returns = [0.0] * count
            self.done = False
            self.truncated = False
            self.steps = 0
            replay, self.replay = self.replay, []
            if len(self.spec.seeds) == 1:
                self._start(self.spec.seeds[0])
            _replay(replay, self.apply, self.apply_joint)
        return self

    def _start(self, seed: int) -> None:
        self.env = self.spec.pool.pop() if self.spec.pool else self.spec.factory()
        obs, _ = self.env.reset(seed=seed)
        self._observe(obs, set())

    def _player(self, agent_id: AgentID, what: str) -> int:
        try:
            return self.spec.agents.index(agent_id)
        except ValueError:
            raise EnvContractError(
                f"{type(self.env).__name__} returned a {what} for {agent_id!r}, which is not in "
                f"possible_agents {list(self.spec.agents)}"
            ) from None

    def _observe(self, obs: dict[AgentID, Any], ended: set[AgentID]) -> None:
        acting = []
        for agent_id, observation in obs.items():
            player = self._player(agent_id, "observation")
            observation = snapshot(observation)  # the env may write into it later: the record keeps what was seen
            self.last_obs[player] = observation
            self.record[player].append(("observed", observation))
            if agent_id not in ended:
                mask = action_mask_of(observation)
                if mask is not None and not mask.any() and not self.done:  # OpenSpiel: a player to act has a legal action
                    raise EnvContractError(
                        f"{type(self.env).__name__} asks {agent_id!r} to act after {self.steps} steps with an "
                        "action mask that allows no action; leave it out of the obs dict, or end it"
                    )
                acting.append(player)
        self.acting = [] if self.done else sorted(acting)
        if not self.done and not acting:
            raise EnvContractError(
                f"{type(self.env).__name__} asked no agent to act after {self.steps} steps without "
                "setting '__all__' in terminateds or truncateds"
            )
        if self.sequential and len(self.acting) > 1:
            raise EnvContractError(
                f"{type(self.env).__name__} asks {self._names(self.acting)} to act at "
                "once in a game exported as sequential; pass dynamics='simultaneous' to to_openspiel"
            )

    def _step(self, actions: dict[AgentID, Any], did: dict[int, int]) -> None:
        """Step the env with ``actions`` (``did``: player -> OpenSpiel action, recorded once the
        env has accepted them: an action the env refuses leaves no trace)."""
        obs, rewards, terminateds, truncateds, _ = self.env.step(actions)
        for player, action in did.items():
            self.record[player].append(("did", action))
        self.steps += 1
        step_rewards = [0.0] * len(self.spec.agents)
        for agent_id, reward in rewards.items():
            if agent_id != ALL:
                step_rewards[self._player(agent_id, "reward")] += float(reward)
        self.returns = [total + reward for total, reward in zip(self.returns, step_rewards, strict=True)]
        self.rewards = step_rewards
        terminated, truncated = bool(terminateds.get(ALL, False)), bool(truncateds.get(ALL, False))
        cut = not (terminated or truncated) and self.steps >= self.spec.max_game_length
        self.done = terminated or truncated or cut
        self.truncated = self.done and not terminated
        if cut and self.spec.export.get("name") not in _CUT_WARNED:
            _CUT_WARNED.add(self.spec.export.get("name"))
            logger.warning(
                "%s: the env's episode was cut at max_game_length=%d steps (the game ends there, as "
                "truncated); pass a larger max_game_length to to_openspiel to play it out",
                self.spec.export.get("name"), self.spec.max_game_length,
            )
        ended = {a for a in obs if terminateds.get(a, False) or truncateds.get(a, False)}
        self._observe(obs, ended)

    # Transitions ---------------------------------------------------------------------------------

    def apply(self, action: int) -> None:
        """A chance outcome (the seed) or the one acting player's action."""
        self._check_not_over(f"apply_action({action})")
        if self.env is None:
            self._check_chance_outcome(action)
            self._start(self.spec.seeds[action])
        else:
            if len(self.acting) != 1:
                raise MultiAgentEnvError(
                    f"apply_action({action}) at a simultaneous node: {self._names(self.acting)} act at once; "
                    f"apply_actions takes one action per player ({len(self.spec.agents)})"
                )
            player = self.acting[0]
            self._check_action(player, action)
            self._step({self.spec.agents[player]: self.spec.starts[player] + action}, {player: action})
        self.replay.append(int(action))  # only once applied: clones replay what happened

    def apply_joint(self, actions: Sequence[int]) -> None:
        """A joint action at a simultaneous node (entries of players not acting are ignored)."""
        self._check_not_over(f"apply_actions({list(actions)})")
        if self.env is None:
            raise MultiAgentEnvError(f"apply_actions({list(actions)}) at the chance node: apply_action takes the "
                                     f"chance outcome (the index of one of the game's {len(self.spec.seeds)} seeds)")
        if self.sequential:
            raise MultiAgentEnvError(
                f"apply_actions({list(actions)}) on a game exported as sequential: apply_action takes the action of "
                f"the one player to act ({self._names(self.acting)} now)"
            )
        if len(actions) != len(self.spec.agents):
            raise MultiAgentEnvError(
                f"a joint action has one entry per player ({len(self.spec.agents)}: {list(self.spec.agents)}), received "
                f"{len(actions)}: {list(actions)}"
            )
        did = {player: int(actions[player]) for player in self.acting}
        for player, action in did.items():  # all checked before the env sees any
            self._check_action(player, action)
        self._step({self.spec.agents[p]: self.spec.starts[p] + action for p, action in did.items()}, did)
        self.replay.append([int(a) for a in actions])

    def _check_not_over(self, call: str) -> None:
        if self.done:
            raise MultiAgentEnvError(f"{call} on a terminal state: the game is over")

    def _check_chance_outcome(self, action: int) -> None:
        count = len(self.spec.seeds)
        if not 0 <= action < count:  # a negative index would pick a seed from the end
            raise IllegalActionError("chance", action, range(count),
                                     hint=f"a chance outcome is the index of one of the game's {count} seeds")

    def _check_action(self, player: int, action: int) -> None:
        """Raise unless ``action`` is one of ``player``'s legal actions (the env is not stepped)."""
        size, agent_id = self.spec.sizes[player], self.spec.agents[player]
        if not 0 <= action < size:  # a negative one would reach the env as another action
            raise InvalidActionError(agent_id, f"an OpenSpiel action in 0..{size - 1}", action)
        mask = action_mask_of(self.last_obs[player])
        if mask is not None and not (action < mask.size and mask.flat[action]):  # legal_actions' rule, in O(1)
            raise IllegalActionError(agent_id, action, self.legal_actions(player))

    def _names(self, players: Sequence[int]) -> list[AgentID]:
        return [self.spec.agents[p] for p in players]

    def legal_actions(self, player: int) -> list[int]:
        """The legal actions of ``player`` (none when it does not act now)."""
        if self.done or player not in self.acting:
            return []
        mask = action_mask_of(self.last_obs[player])
        if mask is None:
            return list(range(self.spec.sizes[player]))
        return [int(k) for k in np.flatnonzero(mask)]

    def information_state(self, player: int) -> str:
        """Everything ``player`` observed and did, one event a line."""
        return "\n".join(f"{kind} {_render(value)}" for kind, value in self.record[player])


class _EnvState(pyspiel.State):
    """A position of the exported env (see :class:`_Position`)."""

    def __init__(self, game: _EnvGame, spec: _Spec) -> None:
        super().__init__(game)
        self._position = _Position(spec, game.get_type().dynamics == pyspiel.GameType.Dynamics.SEQUENTIAL)

    def __reduce__(self) -> tuple[Any, ...]:
        # pyspiel's own pickle of a state loads its game by name, which a fresh process has never
        # exported: pickled as its game's export and its history instead, replayed when unpickled.
        return _replayed_state, (cloudpickle.dumps(self._position.spec.export), list(self._position.replay))

    def current_player(self) -> int:
        """TERMINAL, CHANCE (choosing the seed), the one acting player, or SIMULTANEOUS."""
        position = self._position.ready()
        if position.done:
            return pyspiel.PlayerId.TERMINAL
        if position.env is None:
            return pyspiel.PlayerId.CHANCE
        if len(position.acting) == 1:
            return position.acting[0]
        return pyspiel.PlayerId.SIMULTANEOUS

    def _legal_actions(self, player: int) -> list[int]:
        return self._position.ready().legal_actions(player)

    def chance_outcomes(self) -> list[tuple[int, float]]:
        """The seeds, uniformly (at the chance node only, as in OpenSpiel's games)."""
        position = self._position.ready()
        if position.done or position.env is not None:
            raise MultiAgentEnvError(f"chance_outcomes() at a node that is not a chance node (current player "
                                     f"{self.current_player()})")
        count = len(position.spec.seeds)
        return [(k, 1.0 / count) for k in range(count)]

    def _apply_action(self, action: int) -> None:
        self._position.ready().apply(action)

    def _apply_actions(self, actions: Sequence[int]) -> None:
        self._position.ready().apply_joint(actions)

    def _action_to_string(self, player: int, action: int) -> str:
        spec = self._position.spec
        if player == pyspiel.PlayerId.CHANCE:
            self._position._check_chance_outcome(action)
            return f"seed={spec.seeds[action]}"
        if not 0 <= player < len(spec.agents):  # the current player, at a simultaneous or terminal node
            why = {pyspiel.PlayerId.SIMULTANEOUS: " (simultaneous: this game names no joint actions, so name each "
                                                  "player's action with that player's index)",
                   pyspiel.PlayerId.TERMINAL: " (terminal: a finished game has no player to act)"}.get(player, "")
            raise MultiAgentEnvError(
                f"action_to_string(player={player}, action={action}): the player must be an agent's index "
                f"(0-{len(spec.agents) - 1}: {list(spec.agents)}) or chance (-1), not {player}{why}"
            )
        if not 0 <= action < spec.sizes[player]:
            raise MultiAgentEnvError(f"action_to_string(player={player}, action={action}): agent "
                                     f"{spec.agents[player]!r} has actions 0-{spec.sizes[player] - 1}")
        return f"{spec.agents[player]}:{spec.starts[player] + action}"

    def is_terminal(self) -> bool:
        """Whether the env ended the episode (or ``max_game_length`` ran out)."""
        return self._position.ready().done

    def is_truncated(self) -> bool:
        """Whether the episode ended by truncation: the env's ``"__all__"`` truncation (without
        termination), or ``max_game_length`` ran out. OpenSpiel has no such flag;
        :class:`~bridges.openspiel.OpenSpielEnv` reads this one, so truncation survives a round trip."""
        position = self._position.ready()
        return position.done and position.truncated

    def rewards(self) -> list[float]:
        """The last transition's rewards (with terminal rewards: the sums at the end, else zeros)."""
        position = self._position.ready()
        if position.spec.terminal_rewards:
            return list(position.returns) if position.done else [0.0] * len(position.returns)
        return list(position.rewards)

    def returns(self) -> list[float]:
        """Each player's summed rewards so far (with terminal rewards: zeros until the end, as
        OpenSpiel requires)."""
        position = self._position.ready()
        if position.spec.terminal_rewards and not position.done:
            return [0.0] * len(position.returns)
        return list(position.returns)

    def paid_returns(self) -> list[float]:
        """What the env has paid each player so far, in both reward models: what a game cut short
        (by :class:`~bridges.openspiel.OpenSpielEnv`'s ``max_steps``) owes its players, which a
        terminal-reward game's ``returns()`` keeps at zero."""
        return list(self._position.ready().returns)

    def __str__(self) -> str:
        return f"{self.get_game().get_type().short_name} after {self._position.replay}"


def _render(value: Any) -> str:
    """``value`` as text that tells every two different values apart: arrays in full (no ``...``),
    each float as its shortest exact form, also inside dicts, tuples and lists. A numpy scalar
    reads as the Python scalar it converts to (``2``, not ``np.int64(2)``), so that an env giving
    ``np.int64(2)`` at one step and ``2`` at another does not split an information set."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_render(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (tuple, list)):
        items = ", ".join(_render(item) for item in value)
        return f"({items})" if isinstance(value, tuple) else f"[{items}]"
    if isinstance(value, np.ndarray):
        return np.array2string(
            value, separator=",", threshold=sys.maxsize, max_line_width=sys.maxsize, floatmode="unique"
        ).replace("\n", "")
    if isinstance(value, np.generic):
        return repr(value.item())
    return repr(value)


class _EnvObserver:
    """The PyObserver of exported games (see ``open_spiel/python/observation.py``)."""

    def __init__(self, spec: _Spec, perfect_recall: bool) -> None:
        self._spec = spec
        self._perfect_recall = perfect_recall
        if spec.tensor_shape is not None and not perfect_recall:
            self.tensor: np.ndarray | None = np.zeros(int(np.prod(spec.tensor_shape)), np.float32)
            self.dict = {OBS_KEY: self.tensor.reshape(spec.tensor_shape)}
        else:
            self.tensor, self.dict = None, {}

    def set_from(self, state: _EnvState, player: int) -> None:
        """Fill ``self.tensor`` with ``player``'s last observation (zeros before the first)."""
        if self.tensor is None:
            return
        observation = state._position.ready().last_obs[player]
        if observation is None:
            self.tensor.fill(0.0)
            return
        if isinstance(observation, dict) and OBS_KEY in observation:
            observation = observation[OBS_KEY]
        self.tensor[:] = np.asarray(observation, np.float32).ravel()

    def string_from(self, state: _EnvState, player: int) -> str:
        """The last observation as text, or the whole record with perfect recall."""
        position = state._position.ready()
        if self._perfect_recall:
            return position.information_state(player)
        observation = position.last_obs[player]
        return "" if observation is None else _render(observation)


__all__ = ["to_openspiel"]

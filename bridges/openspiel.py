"""OpenSpiel games as MultiAgentEnvs: :class:`OpenSpielEnv` (the other direction is
:func:`to_openspiel`, in :mod:`bridges.openspiel_game`).

Interaction model. An OpenSpiel state is a decision node of one player (turn-based), a
simultaneous node (several players choose at once), a chance node, or terminal. The env asks
exactly the players who decide now: the current player at a turn, every player with legal actions
at a simultaneous node. Chance nodes never reach the caller: the env samples them from
``state.chance_outcomes()`` with its own generator, seeded by ``reset(seed=...)``.

Example:
    >>> from bridges.openspiel import OpenSpielEnv
    >>> env = OpenSpielEnv("tic_tac_toe")
    >>> obs, infos = env.reset(seed=0)
    >>> list(obs), obs["player_0"]["observation"].shape, obs["player_0"]["action_mask"].tolist()
    (['player_0'], (3, 3, 3), [1, 1, 1, 1, 1, 1, 1, 1, 1])
    >>> obs, rewards, terminateds, truncateds, infos = env.step({"player_0": 4})
    >>> list(obs), rewards, terminateds
    (['player_1'], {'player_0': 0.0, 'player_1': 0.0}, {'__all__': False})
    >>> env.state.history()
    [4]
"""

from __future__ import annotations

import functools
import importlib
import logging
import string
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from bridges._openspiel_loading import (
    ObservationType,
    PythonGame,
    check_reloadable,
    choose_observation_type,
    copied_without_init,
    load_game,
    player_id,
    pyspiel_module,
    reloaded_with_seed,
    reseeded,
)
from marl_core.env import ALL, AgentID, MultiAgentDict, MultiAgentEnv, ObsDict, StepResult
from marl_core.errors import (
    IllegalActionError,
    InvalidActionError,
    MissingActionError,
    ResetNeededError,
    UnsupportedEnvError,
    a_type,
)
from marl_core.spaces import MASK_KEY, OBS_KEY, check_acting, masked_space

if TYPE_CHECKING:
    import pyspiel

logger = logging.getLogger(__name__)

#: Characters of the ``Text`` observation space: printable ASCII, escape (colour codes), box
#: drawing, card suits and the Unicode playing cards that OpenSpiel's string renderings use.
TEXT_CHARSET = frozenset(
    string.printable
    + "\x1b"
    + "".join(map(chr, range(0x2500, 0x2580)))
    + "".join(map(chr, range(0x2660, 0x2668)))
    + "".join(map(chr, range(0x1F0A0, 0x1F100)))
)
TEXT_MAX_LENGTH = 1 << 16

_MISSING = object()
# current_player() tells the kind of node in one call: a player (>= 0) at a turn, else one of
# pyspiel.PlayerId.CHANCE, SIMULTANEOUS or TERMINAL (OpenSpiel's API asks every game to return
# TERMINAL exactly at terminal states; any other negative id is checked with is_terminal()).
_CHANCE = -1
_TERMINAL = -4
_NO_LIMIT = 1 << 62  # the step limit without max_steps
_MASK_CACHE_SIZE = 4096  # masks kept per env (shared out among its players), keyed by the legal actions
_GAME_OVER, _OUT_OF_STEPS = 0, 1  # how an episode ends: indexes of OpenSpielEnv._ends
_OPENING_DEPTH = 2  # chance nodes at the start of a game that reset() samples from a memo
_OPENINGS_SIZE = 1024  # nodes kept in that memo, per env
_NAMED_LEGAL_ACTIONS = 10  # an illegal-action error names the legal actions when at most this many

# A player about to act with given legal actions: (player, agent id, set of the legal actions, mask
# of them). Kept per (player, legal actions), so a node the env has seen costs one lookup. A plain
# tuple: unpacking and indexing one is cheaper than a NamedTuple's. The mask is int8, 1 for each
# legal action; only the env reads it (users get copies).
_Turn = tuple[int, AgentID, frozenset[int], np.ndarray | None]
_NO_TURN: _Turn = (-1, "", frozenset(), None)  # nobody acts alone (a simultaneous node, or no episode)


def _sample(outcomes: list[tuple[int, float]], draw: float) -> int:
    """The outcome that the uniform ``draw`` in [0, 1) selects from ``state.chance_outcomes()``."""
    for outcome, probability in outcomes:
        draw -= probability
        if draw < 0.0:
            return outcome
    return outcomes[-1][0]  # the probabilities summed to a little less than the draw


def tensor_observer(game: Any, kind: str) -> tuple[tuple[int, ...], Any]:
    """The shape of ``game``'s ``kind`` tensor (``"observation_tensor"`` or
    ``"information_state_tensor"``) and the observer of
    ``open_spiel.python.observation.make_observation`` that fills a tensor of that size, or None
    when pyspiel has no such observer (the state's tensor methods are then the way to read it)."""
    from open_spiel.python.observation import make_observation

    perfect_recall = kind == "information_state_tensor"
    shape = tuple(game.information_state_tensor_shape() if perfect_recall else game.observation_tensor_shape())
    iig = pyspiel_module().IIGObservationType(perfect_recall=True) if perfect_recall else None
    try:
        observer = make_observation(game, iig)
    except pyspiel_module().SpielError:
        return shape, None
    if observer is None or observer.tensor is None or observer.tensor.size != int(np.prod(shape)):
        return shape, None
    return shape, observer


def fills_its_tensor(observer: Any) -> bool:
    """Whether a Python game's observer, after a ``set_from``, holds its observation in its
    ``tensor``: pyspiel reads its ``dict``, whose arrays some observers replace instead of filling."""
    return all(np.shares_memory(np.asarray(value), observer.tensor) for value in observer.dict.values())


class OpenSpielEnv(MultiAgentEnv):
    """An OpenSpiel game as a MultiAgentEnv, with action masks, seeded chance and final observations.

    Args:
        game: a ``pyspiel.Game``, or a game name with optional parameters such as
            ``"connect_four"`` or ``"goofspiel(num_cards=4)"``.
        observation_type: what the ``"observation"`` entry holds. ``"auto"`` (the default) takes the
            first one the game provides, in this order: the observation tensor, the
            information-state tensor, the observation string, the information-state string. Tensors
            are float32 ``Box`` values shaped like the game's tensor (connect_four: ``(3, 6, 7)``);
            strings live in a gymnasium ``Text`` space. Pass ``"information_state_tensor"`` for
            perfect-recall inputs in imperfect-information games.
        max_steps: truncate the episode after this many ``step()`` calls (None: never).
        render_mode: ``"ansi"`` or None; ``render()`` returns the state's text either way.

    Attributes:
        game: the live ``pyspiel.Game``.
        state: the live ``pyspiel.State`` (None before the first ``reset``). Read it freely; apply
            actions through ``step()`` only: the env checks each action against the legal actions
            it read when it handed out the mask, so on a state changed behind its back an action
            that is no longer legal is caught only where the game itself checks it.
        observation_type: the observation type in use (never ``"auto"``).
        max_steps: the truncation limit (None: never); settable between steps, checked like the
            argument.

    Semantics:
        - **Agents**: ``"player_0"`` ... ``"player_{n-1}"``; all of them are alive until the end.
        - **Who acts**: at a turn, only the current player is in the obs dict; at a simultaneous
          node, every player with legal actions.
        - **Masks**: every observation is ``{"observation": ..., "action_mask": int8}`` with one mask
          entry per distinct action, 1 exactly for ``state.legal_actions(player)`` (all zeros in
          final observations). An illegal action raises :class:`~marl_core.errors.IllegalActionError`
          listing the legal ones; it is never replaced, and the state is unchanged.
        - **Chance**: resolved inside the env by sampling ``state.chance_outcomes()`` with
          uniforms drawn from ``self.np_random`` (in blocks of 256); numpy's global RNG is never
          used. Games that sample chance inside pyspiel from a seed parameter (``rng_seed``;
          ``add_noise``'s ``seed``), or wrap one that does, are reloaded with that parameter
          derived from the seed at every seeded reset. So ``reset(seed=s)`` and the same actions
          give the same ``state.history()`` and the same rewards. ``reset``
          reads the nodes that open a game (its first two chance nodes, its first decision)
          from pyspiel once per distinct opening and then from a memo: the same draws, the same
          outcomes, the same observations (copied out, like every array the env hands out).
        - **Rewards**: every step, a reward for every player: what the step added to
          ``state.returns()``. That is ``state.rewards()`` of the player's transition plus those of
          the chance transitions after it, read in the one way that is exact for every game (games
          differ in what ``rewards()`` reports after a chance node: 2048 repeats the move's
          reward). Terminal-reward games pay only at the end. Chance transitions resolved by
          ``reset`` pay with the first step. Each player's episode sum equals ``state.returns()``
          (for a terminal-reward game exported by :func:`~bridges.openspiel_game.to_openspiel` that
          ``max_steps`` cuts short, ``state.paid_returns()``: what its env paid).
        - **"__all__"**: at the terminal state every player gets a final observation,
          ``terminateds`` is True for each of them and for ``"__all__"``. When ``max_steps`` runs
          out first, the same happens through ``truncateds``, and likewise at the terminal state
          of a game exported by :func:`~bridges.openspiel_game.to_openspiel` whose env was
          truncated (``state.is_truncated()``). Otherwise both hold only ``"__all__": False``.
        - **Simultaneous moves**: every acting player must send an action in the same
          ``step()``; players without legal actions at such a node are sent
          ``pyspiel.INVALID_ACTION``.
        - **Refused**: mean-field games, games that have no legal-action list (action structs
          only), and games drawing chance inside pyspiel that pyspiel cannot load again with
          another seed (``restricted_nash_response(game=negotiation())``) raise
          :class:`~marl_core.errors.UnsupportedEnvError` at construction.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"]}

    def __init__(
        self,
        game: str | pyspiel.Game,
        *,
        observation_type: ObservationType = "auto",
        max_steps: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        import pyspiel

        self.game = load_game(game)
        game_type = self.game.get_type()
        name = game_type.short_name
        if game_type.dynamics == pyspiel.GameType.Dynamics.MEAN_FIELD:
            raise UnsupportedEnvError(
                f"OpenSpiel game {name!r} is a mean-field game: its players are a distribution over a "
                "population, updated with distribution nodes, which have no multi-agent equivalent"
            )
        if max_steps is not None and (type(max_steps) is not int or max_steps < 1):
            raise UnsupportedEnvError(f"max_steps must be a positive int or None, received {max_steps!r}")
        if reseeded(self.game):
            check_reloadable(self.game)  # refused now, rather than at the first seeded reset
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise UnsupportedEnvError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, "
                f"received {render_mode!r}"
            )
        self.observation_type: ObservationType = choose_observation_type(self.game, observation_type)
        self._check_legal_actions(name)
        # Instance attributes are kept under 30 on purpose: CPython 3.11 keeps up to 30 in a compact
        # per-instance layout; past that every attribute and method lookup is slower (~2% of a step).
        self._limit = _NO_LIMIT
        self.max_steps = max_steps
        self.render_mode = render_mode
        self._num_actions = self.game.num_distinct_actions()
        self._ids: tuple[AgentID, ...] = tuple(player_id(p) for p in range(self.game.num_players()))
        self._players = tuple(enumerate(self._ids))  # (player, agent id) pairs, looped over at the end
        observation_space = self._setup_observations()
        action_space = spaces.Discrete(self._num_actions)
        self.possible_agents = list(self._ids)
        self.agents = []
        self.observation_spaces = dict.fromkeys(self._ids, observation_space)
        self.action_spaces = dict.fromkeys(self._ids, action_space)
        super().__init__()
        self.state: pyspiel.State | None = None
        # Who acts: at a turn, _now is the player's _Turn; otherwise _now is _NO_TURN and _masks
        # holds the masks of the players acting at a simultaneous node (or nobody, between episodes).
        self._now = _NO_TURN
        self._masks: dict[int, np.ndarray] = {}
        self._turns: tuple[dict[tuple[int, ...], _Turn], ...] = tuple({} for _ in self._ids)
        self._uniforms: list[float] = []
        self._ends = (  # end flags, copied out: all True, all False
            {**dict.fromkeys(self._ids, True), ALL: True},
            {**dict.fromkeys(self._ids, False), ALL: False},
        )
        terminal_rewards = game_type.reward_model == pyspiel.GameType.RewardModel.TERMINAL
        # The rewards of every step but the last in terminal-reward games (copied out); None otherwise.
        self._zero_rewards = dict.fromkeys(self._ids, 0.0) if terminal_rewards else None
        self._returns: list[float] | None = None  # state.returns() when last read (None: not yet)
        # The opening of the game, memoized by reset() (see _open); None for games that sample
        # chance inside pyspiel, whose initial state need not be the same every time.
        sampled = game_type.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC
        self._openings: dict[tuple[int, ...], tuple[Any, ...]] | None = None if sampled else {}
        self._steps = 0

    # Construction helpers ----------------------------------------------------------------------

    def _check_legal_actions(self, name: str) -> None:
        """Refuse games whose decision nodes have no legal-action list."""
        if self.game.num_distinct_actions() < 1:
            raise UnsupportedEnvError(
                f"OpenSpiel game {name!r} has no distinct actions (it uses action structs only), so "
                "there is no legal-action list to mask"
            )
        state = self.game.new_initial_state()
        try:
            for _ in range(10_000):
                if not state.is_chance_node():
                    break
                state.apply_action(state.chance_outcomes()[0][0])
            if not state.is_terminal():
                players = [state.current_player()] if state.current_player() >= 0 else range(self.game.num_players())
                for player in players:
                    state.legal_actions(player)
        except pyspiel_module().SpielError as error:
            raise UnsupportedEnvError(
                f"OpenSpiel game {name!r} has no legal-action list, so actions cannot be masked or "
                f"checked: {error}"
            ) from error

    def _setup_observations(self) -> spaces.Dict:
        """Set up the observer (when pyspiel has one for the type in use); return the observation space."""
        kind = self.observation_type
        self._view = self._set_from = self._python_view = None
        if kind.endswith("_string"):
            inner: spaces.Space = spaces.Text(TEXT_MAX_LENGTH, min_length=0, charset=TEXT_CHARSET)
        else:
            shape, observer = tensor_observer(self.game, kind)
            if observer is not None:
                self._view = observer.tensor.reshape(shape)  # shares memory: set_from fills it (and keeps it)
                inner_observation = getattr(observer, "_observation", None)  # the C++ one: a frame less
                if inner_observation is not None:
                    self._set_from = inner_observation.set_from
                else:
                    self._set_from = functools.partial(self._first_python_set_from, observer)
                    # A Python observer may write only what it sets (a row per time step), so its
                    # tensor is cleared at each reset; C++ observers write all of theirs.
                    self._python_view = self._view
            else:
                logger.debug("no observer for %s; reading %s from the state", self.game, kind)
            self._shape = shape
            inner = spaces.Box(-np.inf, np.inf, shape, np.float32)
        return masked_space(inner, self.game.num_distinct_actions())

    # Observations ------------------------------------------------------------------------------

    def _first_python_set_from(self, observer: Any, state: Any, player: int) -> None:
        """The first ``set_from`` of a Python game's observer: pyspiel reads its ``dict``, and this
        bridge reads its ``tensor``, so keep that shortcut only if the dict's arrays are views of the
        tensor (some observers replace them); otherwise read pyspiel's tensors from the state."""
        observer.set_from(state, player)
        if fills_its_tensor(observer):
            self._set_from = observer.set_from
        else:
            logger.debug("the observer of %s does not fill its tensor; reading %s from the state", self.game,
                         self.observation_type)
            self._set_from = None
            self._view[...] = self._tensor_of(state, player)


    def _observe(self, player: int) -> Any:
        set_from = self._set_from
        if set_from is not None:
            set_from(self.state, player)
            return self._view.copy()
        if self.observation_type.endswith("_tensor"):
            return self._tensor_of(self.state, player)
        return getattr(self.state, self.observation_type)(player)

    def _tensor_of(self, state: Any, player: int) -> np.ndarray:
        """``player``'s observation tensor (of the type in use) read from ``state`` through pyspiel."""
        return np.asarray(getattr(state, self.observation_type)(player), np.float32).reshape(self._shape)

    def _turn_of(self, player: int, legal: tuple[int, ...]) -> _Turn:
        """The :class:`_Turn` of ``player`` with the legal actions ``legal``, cached per player."""
        turns = self._turns[player]
        turn = turns.get(legal)
        if turn is None:
            mask = np.zeros(self._num_actions, np.int8)
            mask[list(legal)] = 1
            turn = (player, self._ids[player], frozenset(legal), mask)
            if len(turns) * len(self._ids) < _MASK_CACHE_SIZE:
                turns[legal] = turn
        return turn

    def _decision_obs(self) -> ObsDict:
        """Observations of the players who decide now (the state is a decision node)."""
        state = self.state
        current = state.current_player()
        if current >= 0:
            return self._turn_obs(state, current)
        self._now = _NO_TURN
        masks = self._masks = {}  # the acting players' masks, in player order
        obs = {}
        for player, agent_id in self._players:
            legal = tuple(state.legal_actions(player))
            if legal:
                mask = masks[player] = self._turn_of(player, legal)[3]
                obs[agent_id] = {OBS_KEY: self._observe(player), MASK_KEY: mask.copy()}
        return obs

    def _turn_obs(self, state: pyspiel.State, player: int) -> ObsDict:
        """The observation of ``player``, the current player, who acts alone now (``step`` inlines
        the same lines). ``legal_actions()`` is the current player's, a little cheaper to ask."""
        legal = tuple(state.legal_actions())
        _, agent_id, _, mask = self._now = self._turns[player].get(legal) or self._turn_of(player, legal)
        set_from = self._set_from
        if set_from is not None:
            set_from(state, player)
            observation = self._view.copy()
        else:
            observation = self._observe(player)
        return {agent_id: {OBS_KEY: observation, MASK_KEY: mask.copy()}}

    def _final_obs(self) -> ObsDict:
        """Every player's observation, with an all-zero mask."""
        size, zeros, set_from = self._num_actions, np.zeros, self._set_from
        obs = {}
        if set_from is not None:
            state, view = self.state, self._view
            for player, agent_id in self._players:
                set_from(state, player)
                obs[agent_id] = {OBS_KEY: view.copy(), MASK_KEY: zeros(size, np.int8)}
        else:
            for player, agent_id in self._players:
                obs[agent_id] = {OBS_KEY: self._observe(player), MASK_KEY: zeros(size, np.int8)}
        return obs

    # Chance --------------------------------------------------------------------------------------

    def _resolve_chance(self) -> int:
        """Sample chance nodes from the current one (a chance node) until a decision or terminal
        node, with draws from ``self.np_random``; return the ``current_player()`` reached."""
        state, uniforms = self.state, self._uniforms
        node = _CHANCE
        while node == _CHANCE:
            outcomes = state.chance_outcomes()
            if not uniforms:  # drawn in blocks: one numpy call per 256 chance events
                uniforms = self._uniforms = self.np_random.random(256).tolist()
            state.apply_action(_sample(outcomes, uniforms.pop()))
            node = state.current_player()
        return node

    def _open(self, state: pyspiel.State) -> tuple[Any, ...]:
        """Play the opening of a game from its initial ``state``: sample its first
        ``_OPENING_DEPTH`` chance nodes as ``_resolve_chance`` does, and return the node reached as
        :meth:`_opening_node` describes it.

        An OpenSpiel state is a function of its history, so the nodes met here depend only on the
        chance actions taken: each is read from pyspiel once and memoized in ``_openings``, keyed by
        those actions (a deal of one card to each of two players, a first roll of the dice, the
        first two tiles of 2048). Games that sample chance inside pyspiel have no memo.
        """
        openings, uniforms = self._openings, self._uniforms
        path: tuple[int, ...] = ()
        while True:
            entry = openings.get(path)
            if entry is None:
                entry = self._opening_node(state, sample=len(path) < _OPENING_DEPTH)
                if len(openings) < _OPENINGS_SIZE:
                    openings[path] = entry
            if entry[0] != _CHANCE or entry[1] is None:
                return entry
            if not uniforms:
                uniforms = self._uniforms = self.np_random.random(256).tolist()
            action = _sample(entry[1], uniforms.pop())
            state.apply_action(action)
            path += (action,)

    def _opening_node(self, state: pyspiel.State, *, sample: bool) -> tuple[Any, ...]:
        """What :meth:`_open` memoizes of ``state``: ``(-1, chance_outcomes())`` at a chance node
        to sample; ``(player, turn, observation)`` at a turn, with the :data:`_Turn` and the
        observation tensor (the env's own array: only copies go out); else ``(current_player(),
        None)``, and ``reset`` carries on from there."""
        node = state.current_player()
        if node == _CHANCE:
            return (node, state.chance_outcomes() if sample else None)
        set_from = self._set_from
        if node >= 0 and set_from is not None:
            turn = self._turn_of(node, tuple(state.legal_actions()))
            set_from(state, node)
            return (node, turn, self._view.copy())
        return (node, None)

    # Episode API -------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsDict, MultiAgentDict]:
        """Start a game; ``seed`` seeds the chance events (and the game's chance seed parameter, if any).

        OpenSpiel games take no reset options (a game's settings are its parameters): ``options``
        are ignored, as Gymnasium and PettingZoo envs ignore options they do not know (PettingZoo's
        ``api_test`` passes some), and the first non-empty ones are logged as a warning.
        """
        if options and not getattr(self, "_options_ignored", False):
            self._options_ignored = True  # set only here: the instance keeps under 30 attributes
            logger.warning(
                "OpenSpielEnv(%r).reset() ignores options %r: an OpenSpiel game takes its settings as "
                "parameters, given with the game: 'name(key=value)'", self.game.get_type().short_name, options
            )
        if seed is not None:  # unseeded resets keep drawing from the generator as it is
            super().reset(seed=seed)
            self._uniforms = []
            if reseeded(self.game):
                self.game = reloaded_with_seed(self.game, int(self.np_random.integers(2**31 - 1)))
        state = self.state = self.game.new_initial_state()
        self._steps = 0
        self._returns = None
        if self._python_view is not None:
            self._python_view.fill(0)
        if self._openings is None:
            node = state.current_player()
        else:
            opening = self._open(state)
            node = opening[0]
            if len(opening) == 3:  # a turn: copy out the memoized observation and mask
                _, turn, observation = opening
                if self._python_view is not None:  # its observer writes only what changes: it starts from here
                    self._python_view[...] = observation
                self.agents = list(self._ids)
                self._now = turn
                return {turn[1]: {OBS_KEY: observation.copy(), MASK_KEY: turn[3].copy()}}, {}
        if node == _CHANCE:
            node = self._resolve_chance()
        if node >= 0:
            self.agents = list(self._ids)
            return self._turn_obs(state, node), {}
        if node == _TERMINAL or state.is_terminal():
            # A MultiAgentEnv pays rewards in step() only: returns of a game over at reset would be lost.
            self.agents, self._masks, self._now = [], {}, _NO_TURN
            raise UnsupportedEnvError(
                f"OpenSpiel game {self.game} ended during reset(), before any player acted (history "
                f"{state.history()}, returns {state.returns()}); a MultiAgentEnv can only pay returns in step()"
            )
        self.agents = list(self._ids)
        return self._decision_obs(), {}

    def step(self, action_dict: Mapping[AgentID, Any]) -> StepResult:
        """Apply the acting players' actions, then resolve chance up to the next decision."""
        state = self.state
        player, agent_id, legal, _ = self._now
        # A turn: the hot path, kept flat (a dict first, the cheapest test, then any other Mapping).
        if player >= 0 and (type(action_dict) is dict or isinstance(action_dict, Mapping)) and len(action_dict) == 1:
            action = action_dict.get(agent_id, _MISSING)
            if type(action) is not int or action not in legal:
                if action is _MISSING:
                    self._check_keys(action_dict)
                action = self._legal(player, action)
            # Checked above against the legal actions read for the mask, as
            # apply_action_with_legality_check would check it, without reading them a second time.
            try:
                state.apply_action(action)
            except pyspiel_module().SpielError as error:  # only if .state was changed behind our back
                raise IllegalActionError(agent_id, action, state.legal_actions(player)) from error
        else:
            if state is None or not self.agents:
                raise ResetNeededError(
                    "OpenSpielEnv.step() called before reset() or after the episode ended; call reset()"
                )
            self._check_keys(action_dict)
            if player >= 0:  # _check_keys found the wrong agents; this is a safeguard
                raise MissingActionError([agent_id], list(action_dict))
            joint = [pyspiel_module().INVALID_ACTION] * len(self._ids)
            for player in self._masks:
                joint[player] = self._legal(player, action_dict[self._ids[player]])
            self._apply_joint(joint)
        node = state.current_player()  # >= 0 at a turn (never at the terminal state), -1 at chance
        if node == _CHANCE:
            node = self._resolve_chance()
        steps = self._steps = self._steps + 1
        zero_rewards = self._zero_rewards
        if node >= 0 and steps < self._limit:  # another turn: _turn_obs, inlined
            key = tuple(state.legal_actions())  # the current player's
            _, agent_id, _, mask = self._now = self._turns[node].get(key) or self._turn_of(node, key)
            set_from = self._set_from
            if set_from is not None:
                set_from(state, node)
                observation = self._view.copy()
            else:
                observation = self._observe(node)
            return (
                {agent_id: {OBS_KEY: observation, MASK_KEY: mask.copy()}},
                zero_rewards.copy() if zero_rewards is not None else self._rewards(),
                {ALL: False},
                {ALL: False},
                {},
            )
        if node == _TERMINAL or (node < 0 and state.is_terminal()):
            return self._end(_GAME_OVER)
        if steps >= self._limit:
            return self._end(_OUT_OF_STEPS)
        rewards = zero_rewards.copy() if zero_rewards is not None else self._rewards()
        return self._decision_obs(), rewards, {ALL: False}, {ALL: False}, {}

    @property
    def max_steps(self) -> int | None:
        """Truncate the episode after this many ``step()`` calls (None: never)."""
        return None if self._limit == _NO_LIMIT else self._limit

    @max_steps.setter
    def max_steps(self, value: int | None) -> None:
        if value is not None and (type(value) is not int or value < 1):
            raise UnsupportedEnvError(f"max_steps must be a positive int or None, received {value!r}")
        self._limit = _NO_LIMIT if value is None else value

    def _rewards(self, returns: list[float] | None = None) -> dict[AgentID, float]:
        """What ``state.returns()`` (or ``returns``) gained since the last time it was read."""
        if returns is None:
            returns = self.state.returns()
        before = self._returns
        rewards = {}  # filled in a loop: cheaper than dict(zip(...)) for a handful of players
        if before is None:  # nothing read yet (terminal-reward games: always)
            for player, agent_id in self._players:
                rewards[agent_id] = returns[player]
        else:
            for player, agent_id in self._players:
                rewards[agent_id] = returns[player] - before[player]
        self._returns = returns
        return rewards

    def _end(self, how: int) -> StepResult:
        """The last step's result: rewards, every player's final observation, the end flags
        (``how``: ``_GAME_OVER`` or ``_OUT_OF_STEPS``, when ``max_steps`` ran out)."""
        # A game exported by to_openspiel knows what its env paid (a terminal-reward game's
        # returns() stay zero until its end) and whether its env was truncated.
        paid = getattr(self.state, "paid_returns", None)
        rewards = self._rewards(None if paid is None else paid())
        obs = self._final_obs()
        if how == _GAME_OVER:
            truncated = getattr(self.state, "is_truncated", None)
            if truncated is not None and truncated():
                how = _OUT_OF_STEPS
        self.agents = []
        self._masks = {}
        self._now = _NO_TURN
        ends = self._ends
        return obs, rewards, ends[how].copy(), ends[1 - how].copy(), {}

    # Actions -----------------------------------------------------------------------------------

    def _check_keys(self, action_dict: Mapping[AgentID, Any]) -> None:
        turn = self._now[0]
        check_acting(action_dict, [self._ids[p] for p in ((turn,) if turn >= 0 else self._masks)])

    def _legal(self, player: int, action: Any) -> int:
        """``action`` as an int, after checking its type and that it is legal for ``player``."""
        if type(action) is not int:
            expected = f"an integer action in {spaces.Discrete(self._num_actions)}"
            if isinstance(action, (bool, np.bool_)) or not isinstance(action, (int, np.integer, np.ndarray)):
                raise InvalidActionError(self._ids[player], expected, action, a_type(action))
            if isinstance(action, np.ndarray) and (action.shape != () or not np.issubdtype(action.dtype, np.integer)):
                raise InvalidActionError(
                    self._ids[player], expected, action, f"an array of shape {action.shape} and dtype {action.dtype}"
                )
            action = int(action)
        turn = self._now
        mask = turn[3] if player == turn[0] else self._masks[player]
        if not 0 <= action < self._num_actions or not mask[action]:
            self._raise_illegal(player, action)
        return action

    def _raise_illegal(self, player: int, action: int) -> None:
        """Raise for an illegal ``action``, naming the legal ones (by name too, when few).

        Only legal actions are described: some games cannot describe an illegal one, and chess
        even crashes the interpreter trying.
        """
        legal = self.state.legal_actions(player)
        hint = f"{self.game.get_type().short_name} has {self._num_actions} distinct actions"
        if 0 <= action < self._num_actions and 0 < len(legal) <= _NAMED_LEGAL_ACTIONS:
            hint = "by name: " + ", ".join(f"{a}={self.state.action_to_string(player, a)!r}" for a in legal)
        elif 0 <= action < self._num_actions:
            hint = ""
        raise IllegalActionError(self._ids[player], action, legal, hint=hint)

    def _apply_joint(self, joint: list[int]) -> None:
        try:
            self.state.apply_actions_with_legality_checks(joint)
        except pyspiel_module().SpielError as error:
            raise IllegalActionError(
                "every acting player", joint, [self.state.legal_actions(p) for p in self._masks]
            ) from error

    # Copying and pickling (pyspiel observers cannot be copied; they are rebuilt) ----------------

    def __getstate__(self) -> dict[str, Any]:
        if self.game.get_type().chance_mode == pyspiel_module().GameType.ChanceMode.SAMPLED_STOCHASTIC:
            try:  # pickling such a game saves its generator, which some games (misere's) cannot
                self.game.serialize()
            except pyspiel_module().SpielError as error:
                raise UnsupportedEnvError(
                    f"OpenSpiel game {self.game} cannot be copied or pickled: pyspiel cannot save the state "
                    f"of its random generator ({error}); build a new env where a copy is needed"
                ) from None
        state = dict(self.__dict__)
        # The observer is rebuilt, its tensor's values carried over: some Python games' observers
        # write only what changed (python_dynamic_routing writes one row per time step).
        state["_set_from"] = state["_python_view"] = None
        state["_view"] = None if self._view is None else self._view.copy()
        if copied_without_init(self.game):
            # pyspiel copies such a game without the attributes its __init__ sets
            # (python_liars_poker's hand_length), so it travels by name, its state serialized.
            state["game"] = PythonGame(type(self.game).__module__, str(self.game))
            state["state"] = None if self.state is None else self.state.serialize()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        game = state["game"]
        if isinstance(game, PythonGame):
            importlib.import_module(game.module)  # registers the game, as importing it did here
            state = {**state, "game": load_game(game.name)}
            if state["state"] is not None:
                state["state"] = state["game"].deserialize_state(state["state"])
        for name, value in state.items():  # setattr, not __dict__.update: keeps the compact layout
            setattr(self, name, value)
        values = self._view
        self._setup_observations()
        if values is not None and self._view is not None and self._view.shape == values.shape:
            self._view[...] = values

    # Rendering ---------------------------------------------------------------------------------

    def render(self) -> str | None:
        """The state as text (OpenSpiel's ``str(state)``), or None before the first reset."""
        return None if self.state is None else str(self.state)

    def __str__(self) -> str:
        return f"<OpenSpielEnv<{self.game}>>"


# The other direction (MultiAgentEnv -> pyspiel.Game) lives in its own module; it is importable
# from here too, where DESIGN.md's layout puts it.
from bridges.openspiel_game import to_openspiel  # noqa: E402, F401

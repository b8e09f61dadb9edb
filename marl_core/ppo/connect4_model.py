"""The networks of the Connect-4 preset: the side-to-move board, tactical planes, mirror averaging.

:func:`connect4_module` is the module factory named in ``"main"``'s PolicySpec. Everything here is
a pure function of the observation (OpenSpiel's ``(3, 6, 7)`` planes x, o, empty; row 0 is the
bottom), so a checkpoint rebuilds the same network from its config alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from marl_core.errors import ConfigError, SpaceError
from marl_core.ppo.config import _MODEL_RULES, TRUE_OR_FALSE, _check_fields, _positive_ints
from marl_core.ppo.model import ActorCritic

FEATURES = ("board", "tactical")
"""Values of ``model_config["features"]``: the three board planes, or those and :func:`tactical_planes`."""

BOARD_SHAPE = (3, 6, 7)
"""The observations the networks read: OpenSpiel's connect_four planes x, o, empty over 6 rows, 7 columns."""

NETWORKS = ("mlp", "cnn")
"""Values of ``model_config["network"]`` (:func:`connect4_module`)."""

#: The keys :func:`connect4_module` reads -> (what each must be, the test of a value).
_CONNECT4_RULES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "network": (f"one of {list(NETWORKS)}", lambda v: v in NETWORKS),
    "features": (f"one of {list(FEATURES)}", lambda v: v in FEATURES),
    "mirror": TRUE_OR_FALSE,
    "conv_channels": ("a list of channel counts (integers of at least 1)", _positive_ints),
    "hiddens": _MODEL_RULES["hiddens"],
    "activation": _MODEL_RULES["activation"],
}


def canonical_board(board: torch.Tensor) -> torch.Tensor:
    """Swap the first two planes (``x``, ``o``) of a batch of boards where ``o`` is to move.

    OpenSpiel's Connect-4 observation is absolute (planes: x, o, empty) and the same for both
    players; after the swap the planes read "mine, theirs, empty" whoever moves, so one network
    plays both seats without having to infer the side to move from piece counts.
    """
    crosses, noughts = board[:, 0], board[:, 1]
    o_to_move = crosses.sum(dim=(1, 2)) > noughts.sum(dim=(1, 2))
    swapped = torch.stack([noughts, crosses, *board[:, 2:].unbind(1)], dim=1)
    return torch.where(o_to_move[:, None, None, None], swapped, board)


def mirror_averaged(net: nn.Module, board: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``net``'s logits and values averaged over ``board`` and its left-right mirror image.

    Connect-4 is symmetric under mirroring the columns: the averaged network gives a mirrored
    board the mirrored policy and the same value by construction, so every training position
    teaches both orientations (one forward pass over a batch twice the size).
    """
    count = board.shape[0]
    logits, values = net(torch.cat([board, board.flip(-1)]))
    return (logits[:count] + logits[count:].flip(-1)) / 2.0, (values[:count] + values[count:]) / 2.0


class SideToMoveActorCritic(nn.Module):
    """The trainer's default actor-critic, fed the side-to-move view of the board.

    ``model_config["features"]``: ``"board"`` (the three planes) or ``"tactical"``
    (:func:`tactical_planes`); ``model_config["mirror"]``: average over the board and its mirror
    image (:func:`mirror_averaged`).
    """

    def __init__(self, observation_space: Any, action_space: Any, model_config: dict[str, Any]) -> None:
        super().__init__()
        self.features = _features(model_config)
        self.inner = ActorCritic(_input_space(observation_space, self.features), action_space, model_config)
        self.mirror = bool(model_config.get("mirror", False))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        board = self.features(canonical_board(obs.float()))
        return mirror_averaged(self.inner, board) if self.mirror else self.inner(board)


class Connect4CNN(nn.Module):
    """A small convolutional actor-critic on the side-to-move board, with a shared trunk.

    ``model_config["conv_channels"]`` 3x3 same-padding convolutions (ReLU) over the 6x7 board,
    then one ``hiddens[0]``-unit layer shared by the policy head (7 logits) and the value head;
    ``model_config["features"]`` and ``["mirror"]`` as in :class:`SideToMoveActorCritic`.
    """

    def __init__(self, observation_space: Any, action_space: Any, model_config: dict[str, Any]) -> None:
        super().__init__()
        self.features = _features(model_config)
        planes, height, width = _input_space(observation_space, self.features).shape
        layers: list[nn.Module] = []
        channels = planes
        for out_channels in model_config.get("conv_channels", (32, 32)):
            layers += [nn.Conv2d(channels, int(out_channels), 3, padding=1), nn.ReLU()]
            channels = int(out_channels)
        hidden = int(model_config["hiddens"][0])
        self.trunk = nn.Sequential(*layers, nn.Flatten(), nn.Linear(channels * height * width, hidden), nn.ReLU())
        self.pi_head = nn.Linear(hidden, int(action_space.n))
        self.vf_head = nn.Linear(hidden, 1)
        nn.init.orthogonal_(self.pi_head.weight, 0.01)
        nn.init.zeros_(self.pi_head.bias)
        self.mirror = bool(model_config.get("mirror", False))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        board = self.features(canonical_board(obs.float()))
        return mirror_averaged(self._heads, board) if self.mirror else self._heads(board)

    def _heads(self, board: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.trunk(board)
        return self.pi_head(hidden), self.vf_head(hidden).squeeze(-1)


def connect4_module(observation_space: Any, action_space: Any, model_config: dict[str, Any]) -> nn.Module:
    """Module factory for ``PolicySpec(model={"module": connect4_module})``.

    ``model_config["network"]``: ``"mlp"`` (the trainer's default actor-critic on the
    side-to-move board) or ``"cnn"`` (:class:`Connect4CNN`). Importable by name, so checkpoints
    rebuild it. A key it reads with a value it cannot take is a :class:`ConfigError` naming it.
    """
    _check_fields(model_config, "connect4_module: model ", _CONNECT4_RULES)
    if not (isinstance(observation_space, spaces.Box) and observation_space.shape == BOARD_SHAPE):
        raise SpaceError(f"connect4_module reads Connect-4 boards (OpenSpiel's connect_four observations, a Box of "
                         f"shape {BOARD_SHAPE}), received {observation_space}")
    if model_config.get("network", "mlp") == "cnn":
        if not model_config.get("hiddens"):
            raise ConfigError("connect4_module: model hiddens must hold the size of the CNN's hidden layer "
                              f"for network 'cnn', received {model_config.get('hiddens')!r}")
        return Connect4CNN(observation_space, action_space, model_config)
    return SideToMoveActorCritic(observation_space, action_space, model_config)


connect4_module.model_keys = frozenset(_CONNECT4_RULES)  # type: ignore[attr-defined]  (the config refuses others)


@functools.cache
def _lines(height: int, width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Every line of four cells on the board: ``(L, 4)`` flat cell indices and the ``(L, H * W)``
    0/1 matrix of which cells each line holds (69 lines on a 6x7 board), on ``device``."""
    lines = []
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):  # horizontal, vertical, both diagonals
        for row in range(height):
            for column in range(width):
                cells = [(row + k * dr, column + k * dc) for k in range(4)]
                if all(0 <= r < height and 0 <= c < width for r, c in cells):
                    lines.append([r * width + c for r, c in cells])
    index = torch.tensor(lines, device=device)
    holds = torch.zeros(len(lines), height * width, device=device).scatter_(1, index, 1.0)
    return index, holds


def winning_cells(pieces: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    """Empty cells where one more of ``pieces`` would complete four in a line (``(..., H, W)`` of 0/1).

    A cell qualifies when some line of four through it holds three of ``pieces`` and it is that
    line's one empty cell, whether or not a piece can be dropped there yet. A handful of batched
    tensor operations over a precomputed table of lines, whatever the batch size.

    Example:
        >>> pieces, empty = torch.zeros(1, 6, 7), torch.ones(1, 6, 7)
        >>> pieces[0, 0, :3] = 1.0; empty[0, 0, :3] = 0.0     # three in the bottom row
        >>> winning_cells(pieces, empty)[0, 0].tolist()
        [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    """
    height, width = pieces.shape[-2:]
    index, holds = _lines(height, width, pieces.device)
    flat_pieces, flat_empty = pieces.flatten(-2), empty.flatten(-2)
    if flat_empty.dim() < flat_pieces.dim():  # several piece planes against one empty plane
        flat_empty = flat_empty.unsqueeze(-2)
    open_lines = (flat_pieces[..., index].sum(-1) == 3) & (flat_empty[..., index].sum(-1) == 1)
    found = open_lines.to(holds.dtype) @ holds  # per cell: open lines through it
    return ((found > 0) * flat_empty).to(pieces.dtype).reshape(pieces.shape)


def tactical_planes(board: torch.Tensor) -> torch.Tensor:
    """The side-to-move board ``(B, 3, H, W)`` and six planes of threats, ``(B, 9, H, W)``.

    Planes 3-8: cells where the side to move would complete four, the same for the opponent, the
    cells a piece drops into now (``playable``), ``playable`` cells that win now, ``playable`` cells
    the opponent would win on now (must block), and ``playable`` cells right below an opponent's
    winning cell (playing there hands over the win). A few batched tensor operations; the
    network still learns what to do with them, from self-play.
    """
    empty = board[:, 2]
    filled_below = torch.cat([torch.ones_like(empty[:, :1]), 1.0 - empty[:, :-1]], dim=1)
    playable = empty * filled_below
    wins = winning_cells(board[:, :2], empty)  # (B, 2, H, W): the side to move's, the opponent's
    wins_now = wins * playable[:, None]
    their_win_above = torch.cat([wins[:, 1, 1:], torch.zeros_like(empty[:, :1])], dim=1)
    return torch.cat([board, wins, playable[:, None], wins_now, (playable * their_win_above)[:, None]], dim=1)


def _features(model_config: dict[str, Any]) -> Callable[[torch.Tensor], torch.Tensor]:
    _check_fields({"features": model_config.get("features", "board")}, "model ", _CONNECT4_RULES)
    return tactical_planes if model_config.get("features", "board") == "tactical" else _identity


def _identity(board: torch.Tensor) -> torch.Tensor:
    return board


def _input_space(observation_space: spaces.Box, features: Callable[[torch.Tensor], torch.Tensor]) -> spaces.Box:
    """The Box the network body sees after ``features``."""
    shape = tuple(features(torch.zeros(1, *observation_space.shape)).shape[1:])
    return spaces.Box(0.0, 1.0, shape, "float32")

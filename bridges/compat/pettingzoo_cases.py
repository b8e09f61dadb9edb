"""The PettingZoo case table: every env of the classic, butterfly and sisl families and of mpe2.

One row per env and API (``"pettingzoo-aec"`` / ``"pettingzoo-parallel"``); the same rows drive
``tests/bridges/test_pettingzoo_cases.py`` and the compatibility matrix. Targets name the module
that defines each env (PettingZoo 1.27 deprecates importing the versioned ``*_vN`` modules in
favour of ``pettingzoo.make``; the defining modules work on every supported version).

``kwargs`` shorten the long episodes (``max_cycles``, a 9x9 go board) so that every case plays whole
episodes, dead steps included; ``max_steps`` caps the bridged steps where a random game may still
run long, and raises the checker's budget of 500 where a whole episode takes more (pistonball's
AEC API: 20 agents x 30 cycles). ``slow`` rows run in the slow tier only.
"""

from __future__ import annotations

from bridges.compat import Case

_CLASSIC = "pettingzoo.classic"
_BUTTERFLY = "pettingzoo.butterfly"
_SISL = "pettingzoo.sisl"

# (family/name, defining module, kwargs, max_steps, slow, parallel API, notes)
_ENVS: list[tuple[str, str, dict, int | None, bool, bool, str]] = [
    ("classic/chess_v6", f"{_CLASSIC}.chess.chess", {}, 400, True, False, "turn-based; mask in observation"),
    ("classic/rps_v2", f"{_CLASSIC}.rps.rps", {"num_actions": 3, "max_cycles": 15}, None, False, True,
     "simultaneous moves; under AEC both rewards arrive after the second move of each round"),
    ("classic/connect_four_v3", f"{_CLASSIC}.connect_four.connect_four", {}, None, False, False,
     "turn-based; the winner's and loser's rewards arrive in the winning move's step"),
    ("classic/tictactoe_v3", f"{_CLASSIC}.tictactoe.tictactoe", {}, None, False, False, "turn-based"),
    ("classic/leduc_holdem_v4", f"{_CLASSIC}.rlcard_envs.leduc_holdem", {}, None, False, False,
     "chance (card deals) seeded through reset(seed=...)"),
    ("classic/texas_holdem_v4", f"{_CLASSIC}.rlcard_envs.texas_holdem", {}, None, False, False, "chance"),
    ("classic/texas_holdem_no_limit_v6", f"{_CLASSIC}.rlcard_envs.texas_holdem_no_limit", {}, None, False,
     False, "chance"),
    ("classic/go_v5", f"{_CLASSIC}.go.go", {"board_size": 9}, 300, True, False,
     "9x9 board to keep random games short; capped at 300 steps"),
    ("classic/hanabi_v5", f"{_CLASSIC}.hanabi.hanabi", {}, None, True, False,
     "needs open_spiel; cooperative, chance"),
    ("butterfly/knights_archers_zombies_v11", f"{_BUTTERFLY}.knights_archers_zombies.knights_archers_zombies",
     {"max_cycles": 60}, None, True, True, "agents die mid-episode"),
    ("butterfly/pistonball_v6", f"{_BUTTERFLY}.pistonball.pistonball", {"max_cycles": 30}, 700, True, True,
     "20 agents, image observations, Box actions"),
    ("butterfly/cooperative_pong_v6", f"{_BUTTERFLY}.cooperative_pong.cooperative_pong", {"max_cycles": 60},
     None, True, True, "image observations"),
    ("sisl/multiwalker_v9", f"{_SISL}.multiwalker.multiwalker", {"max_cycles": 60}, None, True, True,
     "Box actions; walkers fall (terminate) mid-episode"),
    ("sisl/pursuit_v5", f"{_SISL}.pursuit.pursuit", {"max_cycles": 60}, None, True, True, "8 pursuers"),
]

_MPE = [
    ("collect_treasure_v1", "8 agents"),
    ("simple_v3", "one agent"),
    ("simple_adversary_v3", "different observation spaces per agent"),
    ("simple_crypto_v3", "different observation spaces per agent"),
    ("simple_formation_v1", ""),
    ("simple_line_v1", ""),
    ("simple_push_v3", "different observation spaces per agent"),
    ("simple_reference_v3", ""),
    ("simple_speaker_listener_v4", "different observation and action spaces per agent"),
    ("simple_spread_v3", ""),
    ("simple_tag_v3", "different observation spaces per agent"),
    ("simple_world_comm_v3", "different observation and action spaces per agent"),
]
_FAST_MPE = {"simple_v3", "simple_spread_v3", "simple_speaker_listener_v4", "simple_adversary_v3"}

for _name, _notes in _MPE:
    _ENVS.append(
        (f"mpe/{_name}", f"mpe2.{_name}", {"max_cycles": 25}, None, _name not in _FAST_MPE, True,
         _notes or "continuous positions, 25 cycles")
    )


def _cases() -> list[Case]:
    cases = []
    for name, module, kwargs, max_steps, slow, parallel, notes in _ENVS:
        cases.append(
            Case(
                id=f"pettingzoo/{name}/aec",
                source="pettingzoo-aec",
                target=f"{module}:env",
                kwargs=kwargs,
                max_steps=max_steps,
                slow=slow,
                notes=notes,
            )
        )
        if parallel:
            cases.append(
                Case(
                    id=f"pettingzoo/{name}/parallel",
                    source="pettingzoo-parallel",
                    target=f"{module}:parallel_env",
                    kwargs=kwargs,
                    max_steps=max_steps,
                    slow=slow,
                    notes=notes,
                )
            )
    return cases


CASES: list[Case] = _cases()
"""One row per env and API: 26 AEC envs, 18 of which also have a parallel API."""

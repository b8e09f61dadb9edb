"""Every game registered with pyspiel, as rows of the OpenSpiel case table.

One row per name in ``pyspiel.registered_names()`` (open_spiel 2.0.2: 126 names, of which 114 load
with default parameters; ten games that wrap or repeat another game have no defaults and load with
the parameters their rows name, e.g. ``misere(game=tic_tac_toe())``). The rows drive
``tests/bridges/test_openspiel_games.py``: each game that runs is checked with ``check_env``, masks against ``legal_actions`` at every step of random
legal play, reward sums against ``returns()``, and seed determinism, in a subprocess so that a
crash inside pyspiel fails that game only. Rows with ``left_out`` say why a game is not run.
``slow`` rows run in the slow tier; the others are the fast subset of the default tier.
``max_steps`` bounds random play where episodes run past 1,000 steps.
"""

from __future__ import annotations

from bridges.compat import Case


def _game(
    name: str,
    *,
    params: str = "",
    max_steps: int | None = None,
    slow: bool = False,
    notes: str = "",
    left_out: str | None = None,
) -> Case:
    """The row of game ``name``; ``params``: what it is loaded with (games without defaults)."""
    target = f"{name}({params})" if params else name
    if params:
        notes = f"loaded as `{target}`: the game has no default for these" + (f"; {notes}" if notes else "")
    return Case(
        id=f"openspiel/{name}",
        source="openspiel",
        target=target,
        max_steps=max_steps,
        left_out=left_out,
        slow=slow,
        notes=notes,
    )


_MEAN_FIELD = (
    "mean-field game: its players are a population distribution updated at distribution nodes, "
    "which a MultiAgentEnv cannot express; OpenSpielEnv refuses it"
)
_DOES_NOT_LOAD = "does not load with default parameters "
_INFO_TENSOR = "information-state tensor (the game has no observation tensor)"
_SIMULTANEOUS = "simultaneous moves"
_SAMPLED = "chance sampled inside pyspiel: the game is reloaded with rng_seed at each seeded reset"

CASES: list[Case] = [
    _game("2048", slow=True),
    _game("add_noise", params="game=oshi_zumo(),epsilon=1.0,seed=1", slow=True, notes=_SIMULTANEOUS),
    _game("amazons", slow=True),
    _game("antichess", slow=True),
    _game("backgammon"),
    _game("banqi", slow=True),
    _game("bargaining", slow=True),
    _game("battleship", slow=True, notes=_INFO_TENSOR),
    _game("blackjack", slow=True),
    _game("blotto", slow=True, notes=_SIMULTANEOUS),
    _game("breakthrough", slow=True),
    _game("bridge", slow=True, notes="slow scoring: double-dummy solver at the end of each deal"),
    _game(
        "bridge_uncontested_bidding",
        slow=True,
        notes="information-state tensor (the game has no observation tensor); chance sampled inside pyspiel: the game is reloaded with rng_seed at each seeded reset; slow scoring: double-dummy solver at the end of each deal",
    ),
    _game("cached_tree", params="game=tic_tac_toe()", slow=True),
    _game("capture_the_flag", max_steps=2000, slow=True, notes=_SIMULTANEOUS),
    _game("catch", slow=True),
    _game("checkers", slow=True),
    _game("chess", slow=True),
    _game("chinese_checkers", max_steps=2000, slow=True),
    _game("cliff_walking", slow=True),
    _game("clobber", slow=True),
    _game("coin_game", notes="observation string (the game has no tensors)"),
    _game("colored_trails", slow=True),
    _game("connect_four"),
    _game("coop_box_pushing", slow=True, notes=_SIMULTANEOUS),
    _game("coop_to_1p", slow=True),
    _game("coordinated_mp", slow=True, notes="observation string (the game has no tensors)"),
    _game("crazy_eights", slow=True),
    _game("crazyhouse", slow=True),
    _game("cribbage", slow=True, notes="observation string (the game has no tensors)"),
    _game("crossword", left_out="no legal-action list (action structs only); OpenSpielEnv refuses it"),
    _game("cursor_go", slow=True),
    _game("dark_chess", slow=True),
    _game("dark_hex", slow=True),
    _game("dark_hex_ir", slow=True),
    _game("deep_sea", slow=True),
    _game("dots_and_boxes", slow=True),
    _game("dou_dizhu", slow=True),
    _game("efg_game", left_out=_DOES_NOT_LOAD + "(needs an .efg file: filename)"),
    _game("einstein_wurfelt_nicht", slow=True),
    _game("euchre", slow=True, notes=_INFO_TENSOR),
    _game("first_sealed_auction", slow=True),
    _game("gin_rummy", slow=True),
    _game("go", slow=True),
    _game("go_fish", slow=True),
    _game("gomoku", slow=True),
    _game("goofspiel", notes=_SIMULTANEOUS),
    _game("hanabi", slow=True),
    _game("havannah", slow=True),
    _game("hearts", slow=True, notes=_INFO_TENSOR),
    _game("hex", slow=True),
    _game("hive", slow=True),
    _game("kriegspiel", slow=True),
    _game("kuhn_poker"),
    _game("laser_tag", max_steps=2000, slow=True, notes=_SIMULTANEOUS),
    _game("latent_ttt", slow=True),
    _game("leduc_poker"),
    _game("lewis_signaling", slow=True),
    _game("liars_dice", slow=True),
    _game("liars_dice_ir", notes="information-state string (the game has no tensors)"),
    _game("lines_of_action", slow=True),
    _game("maedn", slow=True),
    _game("mancala", slow=True),
    _game("markov_soccer", slow=True, notes=_SIMULTANEOUS),
    _game("matching_pennies_3p", slow=True, notes=_SIMULTANEOUS),
    _game("matrix_bos", slow=True, notes=_SIMULTANEOUS),
    _game("matrix_brps", slow=True, notes=_SIMULTANEOUS),
    _game("matrix_cd", slow=True, notes=_SIMULTANEOUS),
    _game("matrix_coordination", slow=True, notes=_SIMULTANEOUS),
    _game("matrix_mp", slow=True, notes=_SIMULTANEOUS),
    _game("matrix_pd", slow=True, notes=_SIMULTANEOUS),
    _game("matrix_rps", slow=True, notes=_SIMULTANEOUS),
    _game("matrix_rpsw", slow=True, notes=_SIMULTANEOUS),
    _game("matrix_sh", slow=True, notes=_SIMULTANEOUS),
    _game("matrix_shapleys_game", slow=True, notes=_SIMULTANEOUS),
    _game("mfg_crowd_modelling", left_out=_MEAN_FIELD),
    _game("mfg_crowd_modelling_2d", left_out=_MEAN_FIELD),
    _game("mfg_dynamic_routing", left_out=_MEAN_FIELD),
    _game("mfg_garnet", left_out=_MEAN_FIELD),
    _game("misere", params="game=tic_tac_toe()", slow=True),
    _game("mnk", slow=True),
    _game("morpion_solitaire", slow=True, notes="observation string (the game has no tensors)"),
    _game("negotiation", slow=True, notes=_SAMPLED),
    _game("nfg_game", left_out=_DOES_NOT_LOAD + "(needs a normal-form game file)"),
    _game("nim", slow=True),
    _game("nine_mens_morris", slow=True),
    _game("normal_form_extensive_game", params="game=matrix_pd()", slow=True, notes=f"{_INFO_TENSOR}; {_SIMULTANEOUS}"),
    _game("oh_hell", slow=True, notes=_INFO_TENSOR),
    _game("oshi_zumo", notes=_SIMULTANEOUS),
    _game("othello", slow=True),
    _game("oware", slow=True),
    _game("pathfinding", slow=True, notes=_SIMULTANEOUS),
    _game("pentago", slow=True),
    _game("phantom_go", slow=True),
    _game("phantom_ttt", slow=True),
    _game("phantom_ttt_ir", slow=True, notes="information-state string (the game has no tensors)"),
    _game("pig", slow=True),
    _game("quoridor", slow=True),
    _game("rbc", slow=True),
    _game("repeated_game", params="stage_game=matrix_rps(),num_repetitions=5", slow=True, notes=_SIMULTANEOUS),
    _game("repeated_leduc_poker", slow=True),
    _game(
        "repeated_poker",
        params="max_num_hands=3,reset_stacks=True,rotate_dealer=True,universal_poker_game_string=universal_poker("
        "betting=nolimit,numPlayers=2,numRounds=2,blind=1 2,firstPlayer=1 1,numSuits=2,numRanks=3,numHoleCards=1,"
        "numBoardCards=0 1,stack=20 20,bettingAbstraction=fcpa)",
        slow=True,
        notes="observation string (the game has no tensors)",
    ),
    _game("restricted_nash_response", params="game=kuhn_poker()", slow=True),
    _game("sheriff", slow=True, notes=_INFO_TENSOR),
    _game("shogi", slow=True),
    _game("skat", slow=True),
    _game("snake", slow=True, notes=_SIMULTANEOUS),
    _game("social_deduction", slow=True, notes="observation string (the game has no tensors)"),
    _game("solitaire", slow=True),
    _game("spades", slow=True),
    _game("start_at", params="game=tic_tac_toe(),history=4;0", slow=True),
    _game("stones_and_gems", slow=True, notes=_SAMPLED),
    _game(
        "tarok",
        slow=True,
        notes="information-state string (the game has no tensors); chance sampled inside pyspiel: reloaded with rng_seed at each seeded reset",
    ),
    _game("tic_tac_toe"),
    _game("tiny_bridge_2p", slow=True),
    _game("tiny_bridge_4p", slow=True),
    _game("tiny_hanabi", slow=True),
    _game("trade_comm", slow=True),
    _game("turn_based_simultaneous_game", params="game=goofspiel(num_cards=4)", slow=True),
    _game("twixt", slow=True),
    _game("ultimate_tic_tac_toe", slow=True),
    _game("universal_poker", slow=True),
    _game("xiangqi", slow=True),
    _game("y", slow=True),
    _game("yacht", slow=True),
    _game("zerosum", params="game=oshi_zumo()", slow=True, notes=_SIMULTANEOUS),
]

"""RLlib's multi-agent example envs (``ray.rllib.examples.envs.classes.multi_agent``) as cases.

Every env there is listed, one row each; a row that cannot run here says why in ``left_out``.
The single-agent bandit envs kept in the same package are Gymnasium envs: they are rows of
:mod:`bridges.compat.gymnasium_cases`. Targets are classes taking RLlib's ``config`` dict.
"""

from __future__ import annotations

from bridges.compat import Case

_M = "ray.rllib.examples.envs.classes.multi_agent"
_SEEDING = "draws its start player from Python's global `random`, so `reset(seed=...)` cannot repeat an episode"

CASES: list[Case] = [
    Case("rllib/rock_paper_scissors", "rllib", f"{_M}.rock_paper_scissors:RockPaperScissors", {"config": {}}),
    Case(
        "rllib/rock_paper_scissors_sheldon_cooper",
        "rllib",
        f"{_M}.rock_paper_scissors:RockPaperScissors",
        {"config": {"sheldon_cooper_mode": True}},
        notes="five moves (lizard, Spock)",
    ),
    Case("rllib/tic_tac_toe", "rllib", f"{_M}.tic_tac_toe:TicTacToe", {"config": {}}, notes=_SEEDING),
    Case("rllib/two_step_game", "rllib", f"{_M}.two_step_game:TwoStepGame", {"env_config": {}}),
    Case(
        "rllib/two_step_game_grouped",
        "rllib",
        f"{_M}.two_step_game:TwoStepGameWithGroupedAgents",
        {"env_config": {}},
        notes="RLlib's GroupAgentsWrapper inside: one 'agents' group with Tuple spaces",
    ),
    Case("rllib/guess_the_number", "rllib", f"{_M}.guess_the_number_game:GuessTheNumberGame", {"config": {}}),
    Case(
        "rllib/double_row_corridor",
        "rllib",
        f"{_M}.double_row_corridor_env:DoubleRowCorridorEnv",
        {"config": {}},
        max_steps=300,
    ),
    Case(
        "rllib/pettingzoo_connect4",
        "rllib",
        f"{_M}.pettingzoo_connect4:MultiAgentConnect4",
        {"config": {}},
        notes="RLlib's own wrapper around PettingZoo's connect_four_v3",
    ),
    Case(
        "rllib/pettingzoo_chess",
        "rllib",
        f"{_M}.pettingzoo_chess:MultiAgentChess",
        {"config": {}},
        max_steps=300,
        slow=True,
        notes=(
            "RLlib's own wrapper around PettingZoo's chess (needs python-chess); RLlib's env checker samples "
            "actions without the mask, so its round trip plays illegal moves"
        ),
    ),
    Case("rllib/multi_agent_cartpole", "rllib", f"{_M}:MultiAgentCartPole", {"config": {"num_agents": 2}}),
    Case(
        "rllib/multi_agent_mountain_car",
        "rllib",
        f"{_M}:MultiAgentMountainCar",
        {"config": {"num_agents": 2}},
        max_steps=300,
    ),
    Case("rllib/multi_agent_pendulum", "rllib", f"{_M}:MultiAgentPendulum", {"config": {"num_agents": 2}}),
    Case(
        "rllib/multi_agent_stateless_cartpole",
        "rllib",
        f"{_M}:MultiAgentStatelessCartPole",
        {"config": {"num_agents": 2}},
    ),
    Case(
        "rllib/multi_agent_cartpole_dict_obs",
        "rllib",
        f"{_M}:MultiAgentCartPoleWithDictObservationSpace",
        {"config": {"num_agents": 2}},
    ),
    Case(
        "rllib/multi_agent_nested_space_repeat_after_me",
        "rllib",
        f"{_M}:MultiAgentNestedSpaceRepeatAfterMeEnv",
        {"config": {"num_agents": 2}},
    ),
    Case(
        "rllib/footsies",
        "rllib",
        f"{_M}.footsies.footsies_env:FootsiesEnv",
        left_out=(
            "needs the Footsies game server: a binary downloaded at construction and a port to talk to it "
            "(no network here)"
        ),
    ),
]
"""One row per RLlib multi-agent example env."""

"""Rock-paper-scissors from RLlib's multi-agent docs: a learned policy against a heuristic.

``player1`` is learned; ``player2`` plays RLlib's "beat the last move" heuristic (it plays what
beats ``player1``'s previous move, which is its observation). A feed-forward policy sees only the
heuristic's last move, yet learns a cycle that wins most rounds: the best such policy scores +6
per 10-round episode. The heuristic is a plain callable policy: it is never trained.

Run: ``python examples/rps_learned_vs_heuristic.py --iterations 20`` (add ``--runners 1`` to
sample in a Ray actor).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from marl_core.envs import RockPaperScissors
from marl_core.ppo import PPO, PPOConfig
from marl_core.ppo.presets import beat_last_move
from marl_core.rollout import rollout


def policy_mapping_fn(agent_id, episode, **kwargs):
    """player1 learns, player2 is the heuristic."""
    return "learned" if agent_id == "player1" else "beat_last"


def build_config(num_env_runners: int = 0, seed: int = 0) -> PPOConfig:
    """The example's config: a small MLP, short batches."""
    return (
        PPOConfig()
        .environment(RockPaperScissors)
        .multi_agent(
            policies={"learned": None, "beat_last": beat_last_move},
            policy_mapping_fn=policy_mapping_fn,
            policies_to_train=["learned"],
        )
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=8)
        .training(lr=3e-3, gamma=0.9, train_batch_size=800, minibatch_size=200, num_epochs=4,
                  entropy_coeff=0.01, model={"hiddens": [32]})
        .resources(num_cpus=2)
        .debugging(seed=seed)
    )


def evaluate(algo: PPO, episodes: int = 20) -> float:
    """Mean return of the greedy learned policy against the heuristic."""
    learned = algo.get_policy_callable("learned", explore=False)
    total = 0.0
    for seed in range(episodes):
        result = rollout(RockPaperScissors(), {"player1": learned, "player2": beat_last_move}, seed=seed)
        total += result.returns["player1"]
    return total / episodes


def train(iterations: int, num_env_runners: int = 0, seed: int = 0, verbose: bool = True) -> float:
    """Train for ``iterations`` and return the evaluation score."""
    with build_config(num_env_runners, seed).build() as algo:
        for _ in range(iterations):
            result = algo.train()
            if verbose:
                learned = result["policies"]["learned"]
                print(f"iteration {result['training_iteration']:3d}: learned return "
                      f"{learned['episode_return_mean']:+.2f} (entropy {learned['entropy']:.2f})")
        return evaluate(algo)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--runners", type=int, default=0, help="Ray env runners (0: sample in this process)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    score = train(args.iterations, args.runners, args.seed)
    print(f"greedy learned policy vs beat-last-move: {score:+.2f} per episode (best possible +6, random 0)")


if __name__ == "__main__":
    main()

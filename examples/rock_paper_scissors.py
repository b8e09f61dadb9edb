"""Rock-paper-scissors from RLlib's multi-agent docs, on marl_core: both players move at once.

The env is ``marl_core.envs.RockPaperScissors`` (read it there: 60 lines), installed with the
package so that the ``rps`` preset and checkpoints of it load from any directory.

Run: ``python examples/rock_paper_scissors.py`` plays one seeded episode with random actions.
"""

from __future__ import annotations

from marl_core.envs import RockPaperScissors

__all__ = ["RockPaperScissors"]

if __name__ == "__main__":
    from marl_core import rollout

    result = rollout(RockPaperScissors(), seed=0)
    print(f"rock-paper-scissors, random play: returns {result.returns} after {result.steps} steps")

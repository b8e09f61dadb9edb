"""The PPO update of one policy: minibatch epochs over its train batch (CleanRL's loop).

Loss = clipped surrogate + ``vf_coeff`` * value loss - ``entropy_coeff`` * entropy (+ ``kl_coeff`` *
KL with ``use_kl_loss``, the coefficient adapted after each update as RLlib adapts it). Diagnostics:
approximate KL (``(ratio - 1) - log ratio``), clip fraction and explained variance.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from marl_core.errors import TrainingError
from marl_core.ppo.batching import index_obs
from marl_core.ppo.config import scheduled
from marl_core.ppo.model import TorchPolicy, to_tensor
from marl_core.ppo.optim import Adam


class Learner:
    """Owns one learned policy's optimizer and runs its PPO epochs."""

    def __init__(self, policy: TorchPolicy, params: dict[str, Any], name: str = "default_policy") -> None:
        self.policy = policy
        self.name = name
        self.params = dict(params)
        self.optimizer = Adam(policy.module.parameters(), lr=scheduled(self.params["lr"], 0), eps=1e-5)
        self.kl_coeff = float(self.params["kl_coeff"])  # adapted after every update (use_kl_loss)

    def update(self, batch: dict[str, Any], rng: np.random.Generator, normalize_advantages: bool = True,
               env_steps: int = 0) -> dict[str, float]:
        """Run ``num_epochs`` passes of minibatch SGD over ``batch``; return the loss metrics.
        Scheduled settings (``lr``, ``entropy_coeff``) take their values at ``env_steps``."""
        p = self.params
        self.optimizer.lr = scheduled(p["lr"], env_steps)
        entropy_coeff = scheduled(p["entropy_coeff"], env_steps)
        device = self.policy.device
        size = len(batch["advantages"])
        advantages = batch["advantages"]
        if not _largest(advantages) < _SQUARES_FIT_FLOAT32:
            self._diverged(f"advantages of size {_largest(advantages):.3g} are too large: their squares "
                           "overflow float32", batch)
        if normalize_advantages and size > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        obs = to_tensor(self.policy.masks.canonical(batch["obs"]), device)
        actions = to_tensor(batch["actions"], device)
        old_logp = to_tensor(batch["logp"], device)
        adv = torch.as_tensor(advantages, dtype=torch.float32, device=device)
        returns = to_tensor(batch["returns"], device)
        minibatch = max(1, min(int(p["minibatch_size"]), size))
        sums: dict[str, float] = {}
        count = 0
        self.policy.module.train()
        for epoch in range(int(p["num_epochs"])):
            order = torch.as_tensor(rng.permutation(size), device=device)
            for start in range(0, size, minibatch):
                idx = order[start : start + minibatch]
                logp, entropy, values = self.policy.evaluate(index_obs(obs, idx), actions[idx])
                log_ratio = logp - old_logp[idx]
                ratio = log_ratio.exp()
                mb_adv = adv[idx]
                surrogate = torch.max(-mb_adv * ratio,
                                      -mb_adv * ratio.clamp(1 - p["clip_param"], 1 + p["clip_param"]))
                policy_loss = surrogate.mean()
                value_error = (values - returns[idx]) ** 2
                if p["vf_clip_param"] is not None:  # RLlib's: each squared error capped
                    value_error = value_error.clamp(max=p["vf_clip_param"])
                vf_loss = 0.5 * value_error.mean()
                entropy_mean = entropy.mean()
                kl = ((ratio - 1) - log_ratio).mean()  # KL(old || new), estimated on the sampled actions
                loss = policy_loss + p["vf_coeff"] * vf_loss - entropy_coeff * entropy_mean
                if p["use_kl_loss"]:
                    loss = loss + self.kl_coeff * kl
                total_loss = loss.item()
                where = f"epoch {epoch + 1}, minibatch {start // minibatch + 1}"
                if not math.isfinite(total_loss):
                    self._diverged(f"the loss is {total_loss} (policy {policy_loss.item()}, value "
                                   f"{vf_loss.item()}, entropy {entropy_mean.item()}) at {where}", batch)
                self.optimizer.zero_grad()
                loss.backward()
                if p["grad_clip"] is not None:
                    norm = float(torch.nn.utils.clip_grad_norm_(self.policy.module.parameters(), p["grad_clip"]))
                    if not math.isfinite(norm):
                        self._diverged(f"the gradient's norm is {norm} at {where}", batch)
                self.optimizer.step()
                with torch.no_grad():
                    stats = {
                        "total_loss": total_loss,
                        "policy_loss": policy_loss.item(),
                        "vf_loss": vf_loss.item(),
                        "entropy": entropy_mean.item(),
                        "approx_kl": kl.item(),
                        "clip_fraction": ((ratio - 1).abs() > p["clip_param"]).float().mean().item(),
                    }
                for key, value in stats.items():
                    sums[key] = sums.get(key, 0.0) + value
                count += 1
        self.policy.module.eval()
        metrics = {key: value / max(count, 1) for key, value in sums.items()}
        metrics["explained_variance"] = explained_variance(batch["values"], batch["returns"])
        metrics["num_agent_steps_trained"] = float(size)
        metrics["curr_lr"], metrics["curr_entropy_coeff"] = self.optimizer.lr, entropy_coeff
        if p["use_kl_loss"]:
            metrics["curr_kl_coeff"] = self.kl_coeff  # the coefficient this update used
            if metrics["approx_kl"] > 2.0 * p["kl_target"]:  # RLlib's adaptation
                self.kl_coeff *= 1.5
            elif metrics["approx_kl"] < 0.5 * p["kl_target"]:
                self.kl_coeff *= 0.5
        return metrics

    def _diverged(self, what: str, batch: dict[str, Any]) -> None:
        """Raise :class:`TrainingError` (the algorithm puts back the states from before the update)."""
        self.optimizer.zero_grad()
        self.policy.module.eval()
        largest = _largest(batch["returns"])
        raise TrainingError(
            f"PPO update of policy {self.name!r} stopped: {what}; every policy's weights and optimizer state are "
            f"left as they were before this iteration's update. The batch's returns reach {largest:.3g} in size: "
            "scale the env's rewards down, or lower training.lr or training.grad_clip")

    def state_dict(self) -> dict[str, Any]:
        """Module and optimizer state, and the KL coefficient."""
        return {"module": self.policy.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                "kl_coeff": self.kl_coeff}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self.policy.module.load_state_dict(state["module"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.kl_coeff = float(state.get("kl_coeff", self.kl_coeff))


# Past this size a value's square overflows float32 (its largest value is 3.4e38).
_SQUARES_FIT_FLOAT32 = 1e18


def _largest(values: np.ndarray) -> float:
    """The largest absolute value in ``values`` (NaN when one is NaN; 0.0 when empty)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.max(np.abs(values), initial=0.0))


def explained_variance(predicted: np.ndarray, target: np.ndarray) -> float:
    """1 - Var(target - predicted) / Var(target); NaN when the target does not vary."""
    variance = float(np.var(target))
    if variance == 0.0:
        return float("nan")
    return float(1.0 - np.var(np.asarray(target) - np.asarray(predicted)) / variance)

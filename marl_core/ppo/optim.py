"""Adam for the learner, without ``torch.optim``.

``torch.optim``'s optimizers import ``torch._dynamo`` (and with it sympy) on their first step:
about 1.3 s and 70 MB in every learner process, for a compiler the trainer never uses. This is
the update of ``torch.optim.Adam`` (no weight decay, no AMSGrad), run by the same fused kernel
when the torch build has it for the parameters' device, and by foreach ops otherwise.

Example:
    >>> import torch
    >>> layer = torch.nn.Linear(2, 1)
    >>> optimizer = Adam(layer.parameters(), lr=0.1)
    >>> layer(torch.ones(1, 2)).sum().backward()
    >>> optimizer.step()
    >>> optimizer.state_dict()["step"]
    1
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any

import torch

from marl_core.errors import CheckpointError

logger = logging.getLogger(__name__)


class Adam:
    """Adam (Kingma and Ba) over a fixed list of parameters; parameters without a gradient are skipped.

    Args:
        params: the parameters to update.
        lr: learning rate.
        betas: decay rates of the first and second moment estimates.
        eps: added to the second moment's square root.
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.betas, self.eps = float(lr), (float(betas[0]), float(betas[1])), float(eps)
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        # Per-parameter step counts as float tensors on the parameters' devices: the fused kernel's format.
        self.steps = [torch.zeros((), dtype=torch.float32, device=p.device) for p in self.params]
        self._fused = hasattr(torch, "_fused_adam_")

    def zero_grad(self) -> None:
        """Drop every gradient (``set_to_none``)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of every parameter that has a gradient."""
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        params = [self.params[i] for i in live]
        grads = [p.grad for p in params]
        exp_avg = [self.exp_avg[i] for i in live]
        exp_avg_sq = [self.exp_avg_sq[i] for i in live]
        steps = [self.steps[i] for i in live]
        torch._foreach_add_(steps, 1)
        beta1, beta2 = self.betas
        if self._fused:
            try:
                torch._fused_adam_(params, grads, exp_avg, exp_avg_sq, [], steps, amsgrad=False, lr=self.lr,
                                   beta1=beta1, beta2=beta2, weight_decay=0.0, eps=self.eps, maximize=False,
                                   grad_scale=None, found_inf=None)
                return
            except (RuntimeError, TypeError, NotImplementedError) as error:  # no kernel for this device or build
                logger.info("fused Adam kernel unavailable (%s); updating with foreach ops", error)
                self._fused = False
        torch._foreach_lerp_(exp_avg, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sq, beta2)
        torch._foreach_addcmul_(exp_avg_sq, grads, grads, 1 - beta2)
        for param, avg, avg_sq, count in zip(params, exp_avg, exp_avg_sq, steps, strict=True):
            step = float(count)
            step_size = self.lr / (1 - beta1**step)
            denominator = (avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(self.eps)
            param.addcdiv_(avg, denominator, value=-step_size)

    def state_dict(self) -> dict[str, Any]:
        """Moments and step counts (tensors, ints and floats only: loads with ``weights_only=True``)."""
        return {"step": int(self.steps[0]) if self.steps else 0, "steps": [float(s) for s in self.steps],
                "exp_avg": [t.detach().clone() for t in self.exp_avg],
                "exp_avg_sq": [t.detach().clone() for t in self.exp_avg_sq],
                "lr": self.lr, "betas": list(self.betas), "eps": self.eps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; ``torch.optim.Adam``'s state dicts (older checkpoints) load too."""
        if "state" in state and "param_groups" in state:  # torch.optim's layout: per-index state
            per_param = [state["state"].get(i, state["state"].get(str(i), {})) for i in range(len(self.params))]
            state = {"steps": [float(s.get("step", 0)) for s in per_param],
                     "exp_avg": [s.get("exp_avg", torch.zeros_like(p)) for s, p in zip(per_param, self.params, strict=True)],
                     "exp_avg_sq": [s.get("exp_avg_sq", torch.zeros_like(p))
                                    for s, p in zip(per_param, self.params, strict=True)]}
        sizes = [len(state["exp_avg"]), len(state["exp_avg_sq"]), len(state["steps"])]
        if sizes != [len(self.params)] * 3:
            raise CheckpointError(f"optimizer state for {sizes[0]} parameters does not fit {len(self.params)} parameters")
        for target, source in zip(self.exp_avg + self.exp_avg_sq, list(state["exp_avg"]) + list(state["exp_avg_sq"]),
                                  strict=True):
            if target.shape != source.shape:
                raise CheckpointError(f"optimizer state of shape {tuple(source.shape)} does not fit a parameter of "
                                      f"shape {tuple(target.shape)}")
            target.copy_(source)
        for target, value in zip(self.steps, state["steps"], strict=True):
            target.fill_(float(value))

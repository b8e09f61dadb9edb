from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from marl_core.errors import CheckpointError
from marl_core.ppo.optim import Adam


def _net(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _train(net: torch.nn.Module, optimizer, steps: int, seed: int = 1) -> None:
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 5, generator=generator)
        optimizer.zero_grad()
        net(x).pow(2).mean().backward()
        optimizer.step()


@pytest.mark.parametrize("fused", [True, False])
def test_the_same_updates_as_torch_optim_adam(fused):
    ours_net, reference_net = _net(0), _net(0)
    ours = Adam(ours_net.parameters(), lr=3e-3, eps=1e-5)
    ours._fused = fused  # the foreach path is what builds without the fused kernel take
    reference = torch.optim.Adam(reference_net.parameters(), lr=3e-3, eps=1e-5)
    _train(ours_net, ours, 25)
    _train(reference_net, reference, 25)
    for mine, theirs in zip(ours_net.parameters(), reference_net.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)


def test_state_round_trip_continues_exactly_and_torch_optim_states_load():
    net, twin = _net(0), _net(0)
    optimizer, twin_optimizer = Adam(net.parameters(), lr=1e-2), Adam(twin.parameters(), lr=1e-2)
    _train(net, optimizer, 5)
    twin.load_state_dict(net.state_dict())
    twin_optimizer.load_state_dict(optimizer.state_dict())
    assert twin_optimizer.state_dict()["step"] == 5
    _train(net, optimizer, 3, seed=7)
    _train(twin, twin_optimizer, 3, seed=7)
    for a, b in zip(net.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)
    # A torch.optim.Adam state (older checkpoints) continues the same way.
    reference_net, ours_net = _net(3), _net(3)
    reference = torch.optim.Adam(reference_net.parameters(), lr=1e-2)
    _train(reference_net, reference, 4)
    ours_net.load_state_dict(reference_net.state_dict())
    ours = Adam(ours_net.parameters(), lr=1e-2)
    ours.load_state_dict(reference.state_dict())
    _train(reference_net, reference, 2, seed=9)
    _train(ours_net, ours, 2, seed=9)
    for a, b in zip(ours_net.parameters(), reference_net.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_state_that_does_not_fit_is_refused():
    optimizer = Adam(_net(0).parameters(), lr=1e-2)
    state = Adam(torch.nn.Linear(5, 3).parameters(), lr=1e-2).state_dict()
    with pytest.raises(CheckpointError, match="does not fit 4 parameters"):
        optimizer.load_state_dict(state)


def test_training_never_imports_torch_dynamo():
    script = (
        "import sys, torch\n"
        "from marl_core.ppo.optim import Adam\n"
        "net = torch.nn.Linear(3, 2); opt = Adam(net.parameters(), lr=0.1)\n"
        "net(torch.ones(4, 3)).sum().backward(); opt.step(); opt.zero_grad()\n"
        "torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"

"""The trainer's tests share two CPU cores with everything else: one torch thread is fastest."""

from __future__ import annotations

import torch

torch.set_num_threads(1)

"""Your own training loop, recorded by fpexplorer's monitor (the same run log as `train`).

    python examples/monitor_loop.py --out my-loop.jsonl
    fpexplorer runs summarize my-loop.jsonl
    fpexplorer gui   # then File > Open Run... my-loop.jsonl

Only the lines marked "fpexplorer" are added to an ordinary PyTorch AMP loop.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from fpexplorer.training.monitor import AmpMonitor  # fpexplorer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="my-loop.jsonl")
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device)
    inputs = torch.randn(512, 16, device=device)
    labels = (inputs[:, :4] > 0).long().sum(dim=1).clamp(max=3)

    with AmpMonitor(model, optimizer, scaler, out=args.out) as monitor:  # fpexplorer
        for _ in range(args.steps):
            index = torch.randint(0, len(inputs), (64,), device=device)
            with torch.autocast(device, dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(inputs[index]), labels[index])
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            monitor.step(loss)  # fpexplorer: after the step, before the next zero_grad
    print(f"wrote {args.out}: {args.steps} steps")


if __name__ == "__main__":
    main()

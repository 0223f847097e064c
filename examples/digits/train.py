"""Train a small CNN on the digits images mounted at /input; save the model to /output.

Parameters come as environment variables (floyd run --param lr=0.05 ...):
lr (default 0.05), epochs (30), hidden (64), seed (0). Metrics are printed in
FloydHub's format, one JSON line per point, which floydd records as series.
"""

import json
import os
import time
from pathlib import Path

import torch
from torch import nn

try:
    from floydd.agent.sdk import log
except ImportError:  # running outside floydd: print the same lines
    def log(name, value, step=None):
        print(json.dumps({"metric": name, "value": float(value), "step": step}), flush=True)

INPUT = Path(os.environ.get("FLOYD_INPUT", "/input"))
OUTPUT = Path(os.environ.get("FLOYD_OUTPUT", "/output"))
LR = float(os.environ.get("lr", "0.05"))
EPOCHS = int(os.environ.get("epochs", "30"))
HIDDEN = int(os.environ.get("hidden", "64"))
SEED = int(os.environ.get("seed", "0"))


def load(root: Path) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = [], []
    for path in sorted(root.glob("*/*.pgm")):
        data = path.read_bytes()
        images.append(list(data[-64:]))
        labels.append(int(path.parent.name))
    if not images:
        raise SystemExit(f"no .pgm images under {root}: mount the dataset with --data NAME:/input")
    x = torch.tensor(images, dtype=torch.float32).view(-1, 1, 8, 8) / 255.0
    return x, torch.tensor(labels)


def main() -> None:
    torch.manual_seed(SEED)
    x, y = load(INPUT)
    order = torch.randperm(len(x))
    x, y = x[order], y[order]
    split = int(len(x) * 0.8)
    train_x, train_y, val_x, val_y = x[:split], y[:split], x[split:], y[split:]
    print(f"{len(train_x)} training and {len(val_x)} validation images, lr={LR} epochs={EPOCHS}", flush=True)

    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 4 * 4, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10),
    )
    optimiser = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    start, step = time.time(), 0
    for epoch in range(EPOCHS):
        model.train()
        for i in range(0, len(train_x), 64):
            optimiser.zero_grad()
            loss = loss_fn(model(train_x[i:i + 64]), train_y[i:i + 64])
            loss.backward()
            optimiser.step()
            step += 1
        model.eval()
        with torch.no_grad():
            val_loss = loss_fn(model(val_x), val_y).item()
            accuracy = (model(val_x).argmax(1) == val_y).float().mean().item()
        log("loss", loss.item(), step)
        log("val_loss", val_loss, step)
        log("accuracy", accuracy, step)
    print(f"validation accuracy {accuracy:.3f} after {time.time() - start:.1f}s", flush=True)

    OUTPUT.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), OUTPUT / "model.pt")
    (OUTPUT / "metrics.json").write_text(json.dumps({"accuracy": accuracy, "val_loss": val_loss,
                                                      "lr": LR, "epochs": EPOCHS}) + "\n")


if __name__ == "__main__":
    main()

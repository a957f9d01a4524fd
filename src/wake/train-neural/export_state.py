"""Writes a model file from a training state (the last finished epoch), for when a run
was stopped before its end: export_state.py STATE.npz OUT.wake"""

import sys

import numpy as np

import common
import train


def main():
    d = np.load(sys.argv[1])
    p = {k[2:]: d[k] for k in d.files if k.startswith("p_")}
    X, _ = train.load("train")
    sample = X[:: max(1, len(X) // 4000)].astype(np.float32).reshape(-1, train.NMELS)
    mean = sample.mean(axis=0).astype(np.float32)
    std = (sample.std(axis=0) + 1e-3).astype(np.float32)
    train.export(p, mean, std, sys.argv[2], {"name": "hey strawberry", "epoch": int(d["epoch"])})
    print(f"wrote {sys.argv[2]} from epoch {int(d['epoch'])}")


if __name__ == "__main__":
    common.usage(__doc__, len(sys.argv) == 3)
    main()

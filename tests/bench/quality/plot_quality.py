"""Parses run_quality.sh logs (OUT/<config>.log) into plots under IMG and a Markdown table.

    plot_quality.py OUT IMG [AT]

Writes IMG/quality_rounds.png (test accuracy vs rounds, every config),
IMG/quality_dp_epsilon.png (accuracy vs epsilon spent, DP configs) and OUT/table.md, which
also gives each run's accuracy at round AT (60), so runs of different lengths compare at
the same number of rounds."""
import glob
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LINE = re.compile(r"^round +(\d+) \(id \d+\): participants +(\d+) of +(\d+) selected, "
                  r"dropouts +(\d+), test accuracy ([0-9.]+), epsilon ([-0-9.]+), ([0-9.]+) s")
LABEL = {"fedavg": "FedAvg", "fedavgm": "FedAvgM (momentum 0.9)",
         "fedadam": "FedAdam (server lr 0.01)", "fedprox": "FedProx (mu 0.01)",
         "fedavg_seed2": "FedAvg, seed 2",
         "flower_fedavg": "Flower 1.42 FedAvg (PyTorch client)"}


def label(c):
    return LABEL.get(c, f"FedAvgM + central DP, z = {c[2:]}" if c.startswith("dp") else c)


def main():
    out, img = sys.argv[1], sys.argv[2]
    at = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    os.makedirs(img, exist_ok=True)
    runs = {}
    for log in sorted(glob.glob(os.path.join(out, "*.log"))):
        c = os.path.basename(log)[:-4]
        rows = [tuple(float(x) for x in m.groups()) for m in map(LINE.match, open(log)) if m]
        if rows:
            runs[c] = rows
    order = [c for c in ["fedavg", "fedavg_seed2", "flower_fedavg", "fedavgm", "fedadam",
                         "fedprox"]
             if c in runs] + \
        sorted(c for c in runs if c.startswith("dp"))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for c in order:
        r = runs[c]
        ax.plot([x[0] for x in r], [x[4] for x in r], label=label(c),
                linestyle="--" if c.startswith("dp") else ":" if c.startswith("flower") else "-")
    ax.axhline(0.85, color="grey", linestyle=":", linewidth=1, label="85% (issue goal, no DP)")
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy")
    ax.set_title("Fashion-MNIST, 1,000 clients, 100/round, Dirichlet 0.5, SecAgg+\n"
                 "no DP: 5 local epochs, clip 50, example weights; DP: 2 epochs, clip 1",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(img, "quality_rounds.png"), dpi=110)
    dps = [c for c in order if c.startswith("dp")]
    if dps:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for c in dps:
            r = runs[c]
            ax.plot([x[5] for x in r], [x[4] for x in r], marker=".", label=label(c))
        ax.axvline(8, color="grey", linestyle=":", label="budget epsilon 8")
        ax.set_xlabel("epsilon spent (delta 1e-5, coordinator's RDP accountant)")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(img, "quality_dp_epsilon.png"), dpi=110)
    lines = [f"| configuration | rounds | accuracy at round {at} | final accuracy | mean of the "
             "last 10 | best accuracy (round) | first round >= 85% | epsilon | s/round | "
             "wall (s) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in order:
        r = runs[c]
        best = max(r, key=lambda x: x[4])
        s = {}
        try:
            s = json.load(open(os.path.join(out, c + ".json")))
        except (OSError, ValueError):
            pass
        eps = f"{r[-1][5]:.3f}" if c.startswith("dp") else "-"
        per = (r[-1][6] - r[0][6]) / max(1, len(r) - 1)
        stop = " (budget)" if s.get("budget_exhausted") else ""
        first = next((int(x[0]) for x in r if x[4] >= 0.85), None)
        tail = [x[4] for x in r[-10:]]
        at_acc = next((f"{100 * x[4]:.2f}%" for x in r if int(x[0]) == at), "-")
        lines.append(f"| {label(c)} | {len(r)}{stop} | {at_acc} | {100 * r[-1][4]:.2f}% | "
                     f"{100 * sum(tail) / len(tail):.2f}% | "
                     f"{100 * best[4]:.2f}% ({int(best[0])}) | {first or '-'} | {eps} | "
                     f"{per:.1f} | "
                     f"{s.get('wall_time_s', r[-1][6]):.0f} |")
    open(os.path.join(out, "table.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

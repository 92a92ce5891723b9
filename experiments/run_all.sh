#!/usr/bin/env bash
# Regenerate the committed results under docs/results (resumable: rerun to continue).
#   bash experiments/run_all.sh /abs/path/with/npz
set -euo pipefail
cd "$(dirname "$0")/.."
data="${1:?usage: experiments/run_all.sh DATA_DIR (with mnist.npz, fashion_mnist.npz, cifar10.npz)}"
python -m zofl.compare experiments/crosscheck.toml --out docs/results/crosscheck --set "data-dir=\"$data\""
python -m zofl.compare experiments/table1.toml --out docs/results/table1 --set "data-dir=\"$data\""
python experiments/table1_report.py docs/results/table1 > docs/results/table1.md
python -m zofl.compare experiments/fig2.toml --out docs/results/fig2 --set "data-dir=\"$data\""
python experiments/fig2_plot.py docs/results/fig2

#!/usr/bin/env bash
# Regenerate the FedRZO figures (paper 001: Fig. 1, Fig. 2 left and right) under docs/results
# (resumable: rerun to continue; finished cells are skipped).
#   bash experiments/fedrzo_figures.sh /abs/path/with/npz
set -euo pipefail
cd "$(dirname "$0")/.."
data="${1:?usage: experiments/fedrzo_figures.sh DATA_DIR (with mnist.npz)}"
python -m zofl.compare experiments/fig1_fedrzo.toml --out docs/results/fig1_fedrzo --engine inprocess --set "data-dir=\"$data\""
python -m zofl.compare experiments/fig2_fedrzo_hyper.toml --out docs/results/fig2_fedrzo_hyper --engine inprocess --set "data-dir=\"$data\""
python -m zofl.compare experiments/fig2_fedrzo_fair.toml --out docs/results/fig2_fedrzo_fair --engine inprocess --set "data-dir=\"$data\""
python experiments/fedrzo_fig2_plot.py docs/results/fig2_fedrzo_hyper docs/results/fig2_fedrzo_fair

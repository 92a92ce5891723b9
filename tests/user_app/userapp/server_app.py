"""userapp: A Flower / PyTorch app (the ServerApp)."""
import json
import os

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from userapp.task import Net
from zofl.strategies import FedBuffStrategy, ScaffnewStrategy, ScaffoldStrategy, ZOHFLStrategy

app = ServerApp()


def make_strategy(name: str, fraction_train: float):
    """The one line that changes: Flower's FedAvg, or a zofl strategy."""
    if name == "flower-fedavg":
        return FedAvg(fraction_train=fraction_train)
    if name == "zohfl":
        return ZOHFLStrategy(fraction_train=fraction_train, eta=0.05, gamma=0.05, run_config={"local-steps": 2})
    if name == "scaffold":
        return ScaffoldStrategy(fraction_train=fraction_train, local_lr=0.05, run_config={"local-steps": 2})
    if name == "scaffnew":
        return ScaffnewStrategy(fraction_train=fraction_train, local_lr=0.05, comm_prob=0.5)
    if name == "fedbuff":
        return FedBuffStrategy(fraction_train=fraction_train, clock="simulated",
                               run_config={"local-steps": 2, "buffer-size": 2})
    raise ValueError(f"unknown strategy {name!r}")


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Main entry point for the ServerApp (run-config strategy: one, or several in turn, comma-separated)."""
    for name in context.run_config["strategy"].split(","):
        torch.manual_seed(0)
        global_model = Net()
        strategy = make_strategy(name, context.run_config["fraction-train"])
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord(global_model.state_dict()),
                                train_config=ConfigRecord({"lr": context.run_config["lr"]}),
                                num_rounds=context.run_config["num-server-rounds"])
        out = context.run_config["out"]
        if out:  # the final model and the metrics, for the test: OUT/<strategy>.json
            state = result.arrays.to_torch_state_dict()
            with open(os.path.join(out, f"{name}.json"), "w") as f:
                json.dump({"model": {k: v.double().flatten().tolist() for k, v in state.items()},
                           "train": {str(k): dict(v) for k, v in result.train_metrics_clientapp.items()},
                           "evaluate": {str(k): dict(v) for k, v in result.evaluate_metrics_clientapp.items()}}, f)

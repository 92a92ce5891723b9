"""A ClientApp of a user's bilevel problem given as a task of zofl's protocol (tests/test_user_app.py): the task
named by the App's run-config ``task`` (a zofl task here; a user's own object in their App)."""
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from zofl.client import train_task
from zofl.tasks import load_task

app = ClientApp()


@app.train()
def train(msg: Message, context: Context):
    return train_task(msg, context, load_task(context.run_config["task"]))

"""userapp: A Flower / PyTorch app (the task: model, data, training, as Flower's PyTorch template has them)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class Net(nn.Module):
    """Model (simple CNN adapted from 'PyTorch: A 60 Minute Blitz'), for 1 x 16 x 16 images."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(4, 8, 3)
        self.fc1 = nn.Linear(8 * 2 * 2, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 8 * 2 * 2)
        return self.fc2(F.relu(self.fc1(x)))


class Images(Dataset):
    """Items as Flower's tutorial has them (dicts of "img" and "label")."""

    def __init__(self, x, y):
        self.x, self.y = torch.as_tensor(x), torch.as_tensor(y)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"img": self.x[i], "label": self.y[i]}


def make_partition(partition_id: int, n: int = 48):
    """A partition of a small image set: 4 classes, each a fixed pattern plus noise (made here, no download)."""
    patterns = np.random.default_rng(1234).normal(size=(4, 1, 16, 16)).astype(np.float32)
    rng = np.random.default_rng(100 + partition_id)
    y = rng.integers(0, 4, size=n)
    x = patterns[y] + 0.8 * rng.normal(size=(n, 1, 16, 16)).astype(np.float32)
    return x.astype(np.float32), y.astype(np.int64)


def load_data(partition_id: int, num_partitions: int):
    """Partition data: a train and a test DataLoader."""
    x, y = make_partition(partition_id)
    cut = int(0.75 * len(y))
    trainloader = DataLoader(Images(x[:cut], y[:cut]), batch_size=8, shuffle=True)
    testloader = DataLoader(Images(x[cut:], y[cut:]), batch_size=16)
    return trainloader, testloader


def train(net, trainloader, epochs, lr, device):
    """Train the model on the training set."""
    net.to(device)
    criterion = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    running_loss = 0.0
    for _ in range(epochs):
        for batch in trainloader:
            images, labels = batch["img"].to(device), batch["label"].to(device)
            optimizer.zero_grad()
            loss = criterion(net(images), labels)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
    return running_loss / (epochs * len(trainloader))


def test(net, testloader, device):
    """Validate the model on the test set."""
    net.to(device)
    criterion = torch.nn.CrossEntropyLoss()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for batch in testloader:
            images, labels = batch["img"].to(device), batch["label"].to(device)
            outputs = net(images)
            loss += criterion(outputs, labels).item()
            correct += (torch.max(outputs.data, 1)[1] == labels).sum().item()
    return loss / len(testloader), correct / len(testloader.dataset)

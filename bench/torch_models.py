"""The training stack's models written with torch.nn: the same module tree, names and shapes as
synoros::nn, so a state_dict maps one to one."""
import torch
from torch import nn


def mlp(classes=10, hidden=256):
    return nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, classes))


def lenet(classes=10):
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Conv2d(6, 16, 5),
                         nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(),
                         nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, classes))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))
        else:
            self.shortcut = None

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (self.shortcut(x) if self.shortcut is not None else x))


class ResNetMini(nn.Module):
    def __init__(self, classes=10, width=16, blocks=1):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)

        def stage(cin, cout, stride):
            return nn.Sequential(*[BasicBlock(cin if b == 0 else cout, cout, stride if b == 0 else 1)
                                   for b in range(blocks)])
        self.layer1 = stage(width, width, 1)
        self.layer2 = stage(width, 2 * width, 2)
        self.layer3 = stage(2 * width, 4 * width, 2)
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.layer3(self.layer2(self.layer1(y)))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))


def make(name, classes=10):
    if name == "mlp":
        return mlp(classes)
    if name == "lenet":
        return lenet(classes)
    if name == "resnet-mini":
        return ResNetMini(classes)
    raise ValueError("unknown model " + name)

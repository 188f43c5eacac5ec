"""PyTorch eager versions of the side-by-side scenarios. Run by compare.py in a subprocess."""
import json
import sys
import time

import torch
from scenario_list import MATMUL_SHAPES, matmul_name
try:
    from threadpoolctl import threadpool_limits
except ImportError:  # PyTorch 2.x's environment (.peers/) has no threadpoolctl; only main() needs it
    threadpool_limits = None


def tiny_mlp(with_sgd):
    torch.manual_seed(0)
    x = torch.randn(8, 16)
    t = torch.randn(8, 8)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.MSELoss()

    def step():
        for p in model.parameters():
            p.grad = None
        loss = loss_fn(model(x), t)
        loss.backward()
        if with_sgd:
            opt.step()
    return step


def eltwise_chain():
    torch.manual_seed(0)
    x = torch.randn(1024, 1024)
    return lambda: torch.tanh((torch.sigmoid(torch.relu(x * 1.5 + 0.5) * x) - 0.25) * 2)


def bias_gelu_tanh():
    torch.manual_seed(0)
    x = torch.randn(4096, 3072)
    b = torch.randn(3072)
    return lambda: torch.nn.functional.gelu(x + b, approximate="tanh")


def matmul(bt, m, k, n):
    torch.manual_seed(0)
    a = torch.randn(bt, m, k) if bt > 1 else torch.randn(m, k)
    b = torch.randn(bt, k, n) if bt > 1 else torch.randn(k, n)
    return lambda: torch.matmul(a, b)


def conv3x3():
    torch.manual_seed(0)
    x = torch.randn(32, 32, 28, 28)
    w = torch.randn(64, 32, 3, 3) * 0.05
    return lambda: torch.nn.functional.conv2d(x, w, padding=1)


def depthwise3x3():
    torch.manual_seed(0)
    x = torch.randn(32, 32, 28, 28)
    w = torch.randn(32, 1, 3, 3) * 0.3
    return lambda: torch.nn.functional.conv2d(x, w, padding=1, groups=32)


def train_classifier(name):
    from torch_models import make
    torch.manual_seed(0)
    model = make(name)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(64, 1, 28, 28)
    y = torch.arange(64) % 10

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return step


def infer_classifier(name, batch):
    from torch_models import make
    torch.manual_seed(0)
    model = make(name).eval()
    x = torch.randn(batch, 1, 28, 28)

    def forward():
        with torch.no_grad():
            model(x)
    return forward


SCENARIOS = {
    "Conv3x3": conv3x3,
    "Conv3x3/winograd": conv3x3,  # the engine's conv3x3 op; PyTorch's convolution is the same
    "Depthwise3x3": depthwise3x3,
    "EltwiseChain": eltwise_chain,
    "BiasGeluTanh": bias_gelu_tanh,
    "TinyMLP/FwdBwd": lambda: tiny_mlp(False),
    "TinyMLP/SgdStep": lambda: tiny_mlp(True),
}
for _m in ("mlp", "lenet", "resnet-mini"):
    SCENARIOS["Train/%s/batch:64" % _m] = (lambda m: lambda: train_classifier(m))(_m)
for _b in (1, 64):
    SCENARIOS["Infer/resnet-mini/batch:%d" % _b] = (lambda b: lambda: infer_classifier("resnet-mini", b))(_b)
for _s in MATMUL_SHAPES:
    SCENARIOS[matmul_name(_s)] = (lambda s: lambda: matmul(*s))(_s)


def time_ns(fn, min_time=0.5):
    for _ in range(50):
        fn()
    n, elapsed = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time:
            return elapsed * 1e9 / n
        n *= 2


def main():
    threads = int(sys.argv[1])
    names = sys.argv[2:]
    torch.set_num_threads(threads)
    out = {}
    with threadpool_limits(limits=threads):
        for name in names:
            out[name] = time_ns(SCENARIOS[name]())
    print(json.dumps(out))


if __name__ == "__main__":
    main()

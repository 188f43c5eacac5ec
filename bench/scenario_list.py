"""Names and shapes of the side-by-side scenarios (shared by compare.py and torch_scenarios.py)."""

# (batch, M, K, N): squares, skinny, odd, and the small matmuls of the MLP and of attention.
MATMUL_SHAPES = [(1, 64, 64, 64), (1, 128, 128, 128), (1, 256, 256, 256), (1, 512, 512, 512),
                 (1, 1024, 1024, 1024), (1, 2048, 2048, 2048), (1, 1, 512, 512), (1, 512, 512, 1),
                 (1, 127, 127, 127), (1, 513, 513, 513), (1, 8, 16, 32), (32, 128, 64, 128)]


def matmul_name(s):
    return "Matmul/batch:%d/M:%d/K:%d/N:%d" % s

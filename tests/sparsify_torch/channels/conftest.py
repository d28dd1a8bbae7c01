"""Small models shared by the channel-pruning tests."""
import pytest
import torch
from torch import nn



@pytest.fixture(autouse=True)
def one_torch_thread():
    """One intra-op thread per test process: CI runs ``-n 2`` on 2 shared cores, and more threads than cores
    make OpenMP workers spin against each other (the model zoo took 4x longer with 2 threads per worker)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class ResidualNet(nn.Module):
    """stem -> (conv-bn-relu-conv-bn) + skip -> concat with a side branch -> pool -> linear."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.stem_bn = nn.BatchNorm2d(8)
        self.conv1 = nn.Conv2d(8, 6, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 8, 1)
        self.bn2 = nn.BatchNorm2d(8)
        self.side = nn.Conv2d(8, 4, 1)
        self.dw = nn.Conv2d(12, 12, 3, padding=1, groups=12)
        self.head = nn.Conv2d(12, 5, 1)
        self.fc = nn.Linear(5 * 4 * 4, 3)

    def forward(self, x):
        x = torch.relu(self.stem_bn(self.stem(x)))
        y = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(x + self.bn2(self.conv2(y)))
        x = torch.cat([x, torch.relu(self.side(x))], dim=1)
        x = torch.relu(self.head(self.dw(x)))
        x = nn.functional.adaptive_avg_pool2d(x, 4)
        return self.fc(x.flatten(1))


class Wrapper(nn.Module):
    """A model whose interesting part is a submodule (for entry_point tests)."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 6, 3), nn.ReLU(), nn.Conv2d(6, 4, 3))
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        return self.head(torch.relu(self.backbone(x)))


def mse_loss(out, sample):
    return out.float().pow(2).mean()


@pytest.fixture
def residual_net():
    torch.manual_seed(0)
    return ResidualNet().eval()


@pytest.fixture
def batches():
    g = torch.Generator().manual_seed(1)
    return [torch.randn(2, 3, 8, 8, generator=g) for _ in range(2)]

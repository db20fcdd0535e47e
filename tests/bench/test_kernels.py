"""The kernel benchmark without PyTorch: its columns read n/a and it says why, once (timings are
never asserted)."""

import sys

from ascend_grad.bench import kernels


def test_without_torch_the_columns_are_na_and_it_says_why(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    kernels._torch.cache_clear()
    try:
        assert kernels._torch() is None and kernels._torch() is None
    finally:
        kernels._torch.cache_clear()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "PyTorch is not installed" in lines[0] and "[torch]" in lines[0]

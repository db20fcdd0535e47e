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


def test_the_exporter_spelling_computes_group_norm_swish():
    """The competitor of the GroupNormSwish rows computes the op itself (else its ratio means nothing)."""
    import numpy as np
    import onnxruntime as ort

    from ascend_grad import ops
    from ascend_grad.testing import assert_close

    rng = np.random.default_rng(0)
    shape, G = (2, 12, 5, 7), 3
    x = rng.standard_normal(shape).astype(np.float32) * 3 + 1
    gamma, beta = rng.standard_normal(12).astype(np.float32), rng.standard_normal(12).astype(np.float32)
    model = kernels.exporter_group_norm_swish(shape, G, np.dtype(np.float32))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": x, "gamma": gamma.reshape(12, 1, 1), "beta": beta.reshape(12, 1, 1)})
    want = ops.reference.group_norm_swish(x, gamma, beta, G)[0]
    assert_close(y, want)


def test_the_channels_last_competitor_reads_the_nhwc_arrays():
    """ATen's side of the NHWC rows runs on channels_last views of the NHWC arrays: GroupNorm there
    computes the op (transposed back to NHWC), else its ratio means nothing."""
    import numpy as np
    import torch

    from ascend_grad import ops
    from ascend_grad.testing import assert_close

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 5, 3, 12)) * 2 + 1).astype(np.float32)  # (N, H, W, C)
    gamma, beta = rng.standard_normal(12).astype(np.float32), rng.standard_normal(12).astype(np.float32)
    attrs, to_torch, label = kernels._layout("NHWC")
    assert attrs == {"data_format": "NHWC"} and label == "NHWC "
    xt = to_torch(torch, x)
    assert tuple(xt.shape) == (2, 12, 5, 3) and xt.is_contiguous(memory_format=torch.channels_last)
    z = torch.ops.aten.native_group_norm(xt, to_torch(torch, gamma), to_torch(torch, beta), 2, 12, 15, 3, 1e-5)[0]
    want = ops.reference.group_norm_swish(x, gamma, beta, 3, data_format="NHWC", activate_swish=False)[0]
    assert_close(z.permute(0, 2, 3, 1).numpy(), want)


def test_the_machine_line_names_an_arm_cpu():
    """aarch64's /proc/cpuinfo has no model name: the benchmark names the CPU from its implementer
    and part numbers (here the Kunpeng 920 of an Atlas host, the file the emulated tests use)."""
    from pathlib import Path

    from ascend_grad.bench.report import cpu_model

    cpuinfo = (Path(__file__).resolve().parents[1] / "aarch64" / "cpuinfo").read_text()
    assert cpu_model(cpuinfo) == "HiSilicon Kunpeng 920 (TaiShan v110), CPU implementer 0x48 part 0xd01"
    assert cpu_model("model name\t: AMD EPYC\nflags\t: avx2\n") == "AMD EPYC"

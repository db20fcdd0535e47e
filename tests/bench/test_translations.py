"""The translation benchmark's check: a translation that differs from PyTorch's op is refused
before anything is timed (timings are never asserted)."""

import pytest

torch = pytest.importorskip("torch")

from ascend_grad.bench import translations  # noqa: E402


def test_a_case_is_checked_then_timed():
    case = translations._conv(2, 4, 8, 6, 3, stride=2, padding=1)
    row = translations.measure(torch, case, threads=1)
    assert row.case == case.label and row.onnxruntime > 0 and row.torch > 0


def test_a_wrong_translation_is_refused():
    """The same call exported, but checked against another op (a scaled grad_output): it must fail."""
    case = translations._conv(2, 4, 8, 6, 3)
    real = case.op
    case.op = lambda t: (lambda go, *rest: real(t)(go * 2, *rest))
    case.exported = lambda t: real(t)
    with pytest.raises(AssertionError, match="differs from PyTorch's"):
        translations.measure(torch, case, threads=1)


def test_every_case_has_a_family_and_a_unique_label():
    labels = [c.label for cases in translations.CASES.values() for c in cases]
    assert len(labels) == len(set(labels)) and all(translations.CASES.values())

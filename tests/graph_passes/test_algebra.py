"""The polynomial algebra the proofs rest on: exact division."""

from ascend_grad.graph_passes._algebra import Poly, divide

A, B, C = Poly.atom(0), Poly.atom(1), Poly.atom(2)
ONE = Poly.constant(1.0)


def test_divide_exact():
    q = A + B.scale(2.0) + (A * C).scale(-0.5)
    d = A * A + C.scale(3.0) + ONE
    assert divide(d * q, q, [0, 1]) == d
    assert divide(q, q, [1, 0]) == ONE


def test_divide_refuses_what_is_not_a_multiple():
    q = ONE + A
    assert divide(A * A + ONE, q, [0]) is None  # (1 + a)(a - 1) + 2
    assert divide((ONE + A) * B + C.scale(1e-3), q, [0, 1, 2]) is None

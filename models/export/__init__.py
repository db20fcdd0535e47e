"""The PyTorch exporter: a module and its example inputs -> one ONNX graph of the forward, the loss
and the backward (`export_training_graph`, training_graph.py).

One module per ATen family for the translations torch.onnx lacks (onnxscript functions, as
onnxscript's torch_lib groups them), and ascend.py for our own ops; `TABLE` holds them all, for
torch.onnx's `custom_translation_table`. An op in TABLE is never decomposed before it is translated; an op
in DECOMPOSE is always decomposed (torch.onnx's own translation of it is wrong for training).
"""

from ascend_grad.models.export import ascend, convolution, normalization, pooling, tensor, upsample

TABLE = {**ascend.TABLE, **convolution.TABLE, **normalization.TABLE, **pooling.TABLE, **tensor.TABLE,
         **upsample.TABLE}
# torch.onnx translates these wrongly for a training step: PyTorch's decompositions are used instead
DECOMPOSE = normalization.DECOMPOSE


from ascend_grad.models.export.training_graph import export_training_graph  # noqa: E402, F401  (it reads TABLE)

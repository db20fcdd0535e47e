"""The PyTorch exporter: a module and its example inputs -> one ONNX graph of the forward, the loss
and the backward (`export_training_graph`, training_graph.py).

One module per ATen family for the translations torch.onnx lacks (onnxscript functions, as
onnxscript's torch_lib groups them), and ascend.py for our own ops; `TABLE` holds them all, for
torch.onnx's `custom_translation_table`. An op in TABLE is never decomposed before it is translated.
"""

from ascend_grad.models.export import ascend, convolution, pooling, tensor

TABLE = {**ascend.TABLE, **convolution.TABLE, **pooling.TABLE, **tensor.TABLE}


from ascend_grad.models.export.training_graph import export_training_graph  # noqa: E402  (it reads TABLE)

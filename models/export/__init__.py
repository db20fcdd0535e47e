"""The PyTorch exporter: a module and its example inputs -> one ONNX graph of the forward, the loss
and the backward. One module per ATen family for the translations torch.onnx lacks (onnxscript
functions, as onnxscript's torch_lib groups them); `TABLE` holds them all, for torch.onnx's
`custom_translation_table`. An op in TABLE is never decomposed before it is translated."""

from ascend_grad.models.export import convolution, pooling, tensor

TABLE = {**convolution.TABLE, **pooling.TABLE, **tensor.TABLE}

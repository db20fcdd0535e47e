"""The kernels onnxruntime-cann 1.24.4 has, as data: which node the CANN execution provider can take.

Read from the provider's source (onnxruntime/core/providers/cann/: cann_execution_provider.cc's
RegisterCANNKernels and each op's .cc for its type constraints and memory types) and checked kernel
for kernel against the wheel's own registry (`get_all_opkernel_def()` under the simulated CANN
runtime: tests/graph_passes/ascend/test_kernel_table.py). Each row is one registration, or several
that differ only in the one dtype of a single type constraint:

    (op_type, first version, last version, {type constraint: dtypes})

`last version` None is a kernel registered without one (ONNX_OPERATOR_KERNEL): onnxruntime then
matches it only to a node whose op schema has exactly `first version` as its since_version
(kernel_registry.cc: a Reshape kernel "14" does not take Reshape-19, which every model of opset 19
and later holds). A versioned kernel takes since_versions first..last.

Everything not here runs on the host (the CPU execution provider), except our own ops, which the
kernel library registers for CANN (LIBRARY_KERNELS). onnxruntime's own CPU fallback
(GetCpuPreferredNodes) starts only from tensors a CANN kernel leaves in host memory, and no CANN
kernel of 1.24.4 declares an output on the host, so it moves nothing.
"""

from __future__ import annotations

# onnxruntime's type lists, in its order (DataTypeImpl::AllFixedSizeTensorTypes, ...)
FIXED_SIZE = ("float", "double", "int64", "uint64", "int32", "uint32", "int16", "uint16", "int8", "uint8",
              "float16", "bfloat16", "bool")
FLOAT8 = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")
SEQUENCES = tuple(f"seq(tensor({t}))" for t in FIXED_SIZE)
SEQUENCES8 = tuple(f"seq(tensor({t}))" for t in FLOAT8)
INTEGERS = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")
CAST_TO = ("float16", "float", "double", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool")
HALF_FLOAT = ("float16", "float")
IEEE = ("float16", "float", "double")
ADD_14 = ("uint8", "int8", "int16", "int32", "int64", "float16", "float", "double")
BINARY_14 = ("uint8", "uint16", "int8", "int16", "int32", "int64", "float16", "float", "double")  # Sub, Mul, Div
BINARY_7 = ("int32", "int64", "float16", "float", "double")

ONNX_KERNELS: tuple[tuple[str, int, int | None, dict[str, tuple[str, ...]]], ...] = (
    ("Abs", 1, 5, {"T": HALF_FLOAT}),
    ("Abs", 6, 12, {"T": ("int32", "float16", "float")}),
    ("Abs", 13, None, {"T": ("int32", "float16", "float")}),
    ("Add", 7, 12, {"T": BINARY_7}),
    ("Add", 13, 13, {"T": BINARY_7}),
    ("Add", 14, None, {"T": ADD_14}),
    ("AveragePool", 7, 9, {"T": IEEE}),
    ("AveragePool", 10, 10, {"T": IEEE}),
    ("AveragePool", 11, None, {"T": IEEE}),
    ("BatchNormalization", 7, 8, {"T": ("float",)}),
    ("BatchNormalization", 9, 13, {"T": ("float",)}),
    ("BatchNormalization", 14, 14, {"T": ("float",), "U": ("float",)}),
    ("BatchNormalization", 15, None, {"T": ("float",), "T1": ("float",), "T2": ("float",)}),
    ("Cast", 6, 8, {"T1": (*INTEGERS, "float16", "float", "double", "bool"), "T2": CAST_TO}),
    ("Cast", 9, 12, {"T1": (*INTEGERS, "float16", "float", "double", "bool"), "T2": CAST_TO}),
    ("Cast", 13, None, {"T1": (*INTEGERS, "float16", "float", "double", "bool"), "T2": CAST_TO}),
    ("Ceil", 1, 5, {"T": HALF_FLOAT}),
    ("Ceil", 6, 12, {"T": HALF_FLOAT}),
    ("Ceil", 13, None, {"T": HALF_FLOAT}),
    ("Conv", 1, 10, {"T": HALF_FLOAT}),
    ("Conv", 11, None, {"T": HALF_FLOAT}),
    ("Cos", 7, None, {"T": HALF_FLOAT}),
    ("Div", 7, 12, {"T": BINARY_7}),
    ("Div", 13, 13, {"T": BINARY_7}),
    ("Div", 14, None, {"T": BINARY_14}),
    ("Dropout", 7, 9, {"T": IEEE}),
    ("Dropout", 10, 11, {"T": IEEE, "T1": ("bool",)}),
    ("Dropout", 12, 12, {"T": ("float16",), "T1": ("float16",), "T2": ("bool",)}),
    ("Dropout", 12, 12, {"T": ("float",), "T1": ("float",), "T2": ("bool",)}),
    ("Dropout", 13, None, {"T": ("float16",), "T1": ("float16",), "T2": ("bool",)}),
    ("Dropout", 13, None, {"T": ("float",), "T1": ("float",), "T2": ("bool",)}),
    ("Erf", 9, 12, {"T": HALF_FLOAT}),
    ("Erf", 13, None, {"T": HALF_FLOAT}),
    ("Exp", 1, 5, {"T": ("float16",)}),
    ("Exp", 6, 12, {"T": ("float16",)}),
    ("Exp", 13, None, {"T": ("float16",)}),
    ("Flatten", 1, 8, {"T": HALF_FLOAT}),
    ("Flatten", 9, 10, {"T": (*INTEGERS, "float16", "float")}),
    ("Flatten", 11, 12, {"T": (*INTEGERS, "float16", "float")}),
    ("Flatten", 13, None, {"T": (*INTEGERS, "float16", "float")}),
    ("Floor", 1, 5, {"T": HALF_FLOAT}),
    ("Floor", 6, 12, {"T": HALF_FLOAT}),
    ("Floor", 13, None, {"T": HALF_FLOAT}),
    ("Gemm", 7, 8, {"T": ("float16",)}),
    ("Gemm", 9, 10, {"T": ("float16",)}),
    ("Gemm", 11, 12, {"T": ("float16",)}),
    ("Gemm", 13, None, {"T": ("float16",)}),
    ("GlobalAveragePool", 1, None, {"T": IEEE}),
    ("GlobalMaxPool", 1, None, {"T": IEEE}),
    ("Identity", 1, 12, {"T": FIXED_SIZE}),
    ("Identity", 13, 13, {"T": FIXED_SIZE}),
    ("Identity", 14, 18, {"V": FIXED_SIZE + SEQUENCES}),
    ("Identity", 19, None, {"V": FIXED_SIZE + FLOAT8 + SEQUENCES + SEQUENCES8}),
    ("Log", 1, 5, {"T": HALF_FLOAT}),
    ("Log", 6, 12, {"T": HALF_FLOAT}),
    ("Log", 13, None, {"T": HALF_FLOAT}),
    ("MatMul", 1, 8, {"T": HALF_FLOAT}),
    ("MatMul", 9, 12, {"T": ("float16", "float", "int32")}),
    ("MatMul", 13, None, {"T": ("bfloat16", "float16", "float", "int32")}),
    ("MaxPool", 1, 7, {"T": IEEE}),
    ("MemcpyFromHost", 1, None, {"T": FIXED_SIZE + SEQUENCES}),
    ("MemcpyToHost", 1, None, {"T": FIXED_SIZE + SEQUENCES}),
    ("Mul", 7, 12, {"T": BINARY_7}),
    ("Mul", 13, 13, {"T": BINARY_7}),
    ("Mul", 14, None, {"T": BINARY_14}),
    ("Neg", 1, 5, {"T": HALF_FLOAT}),
    ("Neg", 6, 12, {"T": ("int8", "int32", "float16", "float")}),
    ("Neg", 13, None, {"T": ("int8", "int32", "float16", "float")}),
    ("Reciprocal", 1, 5, {"T": HALF_FLOAT}),
    ("Reciprocal", 6, 12, {"T": HALF_FLOAT}),
    ("Reciprocal", 13, None, {"T": HALF_FLOAT}),
    ("Relu", 6, 12, {"T": IEEE}),
    ("Relu", 13, 13, {"T": IEEE}),
    ("Relu", 14, None, {"T": ("int8", "int16", "int32", "int64", "float16", "float", "double")}),
    ("Reshape", 1, 4, {"T": FIXED_SIZE}),
    ("Reshape", 5, 12, {"T": FIXED_SIZE, "shape": ("int64",)}),
    ("Reshape", 13, 13, {"T": FIXED_SIZE, "shape": ("int64",)}),
    ("Reshape", 14, None, {"T": FIXED_SIZE, "shape": ("int64",)}),
    ("Round", 11, None, {"T": HALF_FLOAT}),
    ("Sin", 7, None, {"T": HALF_FLOAT}),
    ("Sqrt", 1, 5, {"T": HALF_FLOAT}),
    ("Sqrt", 6, 12, {"T": HALF_FLOAT}),
    ("Sqrt", 13, None, {"T": HALF_FLOAT}),
    ("Sub", 7, 12, {"T": BINARY_7}),
    ("Sub", 13, 13, {"T": BINARY_7}),
    ("Sub", 14, None, {"T": BINARY_14}),
    ("Transpose", 1, None, {"T": (*INTEGERS, "float16", "float", "bool")}),
)

# Inputs a CANN kernel reads from host memory (KernelDefBuilder::InputMemoryType(OrtMemTypeCPUInput)):
# no copy to the device for them, a copy to the host if the NPU computed them.
HOST_INPUTS: dict[tuple[str, int], tuple[int, ...]] = {
    ("Reshape", 5): (1,), ("Reshape", 13): (1,), ("Reshape", 14): (1,),  # the shape
    ("Dropout", 12): (1, 2), ("Dropout", 13): (1, 2),  # ratio, training_mode
}

# The kernels our library registers for "CANNExecutionProvider" (runtime_ext/cann/register.cc), the
# dtype combinations each op's seed allows: a node of ours whose dtypes are not listed runs on its
# CPU kernel. SiluBackward and GroupNormSwishGrad (all nine tensors) take one dtype per call;
# MishBackward any (gradOutput, self) pair (aclnn deduces the compute dtype, float for any mix);
# GroupNormSwish gamma/beta in x's dtype or float.
OP_DTYPES = ("float", "float16", "bfloat16")
LIBRARY_KERNELS: dict[str, tuple[tuple[str, ...], ...]] = {  # op -> accepted input dtypes, in input order
    "SiluBackward": tuple((t, t) for t in OP_DTYPES),
    "MishBackward": tuple((a, b) for a in OP_DTYPES for b in OP_DTYPES),
    "GroupNormSwishGrad": tuple((t,) * 6 for t in OP_DTYPES),
    "GroupNormSwish": tuple((t, u, u) for t in OP_DTYPES for u in OP_DTYPES if u in (t, "float")),
}


def onnx_kernels(op_type: str) -> list[tuple[int, int | None, dict[str, tuple[str, ...]]]]:
    """The table's rows for one ai.onnx op: (first, last, constraints)."""
    return [(first, last, constraints) for op, first, last, constraints in ONNX_KERNELS if op == op_type]


def version_matches(first: int, last: int | None, since_version: int) -> bool:
    """onnxruntime's rule (kernel_registry.cc, VerifyKernelDef): a kernel without a last version
    takes only its own first version."""
    if last is None:
        return since_version == first
    return first <= since_version <= last


def host_inputs(op_type: str, first: int) -> tuple[int, ...]:
    return HOST_INPUTS.get((op_type, first), ())

# The ops outside ai.onnx that the wheel's CPU execution provider has (its contrib ops; the wheel
# is an inference build: training ops such as com.microsoft::ConvGrad or Scale are not there, and a
# graph holding one cannot be loaded).
CPU_CONTRIB_OPS: dict[str, frozenset[str]] = {
    "com.microsoft": frozenset((
        "Attention", "AttnLSTM", "BeamSearch", "BiasGelu", "BifurcationDetector", "CDist",
        "ConvTransposeWithDynamicPads", "CropAndResize", "DecoderMaskedMultiHeadAttention", "DequantizeLinear",
        "DynamicQuantizeLSTM", "DynamicQuantizeMatMul", "DynamicTimeWarping", "EmbedLayerNormalization",
        "ExpandDims", "FastGelu", "FusedConv", "FusedGemm", "FusedMatMul", "GatherBlockQuantized", "GatherND",
        "Gelu", "GreedySearch", "GridSample", "GroupQueryAttention", "Inverse", "MatMulBnb4", "MatMulFpQ4",
        "MatMulInteger16", "MatMulIntegerToFloat", "MatMulNBits", "MaxpoolWithMask", "MoE",
        "MultiHeadAttention", "MurmurHash3", "NGramRepeatBlock", "NhwcMaxPool", "Pad", "QAttention",
        "QEmbedLayerNormalization", "QGemm", "QLinearAdd", "QLinearAveragePool", "QLinearConcat", "QLinearConv",
        "QLinearGlobalAveragePool", "QLinearLeakyRelu", "QLinearMul", "QLinearSigmoid", "QLinearSoftmax",
        "QLinearWhere", "QMoE", "QuantizeLinear", "QuickGelu", "Range", "RotaryEmbedding", "SampleOp",
        "Sampling", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "SparseAttention",
        "SparseToDenseMatMul", "Tokenizer", "TransposeMatMul", "Trilu", "UnfoldTensor", "Unique",
        "WhisperBeamSearch", "WordConvEmbedding")),
    "ai.onnx.ml": frozenset((
        "ArrayFeatureExtractor", "Binarizer", "CastMap", "CategoryMapper", "DictVectorizer", "FeatureVectorizer",
        "Imputer", "LabelEncoder", "LinearClassifier", "LinearRegressor", "Normalizer", "OneHotEncoder",
        "SVMClassifier", "SVMRegressor", "Scaler", "TreeEnsemble", "TreeEnsembleClassifier",
        "TreeEnsembleRegressor", "ZipMap")),
    "com.microsoft.nchwc": frozenset((
        "AveragePool", "Conv", "GlobalAveragePool", "GlobalMaxPool", "MaxPool", "ReorderInput", "ReorderOutput",
        "Upsample")),
}

# The CPU execution provider's float16 kernels (the wheel's registry): (op, first, last, the type
# constraints that take float16). A host node reading float16 that no row takes is left to
# onnxruntime's InsertCastTransformer (host_float16.py).
CPU_FLOAT16_KERNELS: tuple[tuple[str, int, int | None, tuple[str, ...]], ...] = (
    ("Attention", 23, 23, ("T1", "T2", "U")), ("Attention", 24, None, ("T1", "T2", "U")),
    ("Cast", 6, 12, ("T1", "T2")), ("Cast", 13, 18, ("T1", "T2")), ("Cast", 19, 20, ("T1", "T2")),
    ("Cast", 21, 22, ("T1", "T2")), ("Cast", 23, 23, ("T1", "T2")), ("Cast", 24, 24, ("T1", "T2")),
    ("Cast", 25, None, ("T1", "T2")), ("Clip", 12, 12, ("T",)), ("Clip", 13, None, ("T",)),
    ("Compress", 9, 10, ("T",)), ("Compress", 11, None, ("T",)), ("Concat", 4, 10, ("T",)),
    ("Concat", 11, 12, ("T",)), ("Concat", 13, None, ("T",)), ("ConstantOfShape", 9, 19, ("T2",)),
    ("ConstantOfShape", 20, 20, ("T2",)), ("ConstantOfShape", 21, 22, ("T2",)), ("ConstantOfShape", 23, 23, ("T2",)),
    ("ConstantOfShape", 24, 24, ("T2",)), ("ConstantOfShape", 25, None, ("T2",)),
    ("DequantizeLinear", 19, 20, ("T2",)), ("DequantizeLinear", 21, 22, ("T2",)),
    ("DequantizeLinear", 23, 23, ("T2",)), ("DequantizeLinear", 24, 24, ("T2",)),
    ("DequantizeLinear", 25, None, ("T2",)), ("Dropout", 7, 9, ("T",)), ("Dropout", 10, 11, ("T",)),
    ("DynamicSlice", 1, None, ("T",)), ("Expand", 8, 12, ("T",)), ("Expand", 13, None, ("T",)),
    ("Flatten", 1, 8, ("T",)), ("Flatten", 9, 10, ("T",)), ("Flatten", 11, 12, ("T",)), ("Flatten", 13, 20, ("T",)),
    ("Flatten", 21, 22, ("T",)), ("Flatten", 23, 23, ("T",)), ("Flatten", 24, 24, ("T",)),
    ("Flatten", 25, None, ("T",)), ("Gather", 1, 10, ("T",)), ("Gather", 11, 12, ("T",)),
    ("Gather", 13, None, ("T",)), ("GatherElements", 11, 12, ("T",)), ("GatherElements", 13, None, ("T",)),
    ("GatherND", 11, 11, ("T",)), ("GatherND", 12, 12, ("T",)), ("GatherND", 13, None, ("T",)),
    ("Identity", 1, 12, ("T",)), ("Identity", 13, 13, ("T",)), ("Identity", 14, 15, ("V",)),
    ("Identity", 16, 18, ("V",)), ("Identity", 19, 20, ("V",)), ("Identity", 21, 22, ("V",)),
    ("Identity", 23, 23, ("V",)), ("Identity", 24, 24, ("V",)), ("Identity", 25, None, ("V",)),
    ("If", 1, 10, ("V",)), ("If", 11, 12, ("V",)), ("If", 13, 15, ("V",)), ("If", 16, 18, ("V",)),
    ("If", 19, 20, ("V",)), ("If", 21, 22, ("V",)), ("If", 23, 23, ("V",)), ("If", 24, 24, ("V",)),
    ("If", 25, None, ("V",)), ("IsInf", 20, None, ("T1",)), ("IsNaN", 9, 12, ("T1",)), ("IsNaN", 13, 19, ("T1",)),
    ("IsNaN", 20, None, ("T1",)), ("LayerNormalization", 1, 16, ("T", "U", "V")),
    ("LayerNormalization", 17, None, ("T",)), ("Loop", 1, 10, ("V",)), ("Loop", 11, 12, ("V",)),
    ("Loop", 13, 15, ("V",)), ("Loop", 16, 18, ("V",)), ("Loop", 19, 20, ("V",)), ("Loop", 21, 22, ("V",)),
    ("Loop", 23, 23, ("V",)), ("Loop", 24, 24, ("V",)), ("Loop", 25, None, ("V",)), ("Max", 12, 12, ("T",)),
    ("Max", 13, None, ("T",)), ("MemcpyFromHost", 1, None, ("T",)), ("MemcpyToHost", 1, None, ("T",)),
    ("Min", 12, 12, ("T",)), ("Min", 13, None, ("T",)), ("Mod", 10, 12, ("T",)), ("Mod", 13, None, ("T",)),
    ("Optional", 15, None, ("V",)), ("OptionalGetElement", 15, 17, ("V",)),
    ("OptionalGetElement", 18, None, ("O", "V")), ("OptionalHasElement", 18, None, ("O",)),
    ("QuantizeLinear", 19, 20, ("T1",)), ("QuantizeLinear", 21, 22, ("T1",)),
    ("QuantizeLinear", 23, 23, ("T1", "T2")), ("QuantizeLinear", 24, 24, ("T1", "T2")),
    ("QuantizeLinear", 25, None, ("T1", "T2")), ("RMSNormalization", 23, None, ("T", "V")),
    ("RandomNormalLike", 1, None, ("T1",)), ("RandomUniformLike", 1, None, ("T1",)), ("Reshape", 1, 4, ("T",)),
    ("Reshape", 5, 12, ("T",)), ("Reshape", 13, 13, ("T",)), ("Reshape", 14, 18, ("T",)),
    ("Reshape", 19, 20, ("T",)), ("Reshape", 21, 22, ("T",)), ("Reshape", 23, 23, ("T",)),
    ("Reshape", 24, 24, ("T",)), ("Reshape", 25, None, ("T",)), ("ReverseSequence", 10, None, ("T",)),
    ("RotaryEmbedding", 23, None, ("T",)), ("Round", 11, 21, ("T",)), ("Round", 22, None, ("T",)),
    ("Scan", 8, 8, ("V",)), ("Scan", 9, 10, ("V",)), ("Scan", 11, 15, ("V",)), ("Scan", 16, 18, ("V",)),
    ("Scan", 19, 20, ("V",)), ("Scan", 21, 22, ("V",)), ("Scan", 23, 23, ("V",)), ("Scan", 24, 24, ("V",)),
    ("Scan", 25, None, ("V",)), ("Scatter", 9, 10, ("T",)), ("ScatterElements", 11, 12, ("T",)),
    ("ScatterElements", 13, 15, ("T",)), ("ScatterElements", 16, 17, ("T",)), ("ScatterElements", 18, None, ("T",)),
    ("ScatterND", 11, 12, ("T",)), ("ScatterND", 13, 15, ("T",)), ("ScatterND", 16, 17, ("T",)),
    ("ScatterND", 18, None, ("T",)), ("SequenceAt", 11, None, ("T",)), ("SequenceConstruct", 11, None, ("T",)),
    ("Shape", 1, 12, ("T",)), ("Shape", 13, 14, ("T",)), ("Shape", 15, 18, ("T",)), ("Shape", 19, 20, ("T",)),
    ("Shape", 21, 22, ("T",)), ("Shape", 23, 23, ("T",)), ("Shape", 24, 24, ("T",)), ("Shape", 25, None, ("T",)),
    ("Shrink", 9, None, ("T",)), ("Sign", 9, 12, ("T",)), ("Sign", 13, None, ("T",)),
    ("SimplifiedLayerNormalization", 1, None, ("T", "U", "V")), ("Slice", 1, 9, ("T",)), ("Slice", 10, 10, ("T",)),
    ("Slice", 11, 12, ("T",)), ("Slice", 13, None, ("T",)), ("Split", 2, 10, ("T",)), ("Split", 11, 12, ("T",)),
    ("Split", 13, 17, ("T",)), ("Split", 18, None, ("T",)), ("SplitToSequence", 11, 23, ("T",)),
    ("SplitToSequence", 24, None, ("T",)), ("Squeeze", 1, 10, ("T",)), ("Squeeze", 11, 12, ("T",)),
    ("Squeeze", 13, 20, ("T",)), ("Squeeze", 21, 22, ("T",)), ("Squeeze", 23, 23, ("T",)),
    ("Squeeze", 24, 24, ("T",)), ("Squeeze", 25, None, ("T",)), ("Transpose", 1, 12, ("T",)),
    ("Transpose", 13, 20, ("T",)), ("Transpose", 21, 22, ("T",)), ("Transpose", 23, 23, ("T",)),
    ("Transpose", 24, 24, ("T",)), ("Transpose", 25, None, ("T",)), ("Unsqueeze", 1, 10, ("T",)),
    ("Unsqueeze", 11, 12, ("T",)), ("Unsqueeze", 13, 20, ("T",)), ("Unsqueeze", 21, 22, ("T",)),
    ("Unsqueeze", 23, 23, ("T",)), ("Unsqueeze", 24, 24, ("T",)), ("Unsqueeze", 25, None, ("T",)),
)

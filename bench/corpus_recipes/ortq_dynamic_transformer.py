# onnxruntime quantize_dynamic on the dynamo-exported transformer (run
# torch_dynamo_transformer.py first), uint8 weights, per-channel.
from _common import out
from onnxruntime.quantization import QuantType, quantize_dynamic

quantize_dynamic(
    out("torch_dynamo_transformer"),
    out("ortq_dynamic_transformer"),
    weight_type=QuantType.QUInt8,
    per_channel=True,
)

# onnxscript authoring API: a model that calls two model-local functions in a custom domain
# ("this.custom"),
# one of them nested; dynamic batch dim 'N'. Shows FunctionProto usage in the graph.
import numpy as np
import onnx
from _common import out
from onnxscript import FLOAT, script
from onnxscript import opset18 as op
from onnxscript.values import Opset

custom = Opset("this.custom", 1)


@script(custom)
def GeluTanh(x):
    return 0.5 * x * (op.Tanh(0.7978845608 * (x + 0.044715 * x * x * x)) + 1.0)


@script(custom)
def MlpBlock(x, w1, w2):
    return op.MatMul(GeluTanh(op.MatMul(x, w1)), w2)


@script()
def main(x: FLOAT["N", 16]) -> FLOAT["N", 16]:  # noqa: F821 (onnxscript dim names)
    w1 = op.Constant(
        value=onnx.numpy_helper.from_array(
            np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32) * 0.1, "w1"
        )
    )
    w2 = op.Constant(
        value=onnx.numpy_helper.from_array(
            np.random.default_rng(1).standard_normal((32, 16)).astype(np.float32) * 0.1, "w2"
        )
    )
    return op.Add(MlpBlock(x, w1, w2), x)


model = main.to_model_proto()
onnx.checker.check_model(model)
onnx.save(model, out("onnxscript_local_functions"))

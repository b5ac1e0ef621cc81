# onnxruntime quant_pre_process + quantize_static (QDQ format, per-channel int8 weights, uint8
# activations) on torch_ts_cnn,
# calibrated with 8 random 64x64 images (MinMax).
import os
import tempfile

import numpy as np
from _common import out
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process


class Reader(CalibrationDataReader):
    def __init__(s):
        rng = np.random.default_rng(0)
        s.it = iter(
            [{"image": rng.standard_normal((1, 3, 64, 64)).astype(np.float32)} for _ in range(8)]
        )

    def get_next(s):
        return next(s.it, None)


pre = os.path.join(tempfile.mkdtemp(), "pre.onnx")
quant_pre_process(out("torch_ts_cnn"), pre)
quantize_static(
    pre,
    out("ortq_static_qdq_cnn"),
    Reader(),
    quant_format=QuantFormat.QDQ,
    per_channel=True,
    weight_type=QuantType.QInt8,
    activation_type=QuantType.QUInt8,
)

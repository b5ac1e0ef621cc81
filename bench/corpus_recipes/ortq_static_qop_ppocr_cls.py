# onnxruntime quantize_static in QOperator format (QLinearConv/QLinearMatMul...) on a THIRD-
# PARTY model from part A:
# rapidocr's PP-OCR mobile v2.0 direction classifier (models/rapidocr_ppocr_mobile_v2_cls.onnx),
# calibrated on 8 random 48x192 crops.
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
            [{"x": rng.uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32)} for _ in range(8)]
        )

    def get_next(s):
        return next(s.it, None)


pre = os.path.join(tempfile.mkdtemp(), "pre.onnx")
quant_pre_process(out("rapidocr_ppocr_mobile_v2_cls"), pre, skip_symbolic_shape=True)
quantize_static(
    pre,
    out("ortq_static_qop_ppocr_cls"),
    Reader(),
    quant_format=QuantFormat.QOperator,
    weight_type=QuantType.QUInt8,
    activation_type=QuantType.QUInt8,
)

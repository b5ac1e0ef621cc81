# onnxruntime.quantization.quantize_dynamic on torch_ts_lstm (run torch_ts_lstm.py first): LSTM
# -> com.microsoft DynamicQuantizeLSTM,
# MatMul -> MatMulInteger/DynamicQuantizeLinear (QOperator format, int8 weights).
from _common import out
from onnxruntime.quantization import QuantType, quantize_dynamic

quantize_dynamic(out("torch_ts_lstm"), out("ortq_dynamic_lstm"), weight_type=QuantType.QInt8)

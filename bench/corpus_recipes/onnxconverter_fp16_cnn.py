# onnxconverter-common float16 conversion of torch_ts_cnn (run torch_ts_cnn.py first),
# keep_io_types=True -> fp16 weights, Cast at I/O.
import onnx
from _common import out
from onnxconverter_common import float16

m = float16.convert_float_to_float16(onnx.load(out("torch_ts_cnn")), keep_io_types=True)
onnx.save(m, out("onnxconverter_fp16_cnn"))

# paddle2onnx 2.x: PaddlePaddle 3 dygraph CNN (Conv/BN/Hardswish/pool/Linear) -> paddle.jit.save
# (PIR) -> paddle2onnx.export, opset 13.
import os
import tempfile

import paddle
import paddle2onnx
from _common import out

paddle.seed(0)


class Net(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.f = paddle.nn.Sequential(
            paddle.nn.Conv2D(3, 16, 3, 2, 1),
            paddle.nn.BatchNorm2D(16),
            paddle.nn.Hardswish(),
            paddle.nn.Conv2D(16, 32, 3, 1, 1, groups=16),
            paddle.nn.BatchNorm2D(32),
            paddle.nn.ReLU6(),
            paddle.nn.AdaptiveAvgPool2D(1),
            paddle.nn.Flatten(),
        )
        self.fc = paddle.nn.Linear(32, 4)

    def forward(self, x):
        return paddle.nn.functional.softmax(self.fc(self.f(x)))


net = Net()
net.eval()
d = tempfile.mkdtemp()
prefix = os.path.join(d, "inference")
paddle.jit.save(
    net, prefix, input_spec=[paddle.static.InputSpec([None, 3, None, None], "float32", "x")]
)
print(os.listdir(d))
mf = prefix + (".json" if os.path.exists(prefix + ".json") else ".pdmodel")
paddle2onnx.export(mf, prefix + ".pdiparams", out("paddle2onnx_cnn"), opset_version=13)

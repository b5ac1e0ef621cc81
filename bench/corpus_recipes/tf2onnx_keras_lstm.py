# tf2onnx: Keras 3 Embedding + LSTM + GRU text classifier, dynamic batch & time, opset 15.
import os

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import keras
import tensorflow as tf
import tf2onnx
from _common import out

keras.utils.set_random_seed(0)
inp = keras.Input((None,), dtype="int32", name="tokens")
x = keras.layers.Embedding(500, 32)(inp)
x = keras.layers.LSTM(32, return_sequences=True)(x)
x = keras.layers.GRU(16)(x)
y = keras.layers.Dense(4, activation="softmax")(x)
model = keras.Model(inp, y)
spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
fn = tf.function(lambda tokens: model(tokens, training=False))
tf2onnx.convert.from_function(
    fn, input_signature=spec, opset=15, output_path=out("tf2onnx_keras_lstm")
)

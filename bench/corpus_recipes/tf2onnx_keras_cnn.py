# tf2onnx (from_function on a Keras 3 model's tf.function): NHWC CNN with BatchNorm + Dense,
# dynamic batch, opset 17.
import os

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import keras
import tensorflow as tf
import tf2onnx
from _common import out

keras.utils.set_random_seed(0)
inp = keras.Input((32, 32, 3), name="image")
x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inp)
x = keras.layers.BatchNormalization()(x)
x = keras.layers.DepthwiseConv2D(3, padding="same", activation="relu6")(x)
x = keras.layers.MaxPooling2D()(x)
x = keras.layers.Conv2D(32, 3, padding="same", activation="swish")(x)
x = keras.layers.GlobalAveragePooling2D()(x)
x = keras.layers.Dropout(0.2)(x)
y = keras.layers.Dense(10, activation="softmax")(x)
model = keras.Model(inp, y)
spec = (tf.TensorSpec((None, 32, 32, 3), tf.float32, name="image"),)
fn = tf.function(lambda image: model(image, training=False))
tf2onnx.convert.from_function(
    fn, input_signature=spec, opset=17, output_path=out("tf2onnx_keras_cnn")
)

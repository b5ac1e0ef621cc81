# skl2onnx: StandardScaler + LogisticRegression pipeline on iris (default options -> ZipMap =>
# output is sequence(map)).
import numpy as np
from _common import out
from skl2onnx import to_onnx
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

X, y = load_iris(return_X_y=True)
pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(X, y)
onx = to_onnx(pipe, X[:1].astype(np.float32), target_opset={"": 17, "ai.onnx.ml": 3})
with open(out("skl2onnx_logreg_pipeline"), "wb") as f:
    f.write(onx.SerializeToString())

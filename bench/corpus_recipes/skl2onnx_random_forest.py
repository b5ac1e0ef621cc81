# skl2onnx: RandomForestClassifier (20 trees) -> ai.onnx.ml TreeEnsembleClassifier, zipmap
# disabled (plain tensor outputs).
import numpy as np
from _common import out
from skl2onnx import to_onnx
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier

X, y = make_classification(
    n_samples=500, n_features=12, n_classes=3, n_informative=6, random_state=0
)
rf = RandomForestClassifier(n_estimators=20, max_depth=8, random_state=0).fit(X, y)
onx = to_onnx(
    rf, X[:1].astype(np.float32), options={"zipmap": False}, target_opset={"": 17, "ai.onnx.ml": 3}
)
with open(out("skl2onnx_random_forest"), "wb") as f:
    f.write(onx.SerializeToString())

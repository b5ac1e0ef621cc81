# onnxmltools: LightGBM LGBMClassifier (30 trees, 3 classes) -> ai.onnx.ml
# TreeEnsembleClassifier + ZipMap.
import lightgbm as lgb
import onnxmltools
from _common import out
from onnxmltools.convert.common.data_types import FloatTensorType
from sklearn.datasets import make_classification

X, y = make_classification(
    n_samples=600, n_features=10, n_classes=3, n_informative=5, random_state=0
)
clf = lgb.LGBMClassifier(n_estimators=30, num_leaves=15, random_state=0, verbose=-1).fit(X, y)
onx = onnxmltools.convert_lightgbm(
    clf, initial_types=[("features", FloatTensorType([None, 10]))], target_opset=15
)
with open(out("onnxmltools_lightgbm"), "wb") as f:
    f.write(onx.SerializeToString())

# skl2onnx: ColumnTransformer (OneHotEncoder on a string column, SimpleImputer+StandardScaler on
# floats) + GradientBoostingRegressor.
# Two graph inputs of different element types (STRING and FLOAT).
import numpy as np
import pandas as pd
from _common import out
from skl2onnx import convert_sklearn
from skl2onnx.common.data_types import FloatTensorType, StringTensorType
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

rng = np.random.default_rng(0)
df = pd.DataFrame({"city": rng.choice(["a", "b", "c", "d"], 300)})
num = rng.normal(size=(300, 3))
num[rng.random((300, 3)) < 0.1] = np.nan
y = rng.normal(size=300)
Xnum = pd.DataFrame(num, columns=["n0", "n1", "n2"])
X = pd.concat([df, Xnum], axis=1)
ct = ColumnTransformer(
    [
        ("cat", OneHotEncoder(handle_unknown="ignore"), ["city"]),
        ("num", make_pipeline(SimpleImputer(), StandardScaler()), ["n0", "n1", "n2"]),
    ]
)
model = Pipeline(
    [("prep", ct), ("gbr", GradientBoostingRegressor(n_estimators=15, random_state=0))]
).fit(X, y)
# skl2onnx maps ColumnTransformer columns to named inputs; group the numeric ones in one 3-wide
# tensor
ct2 = ColumnTransformer(
    [
        ("cat", OneHotEncoder(handle_unknown="ignore"), [0]),
        ("num", make_pipeline(SimpleImputer(), StandardScaler()), [1, 2, 3]),
    ]
)
model = Pipeline(
    [("prep", ct2), ("gbr", GradientBoostingRegressor(n_estimators=15, random_state=0))]
).fit(X.to_numpy(dtype=object), y)
onx = convert_sklearn(
    model,
    initial_types=[("city", StringTensorType([None, 1])), ("num", FloatTensorType([None, 3]))],
    target_opset={"": 17, "ai.onnx.ml": 3},
)
with open(out("skl2onnx_column_transformer"), "wb") as f:
    f.write(onx.SerializeToString())

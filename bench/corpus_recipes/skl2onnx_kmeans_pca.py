# skl2onnx: PCA + KMeans pipeline (pure ai.onnx ops: MatMul, ReduceSumSquare, ArgMin ...), two
# outputs (label, scores).
import numpy as np
from _common import out
from skl2onnx import to_onnx
from sklearn.cluster import KMeans
from sklearn.decomposition import PCA
from sklearn.pipeline import make_pipeline

X = np.random.default_rng(0).normal(size=(400, 20)).astype(np.float32)
pipe = make_pipeline(PCA(8, random_state=0), KMeans(5, n_init=3, random_state=0)).fit(X)
onx = to_onnx(pipe, X[:1], target_opset=17)
with open(out("skl2onnx_kmeans_pca"), "wb") as f:
    f.write(onx.SerializeToString())

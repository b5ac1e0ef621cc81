# skl2onnx: TfidfVectorizer + LogisticRegression on raw strings -> StringNormalizer,
# com.microsoft Tokenizer, TfIdfVectorizer, LinearClassifier.
from _common import out
from skl2onnx import convert_sklearn
from skl2onnx.common.data_types import StringTensorType
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

docs = [
    "the cat sat on the mat",
    "dogs chase cats",
    "onnx models run fast",
    "profilers measure time",
    "a dog and a cat",
    "runtime kernels are fast",
    "the mat is red",
    "measure kernel latency",
] * 5
y = [0, 0, 1, 1, 0, 1, 0, 1] * 5
pipe = make_pipeline(TfidfVectorizer(ngram_range=(1, 2)), LogisticRegression(max_iter=500)).fit(
    docs, y
)
onx = convert_sklearn(
    pipe,
    initial_types=[("text", StringTensorType([None, 1]))],
    target_opset={"": 17, "ai.onnx.ml": 3},
    options={TfidfVectorizer: {"tokenexp": r"\b\w\w+\b"}, LogisticRegression: {"zipmap": False}},
)
with open(out("skl2onnx_tfidf_logreg"), "wb") as f:
    f.write(onx.SerializeToString())

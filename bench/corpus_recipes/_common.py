"""Where a corpus recipe writes (and finds earlier) models: $AACO_CORPUS_OUT (bench/corpus.py
sets it to the corpus folder's models/), else ./models."""

import os

MODELS = os.environ.get("AACO_CORPUS_OUT", os.path.join(os.getcwd(), "models"))
os.makedirs(MODELS, exist_ok=True)


def out(name):
    return os.path.join(MODELS, name + ".onnx")

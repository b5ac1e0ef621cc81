"""Built-in reference models (MLP, convnet, ResNet, BERT, GPT-2) built offline with random weights.

``aaco.models.registry`` maps builder names to builders and caches built files; each builder
lives in its own module (``small``, ``resnet``, ``bert``, ``gpt2``) on top of ``_graph``.
Nothing is imported here, so ``import aaco.models`` stays cheap.
"""

"""LLM serving benchmarks (``aaco llm bench``): the streaming client, load shapes, prompts,
Prometheus scraping, and the orchestration into a session bundle."""

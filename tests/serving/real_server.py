"""A real OpenAI-compatible LLM server for tests: `transformers serve` on a tiny offline Llama.

`build_tiny_llama` trains a tokenizer on a built-in corpus and saves it with a random-weight
`LlamaForCausalLM`; `transformers_server` runs `transformers serve` on that folder as a subprocess
bound to 127.0.0.1 and yields its base URL. Nothing is downloaded: the Hub is never reached.

Example::

    model_dir = build_tiny_llama(tmp_path / "llama", "word")
    with transformers_server(model_dir) as base_url:
        ...  # POST f"{base_url}/v1/chat/completions"
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import importlib.util
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tokenizers import Tokenizer

TokenizerKind = Literal["bytelevel", "word"]

# Special tokens, all suppressed at generation time (see build_tiny_llama): a generated special
# token decodes to nothing and would merge into the next stream chunk.
SPECIAL_TOKENS = ("<unk>", "<pad>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>")

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

# Multi-byte words (accents: 2 bytes, CJK: 3, emoji: 4) give the byte-level BPE merges that end
# inside a character, so a streamed token can be an incomplete UTF-8 sequence.
_WORDS_TEXT = (
    "the a an one two three some every this that model token server client request reply "
    "stream chunk batch queue cache kernel memory time load test quick brown fox lazy dog "
    "runs jumps waits reads writes sends answers measures counts starts stops fast slow small "
    "large early late new old red green blue over under with without after before and or but "
    "café naïve über déjà vu crème brûlée façade smörgåsbord jalapeño señor "
    "日本 東京 大阪 言語 模型 計算 速度 記憶 テスト トークン サーバー 🙂 🚀 ✨"
)


def corpus(lines: int = 400, seed: int = 0) -> list[str]:
    """Seeded English-like sentences with some multi-byte words, to train the tokenizers on."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = rng.choices(_WORDS_TEXT.split(), k=rng.randint(4, 14))
        out.append(" ".join(words).capitalize() + rng.choice((".", "!", "?", ",")))
    return out


def _train_tokenizer(kind: TokenizerKind, seed: int) -> Tokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    text = corpus(seed=seed)
    if kind == "bytelevel":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        # All 256 bytes in the vocabulary, so any string encodes; the merges learnt on the
        # multi-byte words include pieces that stop inside a character.
        bpe_trainer = trainers.BpeTrainer(
            vocab_size=512,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=list(SPECIAL_TOKENS),
            show_progress=False,
        )
        tok.train_from_iterator(text, bpe_trainer)
    elif kind == "word":
        tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
        # No decoder: tokens are joined by one space, so every streamed token decodes to text
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        word_trainer = trainers.WordLevelTrainer(
            special_tokens=list(SPECIAL_TOKENS), show_progress=False
        )
        tok.train_from_iterator(text, word_trainer)
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r}; valid: 'bytelevel', 'word'")
    return tok


def build_tiny_llama(out_dir: Path, tokenizer: TokenizerKind, seed: int = 0) -> Path:
    """Save a tokenizer trained here and a random-weight Llama in `out_dir`; return `out_dir`.

    Generation never stops early, so a reply has exactly `max_tokens` tokens: there is no EOS
    token in the model or generation config, and the special tokens are suppressed. Sampling is
    on (near-uniform over the vocabulary with random weights), so byte-level replies mix whole
    and partial characters; `temperature: 0` in a request makes it greedy.
    """
    import torch
    from transformers import (
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    trained = _train_tokenizer(tokenizer, seed)
    ids = [trained.token_to_id(token) for token in SPECIAL_TOKENS]  # the trainers added them all
    special_ids = sorted(i for i in ids if i is not None)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=trained,
        unk_token="<unk>",
        pad_token="<pad>",
        eos_token="<|end|>",
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(out_dir)

    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=fast.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        do_sample=True,
        top_k=0,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=fast.pad_token_id,
        suppress_tokens=special_ids,
    )
    model.save_pretrained(out_dir)
    return out_dir


def transformers_serve_available() -> str | None:
    """None when `transformers serve` can run here, else why not (for `pytest.skip`)."""
    for module in ("torch", "transformers", "tokenizers", "fastapi", "uvicorn", "openai"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'transformers[serving]>=5')"
    version = importlib.metadata.version("transformers")
    if int(version.split(".")[0]) < 5:
        return f"transformers {version} is too old: `transformers serve` needs 5.x"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _parent_death_signal() -> Callable[[], None] | None:
    """A preexec_fn that has Linux send the server SIGTERM when the test process dies, so a
    killed pytest leaves no server behind; None elsewhere. prctl is looked up here, in the
    parent: the child of a threaded parent must not load libraries. Linux sends it when the
    *thread* that started the server ends, so start servers from a thread that outlives them."""
    if sys.platform != "linux":
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))

    return preexec


def serve_command(model_dir: Path, port: int, *, continuous_batching: bool = False) -> list[str]:
    """The `transformers serve` command line that `transformers_server` runs."""
    command = [
        sys.executable,
        "-m",
        "transformers.cli.transformers",
        "serve",
        str(model_dir),  # force_model: loaded before the port opens, and the only model served
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        "cpu",
        "--dtype",
        "float32",
    ]
    if continuous_batching:
        # Unsized, the paged KV cache takes 80-90% of free memory, which on CPU is system RAM
        # (15 GB on a 24 GB machine). 64 pages of 256 tokens hold 16k tokens in a few MB here.
        command += [
            "--continuous-batching",
            "--cb-num-blocks",
            "64",
            "--cb-max-batch-tokens",
            "512",
        ]
    return command


def serve_env() -> dict[str, str]:
    """The environment for the server: offline, no update check, no telemetry, one thread."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        # the CLI otherwise asks PyPI once a day whether transformers is up to date
        HF_HUB_DISABLE_UPDATE_CHECK="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        TOKENIZERS_PARALLELISM="false",
        # One intra-op thread: this model gains nothing from more, and on a 2-core machine shared
        # with the client, two threads made a 64-token reply 10x slower (0.2 s -> 2-8 s)
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
    )
    return env


def _log_tail(path: Path, limit: int = 20_000) -> str:
    try:
        text = path.read_text("utf-8", "replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return text if len(text) <= limit else "...\n" + text[-limit:]


def _wait_ready(proc: subprocess.Popen[bytes], base_url: str, timeout: float) -> str | None:
    """None once /health answers 200, else why the server is not coming up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"transformers serve exited with code {proc.returncode} before it answered"
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=1) as reply:
                if reply.status == 200:
                    return None
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass  # not listening yet (the model loads before the port opens), or 503
        time.sleep(0.05)
    return f"transformers serve did not answer {base_url}/health within {timeout:g} s"


def _stop(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    if proc.poll() is None:
        proc.terminate()  # uvicorn shuts down on SIGTERM in well under a second
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _start(
    command: Callable[[int], list[str]], port: int | None, timeout: float, log_dir: Path
) -> tuple[subprocess.Popen[bytes], str, Path]:
    # A free port picked here can be taken before the server binds it: then try another
    attempts = 3 if port is None else 1
    for attempt in range(1, attempts + 1):
        chosen = port if port is not None else _free_port()
        base_url = f"http://127.0.0.1:{chosen}"
        log_path = log_dir / f"serve-{attempt}.log"
        # O_APPEND: the server's stdout and stderr both write at the end, never over each other
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                command(chosen),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=serve_env(),
                preexec_fn=_parent_death_signal(),
            )
        try:
            failure = _wait_ready(proc, base_url, timeout)
        except BaseException:
            _stop(proc)
            raise
        if failure is None:
            return proc, base_url, log_path
        _stop(proc)
        text = _log_tail(log_path)
        if attempt == attempts or "address already in use" not in text.lower():
            raise RuntimeError(f"{failure}; its log:\n{text}")
    raise AssertionError("unreachable")


@contextlib.contextmanager
def transformers_server(
    model_dir: Path,
    *,
    continuous_batching: bool = False,
    port: int | None = None,
    timeout: float = 120,
    extra_args: Sequence[str] = (),
) -> Iterator[str]:
    """Run `transformers serve` on `model_dir` at 127.0.0.1 and yield its base URL.

    The model is pinned (`force_model`) and loaded before the server answers: requests leave
    out `model` or name `str(model_dir)` exactly (anything else is a 400). The server's log is
    attached to an error raised inside the block, and to the error raised when the server
    does not answer within `timeout` seconds. `extra_args` go to `transformers serve` as they are.
    """

    def command(chosen: int) -> list[str]:
        args = serve_command(model_dir, chosen, continuous_batching=continuous_batching)
        return [*args, *extra_args]

    with tempfile.TemporaryDirectory(prefix="aaco-serve-") as log_dir:
        proc, base_url, log_path = _start(command, port, timeout, Path(log_dir))
        try:
            yield base_url
        except BaseException as exc:
            add_note = getattr(exc, "add_note", None)  # Python 3.11+
            if add_note is not None:
                add_note(f"transformers serve log:\n{_log_tail(log_path)}")
            raise
        finally:
            _stop(proc)

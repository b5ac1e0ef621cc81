"""Kernel fingerprinting: a readable short name, family, vendor library and data type per kernel.

Everything is read from the kernel name alone, with ordered regular-expression rules that
follow how the vendors' libraries actually name their kernels (Tensile's ``Cijk_`` solution
names, cuBLAS' ``sm90_xmma_gemm_...``, cuDNN, MIOpen, Composable Kernel, CUTLASS, Triton,
ATen, MIGraphX, ONNX Runtime, NCCL/RCCL). Names are classified once per unique name
(:func:`classify_table` dictionary-encodes the column), so millions of dispatches of a few
hundred kernels cost a few hundred classifications.

Example::

    classify_kernel("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0")
    # KernelClass(family='gemm', library='Tensile', dtype='fp16')
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "FAMILIES",
    "KernelClass",
    "classify_kernel",
    "classify_table",
    "math_unit",
    "short_name",
]

FAMILIES = (
    "gemm",
    "conv",
    "attention",
    "norm",
    "softmax",
    "reduce",
    "elementwise",
    "data_movement",
    "memcpy",
    "communication",
    "other",
)


@dataclass(frozen=True)
class KernelClass:
    """What a kernel name says: family (one of :data:`FAMILIES`), library and dtype.

    ``library`` and ``dtype`` are None when the name does not say (never a guess).
    """

    family: str
    library: str | None
    dtype: str | None


# --- short names -------------------------------------------------------------------------

_KD_SUFFIX = re.compile(r"(?:\s*\[clone \.kd\]|\.kd)$")
_MEMORY_NAME = re.compile(r"^(?:Memcpy|Memset|dma)", re.IGNORECASE)
# Tensile solution names run to hundreds of characters of tuning parameters; the prefix up
# to the macro tile names the problem (layout, types, tile), the full name stays in `name`.
_TENSILE_PREFIX = re.compile(r"^((?:Custom_)?Cijk_[A-Za-z]+_[A-Za-z]+_[^_]+(?:_[^_]+)*?_MT[0-9x]+)")
_ANON = re.compile(r"\(anonymous namespace\)::")


def _demangle_best_effort(name: str) -> str:
    """The qualified name of an Itanium-mangled symbol, without cxxfilt.

    Reads the length-prefixed identifiers of ``_Z[N]<len><id>...`` and stops at the first
    thing that is not one (template arguments, parameters): enough for a short name.
    """
    i = 2
    nested = i < len(name) and name[i] == "N"
    if nested:
        i += 1
        # CV / ref qualifiers of member functions come before the nested name.
        while i < len(name) and name[i] in "rVKRO":
            i += 1
    parts: list[str] = []
    while i < len(name):
        if name.startswith("St", i):  # std:: abbreviation
            parts.append("std")
            i += 2
            continue
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        if j == i:
            break
        n = int(name[i:j])
        if n <= 0 or j + n > len(name):
            break
        parts.append(name[j : j + n])
        i = j + n
        if not nested:
            break
    return "::".join(parts) if parts else name


def _demangle(name: str) -> str:
    try:
        import cxxfilt  # type: ignore[import-not-found]  # optional, not a dependency
    except ImportError:
        return _demangle_best_effort(name)
    try:
        return str(cxxfilt.demangle(name))
    except Exception:  # cxxfilt raises its own error type on names it cannot read
        return _demangle_best_effort(name)


def _strip_brackets(s: str) -> str:
    """Drop everything inside <...> and (...), nesting included (HTA's shorten_name idea)."""
    out: list[str] = []
    depth = 0
    for ch in s.replace("->", "").replace("operator()", "operator"):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


@functools.lru_cache(maxsize=65536)
def short_name(name: str) -> str:
    """A readable kernel name: demangled, return type, templates and parameters dropped.

    ``void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`` ->
    ``at::native::vectorized_elementwise_kernel``; Tensile names are cut after their macro
    tile (``Cijk_Alik_Bljk_HHS_BH_MT128x128x32``); copy-engine names stay as they are.
    """
    s = _KD_SUFFIX.sub("", name.strip())
    if _MEMORY_NAME.match(s):
        return s
    if s.startswith("_Z"):
        s = _KD_SUFFIX.sub("", _demangle(s))
    m = _TENSILE_PREFIX.match(s)
    if m:
        return m.group(1)
    if "<" not in s and "(" not in s:
        return s
    s = _strip_brackets(_ANON.sub("", s)).strip()
    # What remains is "[return type] qualified::name [const]"; the name is the last word
    # that is not a qualifier.
    words = [w for w in s.split() if w not in ("const", "volatile", "&", "&&")]
    return words[-1] if words else name


# --- classification ----------------------------------------------------------------------


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


# Library rules, first match wins; the order matters where names overlap (cuDNN's
# xmma_fprop before cuBLAS' xmma_gemm, CK/CUTLASS fmha before FlashAttention).
_LIBRARY_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("copy engine", _rx(r"^(?:memcpy|memset|dma)\b|^copy(?:host|device)to(?:host|device)")),
    ("HIP runtime", _rx(r"__amd_rocclr_")),
    ("RCCL", _rx(r"rccl")),
    ("NCCL/RCCL", _rx(r"^(?:void )?nccl|ncclDevKernel|ncclKernel")),
    ("hipBLASLt", _rx(r"^(?:custom_)?cijk_.*(?:userargs|_bias|_sav_)|hipblaslt")),
    ("Tensile", _rx(r"^(?:custom_)?cijk_")),
    ("rocBLAS", _rx(r"rocblas")),
    (
        "MIOpen",
        _rx(r"miopen|naive_conv|^igemm_|^mlo|gridwise_convolution|^op[0-9]dtensor|^subtensorop"),
    ),
    (
        "Composable Kernel",
        _rx(
            r"\bck(?:_tile)?::|_ZN2ck|device_gemm|kernel_gemm_xdl|kernel_grouped_conv|kernel_batched_gemm|kernel_gemm_wmma"
        ),
    ),
    ("CUTLASS", _rx(r"cutlass")),
    (
        "cuDNN",
        _rx(
            r"cudnn|implicit_convolve_sgemm|precomputed_convolve|xmma_(?:fprop|dgrad|wgrad)|cask_cudnn|_fprop_implicit_gemm"
        ),
    ),
    (
        "cuBLAS",
        _rx(
            r"cublas|sm\d+_xmma_gemm|gemv2[tn]_kernel|gemvnsp|gemmsn_|gemmk1_kernel|^nvjet_"
            r"|^(?:void )?(?:maxwell|kepler|volta|turing|ampere|hopper|sm\d+)_\w*gemm"
        ),
    ),
    ("FlashAttention", _rx(r"flash_fwd|flash_bwd|flash::|flash_attn|pytorch_flash|fmha")),
    ("Triton", _rx(r"^triton_")),
    ("ATen", _rx(r"at::native::|_ZN2at6native|at_cuda_detail|at::cuda::")),
    ("MIGraphX", _rx(r"migraphx|^mlir_|\bgpu::")),
    ("ONNX Runtime", _rx(r"onnxruntime")),
)

# Family rules over the whole name (templates included: ATen's functor names live there).
_FAMILY_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "memcpy",
        _rx(
            r"^(?:memcpy|memset|dma)\b|copy(?:host|device)to(?:host|device)|__amd_rocclr_(?:copy|fill)|memcpy|memset"
        ),
    ),
    (
        "communication",
        _rx(
            r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv|cross_device_reduce"
        ),
    ),
    (
        "attention",
        _rx(
            r"flash|fmha|(?<![a-z])mha|sdpa|scaled_dot_product|attention|attn|softmax_gemm|fused_multi_head"
        ),
    ),
    (
        "conv",
        _rx(
            r"conv(?!ert)|[shd]cudnn|fprop|dgrad|wgrad|winograd|igemm|implicit_gemm|implicit_convolve|im2col|col2im"
        ),
    ),
    (
        "gemm",
        _rx(
            r"^(?:custom_)?cijk_|gemm|gemv|matmul|cublaslt|splitkreduce|^nvjet_|(?:^|_|::)(?:quant_)?dot(?:_|$)|(?<![a-z])b?mm(?:_|$)"
        ),
    ),
    (
        "norm",
        _rx(
            r"layer_?norm|batch_?norm|group_?norm|rms_?norm|instance_?norm|rowwisemoments|bn_fw|bn_bw|normalization"
        ),
    ),
    ("softmax", _rx(r"soft_?max")),
    ("reduce", _rx(r"reduc|argmax|argmin|(?<![a-z])(?:sum|mean)_kernel")),
    (
        "data_movement",
        _rx(
            r"copy|transpose|concat|catarray|(?<![a-z])cat(?![a-z])|gather|scatter|index|permute|(?<![a-z])pad|reshape|slice|split|stack|repeat|flip|roll|embedding|nchwtonhwc|nhwctonchw"
        ),
    ),
    (
        "elementwise",
        _rx(
            r"elementwise|element_wise|pointwise|activation|relu|gelu|silu|swish|sigmoid|tanh|(?<![a-z])elu|clamp|fill|bias_?add|add_?bias|axpy|dropout|cast|(?<![a-z])(?:add|mul|sub|div|exp|sqrt|rsqrt|neg|abs)(?![a-z])|functor"
        ),
    ),
)

_TRITON = _rx(r"^triton_+(poi|red|per|tem|for|spl)?_?(.*)$")

# Tensile solution names: Cijk_<A layout>_<B layout>_<types>_...; the first letters of the
# type token name the input type (H fp16, B bf16, S fp32, D fp64, I8 int8, F8 fp8 ...).
_TENSILE_TYPES = re.compile(r"^(?:Custom_)?Cijk_[A-Za-z]+_[A-Za-z]+_([A-Za-z0-9]+)_")
_TENSILE_TYPE_PREFIX = (
    ("4xi8", "int8"),
    ("I8", "int8"),
    ("F8", "fp8"),
    ("B8", "fp8"),
    ("H", "fp16"),
    ("B", "bf16"),
    ("S", "fp32"),
    ("D", "fp64"),
    ("C", "complex64"),
    ("Z", "complex128"),
)

# Explicit type words; the one that appears FIRST in the name wins (input type before
# accumulator: `ReduceOp<c10::Half, ..., float>` is fp16, `xmma_gemm_bf16bf16_bf16f32` bf16).
_DTYPE_TOKENS = _rx(
    # Short codes may run into the next one (`tf32f32`, `f16f16_f16f32`) but not a digit.
    r"(?<![a-z0-9])(?:"
    r"(?P<bf16>bf16|bhalf)"
    r"|(?P<fp8>fp8|f8|e4m3|e5m2)"
    r"|(?P<tf32>tf32)"
    r"|(?P<fp16>fp16|f16)"
    r"|(?P<fp32>fp32|f32)"
    r"|(?P<fp64>fp64|f64)"
    r"|(?P<int8>int8|i8)"
    r")(?![0-9])"
    # Whole words (C++ type names), optionally as 2/4-wide vectors.
    r"|(?<![a-z])(?:"
    r"(?P<bf16w>bfloat16|__nv_bfloat16|bhalf_t)"
    r"|(?P<fp8w>float8_e4m3\w*|float8_e5m2\w*|__nv_fp8\w*)"
    r"|(?P<fp16w>half|__half|half_t)"
    r"|(?P<fp32w>float)"
    r"|(?P<fp64w>double)"
    r"|(?P<int8w>int8_t)"
    r")[24]?(?![a-z0-9])"
)
# cuBLAS/CUTLASS instruction words when no type word is present.
_DTYPE_INSTR: tuple[tuple[re.Pattern[str], str], ...] = (
    (_rx(r"(?<![a-z])h\d*gemm|hgemv"), "fp16"),
    (_rx(r"(?<![a-z])s1688gemm|(?<![a-z])s884tf32|tf32"), "tf32"),
    (_rx(r"(?<![a-z])i\d+gemm|imma"), "int8"),
    (_rx(r"(?<![a-z])c\d*gemm|gcgemm"), "complex64"),
    (_rx(r"(?<![a-z])(?:sgemm|sgemv|scudnn)"), "fp32"),
    (_rx(r"(?<![a-z])hcudnn"), "fp16"),
    (_rx(r"(?<![a-z])dgemm|dgemv"), "fp64"),
)


def _dtype(name: str, library: str | None) -> str | None:
    if library in ("Tensile", "hipBLASLt"):
        m = _TENSILE_TYPES.match(name)
        if m:
            token = m.group(1)
            for prefix, dtype in _TENSILE_TYPE_PREFIX:
                if token.startswith(prefix):
                    return dtype
    m = _DTYPE_TOKENS.search(name)
    if m and m.lastgroup:
        return m.lastgroup.removesuffix("w")
    for rx, dtype in _DTYPE_INSTR:
        if rx.search(name):
            return dtype
    return None


def _family(name: str, library: str | None) -> str:
    if library == "Triton":
        m = _TRITON.match(name)
        kind, rest = (m.group(1), m.group(2)) if m else (None, name)
        for family in ("attention", "softmax", "norm"):
            if dict(_FAMILY_RULES)[family].search(rest):
                return family
        if kind == "tem":
            if re.search(r"conv", rest, re.IGNORECASE):
                return "conv"
            return "gemm" if re.search(r"(?<![a-z])b?mm|addmm", rest) else "other"
        if kind in ("red", "per", "spl"):
            return "reduce"
        if kind in ("poi", "for"):
            return "elementwise"
        return "other"
    by_short = _first_family(short_name(name))
    if by_short not in ("other", "elementwise"):
        return by_short
    # Generic launchers (ATen's elementwise_kernel, multi_tensor_apply) name the real work
    # in their template arguments: a copy or index functor is data movement.
    by_full = _first_family(name)
    if by_short == "other" or by_full == "data_movement":
        return by_full
    return by_short


def _first_family(name: str) -> str:
    for family, rx in _FAMILY_RULES:
        if rx.search(name):
            return family
    return "other"


# The instruction type a kernel's name gives away, for the roof it is held to.
# Matrix / tensor cores: NVIDIA HMMA/IMMA/GMMA kernels (cuBLAS `*_h1688gemm`, `s1688gemm`,
# `*_884*`, xmma / wmma / gmma / tensorop / nvjet names), AMD MFMA (Tensile / hipBLASLt
# solutions with an `_MI<M>x<N>x<K>` instruction tile, `mfma`, Composable Kernel `xdl`).
_MATRIX_UNIT = _rx(
    r"tensorop|xmma|wmma|gmma|hmma|imma|(?<![a-z])nvjet|mfma|_xdl|xdlops|gtcx"
    r"|(?<![a-z0-9])[hsi]?(?:1688|16816|884|8816)|_mi\d+x\d+x\d+"
)
# Plain vector units: cuBLAS / cuDNN SIMT FP32/FP64 kernels (`ampere_sgemm_*`,
# `implicit_convolve_sgemm`, `dgemm`, mangled `_Z10sgemm_kernel`), GEMV, xmma kernels
# built on FFMA (SIMT despite the xmma name), and Tensile solutions without an MFMA tile.
_VECTOR_UNIT = _rx(
    r"(?<![a-z])(?:sgemm|dgemm|sgemv|dgemv|gemv)|implicit_convolve_sgemm|(?<![a-z])ffma"
)
# TF32 anywhere in a name: CUTLASS `s1688tf32gemm`, cuBLAS `xmma_gemm_f32f32_tf32f32_f32`
_TF32_UNIT = _rx(r"tf32")


@functools.lru_cache(maxsize=65536)
def math_unit(name: str) -> str | None:
    """``tf32`` (TF32 tensor cores), ``matrix`` (tensor / matrix cores), ``vector`` (SIMT /
    VALU) or None (the name does not tell) for a GEMM- or convolution-like kernel.

    >>> math_unit("ampere_sgemm_32x32_sliced1x4_tn"), math_unit("sm90_xmma_gemm_f16f16")
    ('vector', 'matrix')
    """
    s = _KD_SUFFIX.sub("", name.strip())
    if _TF32_UNIT.search(s):
        return "tf32"
    if _VECTOR_UNIT.search(s):
        return "vector"
    if _MATRIX_UNIT.search(s):
        return "matrix"
    library = classify_kernel(name).library
    if library in ("Tensile", "hipBLASLt"):
        return "vector"  # a Tensile solution on MFMA names its _MI tile (matched above)
    return None


@functools.lru_cache(maxsize=65536)
def classify_kernel(name: str) -> KernelClass:
    """Family, library and data type of a kernel from its name.

    >>> classify_kernel("ampere_sgemm_128x64_nn")
    KernelClass(family='gemm', library='cuBLAS', dtype='fp32')
    """
    s = _KD_SUFFIX.sub("", name.strip())
    library = None
    for lib, rx in _LIBRARY_RULES:
        if rx.search(s):
            library = lib
            break
    family = _family(s, library)
    # Copies and collectives name no element type worth reporting (`float` in an NCCL
    # name is the reduction type, which is one).
    dtype = None if family == "memcpy" else _dtype(s, library)
    return KernelClass(family, library, dtype)


def classify_table(kernels: pa.Table) -> pa.Table:
    """Fill ``short_name``, ``family``, ``library`` and ``dtype`` of a KERNELS table.

    Values already present are kept (an importer may know better); nulls are filled from
    the name. Each unique name is classified once.
    """
    if kernels.num_rows == 0:
        return kernels
    encoded = kernels.column("name").combine_chunks().dictionary_encode()
    names = encoded.dictionary.to_pylist()
    indices = pa.array(np.asarray(encoded.indices.to_numpy(zero_copy_only=False)))
    classes = [classify_kernel(n) for n in names]
    computed: dict[str, list[Any]] = {
        "short_name": [short_name(n) for n in names],
        "family": [c.family for c in classes],
        "library": [c.library for c in classes],
        "dtype": [c.dtype for c in classes],
    }
    out = kernels
    for col, values in computed.items():
        filled = pa.array(values, type=pa.string()).take(indices)
        if col in out.column_names:
            i = out.column_names.index(col)
            existing = out.column(col)
            if existing.null_count != len(existing):
                filled = pc.coalesce(existing.combine_chunks().cast(pa.string()), filled)
            out = out.set_column(i, out.schema.field(i), filled)
        else:
            out = out.append_column(col, filled)
    return out

# ruff: noqa: E501  (the table holds real kernel names, which are long)
"""Kernel fingerprinting on real kernel names from AMD and NVIDIA traces."""

from __future__ import annotations

import pyarrow as pa
import pytest

from aaco.analysis.kernels import KernelClass, classify_kernel, classify_table, short_name
from aaco.session.schema import KERNELS

# (name as the tool reports it, family, library, dtype). Names as they appear in real
# rocprofv3 / rocprof / Kineto / ORT traces of the libraries named.
REAL_NAMES: list[tuple[str, str, str | None, str | None]] = [
    # rocBLAS / hipBLASLt (Tensile solutions)
    (
        "Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS3_ASE_ASGT_ASLT_ASAE01_ASCE01_ASEM1_AAC0_BL1_BS1_DTLA0_DTLB0_DTVA0_DTVB0_DVO0_ETSP_EPS1_FL0_GRPM1_GRVW8_GSU1_GSUASB_GLS0_ISA90a_IU1_K1_KLA_LBSPP128_LPA0_LPB8_LDL1_LRVW8_LWPMn1_LDW0_FMA_MIAV1_MDA2_MO40_NTA0_NTB0_NTC0_NTD0_NEPBS0_NLCA1_NLCB1_ONLL1_OPLV0_PK0_PAP0_PGR1_PLR9_SIA3_SS1_SU32_SUM0_SUS256_SCIUI1_SPO0_SRVW0_SSO0_SVW4_SNLL0_TT4_64_TLDS1_USFGROn1_VAW2_VSn1_VW4_WSGRA1_WSGRB1_WS64_WG32_4_1_WGM8",
        "gemm",
        "Tensile",
        "fp16",
    ),
    (
        "Cijk_Ailk_Bljk_SB_MT64x64x16_SN_1LDSB0_APM1_AF0EM1_AF1EM1_AMAS3_ASE_ASGT_ASLT_ASAE01_ASCE01_ASEM1_BL1_BS1_GRVW4_ISA908_IU1_K1_KLA_LPA0_LPB0_LDL1_LRVW4_MAC_MDA2_MO40_NTA0_NTB0_NTC0_NTD0_NEPBS0_NLCA1_NLCB1_ONLL1_PK0_PAP0_PGR1_PLR1_SIA1_SS0_SU32_SUM0_SUS256_SCIUI1_SPO0_SRVW0_SSO0_SVW4_SNLL0_TT4_4_TLDS0_USFGROn1_VAW1_VS1_VW4_WSGRA0_WSGRB0_WS64_WG16_16_1_WGM8",
        "gemm",
        "Tensile",
        "fp32",
    ),
    (
        "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA1_GRVWB1_GSUAMB_ISA90a_IU1_K1_LBSPPA0_LBSPPB0",
        "gemm",
        "hipBLASLt",
        "fp32",
    ),
    (
        "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA942",
        "gemm",
        "hipBLASLt",
        "bf16",
    ),
    ("Cijk_Alik_Bljk_DB_MT64x32x8_SN_APM1_AF0EM1_AF1EM1_AMAS3_ISA90a", "gemm", "Tensile", "fp64"),
    ("Cijk_Alik_Bljk_I8II_BH_MT128x128x64_MI32x32x8x1_SN_ISA942", "gemm", "Tensile", "int8"),
    ("rocblas_gemvn_kernel", "gemm", "rocBLAS", None),
    # MIOpen
    ("miopenSp3AsmConv_v21_1_3_gfx9_fp32_f3x2_stride1", "conv", "MIOpen", "fp32"),
    ("naive_conv_fwd_nchw_half_double_half", "conv", "MIOpen", "fp16"),
    (
        "igemm_fwd_gtcx_nhwc_fp16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2_ta1x8x2x1_1x4x1x64_tb1x8x1x1_1x4x1x64",
        "conv",
        "MIOpen",
        "fp16",
    ),
    ("MIOpenBatchNormFwdInferSpatialEst", "norm", "MIOpen", None),
    ("MIOpenBatchNormFwdTrainSpatial.kd", "norm", "MIOpen", None),
    ("gridwise_convolution_implicit_gemm_v4r4_xdlops_nchw_kcyx_nkhw", "conv", "MIOpen", None),
    ("mloPoolingG", "other", "MIOpen", None),
    # Composable Kernel
    (
        "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::tensor_layout::gemm::RowMajor, ck::tensor_layout::gemm::ColumnMajor, ck::tensor_layout::gemm::RowMajor, ck::half_t, ck::half_t, float, float, ck::half_t>, true, 1, 2>(ck::GridwiseGemm_xdl_cshuffle_v3<ck::half_t>::Argument)",
        "gemm",
        "Composable Kernel",
        "fp16",
    ),
    (
        "void ck::kernel_grouped_conv_fwd_xdl_cshuffle<ck::GridwiseGemmMultipleD_xdl_cshuffle<ck::bhalf_t, ck::bhalf_t, float>>(ck::bhalf_t const*)",
        "conv",
        "Composable Kernel",
        "bf16",
    ),
    (
        "void ck::kernel_batched_gemm_softmax_gemm_xdl_cshuffle_v1<ck::half_t, ck::half_t, float>(ck::half_t const*)",
        "attention",
        "Composable Kernel",
        "fp16",
    ),
    (
        "void ck_tile::kentry<256, 1, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync<ck_tile::BlockFmhaPipelineProblem<ck_tile::bf16_t, ck_tile::bf16_t, float>>>>(ck_tile::FmhaFwdKernelArgs)",
        "attention",
        "Composable Kernel",
        "bf16",
    ),
    # cuBLAS / cuBLASLt
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        "gemm",
        "cuBLAS",
        "bf16",
    ),
    (
        "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize160x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel",
        "gemm",
        "cuBLAS",
        "fp16",
    ),
    ("ampere_sgemm_128x64_nn", "gemm", "cuBLAS", "fp32"),
    ("ampere_sgemm_32x32_sliced1x4_tn", "gemm", "cuBLAS", "fp32"),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", "gemm", "cuBLAS", "fp16"),
    ("volta_h884gemm_64x64_ldg8_nn", "gemm", "cuBLAS", "fp16"),
    ("ampere_gcgemm_64x64_nt", "gemm", "cuBLAS", "complex64"),
    (
        "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, false, true, false>(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>, float, float)",
        "gemm",
        "cuBLAS",
        "fp32",
    ),
    (
        "void gemmSN_NN_kernel<float, 128, 2, 4, 8, 2, 4, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >(cublasGemmSmallNParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)",
        "gemm",
        "cuBLAS",
        "fp32",
    ),
    (
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, true, false>(cublasLt::cublasSplitKParams<float>, float const*, float const*, float*, float const*, float const*, float const*)",
        "gemm",
        "cuBLAS",
        "fp32",
    ),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm", "cuBLAS", None),
    # cuDNN
    (
        "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn",
        "conv",
        "cuDNN",
        "tf32",
    ),
    (
        "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, float const*, float const*, bool, int, int)",
        "conv",
        "cuDNN",
        "fp32",
    ),
    ("cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "conv", "cuDNN", "fp32"),
    (
        "void cudnn::bn_fw_inf_1C11_kernel_NCHW<__half, float, true, 1>(float, float, cudnnTensorStruct, __half const*, cudnnTensorStruct, __half*, cudnnTensorStruct, float const*, float const*, float const*, float const*, float)",
        "norm",
        "cuDNN",
        "fp16",
    ),
    (
        "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)",
        "data_movement",
        "cuDNN",
        "fp32",
    ),
    # CUTLASS
    (
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8::Params)",
        "gemm",
        "CUTLASS",
        "bf16",
    ),
    (
        "void cutlass::Kernel<cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_tn_align8>(cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_tn_align8::Params)",
        "gemm",
        "CUTLASS",
        "fp16",
    ),
    (
        "fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
        "attention",
        "CUTLASS",
        "fp16",
    ),
    # FlashAttention
    (
        "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(Flash_fwd_params)",
        "attention",
        "CUTLASS",
        "bf16",
    ),
    (
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, c10::Half>, false, true, false, false, false, true, false, false>(pytorch_flash::Flash_fwd_params)",
        "attention",
        "FlashAttention",
        "fp16",
    ),
    (
        "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, true>(flash::Flash_fwd_params)",
        "attention",
        "FlashAttention",
        None,
    ),
    # Triton (torch.compile)
    ("triton_poi_fused_add_mul_0", "elementwise", "Triton", None),
    ("triton_red_fused_native_layer_norm_0", "norm", "Triton", None),
    ("triton_per_fused__softmax_1", "softmax", "Triton", None),
    ("triton_red_fused_sum_2", "reduce", "Triton", None),
    ("triton_tem_fused_mm_0", "gemm", "Triton", None),
    ("triton_tem_fused_addmm_relu_3", "gemm", "Triton", None),
    ("triton_poi_fused_cat_4", "elementwise", "Triton", None),
    # ATen
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)",
        "elementwise",
        "ATen",
        "fp32",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::Half>, at::detail::Array<char*, 3>)",
        "elementwise",
        "ATen",
        "fp16",
    ),
    (
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&)::{lambda(int)#1})",
        "data_movement",
        "ATen",
        "fp32",
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)",
        "reduce",
        "ATen",
        "fp32",
    ),
    (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
        "softmax",
        "ATen",
        "fp32",
    ),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
        "norm",
        "ATen",
        "bf16",
    ),
    (
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<4u>, unsigned int, 2, 128, 1>(at::native::(anonymous namespace)::OpaqueType<4u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<4u>, unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)",
        "data_movement",
        "ATen",
        None,
    ),
    (
        "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<4> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::index_kernel_impl<at::native::OpaqueType<4> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1} const&)::{lambda(int)#1}>(long, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<4> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::index_kernel_impl<at::native::OpaqueType<4> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1} const&)::{lambda(int)#1})",
        "data_movement",
        "ATen",
        None,
    ),
    (
        "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, long, long, long, int, int, int, int, int, int, int, int, int, int, float*, long*)",
        "other",
        "ATen",
        "fp32",
    ),
    (
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_",
        "elementwise",
        "ATen",
        None,
    ),
    # NCCL / RCCL
    (
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        "communication",
        "NCCL/RCCL",
        "fp32",
    ),
    (
        "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
        "communication",
        "NCCL/RCCL",
        "int8",
    ),
    # MIGraphX
    ("mlir_convolution_add_relu", "conv", "MIGraphX", None),
    ("mlir_dot_add", "gemm", "MIGraphX", None),
    ("migraphx::gpu::layernorm_kernel", "norm", "MIGraphX", None),
    # ONNX Runtime CUDA / ROCm EP
    (
        "void onnxruntime::cuda::_BinaryElementWiseSimple<true, true, float, float, float, onnxruntime::cuda::OP_Add<float, float, float>, 256, 4>(float const*, float const*, float*, onnxruntime::cuda::OP_Add<float, float, float> const&, int)",
        "elementwise",
        "ONNX Runtime",
        "fp32",
    ),
    (
        "void onnxruntime::cuda::Transpose3DKernel<float>(onnxruntime::cuda::TArray<long, 8> const, onnxruntime::cuda::TArray<long, 8> const, float const*, float*)",
        "data_movement",
        "ONNX Runtime",
        "fp32",
    ),
    (
        "void onnxruntime::contrib::cuda::SkipLayerNormKernelSmall<__half, 256, 8, true>(int, __half const*, __half const*, __half const*, __half const*, __half const*, __half, __half*, __half*, bool)",
        "norm",
        "ONNX Runtime",
        "fp16",
    ),
    # copies
    ("Memcpy HtoD (Pageable -> Device)", "memcpy", "copy engine", None),
    ("Memset (Device)", "memcpy", "copy engine", None),
    ("CopyHostToDevice", "memcpy", "copy engine", None),
    ("__amd_rocclr_copyBuffer.kd", "memcpy", "HIP runtime", None),
    ("__amd_rocclr_fillBufferAligned.kd", "memcpy", "HIP runtime", None),
]


@pytest.mark.parametrize(("name", "family", "library", "dtype"), REAL_NAMES)
def test_classify_real_names(
    name: str, family: str, library: str | None, dtype: str | None
) -> None:
    assert classify_kernel(name) == KernelClass(family, library, dtype)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl("
            "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#1}::operator()() const::"
            "{lambda()#2}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >"
            "(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&)::{lambda(float)#1}, "
            "at::detail::Array<char*, 2>)",
            "at::native::vectorized_elementwise_kernel",
        ),
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float,"
            " at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
            "at::native::cunn_SoftMaxForward",
        ),
        (
            "Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1",
            "Cijk_Alik_Bljk_HHS_BH_MT128x128x32",
        ),
        ("MIOpenBatchNormFwdTrainSpatial [clone .kd]", "MIOpenBatchNormFwdTrainSpatial"),
        ("__amd_rocclr_copyBuffer.kd", "__amd_rocclr_copyBuffer"),
        ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
        ("ampere_sgemm_128x64_nn", "ampere_sgemm_128x64_nn"),
        ("triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul_0"),
        (
            "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5Arr"
            "ayIPcLi1EEEEEviT0_T1_",
            "at::native::vectorized_elementwise_kernel",
        ),
        ("_Z16my_custom_kerneliPf", "my_custom_kernel"),
        (
            "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_al"
            "ign8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8::Params)",
            "cutlass::Kernel2",
        ),
        (
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
        ),
    ],
)
def test_short_name(name: str, expected: str) -> None:
    assert short_name(name) == expected


def test_enough_real_names_across_families() -> None:
    assert len(REAL_NAMES) >= 40
    families = {f for _, f, _, _ in REAL_NAMES}
    assert families == {
        "gemm", "conv", "attention", "norm", "softmax", "reduce", "elementwise",
        "data_movement", "memcpy", "communication", "other",
    }  # fmt: skip


def test_classify_table_fills_per_unique_name_and_keeps_known_values() -> None:
    names = ["ampere_sgemm_128x64_nn", "triton_poi_fused_add_mul_0", "ampere_sgemm_128x64_nn"]
    rows = [
        {"source": "t", "name": n, "start_ns": i, "end_ns": i + 1, "dur_ns": 1,
         "time_is_gpu": True}
        for i, n in enumerate(names)
    ]  # fmt: skip
    rows[1]["family"] = "softmax"  # an importer's own value wins over the name
    t = classify_table(KERNELS.from_rows(rows))
    assert t.schema == KERNELS.schema
    assert t.column("short_name").to_pylist() == [
        "ampere_sgemm_128x64_nn", "triton_poi_fused_add_mul_0", "ampere_sgemm_128x64_nn",
    ]  # fmt: skip
    assert t.column("family").to_pylist() == ["gemm", "softmax", "gemm"]
    assert t.column("library").to_pylist() == ["cuBLAS", "Triton", "cuBLAS"]
    assert t.column("dtype").to_pylist() == ["fp32", None, "fp32"]


def test_classify_table_chunked_and_empty() -> None:
    row = {"source": "t", "name": "Memset (Device)", "start_ns": 0, "end_ns": 1, "dur_ns": 1,
           "time_is_gpu": True}  # fmt: skip
    one = KERNELS.from_rows([row])
    t = classify_table(pa.concat_tables([one, one]))
    assert t.column("family").to_pylist() == ["memcpy", "memcpy"]
    assert classify_table(KERNELS.empty()).num_rows == 0

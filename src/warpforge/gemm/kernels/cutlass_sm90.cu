// One CUTLASS 3.x GEMM for Hopper (sm_90a): warp-specialised wgmma mainloop fed by TMA, TMA-store
// epilogue, persistent (or stream-K) tile scheduler. warpforge fills the dollar-brace placeholders
// (gemm/cutlass_sm90.py: `source`) and builds this file into a plain shared library with nvcc; Python
// calls the extern "C" functions at the bottom through ctypes. No torch headers: the library works
// with whichever torch the process runs.
//
//   D (M x N, row-major) = A (M x K, row-major) . B, fp32 accumulation, D in the input type.
//   B is (K, N) row-major for layout "nn" (N-major) or the (N, K) row-major weight for "nt"
//   (K-major). There is no C operand: alpha = 1, beta = 0, nothing is read besides A and B.
//
// Instance: ${NAME} (${DTYPE}, ${LAYOUT})

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/numeric_types.h"
#include "cutlass/version.h"

#define WF_B_KMAJOR ${B_KMAJOR}  // 1: layout "nt", B is the (N, K) weight; 0: layout "nn", B is (K, N)

#if !defined(__CUDACC_VER_MAJOR__) || __CUDACC_VER_MAJOR__ < 12
#error "CUTLASS sm90 kernels need nvcc 12 or newer"
#endif

namespace wf {

using namespace cute;

using Element = ${ELEMENT};  // cutlass::half_t or cutlass::bfloat16_t
using ElementAccumulator = float;
using ElementCompute = float;

using LayoutA = cutlass::layout::RowMajor;  // (M, K), K contiguous
#if WF_B_KMAJOR
using LayoutB = cutlass::layout::ColumnMajor;  // CUTLASS's (K, N) column-major = our (N, K) row-major
#else
using LayoutB = cutlass::layout::RowMajor;  // (K, N), N contiguous
#endif
using LayoutD = cutlass::layout::RowMajor;

// TMA moves 16-byte aligned rows: 8 elements of a 16-bit type. The Python side refuses K and N that
// are not multiples of 8 before it gets here; can_implement() checks again.
constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;

using TileShape = Shape<_${TILE_M}, _${TILE_N}, _${TILE_K}>;
using ClusterShape = Shape<_${CLUSTER_M}, _${CLUSTER_N}, _1>;
using KernelSchedule = cutlass::gemm::${KERNEL_SCHEDULE};
using EpilogueSchedule = cutlass::epilogue::${EPILOGUE_SCHEDULE};
using TileScheduler = cutlass::gemm::${TILE_SCHEDULER};

// The epilogue first: the mainloop's stage count is whatever shared memory the epilogue leaves.
using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    TileShape, ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto,
    ElementAccumulator, ElementCompute,
    void, LayoutD, kAlignment,     // C: none (void), so beta is never applied and C never loaded
    Element, LayoutD, kAlignment,  // D
    EpilogueSchedule>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    Element, LayoutA, kAlignment,
    Element, LayoutB, kAlignment,
    ElementAccumulator,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    KernelSchedule>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>,  // (M, N, K, L), L = 1
    CollectiveMainloop, CollectiveEpilogue, TileScheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

// Our own status codes sit above cutlass::Status's (0 = kSuccess ... < 100).
constexpr int kNoDevice = 100;          // cudaGetDevice failed
constexpr int kWorkspaceTooSmall = 101;
constexpr int kNoSplitK = 102;          // splits > 1 asked of a scheduler that has no split-K (persistent)

// Whether the tile scheduler's arguments take a split-K factor (the stream-K scheduler's do).
template <class SchedulerArguments, class = void>
struct has_splits : std::false_type {};
template <class SchedulerArguments>
struct has_splits<SchedulerArguments, std::void_t<decltype(std::declval<SchedulerArguments&>().splits)>>
    : std::true_type {};
using SchedulerArguments = std::remove_reference_t<decltype(std::declval<typename Gemm::Arguments&>().scheduler)>;
constexpr bool kSplitK = has_splits<SchedulerArguments>::value;

// splits > 1: a split-K decomposition into that many K slices. A template, so that the branch a
// scheduler without split-K does not take is never compiled against its arguments.
template <class Scheduler>
void set_split_k(Scheduler& scheduler, int splits) {
  if constexpr (has_splits<Scheduler>::value) {
    if (splits > 1) {
      scheduler.splits = splits;
      scheduler.decomposition_mode = decltype(scheduler.decomposition_mode)::SplitK;
    }
  }
}

// SM count per device, asked once: CUTLASS would otherwise query it on every call (the persistent
// grid is one cluster per SM).
int sm_count(int device) {
  static int counts[64] = {0};
  if (device < 0 || device >= 64) {
    return cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  }
  if (counts[device] == 0) {
    counts[device] = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  }
  return counts[device];
}

// raster: 0 CUTLASS's heuristic, 1 along M, 2 along N (the order of cutlass::gemm::kernel::detail::
// RasterOrderOptions); swizzle: the tile scheduler's max_swizzle_size (1, 2, 4 or 8). Both are the
// persistent and stream-K schedulers' run-time arguments: one library serves every setting.
// splits: 1 leaves the decomposition to the scheduler (stream-K's heuristic); more forces a split-K
// decomposition into that many K slices, stream-K scheduler only (kNoSplitK elsewhere).
typename Gemm::Arguments make_arguments(const void* a, const void* b, void* d, int m, int n, int k,
                                        int lda, int ldb, int ldd, int raster, int swizzle, int splits,
                                        int device) {
  // Strides of (row/col, K, L) for A and B and of (M, N, L) for D; the unit stride is a static _1.
  auto stride_a = make_stride(int64_t(lda), Int<1>{}, int64_t(0));
#if WF_B_KMAJOR
  auto stride_b = make_stride(int64_t(ldb), Int<1>{}, int64_t(0));  // over N: ldb, over K: 1
#else
  auto stride_b = make_stride(Int<1>{}, int64_t(ldb), int64_t(0));  // over N: 1, over K: ldb
#endif
  auto stride_d = make_stride(int64_t(ldd), Int<1>{}, int64_t(0));
  static_assert(std::is_same_v<decltype(stride_a), typename Gemm::GemmKernel::StrideA>);
  static_assert(std::is_same_v<decltype(stride_b), typename Gemm::GemmKernel::StrideB>);
  static_assert(std::is_same_v<decltype(stride_d), typename Gemm::GemmKernel::StrideD>);

  cutlass::KernelHardwareInfo hw_info;
  hw_info.device_id = device;
  hw_info.sm_count = sm_count(device);

  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {m, n, k, 1},
      {static_cast<const Element*>(a), stride_a, static_cast<const Element*>(b), stride_b},
      {{}, nullptr, stride_d, static_cast<Element*>(d), stride_d},  // C: nullptr (void)
      hw_info};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.scheduler.raster_order = static_cast<decltype(args.scheduler.raster_order)>(raster);
  args.scheduler.max_swizzle_size = swizzle;
  set_split_k(args.scheduler, splits);
  return args;
}

}  // namespace wf

extern "C" {

// CUTLASS's version (major * 10000 + minor * 100 + patch), so a stale library can be told apart.
int wf_cutlass_version() { return CUTLASS_MAJOR * 10000 + CUTLASS_MINOR * 100 + CUTLASS_PATCH; }

const char* wf_cutlass_name() { return "${NAME}/${DTYPE}/${LAYOUT}"; }

const char* wf_cutlass_status_string(int status) {
  if (status == wf::kNoDevice) return "no current CUDA device";
  if (status == wf::kWorkspaceTooSmall) return "workspace smaller than wf_cutlass_workspace_size()";
  if (status == wf::kNoSplitK) return "split-K asked of a kernel without the stream-K scheduler";
  return cutlassGetStatusString(static_cast<cutlass::Status>(status));
}

// 0 when this kernel can compute the problem (alignment, sizes), else a cutlass::Status code.
// Host arithmetic only: no GPU is touched.
int wf_cutlass_can_implement(int m, int n, int k, int lda, int ldb, int ldd, int raster, int swizzle,
                             int splits) {
  if (splits > 1 && !wf::kSplitK) {
    return wf::kNoSplitK;
  }
  auto args = wf::make_arguments(nullptr, nullptr, nullptr, m, n, k, lda, ldb, ldd, raster, swizzle, splits, 0);
  args.hw_info.sm_count = 1;  // not used by the check; avoids asking a device
  return static_cast<int>(wf::Gemm::can_implement(args));
}

// Bytes of device workspace one call needs on the current device (0 for the persistent scheduler;
// stream-K keeps partial tiles and flags there).
size_t wf_cutlass_workspace_size(int m, int n, int k, int lda, int ldb, int ldd, int raster, int swizzle,
                                 int splits) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    return 0;
  }
  return wf::Gemm::get_workspace_size(
      wf::make_arguments(nullptr, nullptr, nullptr, m, n, k, lda, ldb, ldd, raster, swizzle, splits, device));
}

// D = A . B on `stream` (a cudaStream_t; 0 is the legacy default stream). Returns 0 or a status code
// (wf_cutlass_status_string). Allocates nothing: `workspace` holds at least
// wf_cutlass_workspace_size() bytes (any pointer when that is 0).
int wf_cutlass_gemm(const void* a, const void* b, void* d, int m, int n, int k, int lda, int ldb, int ldd,
                    int raster, int swizzle, int splits, void* stream, void* workspace, size_t workspace_bytes) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    return wf::kNoDevice;
  }
  if (splits > 1 && !wf::kSplitK) {
    return wf::kNoSplitK;
  }
  auto args = wf::make_arguments(a, b, d, m, n, k, lda, ldb, ldd, raster, swizzle, splits, device);
  cutlass::Status status = wf::Gemm::can_implement(args);
  if (status != cutlass::Status::kSuccess) {
    return static_cast<int>(status);
  }
  if (wf::Gemm::get_workspace_size(args) > workspace_bytes) {
    return wf::kWorkspaceTooSmall;
  }
  wf::Gemm gemm;  // holds only the kernel's parameters: one per call, so concurrent calls never share one
  // run() = initialize (workspace reset on the stream, TMA descriptors, shared-memory attribute) + launch
  status = gemm.run(args, workspace, static_cast<cudaStream_t>(stream));
  return static_cast<int>(status);
}

}  // extern "C"

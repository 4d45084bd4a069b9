// C[M, N] = A[M, K] @ B in fp16 or bf16 with fp32 accumulation, for sm_80 and later (tuned for H100).
//
// One thread block computes a BM x BN tile of C; its WARPS_M x WARPS_N warps each own a
// (BM / WARPS_M) x (BN / WARPS_N) sub-tile made of m16n8k16 tensor-core MMAs (mma.sync, inline PTX).
// Tiles of A and B go global -> shared through a STAGES-deep cp.async pipeline (16-byte copies,
// zero-filled past the matrix edges) and shared -> registers through ldmatrix. Shared memory is
// XOR-swizzled in 16-byte chunks so that both the copies and the ldmatrix reads are free of bank
// conflicts. Not done here: split-K, a shared-memory epilogue, TMA / wgmma (Hopper's own path).
//
// Compile-time parameters (-D):
//   BM, BN        block tile; BM % (16 * WARPS_M) == 0, BN % (16 * WARPS_N) == 0
//   BK            32 or 64, the K depth of one pipeline stage
//   WARPS_M/_N    warp grid of a block (32 * WARPS_M * WARPS_N threads)
//   STAGES        2 to 4 pipeline stages
//   DTYPE         half or __nv_bfloat16 (the element type of A, B and C)
//   B_KMAJOR      0: B is (K, N) row-major ("nn"); 1: B is (N, K) row-major, the math uses B^T ("nt")
//   GROUP_M       block rows that share B tiles in L2 (default 8; 1 turns the reordering off)
// The caller guarantees: K % 8 == 0, N % 8 == 0 when B_KMAJOR == 0, 16-byte-aligned base pointers
// (every 16-byte chunk of a row is then entirely inside or entirely outside the matrix). M is free,
// and so is N when B_KMAJOR == 1. Launch: grid (ceil(N / BN), ceil(M / BM)), block
// 32 * WARPS_M * WARPS_N threads, STAGES * (BM + BN) * BK * 2 bytes of dynamic shared memory.
//
// No header is included, so NVRTC needs no CUDA toolkit: elements are stored as 16-bit integers and
// converted with PTX; the kernel's pointer arguments are ABI-identical to DTYPE*.

#if !defined(BM) || !defined(BN) || !defined(BK) || !defined(WARPS_M) || !defined(WARPS_N) || !defined(STAGES)
#error "mma_gemm needs -DBM, -DBN, -DBK, -DWARPS_M, -DWARPS_N and -DSTAGES"
#endif
#ifndef B_KMAJOR
#define B_KMAJOR 0
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif

// DTYPE names a CUDA type (half, __nv_bfloat16); token pasting maps it to a number the preprocessor
// can compare without that type's header.
#define WF_DTYPE_half 1
#define WF_DTYPE___nv_bfloat16 2
#define WF_PASTE_(a, b) a##b
#define WF_PASTE(a, b) WF_PASTE_(a, b)
#if WF_PASTE(WF_DTYPE_, DTYPE) == 1
#define WF_PTX_TYPE "f16"
#elif WF_PASTE(WF_DTYPE_, DTYPE) == 2
#define WF_PTX_TYPE "bf16"
#else
#error "DTYPE must be half or __nv_bfloat16"
#endif

namespace wf {

typedef unsigned short elem_t;  // raw fp16 / bf16 bits

constexpr int kThreads = WARPS_M * WARPS_N * 32;
constexpr int kWarpM = BM / WARPS_M;  // rows of C per warp
constexpr int kWarpN = BN / WARPS_N;  // columns of C per warp
constexpr int kMmaM = kWarpM / 16;    // m16 MMA tiles per warp
constexpr int kMmaN = kWarpN / 8;     // n8 MMA tiles per warp
constexpr int kTileA = BM * BK;       // elements of one stage of A
constexpr int kTileB = BN * BK;       // elements of one stage of B
constexpr int kStageBytes = (kTileA + kTileB) * 2;

static_assert(BK == 32 || BK == 64, "BK must be 32 or 64");
static_assert(STAGES >= 2 && STAGES <= 4, "STAGES must be 2, 3 or 4");
static_assert(kWarpM % 16 == 0, "BM / WARPS_M must be a multiple of 16 (m16 MMA tiles)");
static_assert(kWarpN % 16 == 0, "BN / WARPS_N must be a multiple of 16 (one ldmatrix.x4 feeds two n8 tiles)");
static_assert(kThreads <= 1024, "too many warps per block");
static_assert(B_KMAJOR == 1 || BN == 32 || BN % 64 == 0, "a (K, N) B tile needs BN == 32 or BN % 64 == 0 (its swizzle)");

// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled tile whose rows are CHUNKS
// chunks long. The XOR spreads the 8 rows that one ldmatrix (or 8 copying threads) touches over the
// 8 distinct 16-byte bank groups of a 128-byte line:
//   rows of 8+ chunks (>= 128 bytes) start in bank 0, so the chunk is XORed with row % 8;
//   rows of 4 chunks (64 bytes) pair up in a line, so (row % 2) already picks a half-line and the
//   chunk is XORed with (row / 2) % 4.
template <int CHUNKS>
__device__ __forceinline__ int swizzle(int row, int chunk) {
    static_assert(CHUNKS == 4 || CHUNKS % 8 == 0, "swizzled rows must be 4 or a multiple of 8 chunks");
    const int x = CHUNKS == 4 ? ((row >> 1) & 3) : (row & 7);
    return (row * CHUNKS + (chunk ^ x)) * 8;
}

__device__ __forceinline__ unsigned shared_address(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// 16-byte global -> shared copy that bypasses L1; src_size 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Four 8x8 b16 matrices ("memory": never hoisted above the barrier that publishes the stage); lanes 8i..8i+7 give the row addresses of matrix i, and register i of lane l
// receives row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 of matrix i (.trans: that column pair of
// row l / 4 of the transposed matrix).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// d += a @ b for one 16x8x16 tile (PTX ISA, "Matrix Fragments for mma.m16n8k16").
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32." WF_PTX_TYPE "." WF_PTX_TYPE ".f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to nearest-even into one 32-bit pair: `lo` in the low half (the lower address).
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn." WF_PTX_TYPE "x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Copies a ROWS x COLS tile, COLS contiguous in global memory, into one swizzled stage; each thread
// owns the same chunks in every stage, so their tile coordinates and shared addresses are computed once.
template <int ROWS, int COLS>
struct TileCopy {
    static constexpr int kChunks = COLS / 8;  // 16-byte chunks per tile row
    static constexpr int kTotal = ROWS * kChunks;
    static constexpr int kIters = (kTotal + kThreads - 1) / kThreads;
    int row[kIters], col[kIters];
    unsigned dst[kIters];

    __device__ __forceinline__ TileCopy(int tid, unsigned base) {
#pragma unroll
        for (int i = 0; i < kIters; ++i) {
            const int idx = tid + i * kThreads;
            row[i] = idx / kChunks;
            col[i] = (idx % kChunks) * 8;
            dst[i] = base + swizzle<kChunks>(row[i], idx % kChunks) * 2;
        }
    }

    // Tile origin (r0, c0) in a rows x cols matrix g with leading dimension ld; out-of-range chunks
    // are zero-filled (src points at g itself so that no address outside the allocation is formed).
    __device__ __forceinline__ void copy(unsigned stage_offset, const elem_t* g, int r0, int c0, int rows,
                                         int cols, int ld, int tid) const {
#pragma unroll
        for (int i = 0; i < kIters; ++i) {
            if (kTotal % kThreads == 0 || tid + i * kThreads < kTotal) {
                const int r = r0 + row[i], c = c0 + col[i];
                const bool ok = r < rows && c < cols;
                const elem_t* src = ok ? g + (long long)r * ld + c : g;
                cp_async16(dst[i] + stage_offset, src, ok);
            }
        }
    }
};

}  // namespace wf

extern "C" __global__ void __launch_bounds__(WARPS_M * WARPS_N * 32)
    mma_gemm(const wf::elem_t* __restrict__ A, const wf::elem_t* __restrict__ B, wf::elem_t* __restrict__ C, int M,
             int N, int K) {
    using namespace wf;
    extern __shared__ __align__(128) unsigned char smem[];

    // Block (bm, bn) of the C grid. With GROUP_M > 1, consecutive blocks walk down GROUP_M block rows
    // before moving right, so the B tiles they share are still in L2 (Triton's "grouped ordering").
    int bm = blockIdx.y, bn = blockIdx.x;
    if (GROUP_M > 1) {
        const int grid_m = gridDim.y, grid_n = gridDim.x;
        const int pid = blockIdx.y * grid_n + blockIdx.x;
        const int in_group = GROUP_M * grid_n;
        const int first_m = (pid / in_group) * GROUP_M;
        const int group_m = grid_m - first_m < GROUP_M ? grid_m - first_m : GROUP_M;
        bm = first_m + (pid % in_group) % group_m;
        bn = (pid % in_group) / group_m;
    }
    const int m0 = bm * BM, n0 = bn * BN;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
    const unsigned a_base = shared_address(smem);  // stage s: A at s * kStageBytes, B right after it
    const unsigned b_base = a_base + kTileA * 2;

    const TileCopy<BM, BK> copy_a(tid, a_base);
#if B_KMAJOR
    const TileCopy<BN, BK> copy_b(tid, b_base);  // B^T tile: BN rows of BK contiguous k
#else
    const TileCopy<BK, BN> copy_b(tid, b_base);  // B tile: BK rows of BN contiguous n
#endif

    auto load_stage = [&](int stage, int k_tile) {
        const int k0 = k_tile * BK;
        const unsigned offset = stage * kStageBytes;
        copy_a.copy(offset, A, m0, k0, M, K, K, tid);
#if B_KMAJOR
        copy_b.copy(offset, B, n0, k0, N, K, K, tid);
#else
        copy_b.copy(offset, B, k0, n0, K, N, N, tid);
#endif
    };

    float acc[kMmaM][kMmaN][4];
#pragma unroll
    for (int i = 0; i < kMmaM; ++i)
#pragma unroll
        for (int j = 0; j < kMmaN; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

    // Pipeline: stages 0..STAGES-2 are in flight before the loop; iteration kt waits for tile kt,
    // refills the stage that iteration kt - 1 consumed (the barrier proves every warp is done with it)
    // and computes on tile kt. One commit group per iteration, empty past the last tile, keeps the
    // wait_group count exact.
    const int k_tiles = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load_stage(s, s);
        cp_async_commit();
    }

    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int next = kt + STAGES - 1;
        if (next < k_tiles) load_stage(next % STAGES, next);
        cp_async_commit();

        const unsigned a_stage = a_base + (kt % STAGES) * kStageBytes;
        const unsigned b_stage = b_base + (kt % STAGES) * kStageBytes;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            // A fragment of rows 16 mi.. of the warp tile: matrices (rows 0-7, k 0-7), (8-15, 0-7),
            // (0-7, 8-15), (8-15, 8-15) are a0..a3 of mma.m16n8k16; lane l addresses row l % 16 and
            // k chunk l / 16.
            unsigned af[kMmaM][4];
#pragma unroll
            for (int mi = 0; mi < kMmaM; ++mi) {
                const int row = warp_m * kWarpM + mi * 16 + (lane & 15);
                ldmatrix_x4(af[mi], a_stage + swizzle<BK / 8>(row, kk * 2 + (lane >> 4)) * 2);
            }
            // B fragments of two n8 tiles per ldmatrix.x4: matrices are (b0, b1) of tile 2 nj and
            // (b0, b1) of tile 2 nj + 1, b0 holding k 0-7 and b1 k 8-15 of column n = l / 4.
            unsigned bf[kMmaN][2];
#pragma unroll
            for (int nj = 0; nj < kMmaN / 2; ++nj) {
                unsigned r[4];
#if B_KMAJOR
                // rows are n, k contiguous: lane l addresses n = l % 8 + 8 (l / 16), k chunk (l / 8) % 2
                const int row = warp_n * kWarpN + nj * 16 + (lane & 7) + ((lane >> 4) << 3);
                ldmatrix_x4(r, b_stage + swizzle<BK / 8>(row, kk * 2 + ((lane >> 3) & 1)) * 2);
#else
                // rows are k, n contiguous, transposed on load: lane l addresses k = l % 16, n chunk l / 16
                const int chunk = (warp_n * kWarpN + nj * 16) / 8 + (lane >> 4);
                ldmatrix_x4_trans(r, b_stage + swizzle<BN / 8>(kk * 16 + (lane & 15), chunk) * 2);
#endif
                bf[2 * nj][0] = r[0];
                bf[2 * nj][1] = r[1];
                bf[2 * nj + 1][0] = r[2];
                bf[2 * nj + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
                for (int ni = 0; ni < kMmaN; ++ni) mma_16x8x16(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
        }
    }
    cp_async_wait<0>();  // only empty groups can remain; leave none behind at exit

    // Epilogue: accumulator d0, d1 of lane l hold row l / 4, columns 2 (l % 4) and +1 of the n8 tile;
    // d2, d3 the same columns 8 rows lower. Pairs are stored as one 32-bit word when N is even (the
    // pair is then 4-byte aligned), element by element otherwise.
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
        for (int ni = 0; ni < kMmaN; ++ni) {
            const int c = n0 + warp_n * kWarpN + ni * 8 + 2 * t;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = m0 + warp_m * kWarpM + mi * 16 + g + 8 * h;
                if (r >= M || c >= N) continue;
                const unsigned pair = pack2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
                elem_t* p = C + (long long)r * N + c;
                if (c + 1 < N && (N & 1) == 0) {
                    *reinterpret_cast<unsigned*>(p) = pair;
                } else {
                    p[0] = (elem_t)(pair & 0xffffu);
                    if (c + 1 < N) p[1] = (elem_t)(pair >> 16);
                }
            }
        }
    }
}

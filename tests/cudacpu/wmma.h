/*
tests/cudacpu/wmma.h: nvcuda::wmma (the warp-level tensor-core API of <mma.h>) in software, for
the CPU execution layer (cudacpu.h includes it).

A fragment is spread over the 32 lanes of a warp as on a GPU: each lane holds num_elements of
the tile's rows x cols elements (element e of lane l is element e * 32 + l of the tile in
row-major order; CUDA leaves the mapping unspecified, so code must not depend on it). Modelled:
the shapes m16n16k16, m32n8k16 and m8n32k16; matrix_a / matrix_b of __half or __nv_bfloat16 in
row_major or col_major; accumulators of float (or __half); fill_fragment, load_matrix_sync,
store_matrix_sync, mma_sync. load, store and mma are collective: every lane of the warp must call
them (a lane that has exited or waits elsewhere is reported); the pointer must be 32-byte aligned
and ldm a multiple of 16 bytes, as CUDA requires. mma_sync multiplies exactly (the products of
half or bf16 values are exact in float) and accumulates in float over k in order: tensor cores
add in an unspecified order and precision, which this does not reproduce.
*/
#ifndef CUDACPU_WMMA_H
#define CUDACPU_WMMA_H

namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {

template <int M, int N, int K>
struct shape_ok {
    static constexpr bool value = (M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) ||
                                  (M == 8 && N == 32 && K == 16);
};

// the tile a fragment holds: matrix_a M x K, matrix_b K x N, accumulator M x N
template <typename Use, int M, int N, int K>
struct tile;
template <int M, int N, int K>
struct tile<matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K>
struct tile<matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K>
struct tile<accumulator, M, N, K> { static constexpr int rows = M, cols = N; };

inline float to_float(float v) { return v; }
inline float to_float(__half v) { return __half2float(v); }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
inline T from_float(float v);
template <>
inline float from_float<float>(float v) { return v; }
template <>
inline __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
inline void check_pointer(const T* p, unsigned ldm, const char* what, const char* file, int line) {
    if (((uintptr_t)p & 31u) != 0) {
        cudacpu::fail("%s at %s:%d: pointer %p is not 32-byte aligned", what, file, line, (const void*)p);
    }
    if ((ldm * sizeof(T)) % 16 != 0) {
        cudacpu::fail("%s at %s:%d: ldm %u is not a multiple of 16 bytes", what, file, line, ldm);
    }
}

// the offset in memory of tile element (r, c)
inline size_t offset(int r, int c, unsigned ldm, bool col_major) {
    return col_major ? (size_t)r + (size_t)c * ldm : (size_t)r * ldm + (size_t)c;
}

template <typename Layout>
struct is_col_major { static constexpr bool value = false; };
template <>
struct is_col_major<col_major> { static constexpr bool value = true; };

// a collective load: each lane reads its own elements of the tile at p
template <typename F, typename P>
inline void load(F& f, const P* p, unsigned ldm, bool col_major, const char* file, int line) {
    check_pointer(p, ldm, "load_matrix_sync", file, line);
    cudacpu::warp_collective("load_matrix_sync", file, line);
    int lane = cudacpu::lane_id();
    for (int e = 0; e < f.num_elements; e++) {
        int i = e * 32 + lane;
        f.x[e] = p[offset(i / f.cols, i % f.cols, ldm, col_major)];
    }
}

}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
    static_assert(detail::shape_ok<M, N, K>::value, "cudacpu wmma: only m16n16k16, m32n8k16 and m8n32k16 are modelled");
    static_assert(std::is_same<Use, accumulator>::value ? std::is_void<Layout>::value
                                                        : (std::is_same<Layout, row_major>::value ||
                                                           std::is_same<Layout, col_major>::value),
                  "cudacpu wmma: matrix_a and matrix_b need row_major or col_major, an accumulator no layout");
    static_assert(std::is_same<Use, accumulator>::value
                      ? (std::is_same<T, float>::value || std::is_same<T, __half>::value)
                      : (std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value),
                  "cudacpu wmma: matrix_a/b of __half or __nv_bfloat16, accumulators of float or __half");

public:
    typedef T element_type;
    typedef T storage_element_type;
    static constexpr int rows = detail::tile<Use, M, N, K>::rows, cols = detail::tile<Use, M, N, K>::cols;
    static constexpr int num_elements = rows * cols / 32;
    T x[num_elements];
};

template <typename Use, int M, int N, int K, typename T, typename Layout>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const T& v) {
    for (int e = 0; e < f.num_elements; e++) { f.x[e] = v; }
}
template <typename Use, int M, int N, int K, typename T, typename Layout, typename V>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const V& v) {
    fill_fragment(f, detail::from_float<T>(detail::to_float(v)));
}

#define CUDACPU_WMMA_LOC const char *file = __builtin_FILE(), int line = __builtin_LINE()

// matrix_a / matrix_b: the layout is the fragment's
template <typename Use, int M, int N, int K, typename T, typename Layout, typename P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const P* p, unsigned ldm, CUDACPU_WMMA_LOC) {
    static_assert(!std::is_same<Use, accumulator>::value, "cudacpu wmma: loading an accumulator needs a layout_t");
    static_assert(std::is_same<T, P>::value, "cudacpu wmma: the pointer type must be the fragment's element type");
    detail::load(f, p, ldm, detail::is_col_major<Layout>::value, file, line);
}

// an accumulator, with the layout given
template <int M, int N, int K, typename T, typename P>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const P* p, unsigned ldm, layout_t layout,
                             CUDACPU_WMMA_LOC) {
    static_assert(std::is_same<T, P>::value, "cudacpu wmma: the pointer type must be the fragment's element type");
    detail::load(f, p, ldm, layout == mem_col_major, file, line);
}

template <int M, int N, int K, typename T, typename P>
inline void store_matrix_sync(P* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout,
                              CUDACPU_WMMA_LOC) {
    static_assert(std::is_same<T, P>::value, "cudacpu wmma: the pointer type must be the fragment's element type");
    detail::check_pointer(p, ldm, "store_matrix_sync", file, line);
    cudacpu::warp_collective("store_matrix_sync", file, line);
    int lane = cudacpu::lane_id();
    for (int e = 0; e < f.num_elements; e++) {
        int i = e * 32 + lane;
        p[detail::offset(i / f.cols, i % f.cols, ldm, layout == mem_col_major)] = f.x[e];
    }
}

// d = a . b + c; d may be c
template <int M, int N, int K, typename Ta, typename La, typename Tb, typename Lb, typename Tc, typename Td>
inline void mma_sync(fragment<accumulator, M, N, K, Td>& d, const fragment<matrix_a, M, N, K, Ta, La>& a,
                     const fragment<matrix_b, M, N, K, Tb, Lb>& b, const fragment<accumulator, M, N, K, Tc>& c,
                     CUDACPU_WMMA_LOC) {
    static_assert(std::is_same<Ta, Tb>::value, "cudacpu wmma: matrix_a and matrix_b must have the same type");
    struct Operands {
        const fragment<matrix_a, M, N, K, Ta, La>* a;
        const fragment<matrix_b, M, N, K, Tb, Lb>* b;
        const fragment<accumulator, M, N, K, Tc>* c;
    } mine = {&a, &b, &c};
    // every lane posts where its fragments are, reads the others', then waits until all have read
    const uint64_t* lanes = cudacpu::warp_gather((uint64_t)(uintptr_t)&mine, "mma_sync", file, line);
    auto op = [&](int k) { return (const Operands*)(uintptr_t)lanes[k]; };
    int lane = cudacpu::lane_id();
    float out[fragment<accumulator, M, N, K, Td>::num_elements];
    for (int e = 0; e < d.num_elements; e++) {
        int i = e * 32 + lane, r = i / N, col = i % N;
        float acc = detail::to_float(op(i % 32)->c->x[i / 32]);
        for (int k = 0; k < K; k++) {
            int ia = r * K + k, ib = k * N + col;  // row-major positions in the A and B tiles
            acc += detail::to_float(op(ia % 32)->a->x[ia / 32]) * detail::to_float(op(ib % 32)->b->x[ib / 32]);
        }
        out[e] = acc;
    }
    cudacpu::warp_collective("mma_sync", file, line);
    for (int e = 0; e < d.num_elements; e++) { d.x[e] = detail::from_float<Td>(out[e]); }
}

#undef CUDACPU_WMMA_LOC

}  // namespace wmma
}  // namespace nvcuda

#endif  // CUDACPU_WMMA_H

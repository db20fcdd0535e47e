/* Element access for the simulated kernels: every value goes through double, and a store rounds
 * ONCE from double to the element type (round to nearest even; NaN stays NaN), so the simulator's
 * only error is that final rounding. Integer tensors also have exact int64 access. */
#ifndef SIMCANN_DTYPE_H
#define SIMCANN_DTYPE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "simcann.h"

static inline double half_bits_to_double(uint32_t h, int mant_bits, int exp_bits) {
    uint32_t sign = h >> (mant_bits + exp_bits), e = (h >> mant_bits) & ((1u << exp_bits) - 1);
    uint32_t m = h & ((1u << mant_bits) - 1);
    int bias = (1 << (exp_bits - 1)) - 1;
    double v;
    if (e == (1u << exp_bits) - 1) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, 1 - bias - mant_bits);
    else v = ldexp((double)(m | (1u << mant_bits)), (int)e - bias - mant_bits);
    return sign ? -v : v;
}

/* double -> a binary format with mant_bits stored mantissa bits, one rounding. */
static inline uint32_t double_to_bits(double x, int mant_bits, int exp_bits) {
    uint32_t sign = signbit(x) ? 1u << (mant_bits + exp_bits) : 0;
    uint32_t exp_all = ((1u << exp_bits) - 1) << mant_bits;
    if (isnan(x)) return sign | exp_all | (1u << (mant_bits - 1));
    double a = fabs(x);
    int bias = (1 << (exp_bits - 1)) - 1, emin = 1 - bias;
    if (isinf(a)) return sign | exp_all;
    if (a == 0) return sign;
    int e;
    frexp(a, &e);
    int E = e - 1 < emin ? emin : e - 1;
    double q = nearbyint(ldexp(a, mant_bits - E));  /* exact scaling, then the one rounding */
    if (q >= ldexp(1.0, mant_bits + 1)) { q /= 2; E++; }
    if (E > bias) return sign | exp_all;
    uint32_t qi = (uint32_t)q;
    if (qi < (1u << mant_bits)) return sign | qi;  /* subnormal */
    return sign | ((uint32_t)(E + bias) << mant_bits) | (qi - (1u << mant_bits));
}

static inline int is_float_type(int dt) { return dt == ACL_FLOAT || dt == ACL_FLOAT16 || dt == ACL_BF16 || dt == ACL_DOUBLE; }

static inline const char *dtype_name(int dt) {
    switch (dt) {
    case ACL_FLOAT: return "float";
    case ACL_FLOAT16: return "float16";
    case ACL_BF16: return "bfloat16";
    case ACL_DOUBLE: return "double";
    case ACL_INT8: return "int8";
    case ACL_INT16: return "int16";
    case ACL_INT32: return "int32";
    case ACL_INT64: return "int64";
    case ACL_UINT8: return "uint8";
    case ACL_UINT16: return "uint16";
    case ACL_UINT32: return "uint32";
    case ACL_UINT64: return "uint64";
    case ACL_BOOL: return "bool";
    default: return "undefined";
    }
}

static inline size_t dtype_size(int dt) {
    switch (dt) {
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: return 4;
    case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: case ACL_UINT16: return 2;
    case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
    case ACL_INT64: case ACL_UINT64: case ACL_DOUBLE: return 8;
    default: return 0;
    }
}

static inline double ld(const void *base, int64_t i, int dt) {
    const char *p = (const char *)base;
    switch (dt) {
    case ACL_FLOAT: { float v; memcpy(&v, p + 4 * i, 4); return v; }
    case ACL_DOUBLE: { double v; memcpy(&v, p + 8 * i, 8); return v; }
    case ACL_FLOAT16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return half_bits_to_double(h, 10, 5); }
    case ACL_BF16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return half_bits_to_double(h, 7, 8); }
    case ACL_INT8: return ((const int8_t *)p)[i];
    case ACL_UINT8: case ACL_BOOL: return ((const uint8_t *)p)[i];
    case ACL_INT16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case ACL_UINT16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case ACL_INT32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case ACL_UINT32: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case ACL_INT64: { int64_t v; memcpy(&v, p + 8 * i, 8); return (double)v; }
    case ACL_UINT64: { uint64_t v; memcpy(&v, p + 8 * i, 8); return (double)v; }
    default: return NAN;
    }
}

static inline int64_t ldi(const void *base, int64_t i, int dt) {
    const char *p = (const char *)base;
    switch (dt) {
    case ACL_INT64: { int64_t v; memcpy(&v, p + 8 * i, 8); return v; }
    case ACL_UINT64: { uint64_t v; memcpy(&v, p + 8 * i, 8); return (int64_t)v; }
    default: {
        double d = ld(base, i, dt);
        return isnan(d) ? 0 : (int64_t)d;  /* float -> int truncates toward zero, as C and CANN's Cast */
    }
    }
}

static inline void st(void *base, int64_t i, int dt, double v) {
    char *p = (char *)base;
    switch (dt) {
    case ACL_FLOAT: { float f = (float)v; memcpy(p + 4 * i, &f, 4); return; }
    case ACL_DOUBLE: memcpy(p + 8 * i, &v, 8); return;
    case ACL_FLOAT16: { uint16_t h = (uint16_t)double_to_bits(v, 10, 5); memcpy(p + 2 * i, &h, 2); return; }
    case ACL_BF16: { uint16_t h = (uint16_t)double_to_bits(v, 7, 8); memcpy(p + 2 * i, &h, 2); return; }
    case ACL_BOOL: ((uint8_t *)p)[i] = v != 0; return;
    default: break;
    }
    int64_t iv = isnan(v) ? 0 : (int64_t)v;
    switch (dt) {
    case ACL_INT8: case ACL_UINT8: ((uint8_t *)p)[i] = (uint8_t)iv; return;
    case ACL_INT16: case ACL_UINT16: { uint16_t w = (uint16_t)iv; memcpy(p + 2 * i, &w, 2); return; }
    case ACL_INT32: case ACL_UINT32: { uint32_t w = (uint32_t)iv; memcpy(p + 4 * i, &w, 4); return; }
    case ACL_INT64: case ACL_UINT64: memcpy(p + 8 * i, &iv, 8); return;
    default: return;
    }
}

/* v rounded to dtype dt (what a tensor of that dtype would hold). */
static inline double round_to(double v, int dt) {
    unsigned char b[8];
    st(b, 0, dt, v);
    return ld(b, 0, dt);
}

static inline void sti(void *base, int64_t i, int dt, int64_t v) {
    if (dt == ACL_INT64 || dt == ACL_UINT64) memcpy((char *)base + 8 * i, &v, 8);
    else st(base, i, dt, (double)v);
}

static inline int64_t numel(const int64_t *dims, int rank) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= dims[i];
    return n;
}

/* Walks out_dims (row-major) and returns, for each position, the element index given by
 * `strides` (0 for a broadcast axis): index_of[k] for k in [0, numel). */
static inline void strided_indices(const int64_t *out_dims, int rank, const int64_t *strides, int64_t offset, int64_t *index_of) {
    int64_t n = numel(out_dims, rank), idx[16] = {0}, cur = offset;
    for (int64_t k = 0; k < n; k++) {
        index_of[k] = cur;
        for (int a = rank - 1; a >= 0; a--) {
            if (++idx[a] < out_dims[a]) { cur += strides[a]; break; }
            cur -= strides[a] * (out_dims[a] - 1);
            idx[a] = 0;
        }
    }
}

/* numpy broadcasting: strides of an input (dims, rank r, row-major contiguous) read as out_dims. */
static inline void broadcast_strides(const int64_t *dims, int r, const int64_t *out_dims, int R, int64_t *strides) {
    int64_t s = 1;
    for (int i = R - 1; i >= 0; i--) {
        int j = i - (R - r);
        if (j < 0) { strides[i] = 0; continue; }
        strides[i] = (dims[j] == 1 && out_dims[i] != 1) ? 0 : s;
        s *= dims[j];
    }
}

/* numpy rule: 0 ok (out_dims/out_rank set), -1 not broadcastable. */
static inline int broadcast_shape(const int64_t *a, int ra, const int64_t *b, int rb, int64_t *out, int *rout) {
    int R = ra > rb ? ra : rb;
    for (int i = 0; i < R; i++) {
        int64_t da = i - (R - ra) >= 0 ? a[i - (R - ra)] : 1, db = i - (R - rb) >= 0 ? b[i - (R - rb)] : 1;
        if (da != db && da != 1 && db != 1) return -1;
        out[i] = da == 1 ? db : da;
    }
    *rout = R;
    return 0;
}

#endif

/*
 * half.h -- float16 (IEEE binary16) to and from float32 and float64, in
 * portable C: round to nearest even, NaNs keeping their top payload bits
 * and made quiet, as F16C's vcvtps2ph / vcvtph2ps and NumPy do, so that
 * the portable path and the AVX2 one give the same bits; and bfloat16
 * (float32's sign, exponent and top 7 mantissa bits) the same way: loads
 * are a shift, stores round to nearest even, a NaN stays a NaN (quiet, its
 * top payload bits and sign kept, as AVX512-BF16's vcvtneps2bf16 does).
 */
#ifndef PE_HALF_H
#define PE_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t pe_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float pe_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t pe_f16_from_f32(float f)
{
    uint32_t x = pe_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;

    if (ax > 0x7f800000u) /* nan: the top payload bits, quiet, as F16C's vcvtps2ph */
        return sign | 0x7e00u | (uint16_t)((ax >> 13) & 0x3ffu);
    if (ax == 0x7f800000u)
        return sign | 0x7c00u;
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return sign | 0x7c00u;
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal */
        /* Adding 0.5 forces the bits we keep into the low mantissa, and the
         * float addition rounds to nearest even for us. */
        float v = pe_f32_from_bits(ax) + 0.5f;
        return sign | (uint16_t)(pe_f32_bits(v) - 0x3f000000u);
    }
    uint32_t mant_odd = (ax >> 13) & 1u;
    ax += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round */
    return sign | (uint16_t)(ax >> 13);
}

static inline float pe_f32_from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f)
        return pe_f32_from_bits(sign | 0x7f800000u | (m << 13));
    if (e == 0) /* zero or subnormal: m * 2^-24 is exact in float */
        return (sign ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f;
    return pe_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* float64 -> float32 rounding to odd: truncate, and set the last bit if
 * anything was lost.  Rounding that to float16 (nearest even) gives the
 * float16 nearest the float64 value, where two nearest-even roundings in a
 * row would sometimes miss it by one ulp. */
static inline float pe_f32_round_odd(double d)
{
    float f = (float)d;
    double b = (double)f;
    if (b == d || d != d)
        return f;
    uint32_t u = pe_f32_bits(f);
    if ((b < 0 ? -b : b) > (d < 0 ? -d : d))
        u -= 1; /* rounded away from zero: step back toward it */
    return pe_f32_from_bits(u | 1u);
}

static inline uint16_t pe_f16_from_f64(double d)
{
    return pe_f16_from_f32(pe_f32_round_odd(d));
}

/* bfloat16 has float32's exponent range, so subnormals, overflow to
 * infinity and signed zeros all fall out of rounding the low 16 bits:
 * adding 0x7fff plus the lowest kept bit carries into the kept bits exactly
 * when the dropped half is above one half, or one half with an odd kept
 * part.  A NaN could carry into the sign or become infinity that way, so
 * it is made quiet instead. */
static inline uint16_t pe_bf16_from_f32(float f)
{
    uint32_t x = pe_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline float pe_f32_from_bf16(uint16_t h)
{
    return pe_f32_from_bits((uint32_t)h << 16);
}

/* Rounded to odd at float32's 24 bits first (at least two more than
 * bfloat16's 8), as for float16: the bfloat16 nearest the float64 value. */
static inline uint16_t pe_bf16_from_f64(double d)
{
    return pe_bf16_from_f32(pe_f32_round_odd(d));
}

#endif

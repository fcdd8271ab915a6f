// Double-precision transcendental functions for the f64 kernels: GLSL defines exp, log,
// sin, cos, tanh and erf for float only (the f64 overloads Vulkan allows are sqrt, fma,
// floor and the like). Accurate to a few ulp on the ranges noted, with IEEE special
// cases (NaN in, NaN out; infinities; signed zeros where candle's libm keeps them).
//
// Algorithms (the usual ones of fdlibm / Cody-Waite; the constants are derived from pi
// and ln 2 and checked in ops/src/elementwise.rs's tests):
// - exp: x = n ln2 + r, |r| <= ln2 / 2, ln2 split in two so that n ln2_hi is exact;
//   e^r by its Taylor series to r^13 (truncation < 2^-60); 2^n by two ldexp steps.
// - expm1: the Taylor series to x^16 for |x| < 1/2, else exp(x) - 1.
// - log: x = 2^e m with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m - 1) / (m +
//   1), |s| < 0.172, by its series to s^25.
// - sin, cos: x = q pi/2 + r, by Cody-Waite with pi/2 split in four parts of 33 bits
//   below |x| = 1e6, by Payne-Hanek with 1280 bits of 2/pi above (any finite x); the
//   Taylor series of sin and cos on |r| <= pi/4 to r^23.
// - tanh: expm1(2|x|) / (expm1(2|x|) + 2) with the sign; +-1 beyond |x| = 22.
// - erf: for |x| < 1, 2x/sqrt(pi) e^(-x^2) sum_n (2x^2)^n / (2n+1)!! (all terms
//   positive: no cancellation); from 1, 1 - erfc x with erfc by its continued fraction
//   (Abramowitz and Stegun 7.1.14); x^2 split exactly with fma; +-1 beyond |x| = 6.
#ifndef VKML_MATH64_GLSL
#define VKML_MATH64_GLSL

#define M64_INF (1.0lf / 0.0lf)
#define M64_NAN (0.0lf / 0.0lf)

double m64_ldexp(double v, int n) {
    int h = n / 2;
    return ldexp(ldexp(v, h), n - h);
}

// e^r for |r| <= ln2 / 2 (Horner over 1/k!).
double m64_exp_poly(double r) {
    double p = 1.6059043836821613e-10lf;
    p = p * r + 2.08767569878681e-09lf;
    p = p * r + 2.505210838544172e-08lf;
    p = p * r + 2.755731922398589e-07lf;
    p = p * r + 2.7557319223985893e-06lf;
    p = p * r + 2.48015873015873e-05lf;
    p = p * r + 0.0001984126984126984lf;
    p = p * r + 0.001388888888888889lf;
    p = p * r + 0.008333333333333333lf;
    p = p * r + 0.041666666666666664lf;
    p = p * r + 0.16666666666666666lf;
    p = p * r + 0.5lf;
    p = p * r + 1.0lf;
    return p * r + 1.0lf;
}

double exp64(double x) {
    if (isnan(x)) return x;
    if (x > 709.782712893384lf) return M64_INF;
    if (x < -745.1332191019412lf) return 0.0lf;
    double n = roundEven(x * 1.4426950408889634lf);
    double r = (x - n * 0.6931471803691238lf) - n * 1.9082149292705877e-10lf;
    return m64_ldexp(m64_exp_poly(r), int(n));
}

double expm1_64(double x) {
    if (abs(x) >= 0.5lf) return exp64(x) - 1.0lf;
    double p = 4.779477332387385e-14lf;
    p = p * x + 7.647163731819816e-13lf;
    p = p * x + 1.1470745597729725e-11lf;
    p = p * x + 1.6059043836821613e-10lf;
    p = p * x + 2.08767569878681e-09lf;
    p = p * x + 2.505210838544172e-08lf;
    p = p * x + 2.755731922398589e-07lf;
    p = p * x + 2.7557319223985893e-06lf;
    p = p * x + 2.48015873015873e-05lf;
    p = p * x + 0.0001984126984126984lf;
    p = p * x + 0.001388888888888889lf;
    p = p * x + 0.008333333333333333lf;
    p = p * x + 0.041666666666666664lf;
    p = p * x + 0.16666666666666666lf;
    p = p * x + 0.5lf;
    return x + (p * x) * x;
}

double log64(double x) {
    if (isnan(x)) return x;
    if (x < 0.0lf) return M64_NAN;
    if (x == 0.0lf) return -M64_INF;
    if (isinf(x)) return x;
    int e;
    double m = frexp(x, e); // [0.5, 1)
    if (m < 0.7071067811865476lf) {
        m *= 2.0lf;
        e -= 1;
    }
    double f = m - 1.0lf;
    double s = f / (2.0lf + f);
    double s2 = s * s;
    // 2 atanh(s) = 2s + 2s (s^2/3 + s^4/5 + ... + s^24/25)
    double q = 1.0lf / 25.0lf;
    q = q * s2 + 1.0lf / 23.0lf;
    q = q * s2 + 1.0lf / 21.0lf;
    q = q * s2 + 1.0lf / 19.0lf;
    q = q * s2 + 1.0lf / 17.0lf;
    q = q * s2 + 1.0lf / 15.0lf;
    q = q * s2 + 1.0lf / 13.0lf;
    q = q * s2 + 1.0lf / 11.0lf;
    q = q * s2 + 1.0lf / 9.0lf;
    q = q * s2 + 1.0lf / 7.0lf;
    q = q * s2 + 1.0lf / 5.0lf;
    q = q * s2 + 1.0lf / 3.0lf;
    double hs = 2.0lf * s;
    double lm = hs + hs * (q * s2);
    double de = double(e);
    return de * 0.6931471803691238lf + (de * 1.9082149292705877e-10lf + lm);
}

// sin r and cos r for |r| <= pi/4 (Taylor series).
double m64_sin_poly(double r) {
    double r2 = r * r;
    double p = -3.868170170630684e-23lf;
    p = p * r2 + 1.9572941063391263e-20lf;
    p = p * r2 - 8.22063524662433e-18lf;
    p = p * r2 + 2.8114572543455206e-15lf;
    p = p * r2 - 7.647163731819816e-13lf;
    p = p * r2 + 1.6059043836821613e-10lf;
    p = p * r2 - 2.505210838544172e-08lf;
    p = p * r2 + 2.7557319223985893e-06lf;
    p = p * r2 - 0.0001984126984126984lf;
    p = p * r2 + 0.008333333333333333lf;
    p = p * r2 - 0.16666666666666666lf;
    return r + r * (p * r2);
}

double m64_cos_poly(double r) {
    double r2 = r * r;
    double p = -8.896791392450574e-22lf;
    p = p * r2 + 4.110317623312165e-19lf;
    p = p * r2 - 1.5619206968586225e-16lf;
    p = p * r2 + 4.779477332387385e-14lf;
    p = p * r2 - 1.1470745597729725e-11lf;
    p = p * r2 + 2.08767569878681e-09lf;
    p = p * r2 - 2.755731922398589e-07lf;
    p = p * r2 + 2.48015873015873e-05lf;
    p = p * r2 - 0.001388888888888889lf;
    p = p * r2 + 0.041666666666666664lf;
    // 1 - r^2/2 + r^4 p: the half-square subtracted last keeps the rounding small.
    double hr2 = 0.5lf * r2;
    return (1.0lf - hr2) + ((1.0lf - (1.0lf - hr2)) - hr2 + r2 * r2 * p);
}

// The first 1280 bits of 2/pi after the binary point, 32 per word, most significant first.
const uint M64_TWO_OVER_PI[40] = uint[](
    0xA2F9836Eu, 0x4E441529u, 0xFC2757D1u, 0xF534DDC0u, 0xDB629599u,
    0x3C439041u, 0xFE5163ABu, 0xDEBBC561u, 0xB7246E3Au, 0x424DD2E0u,
    0x06492EEAu, 0x09D1921Cu, 0xFE1DEB1Cu, 0xB129A73Eu, 0xE88235F5u,
    0x2EBB4484u, 0xE99C7026u, 0xB45F7E41u, 0x3991D639u, 0x835339F4u,
    0x9C845F8Bu, 0xBDF9283Bu, 0x1FF897FFu, 0xDE05980Fu, 0xEF2F118Bu,
    0x5A0A6D1Fu, 0x6D367ECFu, 0x27CB09B7u, 0x4F463F66u, 0x9E5FEA2Du,
    0x7527BAC7u, 0xEBE5F17Bu, 0x3D0739F7u, 0x8A5292EAu, 0x6BFB5FB1u,
    0x1F8D5D08u, 0x56033046u, 0xFC7B6BABu, 0xF0CFBC20u, 0x9AF4361Du
);

// Bits [off, off + 32) of the 224-bit little-endian integer p.
uint m64_bits32(uint p[7], int off) {
    int w = off / 32;
    int b = off % 32;
    uint v = p[w] >> uint(b);
    if (b != 0 && w + 1 < 7) v |= p[w + 1] << uint(32 - b);
    return v;
}

// Payne-Hanek: a = q pi/2 + r for a finite a >= 2^20 (any size): a = M 2^E exactly, and
// a (2/pi) mod 4 is M times a 160-bit window of 2/pi's bits (the earlier bits give
// multiples of 4, the later ones less than 2^-74), in 32-bit limbs; r from the 96-bit
// fraction times pi/2 in two parts.
double m64_reduce_large(double a, out int quadrant) {
    uvec2 bits = unpackDouble2x32(a);
    uint m[2] = uint[](bits.x, (bits.y & 0xFFFFFu) | 0x100000u);
    int e = int((bits.y >> 20) & 0x7FFu) - 1075;
    int j0 = e >= 2 ? (e - 2) / 32 : 0;
    uint p[7] = uint[](0u, 0u, 0u, 0u, 0u, 0u, 0u);
    for (int k = 0; k < 2; ++k) {
        uint64_t carry = 0ul;
        for (int i = 0; i < 5; ++i) {
            uint64_t t = uint64_t(m[k]) * uint64_t(M64_TWO_OVER_PI[j0 + 4 - i]) + uint64_t(p[i + k]) + carry;
            p[i + k] = uint(t);
            carry = t >> 32;
        }
        p[5 + k] += uint(carry);
    }
    int s = 32 * (j0 + 5) - e; // fraction bits of p
    int q = int(m64_bits32(p, s) & 3u);
    uint64_t fh = (uint64_t(m64_bits32(p, s - 32)) << 32) | uint64_t(m64_bits32(p, s - 64));
    uint fl = m64_bits32(p, s - 96);
    bool neg = (fh >> 63) != 0ul;
    if (neg) { // fraction >= 1/2: r = (fraction - 1) pi/2 and the next quadrant
        q = (q + 1) & 3;
        if (fl == 0u) {
            fh = ~fh + 1ul;
        } else {
            fl = ~fl + 1u;
            fh = ~fh;
        }
    }
    double f = double(fh) * 5.421010862427522e-20lf + double(fl) * 1.262177448353619e-29lf; // 2^-64, 2^-96
    if (neg) f = -f;
    quadrant = q;
    return f * 1.5707963267948966lf + f * 6.123233995736766e-17lf;
}

// x = q pi/2 + r; returns r and q mod 4. Cody-Waite with pi/2 in four 33-bit parts
// (exact products for |q| < 2^20) below |x| = 1e6, Payne-Hanek above.
double m64_reduce(double x, out int quadrant) {
    if (abs(x) >= 1e6lf) {
        double r = m64_reduce_large(abs(x), quadrant);
        if (x < 0.0lf) {
            quadrant = (4 - quadrant) & 3;
            r = -r;
        }
        return r;
    }
    double q = roundEven(x * 0.6366197723675814lf);
    double r = x - q * 1.5707963267341256lf;
    r = r - q * 6.077100506303966e-11lf;
    r = r - q * 2.0222662487111665e-21lf;
    r = r - q * 8.4784276603689e-32lf;
    quadrant = int(mod(q, 4.0lf));
    return r;
}

double sin64(double x) {
    if (isnan(x) || isinf(x)) return M64_NAN;
    if (abs(x) <= 0.7853981633974483lf) return m64_sin_poly(x);
    int qd;
    double r = m64_reduce(x, qd);
    if (qd == 0) return m64_sin_poly(r);
    if (qd == 1) return m64_cos_poly(r);
    if (qd == 2) return -m64_sin_poly(r);
    return -m64_cos_poly(r);
}

double cos64(double x) {
    if (isnan(x) || isinf(x)) return M64_NAN;
    if (abs(x) <= 0.7853981633974483lf) return m64_cos_poly(x);
    int qd;
    double r = m64_reduce(x, qd);
    if (qd == 0) return m64_cos_poly(r);
    if (qd == 1) return -m64_sin_poly(r);
    if (qd == 2) return -m64_cos_poly(r);
    return m64_sin_poly(r);
}

double tanh64(double x) {
    if (isnan(x)) return x;
    double a = abs(x);
    double t;
    if (a > 22.0lf) {
        t = 1.0lf;
    } else if (a < 3.725290298461914e-09lf) { // 2^-28: tanh x = x in double
        return x;
    } else {
        double e = expm1_64(2.0lf * a);
        t = e / (e + 2.0lf);
    }
    return x < 0.0lf ? -t : t;
}

double erf64(double x) {
    if (isnan(x)) return x;
    double a = abs(x);
    if (a >= 6.0lf) return x < 0.0lf ? -1.0lf : 1.0lf;
    if (a == 0.0lf) return x;
    double hi = a * a;
    double lo = fma(a, a, -hi); // a^2 = hi + lo exactly
    // e^(-a^2) = e^(-hi) e^(-lo), e^(-lo) = 1 - lo to double precision.
    double g = exp64(-hi) * (1.0lf - lo);
    double r;
    if (a < 1.0lf) {
        double tx2 = 2.0lf * hi;
        double term = 1.0lf;
        double sum = 1.0lf;
        for (int n = 1; n < 64; ++n) {
            term *= tx2 / double(2 * n + 1);
            sum += term;
            if (term < sum * 1e-17lf) break;
        }
        r = 1.1283791670955126lf * a * g * sum;
    } else {
        // erfc a = e^(-a^2) / (sqrt(pi) (a + (1/2) / (a + 1 / (a + (3/2) / (a + ...))))),
        // evaluated from the tail: 200 terms for a < 2, 60 beyond (1 ulp of erf).
        int terms = a < 2.0lf ? 200 : 60;
        double f = a;
        for (int k = terms; k > 0; --k) f = a + (0.5lf * double(k)) / f;
        r = 1.0lf - g / (1.7724538509055159lf * f);
    }
    return x < 0.0lf ? -r : r;
}

#endif

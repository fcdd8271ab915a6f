// Seeded sampling over rows of f32 logits, one workgroup per row, so that a decode step
// samples its own next token and the host reads back one id. The distribution: llama.cpp's
// min-p on the raw logits, then the softmax of logits / temperature, its top-k, then top-p
// over the renormalised top-k (Hugging Face's TopK then TopP warpers, llama.cpp's top-k
// then top-p; candle's `TopKThenTopP` measures top-p in the unrenormalised mass instead).
//
// Every filter keeps the tokens at or above a threshold logit, so one bound `lower` on
// the order-preserving key of the logit (`order_key`) describes the kept set:
// 1. max `m` and sum of the row (tree reductions); a sum that is not finite marks a row
//    with a logit that is not (the host reports it) and the row chooses 0;
// 2. min-p: keep `l >= m + ln(min_p)` (the same f32 sum as the host's floor);
// 3. top-k: the k-th largest key by a radix select on counts (`select_key`);
// 4. top-p: the first key, in descending order, at which the inclusive cumulative weight
//    `w = exp((l - m) / T)` reaches `top_p` times the kept total, by the same radix select
//    on weights in 32.32 fixed point (`w 2^32` per token, summed exactly in 64 bits from
//    32-bit shared atomics: the threshold does not depend on the order of additions);
// 5. the draw: u in [0, 1) from one Philox4x32-10 block (Salmon et al., SC 2011) with
//    counter (draw_lo, draw_hi, row, "SAMP") and key (seed_lo, seed_hi); each invocation
//    sums the kept weights of a contiguous chunk, an inclusive scan orders the chunks, and
//    the invocation whose chunk holds u times the total walks it to the token (the
//    inverse of the cumulative distribution in index order).
// Equal logits at a threshold are all kept (candle keeps an arbitrary subset of them).
// The radix select reads 11-bit digits of the key (3 levels), with 2048 bins in shared
// memory; each level finds its digit by a scan over the invocations' bins.
//
// After `sample_candidates.comp` (groups > 0) the passes read its candidates, each
// slice's top-k in index order, instead of the row, unless a slice overflowed.
//
// Bindings: 0 = x (f32, row r from element offset + r * n), 1 = chosen (u32[rows]),
// 2 = sums (f32[rows]), 3 = ids (u32[rows]), 4 = candidates (sample_candidates' layout),
// 5 = the step position (u32, word 0: the draw counter where draw_from_step != 0).
// Push constants: offset, n, top_k (0: all), top_p (f32 bits, 1: all), log_min_p (f32
// bits, -inf: no min-p), inv_temp (f32 bits, 1 / temperature > 0), seed and draw words,
// groups (slices of the candidate stage, 0: none), cap (candidate slots per slice),
// draw_from_step (a replayed step: the draw counter from binding 5, high word 0).
// Spec constant 0 = workgroup size (a power of two from 64 to 1024). Grid: y = rows.
#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0, local_size_x = 1024) in;
#include "order_key.glsl"
#include "philox.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Chosen { uint chosen[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Sums { float sums[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Ids { uint ids[]; };
layout(std430, set = 0, binding = 4) readonly buffer Cand { uint cand[]; };
layout(std430, set = 0, binding = 5) readonly buffer Step { uint step_pos[]; };
layout(push_constant) uniform Params {
    uint offset;
    uint n;
    uint top_k;
    float top_p;
    float log_min_p;
    float inv_temp;
    uint seed_lo;
    uint seed_hi;
    uint draw_lo;
    uint draw_hi;
    uint groups;
    uint cap;
    uint draw_from_step;
} p;

const uint MAX_WG = 1024u;
const uint BINS = 2048u;
const uint DIGIT_BITS = 11u;
const uint LEVELS = 3u;
const uint SAMP = 0x53414D50u;
// Loads issued together by each invocation in the passes over a row: one workgroup
// streams the row alone, so its loads in flight set the pace.
const uint UNROLL = 8u;

shared uint h_lo[BINS];
shared uint h_hi[BINS];
shared uint s_lo[MAX_WG];
shared uint s_hi[MAX_WG];
shared float s_f[MAX_WG];
shared uint s_found;
shared uint s_digit;
shared uvec2 s_above;
shared uint s_last;
shared uint s_pick;

uint base;
uint tid;
uint wg;
// Candidate mode (`sample_candidates.comp` ran first and no slice overflowed): the
// elements are the G * cap candidate slots (slot i of slice i / cap valid below its
// count), else the row's n logits.
bool from_cand;
uint n_el;
uint cbase;

// Element i (i < n_el): its logit (-inf for an empty candidate slot) and whether it is a token.
float elem(uint i, out bool valid) {
    if (!from_cand) {
        valid = i < p.n;
        return x[base + min(i, p.n - 1u)];
    }
    bool inside = i < n_el;
    i = min(i, n_el - 1u);
    uint g = i / p.cap;
    valid = inside && i - g * p.cap < cand[cbase + g];
    return valid ? uintBitsToFloat(cand[cbase + 2u * p.groups + i]) : uintBitsToFloat(0xFF800000u);
}

// The token index of element i.
uint elem_index(uint i) {
    return from_cand ? cand[cbase + 2u * p.groups + p.groups * p.cap + i] : i;
}


uvec2 add64(uvec2 a, uvec2 b) {
    uint carry;
    uint lo = uaddCarry(a.x, b.x, carry);
    return uvec2(lo, a.y + b.y + carry);
}

bool ge64(uvec2 a, uvec2 b) {
    return a.y > b.y || (a.y == b.y && a.x >= b.x);
}

// A token's weight in 32.32 fixed point: exp((l - m) / T) <= 1 times 2^32, 2^32 - 1 at most.
// The maximum (w = 1) is clamped as an integer: 2^32 - 1 is not an f32 (it rounds to 2^32)
// and converting 2^32 to uint is undefined (llvmpipe on some CPUs gives 0, which dropped
// the top token from the top-p mass).
uint fixed_weight(float l, float m) {
    float w = exp((l - m) * p.inv_temp);
    return w < 1.0 ? uint(w * 4294967296.0) : 0xFFFFFFFFu;
}

// Adds the 64-bit `v` (lo, hi) to bin `d`, exactly, with 32-bit shared atomics.
void hist_add(uint d, uvec2 v) {
    uint old = atomicAdd(h_lo[d], v.x);
    uint carry = old + v.x < old ? 1u : 0u;
    if (v.y + carry != 0u) atomicAdd(h_hi[d], v.y + carry);
}

// Inclusive scan of (s_hi, s_lo) over the invocations (Hillis-Steele).
void scan64() {
    for (uint off = 1u; off < wg; off <<= 1u) {
        uvec2 o = uvec2(0u);
        if (tid >= off) o = uvec2(s_lo[tid - off], s_hi[tid - off]);
        barrier();
        uvec2 v = add64(uvec2(s_lo[tid], s_hi[tid]), o);
        s_lo[tid] = v.x;
        s_hi[tid] = v.y;
        barrier();
    }
}

// The largest key t with (weight of kept tokens with key >= t) >= target, among the
// tokens with key >= lower, where a token weighs 1 (MASS false) or its fixed-point weight
// (MASS true: then the target is top_p times the kept total, `frac`); `lower` where the
// kept tokens weigh less than the target.
uint select_key(uint lower, bool mass, uvec2 target, float frac, float m) {
    uint prefix = 0u;
    uint known = 0u;
    uvec2 above = uvec2(0u);
    uint bpt = BINS / wg;
    for (uint level = 0u; level < LEVELS; level++) {
        uint shift = 32u - DIGIT_BITS * (level + 1u);
        shift = level + 1u == LEVELS ? 0u : shift;
        uint width = level + 1u == LEVELS ? 32u - DIGIT_BITS * level : DIGIT_BITS;
        uint dmask = (1u << width) - 1u;
        for (uint b = tid; b < BINS; b += wg) {
            h_lo[b] = 0u;
            h_hi[b] = 0u;
        }
        barrier();
        for (uint i0 = tid; i0 < n_el; i0 += UNROLL * wg) {
            float vs[UNROLL];
            bool ok[UNROLL];
            [[unroll]] for (uint u = 0u; u < UNROLL; u++) vs[u] = elem(i0 + u * wg, ok[u]);
            [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
                float v = vs[u];
                uint k = order_key(v);
                bool take = ok[u] && k >= lower && (k & known) == prefix;
                uint d = (k >> shift) & dmask;
                uint add = take ? (mass ? fixed_weight(v, m) : 1u) : 0u;
                take = add != 0u;
                if (take) hist_add(d, uvec2(add, 0u));
            }
        }
        barrier();
        // Invocation t holds bins [BINS - (t + 1) bpt, BINS - t bpt): invocation 0 the highest.
        uint top = BINS - tid * bpt;
        uvec2 own = uvec2(0u);
        for (uint j = 1u; j <= bpt; j++) own = add64(own, uvec2(h_lo[top - j], h_hi[top - j]));
        s_lo[tid] = own.x;
        s_hi[tid] = own.y;
        if (tid == 0u) s_found = 0u;
        barrier();
        scan64();
        if (level == 0u && mass) {
            // The kept total is the first level's whole histogram.
            uvec2 tot = uvec2(s_lo[wg - 1u], s_hi[wg - 1u]);
            // Rounded up (a cumulative weight reaches t exactly when it reaches ceil(t)),
            // and at least 1: the top token is always kept.
            float t = max(ceil(frac * (float(tot.y) * 4294967296.0 + float(tot.x))), 1.0);
            float hi = floor(t * (1.0 / 4294967296.0));
            target = uvec2(uint(t - hi * 4294967296.0), uint(hi));
        }
        uvec2 incl = add64(above, uvec2(s_lo[tid], s_hi[tid]));
        uvec2 excl = uvec2(0u);
        if (tid > 0u) excl = uvec2(s_lo[tid - 1u], s_hi[tid - 1u]);
        excl = add64(above, excl);
        if (ge64(incl, target) && !ge64(excl, target)) {
            uvec2 acc = excl;
            for (uint j = 1u; j <= bpt; j++) {
                uint b = top - j;
                uvec2 next = add64(acc, uvec2(h_lo[b], h_hi[b]));
                if (ge64(next, target)) {
                    s_found = 1u;
                    s_digit = b;
                    s_above = acc;
                    break;
                }
                acc = next;
            }
        }
        barrier();
        uint found = s_found;
        uint digit = s_digit;
        uvec2 a = s_above;
        barrier();
        if (found == 0u) return lower;
        prefix |= digit << shift;
        known |= dmask << shift;
        above = a;
    }
    return prefix;
}

void main() {
    tid = gl_LocalInvocationID.x;
    wg = gl_WorkGroupSize.x;
    uint r = gl_WorkGroupID.y;
    base = p.offset + r * p.n;
    cbase = r * p.groups * (2u + 2u * p.cap);
    from_cand = p.groups > 0u;
    for (uint g = 0u; g < p.groups; g++) from_cand = from_cand && cand[cbase + g] != 0xFFFFFFFFu;
    n_el = from_cand ? p.groups * p.cap : p.n;

    // 1. Max and sum (in candidate mode, the sum of the slices' sums).
    float mx = uintBitsToFloat(0xFF800000u);
    float sum = 0.0;
    for (uint i0 = tid; i0 < n_el; i0 += UNROLL * wg) {
        float vs[UNROLL];
        bool ok[UNROLL];
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) vs[u] = elem(i0 + u * wg, ok[u]);
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
            if (ok[u]) {
                mx = max(mx, vs[u]);
                sum += vs[u];
            }
        }
    }
    if (p.groups > 0u) {
        sum = 0.0;
        if (tid == 0u) for (uint g = 0u; g < p.groups; g++) sum += uintBitsToFloat(cand[cbase + p.groups + g]);
    }
    s_f[tid] = mx;
    s_lo[tid] = floatBitsToUint(sum); // the sums reuse the scan's words
    barrier();
    for (uint h = wg / 2u; h > 0u; h >>= 1u) {
        if (tid < h) {
            s_f[tid] = max(s_f[tid], s_f[tid + h]);
            s_lo[tid] = floatBitsToUint(uintBitsToFloat(s_lo[tid]) + uintBitsToFloat(s_lo[tid + h]));
        }
        barrier();
    }
    float m = s_f[0];
    float total_logits = uintBitsToFloat(s_lo[0]);
    barrier();
    if (isnan(total_logits) || isinf(total_logits)) {
        if (tid == 0u) {
            chosen[r] = 0u;
            ids[r] = 0u;
            sums[r] = total_logits;
        }
        return;
    }

    // 2. Min-p; 3. top-k; 4. top-p.
    uint lower = 0u;
    if (!isinf(p.log_min_p)) lower = order_key(m + p.log_min_p);
    if (p.top_k > 0u && p.top_k < p.n) lower = max(lower, select_key(lower, false, uvec2(p.top_k, 0u), 0.0, m));
    if (p.top_p < 1.0) lower = max(lower, select_key(lower, true, uvec2(0u), p.top_p, m));

    // 5. The draw.
    uint chunk = (n_el + wg - 1u) / wg;
    uint start = min(tid * chunk, n_el);
    uint end = min(start + chunk, n_el);
    float own = 0.0;
    for (uint i0 = start; i0 < end; i0 += UNROLL) {
        float vs[UNROLL];
        bool ok[UNROLL];
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) vs[u] = elem(i0 + u, ok[u]);
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
            if (ok[u] && i0 + u < end && order_key(vs[u]) >= lower) own += exp((vs[u] - m) * p.inv_temp);
        }
    }
    if (tid == 0u) s_last = 0u;
    s_f[tid] = own;
    barrier();
    if (own > 0.0) atomicMax(s_last, tid);
    for (uint off = 1u; off < wg; off <<= 1u) {
        float o = tid >= off ? s_f[tid - off] : 0.0;
        barrier();
        s_f[tid] += o;
        barrier();
    }
    float incl = s_f[tid];
    float excl = tid > 0u ? s_f[tid - 1u] : 0.0;
    float total = s_f[wg - 1u];
    // A replayed step draws with its position (binding 5, word 0) as the counter.
    uvec2 draw = p.draw_from_step != 0u ? uvec2(step_pos[0], 0u) : uvec2(p.draw_lo, p.draw_hi);
    uvec4 w = philox(uvec4(draw, r, SAMP), uvec2(p.seed_lo, p.seed_hi));
    float u = float(w.x >> 8) * (1.0 / 16777216.0);
    float target = u * total;
    // The first chunk whose inclusive sum passes the target walks (the last chunk with
    // weight where rounding put the target at the total): one invocation, however the
    // scan rounded.
    if (tid == 0u) s_pick = wg;
    barrier();
    if (own > 0.0 && incl > target) atomicMin(s_pick, tid);
    barrier();
    bool mine = tid == (s_pick < wg ? s_pick : s_last);
    if (mine) {
        float acc = excl;
        uint pick = end;
        for (uint i = start; i < end; i++) {
            bool ok;
            float v = elem(i, ok);
            if (!ok || order_key(v) < lower) continue;
            pick = elem_index(i);
            acc += exp((v - m) * p.inv_temp);
            if (acc > target) break;
        }
        chosen[r] = pick;
        ids[r] = pick;
        sums[r] = total_logits;
    }
}

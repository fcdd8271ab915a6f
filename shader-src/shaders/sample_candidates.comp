// The first stage of a top-k draw (vkml_ops::sampling::sample_rows with top_k <= 256 on a
// long row): workgroup (g, r) takes slice g of row r (SLICE logits from g * SLICE), keeps
// its top_k largest logits (every logit equal to the k-th too) and writes them, in index
// order, as candidates for `sample.comp`: the row's top-k is within the union of its
// slices' top-k, so the draw reads G * cap candidates instead of the row, with the same
// result. A slice with more than `cap` candidates (ties) marks itself full and `sample`
// then reads the whole row.
//
// The slice's order-preserving keys sit in shared memory; the k-th largest comes from a
// radix select on counts (11, 11 and 10-bit digits, 2048 bins), then each invocation
// counts the kept keys of a contiguous part and an exclusive scan places them.
//
// Bindings: 0 = x (f32, row r from element offset + r * n), 1 = cand (u32, per row:
// G counts (FULL where the slice overflowed), G slice sums (f32 bits; `sample` adds them
// for the row's finiteness check), G * cap values (f32 bits), G * cap indices).
// Push constants: offset, n, top_k, groups (G), cap. Spec constant 0 = workgroup size (a
// power of two, 64 to 256). Grid: x = G, y = rows.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0, local_size_x = 256) in;
#include "order_key.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Cand { uint cand[]; };
layout(push_constant) uniform Params {
    uint offset;
    uint n;
    uint top_k;
    uint groups;
    uint cap;
} p;

const uint SLICE = 4096u;
const uint MAX_WG = 256u;
const uint BINS = 2048u;
const uint DIGIT_BITS = 11u;
const uint LEVELS = 3u;
const uint FULL = 0xFFFFFFFFu;

shared uint keys[SLICE];
shared uint hist[BINS];
shared uint s_a[MAX_WG];
shared float s_sum[MAX_WG];
shared uint s_digit;
shared uint s_above;


// Inclusive scan of s_a over the invocations (Hillis-Steele).
void scan(uint tid, uint wg) {
    for (uint off = 1u; off < wg; off <<= 1u) {
        uint o = tid >= off ? s_a[tid - off] : 0u;
        barrier();
        s_a[tid] += o;
        barrier();
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint wg = gl_WorkGroupSize.x;
    uint g = gl_WorkGroupID.x;
    uint r = gl_WorkGroupID.y;
    uint start = g * SLICE;
    uint len = min(SLICE, p.n - min(start, p.n));
    uint base = p.offset + r * p.n + start;
    uint row = r * p.groups * (2u + 2u * p.cap);

    float sum = 0.0;
    for (uint j = tid; j < len; j += wg) {
        float v = x[base + j];
        sum += v;
        keys[j] = order_key(v);
    }
    s_sum[tid] = sum;
    barrier();
    for (uint h = wg / 2u; h > 0u; h >>= 1u) {
        if (tid < h) s_sum[tid] += s_sum[tid + h];
        barrier();
    }

    // The k-th largest key (0: all, where the slice holds at most k).
    uint kth = 0u;
    if (p.top_k < len) {
        uint prefix = 0u;
        uint known = 0u;
        uint above = 0u;
        uint bpt = BINS / wg;
        for (uint level = 0u; level < LEVELS; level++) {
            uint shift = level + 1u == LEVELS ? 0u : 32u - DIGIT_BITS * (level + 1u);
            uint width = level + 1u == LEVELS ? 32u - DIGIT_BITS * level : DIGIT_BITS;
            uint dmask = (1u << width) - 1u;
            for (uint b = tid; b < BINS; b += wg) hist[b] = 0u;
            barrier();
            for (uint j = tid; j < len; j += wg) {
                uint k = keys[j];
                if ((k & known) == prefix) atomicAdd(hist[(k >> shift) & dmask], 1u);
            }
            barrier();
            // Invocation t holds bins [BINS - (t + 1) bpt, BINS - t bpt): invocation 0 the highest.
            uint top = BINS - tid * bpt;
            uint own = 0u;
            for (uint j = 1u; j <= bpt; j++) own += hist[top - j];
            s_a[tid] = own;
            barrier();
            scan(tid, wg);
            uint incl = above + s_a[tid];
            uint excl = above + (tid > 0u ? s_a[tid - 1u] : 0u);
            if (incl >= p.top_k && excl < p.top_k) {
                uint acc = excl;
                for (uint j = 1u; j <= bpt; j++) {
                    uint b = top - j;
                    if (acc + hist[b] >= p.top_k) {
                        s_digit = b;
                        s_above = acc;
                        break;
                    }
                    acc += hist[b];
                }
            }
            barrier();
            prefix |= s_digit << shift;
            known |= dmask << shift;
            above = s_above;
            barrier();
        }
        kth = prefix;
    }

    // The kept keys, in index order: invocation t counts part t, a scan places them.
    uint part = (len + wg - 1u) / wg;
    uint a = min(tid * part, len);
    uint e = min(a + part, len);
    uint own = 0u;
    for (uint j = a; j < e; j++) own += keys[j] >= kth ? 1u : 0u;
    s_a[tid] = own;
    barrier();
    scan(tid, wg);
    uint total = s_a[wg - 1u];
    if (tid == 0u) {
        cand[row + g] = total > p.cap ? FULL : total;
        cand[row + p.groups + g] = floatBitsToUint(s_sum[0]);
    }
    if (total > p.cap) return;
    uint at = s_a[tid] - own;
    uint vals = row + 2u * p.groups + g * p.cap;
    uint idxs = row + 2u * p.groups + p.groups * p.cap + g * p.cap;
    for (uint j = a; j < e; j++) {
        if (keys[j] >= kth) {
            cand[vals + at] = floatBitsToUint(x[base + j]);
            cand[idxs + at] = start + j;
            at++;
        }
    }
}

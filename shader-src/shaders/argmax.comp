// Greedy choice over rows of f32 logits, in one dispatch: per row the index of the first
// largest value as candle's CPU `argmax` picks it (a fold from element 0 that moves only
// on a strictly larger value: NaN values are skipped, and a NaN element 0 is the answer),
// and the row's sum (for a finiteness check: NaN or infinite where a logit is).
// Workgroup (g, r) folds elements [g * chunk, (g + 1) * chunk) of row r: each invocation a
// strided part (ties to the lower index), then a shared-memory tree. It writes its
// (max, index, sum) to the scratch and counts itself on a device-scope atomic; the last
// of the row's workgroups folds the partials in order and writes the index to `chosen`
// and `ids` and the sum to `sums`.
// Bindings: 0 = x (f32, row r from element offset + r * n), 1 = scratch (per row: a
// counter, zero before the dispatch, then groups x (max bits, index, sum bits)),
// 2 = chosen (u32[rows]), 3 = sums (f32[rows]), 4 = ids (u32[rows]).
// Push constants: offset, n, chunk, groups. Spec constant 0 = workgroup size (a power
// of two, at most 256). Grid: x = groups, y = rows.
#version 450
layout(local_size_x_id = 0, local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) coherent buffer Scratch { uint scratch[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Chosen { uint chosen[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Sums { float sums[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Ids { uint ids[]; };
layout(push_constant) uniform Params {
    uint offset;
    uint n;
    uint chunk;
    uint groups;
} p;

shared float s_max[256];
shared uint s_idx[256];
shared float s_sum[256];
shared uint is_last;

const uint NONE = 0xFFFFFFFFu;

// Whether (v, i) replaces (bv, bi): larger, or equal at a lower index. NaN never does.
bool better(float v, uint i, float bv, uint bi) {
    return v > bv || (v == bv && i < bi);
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint wg = gl_WorkGroupSize.x;
    uint g = gl_WorkGroupID.x;
    uint r = gl_WorkGroupID.y;
    uint base = p.offset + r * p.n;
    uint start = g * p.chunk;
    uint end = min(start + p.chunk, p.n);
    float bv = uintBitsToFloat(0xFF800000u); // -inf
    uint bi = NONE;
    float sum = 0.0;
    for (uint j = start + tid; j < end; j += wg) {
        float v = x[base + j];
        sum += v;
        if (better(v, j, bv, bi)) {
            bv = v;
            bi = j;
        }
    }
    s_max[tid] = bv;
    s_idx[tid] = bi;
    s_sum[tid] = sum;
    barrier();
    for (uint h = wg / 2u; h > 0u; h >>= 1u) {
        if (tid < h) {
            if (better(s_max[tid + h], s_idx[tid + h], s_max[tid], s_idx[tid])) {
                s_max[tid] = s_max[tid + h];
                s_idx[tid] = s_idx[tid + h];
            }
            s_sum[tid] += s_sum[tid + h];
        }
        barrier();
    }
    uint rs = r * (1u + 3u * p.groups);
    if (tid == 0u) {
        scratch[rs + 1u + 3u * g] = floatBitsToUint(s_max[0]);
        scratch[rs + 2u + 3u * g] = s_idx[0];
        scratch[rs + 3u + 3u * g] = floatBitsToUint(s_sum[0]);
    }
    // Publish the partial, then count it.
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) {
        uint done = atomicAdd(scratch[rs], 1u);
        is_last = done + 1u == p.groups ? 1u : 0u;
    }
    barrier();
    if (is_last == 0u || tid != 0u) return;
    memoryBarrierBuffer();
    float mv = uintBitsToFloat(0xFF800000u);
    uint mi = NONE;
    float total = 0.0;
    for (uint k = 0u; k < p.groups; k++) {
        float v = uintBitsToFloat(scratch[rs + 1u + 3u * k]);
        uint i = scratch[rs + 2u + 3u * k];
        total += uintBitsToFloat(scratch[rs + 3u + 3u * k]);
        if (better(v, i, mv, mi)) {
            mv = v;
            mi = i;
        }
    }
    // Element 0 is never NaN here unless the fold stays on it; it is not NaN otherwise,
    // so some partial holds the row's first maximum.
    uint pick = isnan(x[base]) ? 0u : mi;
    chosen[r] = pick;
    ids[r] = pick;
    sums[r] = total;
}

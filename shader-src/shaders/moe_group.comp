// Groups a routed batch's slots by expert, for the expert-grouped mat-mats
// (include/mul_mat_ids.glsl; llama.cpp's ggml_mul_mat_id sorts its rows the same way):
//   first[e] = the slots whose expert is below e (first[n] = n_slots),
//   slots[first[e] + r] = the r-th slot, in slot order, whose expert is e.
// Slot j is token j / k's (j % k)-th expert ids[j]. A token's k ids must differ and lie
// below n (moe_route's top-k writes them so; an id past n counts as expert n - 1).
// One workgroup of 256 invocations: the counts by shared atomics, their exclusive scan,
// then per chunk of CHUNK = 64 tokens (4 invocations per token, each taking every fourth
// of its slots) a bitmap per expert of the chunk's tokens that chose it: a slot's place is
// its expert's first slot plus the expert's slots of the chunks before plus the bits
// below its token (deterministic: the order is the slots'). 13 KiB of shared memory (the
// Vulkan minimum is 16).
// Bindings: 0 = ids u32 [n_slots], 1 = first u32 [n + 1], 2 = slots u32 [n_slots].
// Push constants: n_tok (tokens), n (experts, at most MAX_EXPERTS), k (slots per token).
// Grid: 1.
#version 450
layout(local_size_x_id = 0, local_size_x = 256) in; // always 256 (WG)
#define WG 256u
#define MAX_EXPERTS 1024u
#define CHUNK 64u
#define LANES (WG / CHUNK) // invocations per token
#define WORDS (CHUNK / 32u) // bitmap words per expert
layout(std430, set = 0, binding = 0) readonly buffer I { uint ids[]; };
layout(std430, set = 0, binding = 1) writeonly buffer F { uint first[]; };
layout(std430, set = 0, binding = 2) writeonly buffer S { uint slots[]; };
layout(push_constant) uniform P { uint n_tok; uint n; uint k; } p;

shared uint base[MAX_EXPERTS]; // the counts, then each expert's next place
shared uint bm[MAX_EXPERTS * WORDS];
shared uint part[WG];

uint expert(uint j) {
    return min(ids[j], p.n - 1u);
}

void main() {
    uint t = gl_LocalInvocationID.x;
    uint n_slots = p.n_tok * p.k;
    for (uint e = t; e < p.n; e += WG) base[e] = 0u;
    barrier();
    for (uint j = t; j < n_slots; j += WG) atomicAdd(base[expert(j)], 1u);
    barrier();
    // Exclusive scan of the counts: invocation t sums experts 4t .. 4t + 3, then a
    // Hillis-Steele scan of those sums.
    uint loc[MAX_EXPERTS / WG];
    uint sum = 0u;
    for (uint i = 0; i < MAX_EXPERTS / WG; i++) {
        uint e = (MAX_EXPERTS / WG) * t + i;
        loc[i] = sum;
        sum += e < p.n ? base[e] : 0u;
    }
    part[t] = sum;
    barrier();
    for (uint off = 1u; off < WG; off <<= 1) {
        uint v = t >= off ? part[t - off] : 0u;
        barrier();
        part[t] += v;
        barrier();
    }
    uint before = part[t] - sum;
    for (uint i = 0; i < MAX_EXPERTS / WG; i++) {
        uint e = (MAX_EXPERTS / WG) * t + i;
        if (e < p.n) {
            base[e] = before + loc[i];
            first[e] = before + loc[i];
        }
    }
    if (t == 0u) first[p.n] = n_slots;
    barrier();
    uint lt = t / LANES, lane = t % LANES; // the chunk's token, its slots lane, lane + LANES, ...
    uint word = lt >> 5, bit = 1u << (lt & 31u);
    for (uint c0 = 0u; c0 < p.n_tok; c0 += CHUNK) {
        for (uint w = t; w < p.n * WORDS; w += WG) bm[w] = 0u;
        barrier();
        uint tok = c0 + lt;
        bool live = tok < p.n_tok;
        if (live) {
            for (uint i = lane; i < p.k; i += LANES) atomicOr(bm[expert(tok * p.k + i) * WORDS + word], bit);
        }
        barrier();
        if (live) {
            for (uint i = lane; i < p.k; i += LANES) {
                uint j = tok * p.k + i, e = expert(j);
                uint r = uint(bitCount(bm[e * WORDS + word] & (bit - 1u)));
                for (uint w = 0; w < word; w++) r += uint(bitCount(bm[e * WORDS + w]));
                slots[base[e] + r] = j;
            }
        }
        barrier();
        for (uint e = t; e < p.n; e += WG) {
            uint c = 0u;
            for (uint w = 0; w < WORDS; w++) c += uint(bitCount(bm[e * WORDS + w]));
            base[e] += c;
        }
        barrier();
    }
}

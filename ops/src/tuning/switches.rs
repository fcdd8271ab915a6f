//! The benchmark switches: environment variables that override [`super`]'s launch choices
//! for sweeps without rebuilding (`VKML_MOE_ROUTE`, `VKML_MOE_SUMS`, `VKML_MAT_VEC`, `VKML_DECODE_ATTN`),
//! each read once per process; unset, every choice is the table's.

use std::sync::atomic::AtomicBool;

use vkml_hal::Capabilities;

use super::{DecodeAttnConfig, MatVecConfig, MAX_ATTN_SPLITS};
#[cfg(doc)]
use super::{DECODE_ATTN_NARROW, DECODE_ATTN_WIDE};

/// Whether a MoE decode step's stacked gate|up expert mat-vec routes its own token
/// (`include/mat_vec_moe.glsl`, `quant::RoutedSlots`) instead of a `moe_route` pass before
/// it: yes, unless the environment sets `VKML_MOE_ROUTE=pass` (a switch for benchmarks
/// comparing the two in one build; read once per process, not per recorded layer).
pub fn moe_route_in_gate_up() -> bool {
    static FOLD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FOLD.get_or_init(|| std::env::var("VKML_MOE_ROUTE").map_or(true, |v| v != "pass"))
}

/// Where a MoE decode step's down expert mat-vec takes the token's weighted sums over its
/// k experts (`quant::WeightedSlots`, `include/mat_vec_moe.glsl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeSums {
    /// In its own store: each workgroup multiplies the token's k experts for its rows and
    /// sums them.
    Fold,
    /// Each slot's row, then a `moe_weighted_sum` pass.
    Pass,
    /// Each slot's row, the last of a token's k workgroups of a row group summing them
    /// (`WeightedSlots::slot_rows`; the integer-dot kernels: elsewhere as `Fold`).
    LastWorkgroup,
}

/// Where a MoE decode step's down takes its weighted sums, where they would run
/// `on_integer_dot` (`quant::expert_sums_on_integer_dot`) or not. On the block kernels,
/// which split the experts over a workgroup's subgroups, folded: H200, gpt-oss-20b MXFP4
/// tg128 347.8 folded against 339.3 with the pass. On the integer-dot kernels, whose
/// subgroups take the experts in turn, each slot's row first: qwen3moe-30b-a3b Q4_0, the
/// down 15.0 µs per layer folded against 9.0 + 5.1 µs with the pass, tg128 291.2 against
/// 299.1 (benches/RESULTS.md, twenty-fourth session); the last workgroup summing them
/// saves the pass's dispatch: tg128 298.4 with the pass against 307.0, and qwen2moe-a2.7b
/// (whose shared expert's addend kept the fold) 658.7 folded against 684.6 (twenty-fifth
/// session). The environment's `VKML_MOE_SUMS=fold`, `pass` or `last`
/// sets it for both (a switch for benchmarks; read once per process). A shared expert's
/// output joins the sums either way.
pub fn moe_sums(on_integer_dot: bool) -> MoeSums {
    static SWITCH: std::sync::OnceLock<Option<MoeSums>> = std::sync::OnceLock::new();
    let switch = SWITCH.get_or_init(|| match std::env::var("VKML_MOE_SUMS").as_deref() {
        Ok("fold") => Some(MoeSums::Fold),
        Ok("pass") => Some(MoeSums::Pass),
        Ok("last") => Some(MoeSums::LastWorkgroup),
        _ => None,
    });
    switch.unwrap_or(if on_integer_dot { MoeSums::LastWorkgroup } else { MoeSums::Fold })
}

/// `cfg` with the launch parameters that `spec` sets (the environment's `VKML_MAT_VEC`, a
/// switch for benchmark sweeps: comma-separated `name=value` of `workgroup`,
/// `rows_per_subgroup`, `dot_rows_per_subgroup`, `dot_x_workgroup`,
/// `dot_x_rows_per_subgroup`, `dot_x_rows_per_subgroup_wide`, `vec4_norm_workgroup`; and
/// the flags `integer_dot`, `integer_dot_mxfp4`, `dot_x_in_kernel`, `norm_one_pass`, 0 or
/// 1). A value outside its field's range (rows 1..=8; workgroups powers of two from the
/// subgroup size to 128, or to the device's limit and 1024 for `dot_x_workgroup` and
/// `vec4_norm_workgroup`) or an unknown name is ignored, the first one reported on stderr.
pub fn mat_vec_overrides(mut cfg: MatVecConfig, spec: Option<&str>, caps: &Capabilities) -> MatVecConfig {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let Some(spec) = spec else { return cfg };
    let sg = caps.subgroup.size.next_power_of_two().max(1);
    let max_wg = 1u32 << caps.limits.max_workgroup_invocations.max(1).ilog2();
    let pow2_in = |v: u32, hi: u32| v.is_power_of_two() && v >= sg && v <= hi;
    let hint = "a name of mat_vec_overrides with a value in its range";
    apply_switch(("VKML_MAT_VEC", hint, &WARNED), spec, |name, v| match (name, v) {
        ("workgroup", v) if pow2_in(v, 128) => {
            cfg.workgroup = v;
            true
        }
        ("dot_x_workgroup", v) if pow2_in(v, max_wg.min(1024)) => {
            cfg.dot_x_workgroup = v;
            true
        }
        ("vec4_norm_workgroup", v) if pow2_in(v, max_wg.min(1024)) => {
            cfg.vec4_norm_workgroup = v;
            true
        }
        ("integer_dot", v @ (0 | 1)) => {
            cfg.integer_dot = v == 1;
            true
        }
        ("integer_dot_mxfp4", v @ (0 | 1)) => {
            cfg.integer_dot_mxfp4 = v == 1;
            true
        }
        ("dot_x_in_kernel", v @ (0 | 1)) => {
            cfg.dot_x_in_kernel = v == 1;
            true
        }
        ("norm_one_pass", v @ (0 | 1)) => {
            cfg.norm_one_pass = v == 1;
            true
        }
        (name, v) if (1..=8).contains(&v) => match name {
            "rows_per_subgroup" => {
                cfg.rows_per_subgroup = v;
                true
            }
            "dot_rows_per_subgroup" => {
                cfg.dot_rows_per_subgroup = v;
                true
            }
            "dot_x_rows_per_subgroup" => {
                cfg.dot_x_rows_per_subgroup = v;
                true
            }
            "dot_x_rows_per_subgroup_wide" => {
                cfg.dot_x_rows_per_subgroup_wide = v;
                true
            }
            _ => false,
        },
        _ => false,
    });
    cfg
}

/// Applies each comma-separated `name=value` item of a benchmark switch's `spec` with
/// `set(name, value)`, which says whether it took the item. The first item not taken (an
/// unknown name, a value out of range or not a number) is reported on stderr with the
/// switch's `var` name and `hint`, once per `warned` (once per switch and process, not at
/// every kernel recorded).
fn apply_switch((var, hint, warned): (&str, &str, &AtomicBool), spec: &str, mut set: impl FnMut(&str, u32) -> bool) {
    for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let parsed = item.split_once('=').and_then(|(k, v)| Some((k.trim(), v.trim().parse::<u32>().ok()?)));
        let ok = parsed.is_some_and(|(name, v)| set(name, v));
        if !ok && !warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
            eprintln!("warning: {var}: ignoring `{item}` ({hint})");
        }
    }
}

/// `cfg` with the split rule that `spec` sets (the environment's `VKML_DECODE_ATTN`, a switch
/// for benchmark sweeps: comma-separated `split_positions=N`, 1..=4096, and `max_splits=N`,
/// 1..=[`MAX_ATTN_SPLITS`]). The workgroup's subgroups stay: the kernels' shared memory is
/// sized for them. An item out of range or unknown is ignored, the first one reported on
/// stderr.
pub fn decode_attn_overrides(mut cfg: DecodeAttnConfig, spec: Option<&str>) -> DecodeAttnConfig {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let Some(spec) = spec else { return cfg };
    let hint = format!("split_positions=1..=4096, max_splits=1..={MAX_ATTN_SPLITS} or query_values=0..=1024");
    apply_switch(("VKML_DECODE_ATTN", &hint, &WARNED), spec, |name, v| {
        let v = v as usize;
        match name {
            "split_positions" if (1..=4096).contains(&v) => cfg.split_positions = v,
            "max_splits" if (1..=MAX_ATTN_SPLITS).contains(&v) => cfg.max_splits = v,
            "query_values" if v <= 1024 => cfg.query_values = v,
            _ => return false,
        }
        true
    });
    cfg
}

/// The decode attention's split rule from `base` ([`DECODE_ATTN_WIDE`] or
/// [`DECODE_ATTN_NARROW`]) with the overrides of `VKML_DECODE_ATTN`
/// ([`decode_attn_overrides`]; read once per process).
pub fn decode_attn_rule(base: DecodeAttnConfig) -> DecodeAttnConfig {
    static SPEC: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    decode_attn_overrides(base, SPEC.get_or_init(|| std::env::var("VKML_DECODE_ATTN").ok()).as_deref())
}

#[cfg(test)]
mod tests {
    use vkml_hal::caps::{ArchClass, Vendor};

    use super::super::tests::fake;
    use super::super::{mat_vec_config, DECODE_ATTN_WIDE};
    use super::*;

    #[test]
    fn decode_attn_overrides_set_the_split_rule_in_range() {
        let w = DECODE_ATTN_WIDE;
        assert_eq!(decode_attn_overrides(w, None), w);
        let o = decode_attn_overrides(w, Some("split_positions=32, max_splits=8"));
        assert_eq!((o.subgroups, o.split_positions, o.max_splits), (16, 32, 8));
        assert_eq!([1, 32, 33, 256, 4096].map(|n| o.splits(n)), [1, 1, 2, 8, 8]);
        // Out of range or unknown: ignored.
        assert_eq!(decode_attn_overrides(w, Some("max_splits=33,split_positions=0,subgroups=4,x")), w);
        assert_eq!(decode_attn_overrides(w, Some("query_values=0")).query_values, 0);
        assert_eq!(decode_attn_overrides(w, Some("query_values=1025")), w);
    }

    /// `VKML_MAT_VEC` sets the fields it names within their ranges and ignores the rest.
    #[test]
    fn mat_vec_overrides_set_named_fields_in_range() {
        let caps = fake(ArchClass::NvidiaTensorCore, Vendor::Nvidia, (32, 32, 32), true);
        let base = mat_vec_config(&caps);
        assert_eq!(mat_vec_overrides(base, None, &caps), base);
        let c =
            mat_vec_overrides(base, Some("dot_x_workgroup=256, dot_x_rows_per_subgroup=2,rows_per_subgroup=8"), &caps);
        assert_eq!((c.dot_x_workgroup, c.dot_x_rows_per_subgroup, c.rows_per_subgroup), (256, 2, 8));
        assert_eq!(c.workgroup, base.workgroup);
        let (off, on) = (
            mat_vec_overrides(base, Some("integer_dot=0,dot_x_in_kernel=0,integer_dot_mxfp4=0"), &caps),
            mat_vec_overrides(base, Some("integer_dot=1,dot_x_in_kernel=1,integer_dot_mxfp4=1"), &caps),
        );
        assert!(!off.integer_dot && !off.dot_x_in_kernel && on.integer_dot && on.dot_x_in_kernel);
        assert!(!off.integer_dot_mxfp4 && on.integer_dot_mxfp4);
        assert!(base.norm_one_pass && !mat_vec_overrides(base, Some("norm_one_pass=0"), &caps).norm_one_pass);
        assert_eq!(mat_vec_overrides(base, Some("vec4_norm_workgroup=256"), &caps).vec4_norm_workgroup, 256);
        assert_eq!(mat_vec_overrides(base, Some("vec4_norm_workgroup=2048"), &caps), base);
        // Out of range (not a power of two, below the subgroup, rows 0 or 9), unknown or
        // malformed: ignored.
        let bad = "dot_x_workgroup=384,workgroup=16,dot_x_rows_per_subgroup=9,rows_per_subgroup=0,colour=3,workgroup,integer_dot=2";
        assert_eq!(mat_vec_overrides(base, Some(bad), &caps), base);
    }
}

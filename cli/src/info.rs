//! `vkml info`: devices and capabilities as a readable table or JSON.

use std::fmt::Write as _;

use vkml_hal::{Capabilities, Instance, InstanceOptions};

/// Prints every adapter's capabilities.
pub fn run(json: bool) -> Result<(), String> {
    let inst = Instance::new(&InstanceOptions::from_env()).map_err(|e| e.to_string())?;
    let adapters = inst.adapters().map_err(|e| e.to_string())?;
    if adapters.is_empty() {
        return Err(vkml_hal::Error::NoDevice { detail: String::new() }.to_string());
    }
    let best = inst.select(&vkml_hal::DeviceSelector::Best).ok().map(|a| a.ordinal);
    if json {
        let list: Vec<serde_json::Value> = adapters
            .iter()
            .map(|a| {
                let mut v = serde_json::to_value(&a.caps).expect("Capabilities serialise");
                v["ordinal"] = a.ordinal.into();
                v["best"] = (Some(a.ordinal) == best).into();
                v
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list).expect("JSON values serialise"));
    } else {
        let n = inst.device_count().map_err(|e| e.to_string())?;
        println!("{n} Vulkan device{}:", if n == 1 { "" } else { "s" });
        for a in &adapters {
            println!("  {}", summary(a.ordinal, Some(a.ordinal) == best, &a.caps));
        }
        println!("(`--devices 0,1` or VKML_DEVICES=0,1 splits a model's layers over several)\n");
        for a in &adapters {
            print!("{}", table(a.ordinal, Some(a.ordinal) == best, &a.caps));
        }
    }
    Ok(())
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// One line per device: ordinal, name, type, device-local memory and its budget (free
/// memory where the driver reports it).
pub fn summary(ordinal: usize, best: bool, c: &Capabilities) -> String {
    let m = &c.memory;
    let free = if m.budget_extension { format!(", {} budget", mib(m.device_local_budget)) } else { String::new() };
    format!(
        "{ordinal}: {} ({}, {} compute units, {} device-local{free}){}{}",
        c.name,
        format!("{:?}", c.device_type).to_lowercase(),
        c.compute_units.count,
        mib(m.device_local_bytes),
        if best { " [best]" } else { "" },
        c.unusable.as_ref().map_or(String::new(), |u| format!(" UNUSABLE: {u}")),
    )
}

/// Renders one device as an aligned two-column table.
pub fn table(ordinal: usize, best: bool, c: &Capabilities) -> String {
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut row = |k: &str, v: String| rows.push((k.to_string(), v));
    row("type", format!("{:?}", c.device_type).to_lowercase());
    row("vendor", format!("{:?} (0x{:04x}), device 0x{:04x}, arch {:?}", c.vendor, c.vendor_id, c.device_id, c.arch));
    row("vulkan", c.api_version.clone());
    row("driver", format!("{} {} ({}; {})", c.driver_name, c.driver_version, c.driver_id, c.driver_info));
    row("device uuid", c.device_uuid.clone());
    if let Some(why) = &c.unusable {
        row("UNUSABLE", why.clone());
    }
    row("compute units", format!("{} ({})", c.compute_units.count, c.compute_units.source));
    let sg = &c.subgroup;
    row(
        "subgroup",
        format!(
            "size {} (range {}..={}), size control {}, full subgroups {}, ops {}",
            sg.size,
            sg.min_size,
            sg.max_size,
            yes(sg.size_control),
            yes(sg.full_subgroups),
            sg.operations.join(",")
        ),
    );
    let t = &c.types;
    row(
        "shader types",
        format!(
            "f16 {}, bf16 {} (dot {}, coopmat {}), f64 {}, int8 {}, int16 {}, int64 {}; storage 8-bit {}, 16-bit {}",
            yes(t.float16),
            yes(t.bfloat16),
            yes(t.bfloat16_dot),
            yes(t.bfloat16_cooperative_matrix),
            yes(t.float64),
            yes(t.int8),
            yes(t.int16),
            yes(t.int64),
            yes(t.storage_buffer_8bit),
            yes(t.storage_buffer_16bit)
        ),
    );
    let d = &c.integer_dot;
    row(
        "integer dot",
        format!(
            "{}; accelerated: 4x8 packed signed {}, unsigned {}, mixed {}, 8-bit signed {}, 16-bit signed {}, accumulating 4x8 signed {}",
            yes(d.supported),
            yes(d.packed_4x8_signed_accelerated),
            yes(d.packed_4x8_unsigned_accelerated),
            yes(d.packed_4x8_mixed_accelerated),
            yes(d.int8_signed_accelerated),
            yes(d.int16_signed_accelerated),
            yes(d.accumulating_4x8_signed_accelerated)
        ),
    );
    if c.cooperative_matrix.is_empty() {
        row("cooperative matrix", "none".into());
    } else {
        row("cooperative matrix", format!("{} shapes (MxNxK A*B+C->R, scope)", c.cooperative_matrix.len()));
        for s in &c.cooperative_matrix {
            row(
                "",
                format!(
                    "{}x{}x{} {}*{}+{}->{}{} {}",
                    s.m,
                    s.n,
                    s.k,
                    s.a,
                    s.b,
                    s.c,
                    s.result,
                    if s.saturating { " sat" } else { "" },
                    s.scope
                ),
            );
        }
    }
    match &c.nv_cooperative_matrix2 {
        None => row("NV coopmat2", "no".into()),
        Some(n) => row(
            "NV coopmat2",
            format!(
                "workgroup scope {} (max {} invocations, {} B shared reserved), flexible dims {} (max {}), reductions {}, conversions {}, per-element {}, tensor addressing {}, block loads {}",
                yes(n.workgroup_scope),
                n.workgroup_scope_max_workgroup_size,
                n.workgroup_scope_reserved_shared_memory,
                yes(n.flexible_dimensions),
                n.flexible_dimensions_max_dimension,
                yes(n.reductions),
                yes(n.conversions),
                yes(n.per_element_operations),
                yes(n.tensor_addressing),
                yes(n.block_loads)
            ),
        ),
    }
    let l = &c.limits;
    row(
        "limits",
        format!(
            "storage binding {}, buffer {}, shared {} KiB, workgroup {:?} / {} invocations, groups {:?}, push constants {} B, push descriptors {}",
            mib(l.max_storage_buffer_range),
            mib(l.max_buffer_size),
            l.max_shared_memory / 1024,
            l.max_workgroup_size,
            l.max_workgroup_invocations,
            l.max_workgroup_count,
            l.max_push_constants_size,
            l.max_push_descriptors
        ),
    );
    let m = &c.memory;
    row(
        "memory",
        format!(
            "{} device-local, budget {}, UMA {}, budget extension {}",
            mib(m.device_local_bytes),
            mib(m.device_local_budget),
            yes(m.uma),
            yes(m.budget_extension)
        ),
    );
    for (i, h) in m.heaps.iter().enumerate() {
        row(
            "",
            format!(
                "heap {i}: {}{} budget {} [{}]",
                mib(h.size),
                if h.device_local { " device-local," } else { "," },
                mib(h.budget),
                h.types.join(" ")
            ),
        );
    }
    row(
        "queues",
        format!(
            "compute family {}, transfer family {}; {}",
            c.queues.compute_family,
            c.queues.transfer_family.map_or("none".to_string(), |f| f.to_string()),
            c.queues.families.join("; ")
        ),
    );
    row(
        "features",
        format!(
            "push descriptors {}, timeline semaphores {}, memory model {}, buffer device address {}",
            yes(c.push_descriptor),
            yes(c.timeline_semaphore),
            yes(c.vulkan_memory_model),
            yes(c.buffer_device_address)
        ),
    );
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = format!("Device {ordinal}: {}{}\n", c.name, if best { "  [best]" } else { "" });
    for (k, v) in rows {
        writeln!(out, "  {k:<width$}  {v}").expect("writing to a String");
    }
    out.push('\n');
    out
}

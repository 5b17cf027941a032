// SPDX-License-Identifier: GPL-2.0

//! Per-cpu address resolution with the checks a BPF caller needs.
//!
//! `per_cpu_ptr()` in C trusts its arguments.  A kfunc cannot: the pointer reaches it as
//! an unchecked `__ign` argument and the cpu is any value the program computed.  This is
//! the rule the rkf_percpu kfuncs apply, kept apart from the kernel so that it is tested
//! on the host too.

/// What per-cpu resolution needs to know about the cpus of the running system.
pub trait CpuLayout {
    /// `nr_cpu_ids`: one more than the highest possible cpu number.
    fn nr_cpu_ids(&self) -> u32;

    /// Whether `cpu`, which is below [`CpuLayout::nr_cpu_ids`], is a possible cpu.
    fn is_possible(&self, cpu: u32) -> bool;

    /// The offset of `cpu`'s per-cpu area (`__per_cpu_offset[cpu]`), for a possible `cpu`.
    fn offset(&self, cpu: u32) -> usize;
}

/// Returns the address of `cpu`'s copy of the per-cpu variable at `addr`.
///
/// Returns `None` when `addr` is zero (an unresolved weak `__ksym`), when `cpu` is not
/// below `nr_cpu_ids`, or when `cpu` is not possible: there is no area to point into.
/// The addition wraps, as pointer arithmetic in C does, because `addr` is not trusted.
pub fn resolve(layout: &impl CpuLayout, addr: usize, cpu: u32) -> Option<usize> {
    if addr == 0 || cpu >= layout.nr_cpu_ids() || !layout.is_possible(cpu) {
        return None;
    }
    Some(addr.wrapping_add(layout.offset(cpu)))
}

// SPDX-License-Identifier: GPL-2.0

//! Per-cpu pointer resolution behind `bpf_rkf_per_cpu_ptr()` and `bpf_rkf_this_cpu_ptr()`.

use kernel::{bindings, ffi::c_void};

use crate::{
    abi::{self, PercpuProbe},
    kfunc::KfuncSet,
    percpu_core::{self, CpuLayout},
    rkf_h,
};

// The probe of rust/core/src/abi.rs is the one c-shim/rkf.h defines for C.
crate::abi_check::assert_same_layout!(PercpuProbe, rkf_h::rkf_percpu_probe,
    cpu, magic, self_addr => self_);
const _: () = assert!(abi::PERCPU_PROBE_MAGIC == rkf_h::RKF_PERCPU_PROBE_MAGIC);

/// The kfunc set of rkf_percpu (`rkf_percpu_kfunc_set`).
pub(crate) static KFUNCS: KfuncSet =
    // SAFETY: the shim defines `rkf_percpu_kfunc_set` with `BTF_KFUNCS_START/END`, as a const
    // object, never written.
    unsafe { KfuncSet::new(&rkf_h::rkf_percpu_kfunc_set) };

/// The cpus of the running kernel.
struct KernelCpus;

impl CpuLayout for KernelCpus {
    fn nr_cpu_ids(&self) -> u32 {
        kernel::cpu::nr_cpu_ids()
    }

    fn is_possible(&self, cpu: u32) -> bool {
        // The bit of `cpu_possible(cpu)`, read here: `Cpumask::test()` calls the
        // out-of-line C helper `cpumask_test_cpu()`, which doubled the kfunc's cost.
        const BITS: usize = usize::BITS as usize;
        const WORDS: usize = size_of::<bindings::cpumask>() / size_of::<usize>();
        let word = cpu as usize / BITS;
        if word >= WORDS {
            return false;
        }
        // SAFETY: `__cpu_possible_mask` is a static cpumask that lives as long as the
        // kernel, `__ro_after_init` (kernel/cpu.c): written only before the module could
        // load; `word` is one of its words (checked above), read through a raw pointer.
        let bits = unsafe {
            (&raw const bindings::__cpu_possible_mask)
                .cast::<usize>()
                .add(word)
                .read()
        };
        bits & (1 << (cpu as usize % BITS)) != 0
    }

    fn offset(&self, cpu: u32) -> usize {
        // SAFETY: `__per_cpu_offset` has `NR_CPUS` entries, set up at boot and read-only
        // afterwards; `resolve()` asks only for a possible cpu, below `nr_cpu_ids`, which
        // is at most `NR_CPUS` (the index is checked all the same).
        unsafe { bindings::__per_cpu_offset[cpu as usize] }
    }
}

/// Returns `cpu`'s copy of the per-cpu variable at `ptr`, or NULL (see `percpu_core`).
///
/// Called by the `bpf_rkf_per_cpu_ptr()` kfunc.  `ptr` comes from a BPF program unchecked;
/// it is only used as a number here, never dereferenced.
#[no_mangle]
pub(crate) extern "C" fn rkf_percpu_resolve(ptr: *const c_void, cpu: u32) -> *mut c_void {
    match percpu_core::resolve(&KernelCpus, ptr as usize, cpu) {
        Some(addr) => addr as *mut c_void,
        None => core::ptr::null_mut(),
    }
}

/// Initialises every possible cpu's copy of `rkf_percpu_probe`, the module's own per-cpu
/// variable, which tests read from BPF to check resolution against the module's view.
pub(crate) fn init_probe() {
    let base = (&raw mut rkf_h::rkf_percpu_probe).cast::<c_void>();
    for cpu in 0..kernel::cpu::nr_cpu_ids() {
        let copy = rkf_percpu_resolve(base, cpu).cast::<PercpuProbe>();
        if copy.is_null() {
            continue;
        }
        // SAFETY: `copy` is `cpu`'s copy of a per-cpu variable of this module, valid for
        // the module's lifetime; nothing reads it before module init has returned.
        unsafe {
            copy.write(PercpuProbe {
                cpu,
                magic: abi::PERCPU_PROBE_MAGIC,
                self_addr: copy as u64,
            })
        };
    }
}

// The definitions above have the prototypes c-shim/rkf.h declares.
const _: () = {
    let _ = [
        rkf_h::rkf_percpu_resolve as unsafe extern "C" fn(_, _) -> _,
        rkf_percpu_resolve,
    ];
};

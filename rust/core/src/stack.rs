// SPDX-License-Identifier: GPL-2.0

//! The rules of `bpf_get_stack()` (kernel/bpf/stackmap.c, `__bpf_get_stack()`), for the
//! rkf_stack kfuncs to return exactly what the helper returns.
//!
//! Flags, sizes and depth are checked by [`plan`]; the tail of the buffer is handled by
//! [`finalize`]; build ids are resolved by [`resolve_build_ids`], the same algorithm as
//! `stack_map_get_build_id_offset()` with its two-slot cache, over an [`AddressSpace`] that
//! the module implements with `find_vma()` and `build_id_parse_nofault()`.

/// `EINVAL`.
pub const EINVAL: i32 = 22;
/// `EFAULT`.
pub const EFAULT: i32 = 14;
/// `EOPNOTSUPP`.
pub const EOPNOTSUPP: i32 = 95;

/// `BPF_F_SKIP_FIELD_MASK`: how many frames to skip.
pub const F_SKIP_FIELD_MASK: u64 = 0xff;
/// `BPF_F_USER_STACK`.
pub const F_USER_STACK: u64 = 1 << 8;
/// `BPF_F_USER_BUILD_ID`.
pub const F_USER_BUILD_ID: u64 = 1 << 11;

/// The size of one ip.
pub const IP_SIZE: u32 = 8;
/// `sizeof(struct bpf_stack_build_id)`.
pub const BUILD_ID_ENTRY_SIZE: u32 = 32;
/// `BPF_BUILD_ID_SIZE`.
pub const BUILD_ID_SIZE: usize = 20;

/// `BPF_STACK_BUILD_ID_VALID`.
pub const STATUS_VALID: i32 = 1;
/// `BPF_STACK_BUILD_ID_IP`.
pub const STATUS_IP: i32 = 2;

/// A checked request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Frames to skip.
    pub skip: u32,
    /// The user stack rather than the kernel stack.
    pub user: bool,
    /// Build id + offset entries rather than ips.
    pub build_id: bool,
    /// The size of one entry in the buffer.
    pub elem_size: u32,
    /// The depth to ask of the callchain (`stack_map_calculate_max_depth()`).
    pub max_depth: u32,
}

/// Checks `flags` and `size` as the helper does, in the same order.
///
/// On error the caller zeroes the whole buffer and returns `-errno`; every error here is
/// `EINVAL`.
pub fn plan(flags: u64, size: u32, sysctl_max_stack: u32) -> Result<Request, i32> {
    let build_id = flags & F_USER_BUILD_ID != 0;
    let user = flags & F_USER_STACK != 0;
    let skip = (flags & F_SKIP_FIELD_MASK) as u32;

    if flags & !(F_SKIP_FIELD_MASK | F_USER_STACK | F_USER_BUILD_ID) != 0 {
        return Err(EINVAL);
    }
    if !user && build_id {
        return Err(EINVAL);
    }
    let elem_size = if build_id {
        BUILD_ID_ENTRY_SIZE
    } else {
        IP_SIZE
    };
    // elem_size is a power of two (is_multiple_of() would need Rust 1.87; the kernel's
    // minimum is 1.85).
    if size & (elem_size - 1) != 0 {
        return Err(EINVAL);
    }
    // size / elem_size is at most 2^29, so adding skip cannot overflow.
    let max_depth = (size / elem_size + skip).min(sysctl_max_stack);
    Ok(Request {
        skip,
        user,
        build_id,
        elem_size,
        max_depth,
    })
}

/// `__bpf_get_task_stack()`'s checks of a task after [`plan`]'s, for a request of the user
/// stack (`user`, [`Request::user`]) or the kernel stack: a user stack needs the task's
/// user regs (`EFAULT` without them, as for a kernel thread), and can be walked
/// for the current task only (`EOPNOTSUPP`: the callchain code does not walk another
/// task's user stack).  A kernel stack can be taken of any task.
///
/// And not from a perf_event program (`perf_event`), unlike the helper: perf's overflow
/// handler runs it after taking the sample's callchain into the per-cpu callchain entry
/// of its context level (perf_prepare_sample() in kernel/events/core.c), and the walk of a
/// user stack (get_perf_callchain()) would take the same entry and overwrite it, under
/// `bpf_get_stack_pe()`'s reads and the sample's record (`EOPNOTSUPP`: such a program
/// takes the user stack with `bpf_rkf_get_stack_pe()`).  A kernel stack is walked into
/// the caller's buffer, not into that entry.
pub fn check_task(user: bool, current: bool, user_regs: bool, perf_event: bool) -> Result<(), i32> {
    if user && !user_regs {
        return Err(EFAULT);
    }
    if user && (!current || perf_event) {
        return Err(EOPNOTSUPP);
    }
    Ok(())
}

/// `PERF_CONTEXT_USER`: where a sampled callchain's user part starts.
pub const PERF_CONTEXT_USER: u64 = -512i64 as u64;

/// What to copy from a callchain that perf sampled with `PERF_SAMPLE_CALLCHAIN`: the
/// entries `start..start + n` of the sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampled {
    /// The first entry to copy.
    pub start: usize,
    /// How many.
    pub n: u32,
    /// As [`Request::elem_size`].
    pub elem_size: u32,
    /// As [`Request::build_id`].
    pub build_id: bool,
}

/// `bpf_get_stack_pe()` for an event that samples callchains: the sample's callchain
/// (`ips`, `None` when the sample has none) instead of a fresh walk.
///
/// The kernel part is everything before `PERF_CONTEXT_USER`; a user stack skips it, so
/// its first entry is the `PERF_CONTEXT_USER` marker, as with the helper.
pub fn plan_sampled(
    ips: Option<&[u64]>,
    flags: u64,
    size: u32,
    sysctl_max_stack: u32,
) -> Result<Sampled, i32> {
    if flags & !(F_SKIP_FIELD_MASK | F_USER_STACK | F_USER_BUILD_ID) != 0 {
        return Err(EINVAL);
    }
    let user = flags & F_USER_STACK != 0;
    let ips = ips.ok_or(EFAULT)?;
    let nr_kernel = ips
        .iter()
        .position(|&ip| ip == PERF_CONTEXT_USER)
        .unwrap_or(ips.len());
    let (trace_nr, flags) = if user {
        let skip = (flags & F_SKIP_FIELD_MASK) + nr_kernel as u64;
        if skip > F_SKIP_FIELD_MASK {
            return Err(EFAULT);
        }
        (ips.len(), (flags & !F_SKIP_FIELD_MASK) | skip)
    } else {
        (nr_kernel, flags)
    };
    // __bpf_get_stack_pe() checks what __bpf_get_stack() checks, with the adjusted skip.
    let req = plan(flags, size, sysctl_max_stack)?;
    let trace_nr = (trace_nr.min(u32::MAX as usize) as u32).min(req.max_depth);
    if trace_nr < req.skip {
        return Err(EFAULT);
    }
    Ok(Sampled {
        start: req.skip as usize,
        n: trace_nr - req.skip,
        elem_size: req.elem_size,
        build_id: req.build_id,
    })
}

/// Zeroes the buffer past the `n` entries written and returns the helper's result, the
/// number of bytes written (`callchain_finalize()`).
pub fn finalize(buf: &mut [u8], n: u32, elem_size: u32) -> i64 {
    let copy = (n as usize * elem_size as usize).min(buf.len());
    buf[copy..].fill(0);
    copy as i64
}

/// A vma, as build-id resolution needs it.
#[derive(Clone, Copy, Debug)]
pub struct Vma {
    /// `vm_start`.
    pub start: u64,
    /// `vm_end`.
    pub end: u64,
    /// `vm_pgoff`.
    pub pgoff: u64,
    /// `vma_is_anonymous()`: no `vm_ops`.
    pub anonymous: bool,
    /// The address space's own handle for the vma.
    pub handle: usize,
}

/// The address space of the current task, as build-id resolution sees it.
pub trait AddressSpace {
    /// `find_vma()`: the first vma that ends above `ip`; it may start above `ip` too.
    fn find_vma(&mut self, ip: u64) -> Option<Vma>;
    /// `build_id_parse_nofault()` (or `build_id_parse()`, where a page fault is allowed)
    /// into `out` (zero-padded); false on failure.
    fn build_id(&mut self, vma: &Vma, out: &mut [u8; BUILD_ID_SIZE]) -> bool;
}

// Accessors of `struct bpf_stack_build_id` entries in a byte buffer: the buffer belongs
// to a BPF program and need not be aligned.
fn entry(buf: &mut [u8], i: usize) -> &mut [u8] {
    let at = i * BUILD_ID_ENTRY_SIZE as usize;
    &mut buf[at..at + BUILD_ID_ENTRY_SIZE as usize]
}

/// The ip (or offset) of build-id entry `i`.
pub fn entry_ip(buf: &[u8], i: usize) -> u64 {
    let at = i * BUILD_ID_ENTRY_SIZE as usize + 24;
    u64::from_ne_bytes(buf[at..at + 8].try_into().unwrap_or([0; 8]))
}

/// Writes `ip` into build-id entry `i`, as `callchain_store()` does.
pub fn set_entry_ip(buf: &mut [u8], i: usize, ip: u64) {
    entry(buf, i)[24..32].copy_from_slice(&ip.to_ne_bytes());
}

// stack_map_build_id_set_ip(): status IP, build id zeroed, ip kept.
fn set_ip(buf: &mut [u8], i: usize) {
    let e = entry(buf, i);
    e[0..4].copy_from_slice(&STATUS_IP.to_ne_bytes());
    e[4..24].fill(0);
}

// stack_map_build_id_set_valid().
fn set_valid(buf: &mut [u8], i: usize, offset: u64, id: &[u8; BUILD_ID_SIZE]) {
    let e = entry(buf, i);
    e[0..4].copy_from_slice(&STATUS_VALID.to_ne_bytes());
    e[4..24].copy_from_slice(id);
    e[24..32].copy_from_slice(&offset.to_ne_bytes());
}

fn offset(pgoff: u64, start: u64, ip: u64, page_shift: u32) -> u64 {
    (pgoff << page_shift).wrapping_add(ip).wrapping_sub(start)
}

/// Turns the first `n` entries of `buf`, which hold ips, into build id + offset entries,
/// falling back to the ip per entry where no build id can be had.
pub fn resolve_build_ids(space: &mut impl AddressSpace, buf: &mut [u8], n: usize, page_shift: u32) {
    // The callers pass at most what fits; never index past the buffer all the same.
    let n = n.min(buf.len() / BUILD_ID_ENTRY_SIZE as usize);
    // The last vma with a build id (range, pgoff, and the id) and the last without one.
    let mut resolved: Option<(u64, u64, u64, [u8; BUILD_ID_SIZE])> = None;
    let mut unresolved: Option<(u64, u64)> = None;
    for i in 0..n {
        let ip = entry_ip(buf, i);
        // By reference: copying the cached id on every frame shows in the benchmark.
        if let Some((start, end, pgoff, id)) = &resolved {
            if ip >= *start && ip < *end {
                set_valid(buf, i, offset(*pgoff, *start, ip, page_shift), id);
                continue;
            }
        }
        if let Some((start, end)) = unresolved {
            if ip >= start && ip < end {
                set_ip(buf, i);
                continue;
            }
        }
        let Some(vma) = space.find_vma(ip) else {
            set_ip(buf, i);
            continue;
        };
        let mut id = [0u8; BUILD_ID_SIZE];
        if vma.anonymous || !space.build_id(&vma, &mut id) {
            set_ip(buf, i);
            unresolved = Some((vma.start, vma.end));
            continue;
        }
        set_valid(buf, i, offset(vma.pgoff, vma.start, ip, page_shift), &id);
        resolved = Some((vma.start, vma.end, vma.pgoff, id));
    }
}

/// The fallback when the address space cannot be locked: every entry is an ip.
pub fn fall_back_to_ips(buf: &mut [u8], n: usize) {
    let n = n.min(buf.len() / BUILD_ID_ENTRY_SIZE as usize);
    for i in 0..n {
        set_ip(buf, i);
    }
}

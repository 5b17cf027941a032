// SPDX-License-Identifier: GPL-2.0

//! Host tests of the bpf_get_stack() rules: every row of the errno table, the depth
//! clamp, the tail, and build-id resolution against a model address space.

use proptest::prelude::*;
use rkf_core::stack::*;

const SYSCTL: u32 = 127;

/// An errno-table row: flags, size, and the expected (max_depth, skip) or errno.
type Row = (u64, u32, Result<(u32, u32), i32>);

/// A model mapping: start, end, pgoff, anonymous, and the build id (None: unparsable).
type Mapping = (u64, u64, u64, bool, Option<[u8; BUILD_ID_SIZE]>);

#[test]
fn errno_table() {
    // (flags, size, expected)
    let rows: &[Row] = &[
        (0, 0, Ok((0, 0))),          // zero size is valid
        (0, 8, Ok((1, 0))),          // one ip
        (3, 8 * 4, Ok((4 + 3, 3))),  // skip adds to the depth
        (255, 8, Ok((SYSCTL, 255))), // clamped to the sysctl
        (0, 7, Err(EINVAL)),         // size not a multiple of 8
        (0, 12, Err(EINVAL)),
        (F_USER_STACK, 16, Ok((2, 0))),
        (F_USER_STACK | F_USER_BUILD_ID, 64, Ok((2, 0))), // 32-byte entries
        (F_USER_STACK | F_USER_BUILD_ID, 40, Err(EINVAL)), // not a multiple of 32
        (F_USER_BUILD_ID, 64, Err(EINVAL)),               // build id needs the user stack
        (1 << 9, 8, Err(EINVAL)),                         // BPF_F_FAST_STACK_CMP: stackid only
        (1 << 10, 8, Err(EINVAL)),                        // BPF_F_REUSE_STACKID: stackid only
        (1 << 12, 8, Err(EINVAL)),
        (1 << 63, 8, Err(EINVAL)),
    ];
    for &(flags, size, want) in rows {
        let got = plan(flags, size, SYSCTL).map(|r| (r.max_depth, r.skip));
        assert_eq!(got, want, "plan(flags={flags:#x}, size={size})");
    }
}

#[test]
fn build_id_without_user_checked_before_size() {
    // The helper checks the flags before the size: EINVAL either way, but the order
    // decides nothing else, so only the errno is observable.
    assert_eq!(plan(F_USER_BUILD_ID, 7, SYSCTL), Err(EINVAL));
}

/// `__bpf_get_task_stack()`'s table past the flags: every combination of stack kind (a
/// build-id request is a user-stack one), task and user regs.
#[test]
fn task_table() {
    let kernel = plan(0, 64, SYSCTL).unwrap().user;
    let user = plan(F_USER_STACK, 64, SYSCTL).unwrap().user;
    // (request, current, user regs, perf_event program, expected)
    let rows = [
        (kernel, true, true, false, Ok(())),
        (kernel, true, false, false, Ok(())),
        (kernel, false, true, false, Ok(())),
        (kernel, false, false, false, Ok(())),
        (kernel, true, true, true, Ok(())),
        (kernel, false, true, true, Ok(())),
        (user, true, true, false, Ok(())),
        (user, true, false, false, Err(EFAULT)),
        (user, false, true, false, Err(EOPNOTSUPP)),
        (user, false, false, false, Err(EFAULT)), // no user regs is checked first
        (user, true, true, true, Err(EOPNOTSUPP)),
        (user, false, true, true, Err(EOPNOTSUPP)),
        (user, true, false, true, Err(EFAULT)),
        (user, false, false, true, Err(EFAULT)),
    ];
    for (user, current, user_regs, perf_event, want) in rows {
        assert_eq!(
            check_task(user, current, user_regs, perf_event),
            want,
            "check_task(user stack {user}, current {current}, user regs {user_regs}, \
             perf_event program {perf_event})"
        );
    }
}

#[test]
fn tail_is_zeroed() {
    let mut buf = [0xaau8; 32];
    assert_eq!(finalize(&mut buf, 2, 8), 16);
    assert!(buf[..16].iter().all(|&b| b == 0xaa));
    assert!(buf[16..].iter().all(|&b| b == 0));
    assert_eq!(finalize(&mut buf, 0, 8), 0);
    assert!(buf.iter().all(|&b| b == 0));
}

proptest! {
    #[test]
    fn plan_accepts_exactly_the_valid_requests(flags in any::<u64>(), size in any::<u32>(), sysctl in 0u32..1000) {
        let known = F_SKIP_FIELD_MASK | F_USER_STACK | F_USER_BUILD_ID;
        let build_id = flags & F_USER_BUILD_ID != 0;
        let elem = if build_id { 32 } else { 8 };
        let valid = flags & !known == 0
            && (flags & F_USER_STACK != 0 || !build_id)
            && size % elem == 0;
        let got = plan(flags, size, sysctl);
        prop_assert_eq!(got.is_ok(), valid);
        if let Ok(r) = got {
            prop_assert!(r.max_depth <= sysctl);
            prop_assert_eq!(r.max_depth, (size / elem + r.skip).min(sysctl));
            prop_assert_eq!(r.elem_size, elem);
        }
    }
}

struct Model {
    vmas: Vec<Mapping>,
    parses: usize,
    lookups: usize,
}

impl AddressSpace for Model {
    fn find_vma(&mut self, ip: u64) -> Option<Vma> {
        self.lookups += 1;
        self.vmas
            .iter()
            .enumerate()
            .find(|(_, v)| ip < v.1)
            .map(|(i, v)| Vma {
                start: v.0,
                end: v.1,
                pgoff: v.2,
                anonymous: v.3,
                handle: i,
            })
    }
    fn build_id(&mut self, vma: &Vma, out: &mut [u8; BUILD_ID_SIZE]) -> bool {
        self.parses += 1;
        match self.vmas[vma.handle].4 {
            Some(id) => {
                *out = id;
                true
            }
            None => false,
        }
    }
}

fn decode(buf: &[u8], i: usize) -> (i32, [u8; BUILD_ID_SIZE], u64) {
    let e = &buf[i * 32..(i + 1) * 32];
    (
        i32::from_ne_bytes(e[0..4].try_into().unwrap()),
        e[4..24].try_into().unwrap(),
        u64::from_ne_bytes(e[24..32].try_into().unwrap()),
    )
}

#[test]
fn build_ids() {
    let id_a = [0xa; BUILD_ID_SIZE];
    let mut m = Model {
        vmas: vec![
            (0x1000, 0x3000, 2, false, Some(id_a)), // file-backed, pgoff 2
            (0x5000, 0x6000, 0, true, None),        // anonymous
            (0x7000, 0x8000, 0, false, None),       // no build id
        ],
        parses: 0,
        lookups: 0,
    };
    let ips = [
        0x1010u64, 0x2000, 0x5008, 0x4000, 0x7004, 0x7008, 0x9000, 0x5010,
    ];
    let mut buf = vec![0u8; ips.len() * 32];
    for (i, &ip) in ips.iter().enumerate() {
        set_entry_ip(&mut buf, i, ip);
    }
    resolve_build_ids(&mut m, &mut buf, ips.len(), 12);
    let page = 1u64 << 12;
    assert_eq!(decode(&buf, 0), (STATUS_VALID, id_a, 2 * page + 0x10));
    // From the cache.
    assert_eq!(decode(&buf, 1), (STATUS_VALID, id_a, 2 * page + 0x1000));
    // Anonymous: ip.
    assert_eq!(decode(&buf, 2), (STATUS_IP, [0; BUILD_ID_SIZE], 0x5008));
    // In the gap before 0x5000: find_vma() gives the next vma, anonymous: ip.
    assert_eq!(decode(&buf, 3), (STATUS_IP, [0; BUILD_ID_SIZE], 0x4000));
    assert_eq!(decode(&buf, 4), (STATUS_IP, [0; BUILD_ID_SIZE], 0x7004)); // unparsable
    assert_eq!(decode(&buf, 5), (STATUS_IP, [0; BUILD_ID_SIZE], 0x7008)); // cached as such
    assert_eq!(decode(&buf, 6), (STATUS_IP, [0; BUILD_ID_SIZE], 0x9000)); // no vma
    assert_eq!(decode(&buf, 7), (STATUS_IP, [0; BUILD_ID_SIZE], 0x5010));
    assert_eq!(m.parses, 2, "one parse per file-backed vma");
}

#[test]
fn gap_resolves_against_the_next_vma() {
    // As with find_vma() in the helper: an ip below a file-backed vma gets its build id and
    // a wrapped offset.
    let id = [7; BUILD_ID_SIZE];
    let mut m = Model {
        vmas: vec![(0x2000, 0x3000, 0, false, Some(id))],
        parses: 0,
        lookups: 0,
    };
    let mut buf = vec![0u8; 32];
    set_entry_ip(&mut buf, 0, 0x1000);
    resolve_build_ids(&mut m, &mut buf, 1, 12);
    assert_eq!(
        decode(&buf, 0),
        (STATUS_VALID, id, 0x1000u64.wrapping_sub(0x2000))
    );
}

#[test]
fn fallback() {
    let mut buf = vec![0xffu8; 64];
    set_entry_ip(&mut buf, 0, 0x1234);
    fall_back_to_ips(&mut buf, 1);
    assert_eq!(decode(&buf, 0), (STATUS_IP, [0; BUILD_ID_SIZE], 0x1234));
    assert!(
        buf[32..].iter().all(|&b| b == 0xff),
        "entries past n are left alone"
    );
}

#[test]
fn sampled_callchains() {
    const K: u64 = -128i64 as u64; // PERF_CONTEXT_KERNEL
    let ips = [
        K,
        0xffff_0001,
        0xffff_0002,
        PERF_CONTEXT_USER,
        0x40_1000,
        0x40_2000,
    ];
    // Kernel: the entries before PERF_CONTEXT_USER, marker included.
    let s = plan_sampled(Some(&ips), 0, 64, SYSCTL).unwrap();
    assert_eq!((s.start, s.n), (0, 3));
    let s = plan_sampled(Some(&ips), 1, 64, SYSCTL).unwrap();
    assert_eq!((s.start, s.n), (1, 2));
    assert_eq!(plan_sampled(Some(&ips), 4, 64, SYSCTL), Err(EFAULT));
    // User: from PERF_CONTEXT_USER on.
    let s = plan_sampled(Some(&ips), F_USER_STACK, 64, SYSCTL).unwrap();
    assert_eq!((s.start, s.n), (3, 3));
    assert_eq!(ips[s.start], PERF_CONTEXT_USER);
    // User skip + kernel entries beyond 255.
    assert_eq!(
        plan_sampled(Some(&ips), F_USER_STACK | 253, 64, SYSCTL),
        Err(EFAULT)
    );
    // A small buffer clamps; the depth counts the skipped entries.
    let s = plan_sampled(Some(&ips), F_USER_STACK | 1, 8, SYSCTL).unwrap();
    assert_eq!((s.start, s.n), (4, 1));
    // Errors, in the helper's order.
    assert_eq!(plan_sampled(None, 1 << 9, 64, SYSCTL), Err(EINVAL));
    assert_eq!(plan_sampled(None, 0, 64, SYSCTL), Err(EFAULT));
    assert_eq!(
        plan_sampled(Some(&ips), F_USER_BUILD_ID, 64, SYSCTL),
        Err(EINVAL)
    );
    assert_eq!(plan_sampled(Some(&ips), 0, 12, SYSCTL), Err(EINVAL));
    let s = plan_sampled(Some(&ips), F_USER_STACK | F_USER_BUILD_ID, 64, SYSCTL).unwrap();
    assert_eq!((s.start, s.n, s.elem_size), (3, 2, 32));
}

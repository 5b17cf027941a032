// SPDX-License-Identifier: GPL-2.0

//! rkf_multi's rules: request limits, target shapes, glob matching, and the bookkeeping
//! of overlapping links (which functions a link operation hooks or unhooks in ftrace, and
//! in which order the programs attached to one function run).
//!
//! The module (rust/multi.rs) and user space (user/src/multi.rs) both build this file;
//! nothing here allocates, so the kernel can call it on its own vectors.

/// `EINVAL`.
pub const EINVAL: i32 = 22;
/// `E2BIG`.
pub const E2BIG: i32 = 7;
/// `ENOENT`.
pub const ENOENT: i32 = 2;
/// `EBUSY`.
pub const EBUSY: i32 = 16;
/// `EBADF`.
pub const EBADF: i32 = 9;

/// The most functions one link may attach to.  Bounds every allocation of an attach
/// request before it is made (16 bytes of input and about 64 bytes of state a function).
pub const MAX_FUNCS: u32 = 1 << 16;

/// The most links on one function, the limit of BPF trampolines (`BPF_MAX_TRAMP_LINKS`).
pub const MAX_LINKS_PER_FUNC: u32 = 38;

/// The most register arguments a target may take: the trampoline saves six.
pub const MAX_ARGS: u32 = 6;

/// Why a function cannot be attached.  The numbers are the ABI of
/// `struct rkf_multi_attach.reason` (c-shim/rkf.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Refusal {
    /// The BTF id is not a function (`ENOENT`).
    NotAFunction = 1,
    /// The address is not the start of the function the BTF id names (`EINVAL`).
    WrongAddress = 2,
    /// More than six arguments (`EINVAL`).
    TooManyArgs = 3,
    /// A struct, union or floating-point argument or return value (`EINVAL`).
    NotInRegisters = 4,
    /// Not in ftrace's `available_filter_functions`: notrace, inlined, or init text
    /// (`ENOENT`).
    NotTraceable = 5,
    /// Another direct trampoline (for example an in-kernel BPF trampoline) owns the
    /// function (`EBUSY`).
    Busy = 6,
    /// The same function twice in one request (`EINVAL`).
    Duplicate = 7,
    /// Functions the trampoline itself runs, or that never return to an fexit
    /// program, as the verifier's deny lists (`EINVAL`).
    Denied = 8,
    /// Already `MAX_LINKS_PER_FUNC` links on the function (`E2BIG`).
    TooManyLinks = 9,
    /// The program is already attached to the function through another link (`EBUSY`).
    SameProgram = 10,
    /// The fd given for the function's BTF object is not the BTF of a loaded module (it
    /// is vmlinux's, a program's, or not a BTF object), or its module is going away
    /// (`EINVAL`).
    NotModuleBtf = 11,
    /// The fd given for the function's BTF object is not open (`EBADF`).
    BadFd = 12,
}

impl Refusal {
    /// The errno the request fails with.
    pub fn errno(self) -> i32 {
        match self {
            Self::NotAFunction | Self::NotTraceable => ENOENT,
            Self::Busy | Self::SameProgram => EBUSY,
            Self::TooManyLinks => E2BIG,
            Self::WrongAddress | Self::TooManyArgs | Self::NotInRegisters | Self::Duplicate => {
                EINVAL
            }
            Self::Denied | Self::NotModuleBtf => EINVAL,
            Self::BadFd => EBADF,
        }
    }

    /// Decodes the ABI number.
    pub fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::NotAFunction,
            2 => Self::WrongAddress,
            3 => Self::TooManyArgs,
            4 => Self::NotInRegisters,
            5 => Self::NotTraceable,
            6 => Self::Busy,
            7 => Self::Duplicate,
            8 => Self::Denied,
            9 => Self::TooManyLinks,
            10 => Self::SameProgram,
            11 => Self::NotModuleBtf,
            12 => Self::BadFd,
            _ => return None,
        })
    }

    /// What to tell the user.
    pub fn describe(self) -> &'static str {
        match self {
            Self::NotAFunction => "the BTF id is not a function",
            Self::WrongAddress => "the address is not the start of the function its BTF id names",
            Self::TooManyArgs => "more than 6 arguments",
            Self::NotInRegisters => "a struct, union or floating-point argument or return value",
            Self::NotTraceable => {
                "not traceable (not in available_filter_functions: notrace, inlined or init)"
            }
            Self::Busy => "another direct trampoline (e.g. an in-kernel BPF trampoline) owns it",
            Self::Duplicate => "listed twice",
            Self::Denied => "the trampoline needs it, or it never returns (deny list)",
            Self::TooManyLinks => "already 38 links on it",
            Self::SameProgram => "the program is attached to it through another link",
            Self::NotModuleBtf => "its BTF object is not the BTF of a loaded module",
            Self::BadFd => "the fd of its BTF object is not open",
        }
    }
}

/// Functions the trampoline's own path calls, which would recurse without bound if traced,
/// and functions that never return, where fexit makes no sense: the verifier's
/// `btf_id_deny` and `noreturn_deny` lists (kernel/bpf/verifier.c), and the pieces of
/// `bpf_prog_run()` that are out of line.
pub const DENY: &[&str] = &[
    "migrate_disable",
    "migrate_enable",
    "___migrate_enable",
    "rcu_read_unlock_strict",
    "preempt_count_add",
    "preempt_count_sub",
    "__rcu_read_lock",
    "__rcu_read_unlock",
    "__bpf_prog_enter_recur",
    "__bpf_prog_exit_recur",
    "bpf_dispatcher_xdp_func",
    "__kasan_check_read",
    "__kasan_check_write",
    "do_exit",
    "do_group_exit",
    "make_task_dead",
    "__x64_sys_exit",
    "__x64_sys_exit_group",
    "__ia32_sys_exit",
    "__ia32_sys_exit_group",
    "kthread_complete_and_exit",
    "kthread_exit",
    "__module_put_and_kthread_exit",
];

/// Whether `name` is on the deny list.
pub fn denied(name: &[u8]) -> bool {
    DENY.iter().any(|d| d.as_bytes() == name)
}

/// BTF kinds (include/uapi/linux/btf.h) that [`check_shape()`] tells apart.
pub mod btf_kind {
    /// `BTF_KIND_INT`.
    pub const INT: u32 = 1;
    /// `BTF_KIND_PTR`.
    pub const PTR: u32 = 2;
    /// `BTF_KIND_ENUM`.
    pub const ENUM: u32 = 6;
    /// `BTF_KIND_ENUM64`.
    pub const ENUM64: u32 = 19;
}

/// Whether a value of BTF `kind` and `size` travels in one register.
fn in_register(kind: u32, size: u32) -> bool {
    match kind {
        btf_kind::PTR => true,
        btf_kind::INT | btf_kind::ENUM | btf_kind::ENUM64 => size <= 8,
        _ => false,
    }
}

/// Decides from a function's BTF whether the trampoline can trace it honestly, and
/// returns its argument count.
///
/// `kind[0]`/`size[0]` describe the return type (kind 0: void), `kind[1..]` the
/// parameters, typedefs and qualifiers skipped (c-shim `rkf_multi_shape()`).  Every
/// argument and the return value must fit one register: at most six integer, enum or
/// pointer arguments, no varargs, no struct, union or floating point.
pub fn check_shape(
    nr_params: u32,
    varargs: bool,
    kind: &[u32; 8],
    size: &[u32; 8],
) -> Result<u32, Refusal> {
    if nr_params > MAX_ARGS {
        return Err(Refusal::TooManyArgs);
    }
    if varargs {
        return Err(Refusal::NotInRegisters);
    }
    if kind[0] != 0 && !in_register(kind[0], size[0]) {
        return Err(Refusal::NotInRegisters);
    }
    for i in 1..=nr_params as usize {
        if !in_register(kind[i], size[i]) {
            return Err(Refusal::NotInRegisters);
        }
    }
    Ok(nr_params)
}

/// Checks the size of an attach request.
pub fn check_count(n: u32) -> Result<(), i32> {
    match n {
        0 => Err(EINVAL),
        n if n > MAX_FUNCS => Err(E2BIG),
        _ => Ok(()),
    }
}

/// The index of the first element equal to its predecessor in `sorted`, if any.
pub fn first_duplicate<T: PartialEq>(sorted: &[T]) -> Option<usize> {
    sorted.windows(2).position(|w| w[0] == w[1]).map(|i| i + 1)
}

/// Shell-style glob matching of `name` against `pat`: `*` (any run), `?` (one byte),
/// `[abc]`, `[a-z]` and `[!a-z]` (one byte of, or not of, a set), `\x` (a literal x).
///
/// Linear in practice: on a mismatch only the last `*` is retried.
pub fn glob_match(pat: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    // Where to resume after the last `*`: the pattern after it, and the name position.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pat.len() {
            match pat[p] {
                b'*' => {
                    star = Some((p + 1, n));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    n += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(&pat[p..], name[n]) {
                        if matched {
                            p += next;
                            n += 1;
                            continue;
                        }
                    } else if name[n] == b'[' {
                        // An unterminated class is a literal `[`.
                        p += 1;
                        n += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pat.len() => {
                    if pat[p + 1] == name[n] {
                        p += 2;
                        n += 1;
                        continue;
                    }
                }
                c => {
                    if c == name[n] {
                        p += 1;
                        n += 1;
                        continue;
                    }
                }
            }
        }
        // Mismatch: let the last `*` swallow one more byte, or fail.
        match star {
            Some((sp, sn)) => {
                star = Some((sp, sn + 1));
                p = sp;
                n = sn + 1;
            }
            None => return false,
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class at the start of `pat` (which starts with `[`).
/// Returns whether it matched and the length of the class, or `None` if the class is not
/// terminated.
fn class(pat: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(pat.get(i), Some(b'!' | b'^'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let &lo = pat.get(i)?;
        if lo == b']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if pat.get(i + 1) == Some(&b'-') && pat.get(i + 2).is_some_and(|&h| h != b']') {
            let hi = pat[i + 2];
            matched |= lo <= c && c <= hi;
            i += 3;
        } else {
            matched |= lo == c;
            i += 1;
        }
    }
}

/// Whether a glob has any special character (otherwise it names one function).
pub fn is_glob(pat: &[u8]) -> bool {
    pat.iter().any(|c| matches!(c, b'*' | b'?' | b'[' | b'\\'))
}

/// One program attached to one function through one link, as the table builder sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The function (its ftrace site).
    pub site: u64,
    /// fexit rather than fentry.
    pub fexit: bool,
    /// The link's attach order: older links run first.
    pub seq: u64,
    /// The caller's reference to the attachment.
    pub idx: u32,
}

/// Orders slots the way the trampoline runs them: by function, fentry programs before
/// fexit ones, each in attach order.
pub fn order_slots(slots: &mut [Slot]) {
    sort_by_key(slots, |s| (s.site, s.fexit, s.seq, s.idx));
}

/// Heapsort by `key`: in place, O(n log n), no allocation.
///
/// Not `slice::sort_unstable_by_key()`: its ord-violation panic path is a function
/// objtool does not know to be noreturn, and it warns about every instantiation in a
/// module.
pub fn sort_by_key<T, K: Ord>(v: &mut [T], key: impl Fn(&T) -> K) {
    let n = v.len();
    for start in (0..n / 2).rev() {
        sift_down(v, start, n, &key);
    }
    for end in (1..n).rev() {
        v.swap(0, end);
        sift_down(v, 0, end, &key);
    }
}

fn sift_down<T, K: Ord>(v: &mut [T], mut root: usize, end: usize, key: &impl Fn(&T) -> K) {
    loop {
        let mut child = 2 * root + 1;
        if child >= end {
            return;
        }
        if child + 1 < end && key(&v[child]) < key(&v[child + 1]) {
            child += 1;
        }
        if key(&v[root]) >= key(&v[child]) {
            return;
        }
        v.swap(root, child);
        root = child;
    }
}

/// One function of an ordered slot array: `slots[start..end]`, fentry programs first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    /// The function.
    pub site: u64,
    /// Its first slot.
    pub start: usize,
    /// One past its last slot.
    pub end: usize,
    /// How many of its slots are fentry programs (they come first).
    pub fentry: usize,
}

/// The functions of slots ordered by [`order_slots()`], in site order.
pub fn groups(slots: &[Slot]) -> Groups<'_> {
    Groups { slots, at: 0 }
}

/// Iterator of [`groups()`].
pub struct Groups<'a> {
    slots: &'a [Slot],
    at: usize,
}

impl Iterator for Groups<'_> {
    type Item = Group;

    fn next(&mut self) -> Option<Group> {
        let first = self.slots.get(self.at)?;
        let start = self.at;
        let len = self.slots[start..]
            .iter()
            .position(|s| s.site != first.site)
            .unwrap_or(self.slots.len() - start);
        let end = start + len;
        let fentry = self.slots[start..end].iter().filter(|s| !s.fexit).count();
        self.at = end;
        Some(Group {
            site: first.site,
            start,
            end,
            fentry,
        })
    }
}

/// What an operation does to one traced function in ftrace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    /// Its first program came: hook the site to its trampoline.
    Hook,
    /// Its programs changed, and with them its trampoline: move the site to the new one.
    Move,
    /// Its last program went: unhook the site from its trampoline.
    Unhook,
}

/// One traced function's route: its ftrace site and the trampoline the site calls (0 for
/// the shared one).  An operation turns the routes before it into the routes after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The ftrace site.
    pub site: u64,
    /// The trampoline, or 0 for the shared one.
    pub tramp: u64,
}

/// Calls `update` for every function whose route differs between `old` and `new` (both
/// sorted by site, one route per site), with the site and the trampoline to hook or move
/// to, or to unhook from.  Returns whether a generated trampoline (non-zero) of `old`
/// stops being called: then it must outlive every task that may still run it.
pub fn plan_updates(
    old: impl Iterator<Item = Route>,
    new: impl Iterator<Item = Route>,
    mut update: impl FnMut(Update, Route),
) -> bool {
    let (mut old, mut new) = (old.peekable(), new.peekable());
    let mut retired = false;
    loop {
        match (old.peek().copied(), new.peek().copied()) {
            (None, None) => return retired,
            (Some(o), n) if n.is_none_or(|n| o.site < n.site) => {
                update(Update::Unhook, o);
                retired |= o.tramp != 0;
                old.next();
            }
            (o, Some(n)) if o.is_none_or(|o| n.site < o.site) => {
                update(Update::Hook, n);
                new.next();
            }
            (Some(o), Some(n)) => {
                if o.tramp != n.tramp {
                    update(Update::Move, n);
                    retired |= o.tramp != 0;
                }
                old.next();
                new.next();
            }
            _ => unreachable!(),
        }
    }
}

/// `GOLDEN_RATIO_64` of include/linux/hash.h.
pub const GOLDEN_RATIO_64: u64 = 0x61C8_8646_80B5_83EB;

/// The home bucket of `key` in an index of `1 << bits` buckets: `hash_64(key, bits)` of
/// include/linux/hash.h, which the trampoline computes in C (c-shim rkf_multi_lookup()).
pub fn bucket(key: u64, bits: u32) -> usize {
    (key.wrapping_mul(GOLDEN_RATIO_64) >> (64 - bits)) as usize
}

/// The bits of the index for `n` functions: at least twice as many buckets as functions
/// (so that a lookup probes about 1.5 buckets), and at least 2.
pub fn index_bits(n: usize) -> u32 {
    let mut bits = 1;
    while (1usize << bits) < 2 * n {
        bits += 1;
    }
    bits
}

/// Builds the open-addressing index of `keys` (distinct): `index` has `1 << bits`
/// buckets, zeroed by the caller; a bucket holds the position of a key plus one, or 0.
/// Linear probing from [`bucket()`].  `keys.len()` must be below the bucket count.
pub fn build_index(keys: impl Iterator<Item = u64>, index: &mut [u32], bits: u32) {
    let mask = (1usize << bits) - 1;
    for (pos, key) in keys.enumerate() {
        let mut b = bucket(key, bits);
        while index[b] != 0 {
            b = (b + 1) & mask;
        }
        index[b] = pos as u32 + 1;
    }
}

/// Finds `key` through an index of [`build_index()`], as the trampoline does in C
/// (rkf_multi_lookup()): the position of the key, or `None`.
pub fn lookup(index: &[u32], bits: u32, keys: &[u64], key: u64) -> Option<usize> {
    let mask = (1usize << bits) - 1;
    let mut b = bucket(key, bits);
    // At most every bucket once, even if the index had no empty one.
    for _ in 0..=mask {
        let pos = (*index.get(b)? as usize).checked_sub(1)?;
        if keys[pos] == key {
            return Some(pos);
        }
        b = (b + 1) & mask;
    }
    None
}

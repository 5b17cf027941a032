// SPDX-License-Identifier: GPL-2.0

//! Time-bounded fuzzing of the rules that judge what user space and BPF programs pass in:
//! glob patterns, function shapes and request sizes (rkf_multi), stack flags, sizes and
//! sampled callchains (rkf_stack), per-cpu addresses and cpus (rkf_percpu).
//!
//! Each target draws inputs from a fresh seed until its time is up: `RKF_FUZZ_SECS`
//! seconds (default 1, for `cargo test`; `make host-fuzz` gives each 20).  Inputs are
//! random bytes, and random values biased toward the boundaries (0, limits, limits ± 1,
//! all bits set).  Every target has an oracle: a reference implementation or a property
//! of the result, not only "does not panic".  A failure prints its seed; `RKF_FUZZ_SEED=N`
//! replays it.

use std::{
    collections::BTreeSet,
    fmt::Debug,
    time::{Duration, Instant, SystemTime},
};

use proptest::{
    prelude::*,
    test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner},
};
use rkf_core::{multi, percpu, stack, stack::AddressSpace};

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number")),
    )
}

/// Runs `test` on values of `strategy` for the time budget, batch by batch, each batch
/// from its own seed.
fn fuzz<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: Debug,
{
    let budget = Duration::from_secs(env_u64("RKF_FUZZ_SECS").unwrap_or(1));
    let replay = env_u64("RKF_FUZZ_SEED");
    let start = Instant::now();
    let mut seed = replay.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let (mut batches, mut cases) = (0u64, 0u64);
    loop {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        let config = Config {
            cases: 512,
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
        if let Err(e) = runner.run(&strategy, &test) {
            panic!("{name}: {e}\nreplay with RKF_FUZZ_SEED={seed} RKF_FUZZ_SECS=0");
        }
        batches += 1;
        cases += 512;
        if replay.is_some() || start.elapsed() >= budget {
            break;
        }
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
    }
    eprintln!(
        "fuzz {name}: {cases} inputs in {batches} batches, {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

/// Integers that hit the edges more often than uniform ones would.
fn edgy_u32(limits: &'static [u32]) -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        prop::sample::select(limits).prop_flat_map(|l| {
            prop::sample::select(vec![
                l,
                l.wrapping_sub(1),
                l.wrapping_add(1),
                l.wrapping_mul(2),
            ])
        }),
        0u32..64,
        Just(u32::MAX),
    ]
}

fn edgy_u64(limits: &'static [u64]) -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        prop::sample::select(limits),
        // Known bits, occasionally one more.
        (0u64..0x1000, 0u32..64).prop_map(|(v, b)| v | (1 << b)),
        0u64..0x1000,
        Just(u64::MAX),
    ]
}

// ---- glob_match ----------------------------------------------------------------------

/// The class at the start of `pat` (which starts with `[`): the bytes it matches and its
/// length, or None if it is not terminated.  Written from the documented syntax, apart
/// from multi::glob_match().
fn ref_class(pat: &[u8]) -> Option<([bool; 256], usize)> {
    let mut set = [false; 256];
    let mut i = 1;
    let negate = matches!(pat.get(i), Some(b'!' | b'^'));
    if negate {
        i += 1;
    }
    let body = i;
    loop {
        let lo = *pat.get(i)?;
        if lo == b']' && i > body {
            if negate {
                set.iter_mut().for_each(|b| *b = !*b);
            }
            return Some((set, i + 1));
        }
        match (pat.get(i + 1), pat.get(i + 2)) {
            (Some(b'-'), Some(&hi)) if hi != b']' => {
                (lo..=hi).for_each(|c| set[c as usize] = true);
                i += 3;
            }
            _ => {
                set[lo as usize] = true;
                i += 1;
            }
        }
    }
}

/// Backtracking reference matcher: exponential, but the inputs are short.
fn ref_glob(pat: &[u8], name: &[u8]) -> bool {
    let Some(&p) = pat.first() else {
        return name.is_empty();
    };
    if p == b'*' {
        return ref_glob(&pat[1..], name) || (!name.is_empty() && ref_glob(pat, &name[1..]));
    }
    let Some(&c) = name.first() else {
        return false;
    };
    let (ok, len) = match p {
        b'?' => (true, 1),
        b'[' => match ref_class(pat) {
            Some((set, len)) => (set[c as usize], len),
            None => (c == b'[', 1),
        },
        b'\\' if pat.len() > 1 => (pat[1] == c, 2),
        _ => (p == c, 1),
    };
    ok && ref_glob(&pat[len..], &name[1..])
}

/// Patterns from the glob alphabet, and names that often come close to matching them: the
/// pattern with its special characters replaced by plausible bytes, then mutated.
fn glob_case() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let alphabet = prop::sample::select(b"ab-_*?[]!^\\z".to_vec());
    let pat = prop_oneof![
        prop::collection::vec(alphabet, 0..14),
        prop::collection::vec(any::<u8>(), 0..14),
    ];
    pat.prop_flat_map(|pat| {
        let from_pat: Vec<u8> = pat
            .iter()
            .filter(|&&c| c != b'*' && c != b'\\')
            .map(|&c| if c == b'?' { b'a' } else { c })
            .collect();
        let name = prop_oneof![
            Just(from_pat.clone()),
            (Just(from_pat), 0usize..16, any::<u8>()).prop_map(|(mut n, at, c)| {
                if !n.is_empty() {
                    let at = at % n.len();
                    n[at] = c;
                }
                n
            }),
            prop::collection::vec(prop::sample::select(b"ab-_[]z".to_vec()), 0..16),
        ];
        (Just(pat), name)
    })
}

#[test]
fn fuzz_glob_match() {
    fuzz("glob_match", glob_case(), |(pat, name)| {
        prop_assert_eq!(
            multi::glob_match(&pat, &name),
            ref_glob(&pat, &name),
            "pattern {:?}, name {:?}",
            String::from_utf8_lossy(&pat),
            String::from_utf8_lossy(&name)
        );
        if !multi::is_glob(&pat) {
            prop_assert_eq!(multi::glob_match(&pat, &name), pat == name);
        }
        Ok(())
    });
}

// ---- check_shape, check_count ---------------------------------------------------------

#[test]
fn fuzz_shape_and_count() {
    let kinds = prop::array::uniform13(prop_oneof![0u32..20, any::<u32>()]);
    let sizes = prop::array::uniform13(edgy_u32(&[0, 1, 2, 4, 8, 16]));
    let max = edgy_u32(&[multi::TMPL6_ARGS, multi::MAX_ARGS]);
    let shape = (
        max,
        edgy_u32(&[multi::TMPL6_ARGS, multi::MAX_ARGS, 7, 13]),
        any::<bool>(),
        kinds,
        sizes,
    );
    let count = edgy_u32(&[multi::MAX_FUNCS]);
    fuzz(
        "check_shape/check_count",
        (shape, count),
        |((max, nr, varargs, kind, size), n)| {
            use multi::btf_kind::*;
            let reg = |k: u32, s: u32| k == PTR || (matches!(k, INT | ENUM | ENUM64) && s <= 8);
            let got = multi::check_shape(max, nr, varargs, &kind, &size);
            let want = if nr > max || nr > multi::MAX_ARGS {
                Err(multi::Reason::TooManyArgs)
            } else if varargs
                || (kind[0] != 0 && !reg(kind[0], size[0]))
                || (1..=nr as usize).any(|i| !reg(kind[i], size[i]))
            {
                Err(multi::Reason::NotInRegisters)
            } else {
                Ok(nr)
            };
            prop_assert_eq!(got, want);
            let want = match n {
                0 => Err(multi::EINVAL),
                n if n > multi::MAX_FUNCS => Err(multi::E2BIG),
                _ => Ok(()),
            };
            prop_assert_eq!(multi::check_count(n), want);
            Ok(())
        },
    );
}

// ---- table order, ftrace updates, lookup, heapsort ---------------------------------------

#[test]
fn fuzz_links() {
    let link = (prop::collection::vec(0u64..48, 0..24), 0u32..3);
    let case = (
        prop::collection::vec(link, 0..10),
        prop::collection::vec(0u64..48, 0..24),
        any::<u64>(),
    );
    fuzz(
        "order_slots/plan_updates/lookup",
        case,
        |(links, op, probe)| {
            // Slots of every link, shuffled by the order the links are given in.
            let mut slots = Vec::new();
            for (seq, (sites, kind)) in links.iter().enumerate() {
                let set: BTreeSet<u64> = sites.iter().copied().collect();
                let kind = rkf_core::abi::Kind::from_raw(*kind).unwrap();
                for (i, &site) in set.iter().enumerate() {
                    slots.push(multi::Slot {
                        site,
                        kind,
                        seq: (links.len() - seq) as u64,
                        idx: i as u32,
                    });
                }
            }
            let mut ordered = slots.clone();
            multi::order_slots(&mut ordered);
            let mut want = slots.clone();
            want.sort_by_key(|s| (s.site, multi::phase(s.kind), s.seq, s.idx));
            prop_assert_eq!(&ordered, &want);
            // Groups: one per site, in order, covering the slots, fentry programs first.
            let mut at = 0;
            for g in multi::groups(&ordered) {
                prop_assert_eq!(g.start, at);
                prop_assert!(g.end > g.start);
                let group = &ordered[g.start..g.end];
                prop_assert!(group.iter().all(|s| s.site == g.site));
                prop_assert!(ordered.get(g.end).is_none_or(|s| s.site > g.site));
                let kinds: Vec<u8> = group.iter().map(|s| multi::phase(s.kind)).collect();
                prop_assert!(kinds.windows(2).all(|w| w[0] <= w[1]));
                prop_assert_eq!(g.fentry, kinds.iter().filter(|&&k| k == 0).count());
                prop_assert_eq!(g.session, kinds.iter().filter(|&&k| k == 1).count());
                at = g.end;
            }
            prop_assert_eq!(at, ordered.len());
            // The ftrace updates of attaching `op` (fentry only, so every site of it
            // gets a generated trampoline, numbered by site): its sites that no link holds
            // yet are hooked, the others move off the shared trampoline.
            let held: BTreeSet<u64> = slots.iter().map(|s| s.site).collect();
            let mut op_sites: Vec<u64> = op
                .iter()
                .copied()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let before = held.iter().map(|&site| multi::Route { site, tramp: 0 });
            let after: BTreeSet<u64> = held
                .union(&op_sites.iter().copied().collect())
                .copied()
                .collect();
            let after = after.iter().map(|&site| multi::Route {
                site,
                tramp: if op_sites.contains(&site) {
                    site + 1
                } else {
                    0
                },
            });
            let mut hooked = Vec::new();
            let mut moved = Vec::new();
            let retired = multi::plan_updates(before, after, |u, r| match u {
                multi::Update::Hook => hooked.push(r.site),
                multi::Update::Move => moved.push(r.site),
                multi::Update::Unhook => unreachable!("attach unhooks nothing"),
            });
            prop_assert!(!retired);
            let want: Vec<u64> = op_sites
                .iter()
                .copied()
                .filter(|s| !held.contains(s))
                .collect();
            prop_assert_eq!(hooked, want);
            let want: Vec<u64> = op_sites
                .iter()
                .copied()
                .filter(|s| held.contains(s))
                .collect();
            prop_assert_eq!(moved, want);
            // The lookup finds every key, and nothing else (a linear search agrees), with
            // keys shaped like kernel text addresses (return addresses past ftrace sites,
            // 16-byte aligned functions) as well as small ones, whether the index holds
            // every key, every other one (the rest found by the binary search, as the
            // functions with generated trampolines are) or none.
            op_sites.push(probe);
            if probe % 2 == 0 {
                for s in op_sites.iter_mut() {
                    *s = 0xffff_ffff_8100_0000 + (*s % 0x10_0000) * 16 + 9;
                }
            }
            op_sites.sort_unstable();
            op_sites.dedup();
            let indexed = |i: usize| match probe % 3 {
                0 => true,
                1 => i.is_multiple_of(2),
                _ => false,
            };
            let nr_indexed = (0..op_sites.len()).filter(|&i| indexed(i)).count();
            let bits = multi::index_bits(nr_indexed);
            prop_assert!(1usize << bits >= 2 * nr_indexed);
            let mut index = vec![0; 1 << bits];
            multi::build_index(
                op_sites
                    .iter()
                    .enumerate()
                    .map(|(i, &s)| indexed(i).then_some(s)),
                &mut index,
                bits,
            );
            prop_assert_eq!(index.iter().filter(|&&b| b != 0).count(), nr_indexed);
            for key in op_sites.iter().copied().chain([
                probe.wrapping_add(1),
                probe.wrapping_sub(1),
                0,
                u64::MAX,
            ]) {
                prop_assert_eq!(
                    multi::lookup(&index, bits, &op_sites, key),
                    op_sites.iter().position(|&s| s == key)
                );
            }
            Ok(())
        },
    );
}

// ---- stack: plan, plan_sampled, finalize, build ids -----------------------------------

const FLAG_LIMITS: &[u64] = &[
    0,
    stack::F_SKIP_FIELD_MASK,
    stack::F_USER_STACK,
    stack::F_USER_BUILD_ID,
    stack::F_USER_STACK | stack::F_USER_BUILD_ID,
    stack::F_USER_STACK | stack::F_USER_BUILD_ID | stack::F_SKIP_FIELD_MASK,
    1 << 9,
    1 << 10,
    1 << 63,
];

#[test]
fn fuzz_stack_plan() {
    let case = (
        edgy_u64(FLAG_LIMITS),
        edgy_u32(&[0, 8, 32, 64, 1016, 1 << 20, 1 << 31]),
        edgy_u32(&[127, 1, 0]),
    );
    fuzz("stack::plan", case, |(flags, size, sysctl)| {
        let known = stack::F_SKIP_FIELD_MASK | stack::F_USER_STACK | stack::F_USER_BUILD_ID;
        let user = flags & stack::F_USER_STACK != 0;
        let build_id = flags & stack::F_USER_BUILD_ID != 0;
        let elem = if build_id { 32 } else { 8 };
        let valid = flags & !known == 0 && (user || !build_id) && size % elem == 0;
        match stack::plan(flags, size, sysctl) {
            Err(e) => {
                prop_assert!(!valid, "refused a valid request");
                prop_assert_eq!(e, stack::EINVAL);
            }
            Ok(r) => {
                prop_assert!(valid, "accepted an invalid request: {:?}", r);
                prop_assert_eq!(r.elem_size, elem);
                prop_assert_eq!((r.user, r.build_id), (user, build_id));
                prop_assert_eq!(r.skip as u64, flags & stack::F_SKIP_FIELD_MASK);
                let depth = (size / elem) as u64 + r.skip as u64;
                prop_assert_eq!(r.max_depth as u64, depth.min(sysctl as u64));
            }
        }
        Ok(())
    });
}

#[test]
fn fuzz_stack_sampled() {
    let ips = prop::option::weighted(
        0.95,
        prop::collection::vec(
            prop_oneof![
                4 => any::<u64>(),
                1 => Just(stack::PERF_CONTEXT_USER),
            ],
            0..300,
        ),
    );
    let case = (
        ips,
        edgy_u64(FLAG_LIMITS),
        edgy_u32(&[0, 8, 32, 64, 2048]),
        edgy_u32(&[127, 0]),
    );
    fuzz("stack::plan_sampled", case, |(ips, flags, size, sysctl)| {
        match stack::plan_sampled(ips.as_deref(), flags, size, sysctl) {
            Err(e) => prop_assert!(e == stack::EINVAL || e == stack::EFAULT),
            Ok(s) => {
                let ips = ips.as_deref().unwrap_or_default();
                let end = s.start.checked_add(s.n as usize);
                prop_assert!(
                    end.is_some_and(|e| e <= ips.len()),
                    "{:?} past {} ips",
                    s,
                    ips.len()
                );
                // Never more entries than the buffer holds.
                prop_assert!(s.n as u64 * s.elem_size as u64 <= size as u64);
                // A kernel stack never reaches into the user part.
                if flags & stack::F_USER_STACK == 0 {
                    let end = s.start + s.n as usize;
                    prop_assert!(!ips[..end].contains(&stack::PERF_CONTEXT_USER));
                }
            }
        }
        Ok(())
    });
}

/// A model vma: start, end, pgoff, anonymous, and its build id (None: unparsable).
type Mapping = (u64, u64, u64, bool, Option<[u8; stack::BUILD_ID_SIZE]>);

/// A model address space.
struct Space(Vec<Mapping>);

impl stack::AddressSpace for Space {
    fn find_vma(&mut self, ip: u64) -> Option<stack::Vma> {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, v)| v.1 > ip)
            .min_by_key(|(_, v)| v.1)
            .map(|(handle, v)| stack::Vma {
                start: v.0,
                end: v.1,
                pgoff: v.2,
                anonymous: v.3,
                handle,
            })
    }

    fn build_id(&mut self, vma: &stack::Vma, out: &mut [u8; stack::BUILD_ID_SIZE]) -> bool {
        self.0[vma.handle].4.is_some_and(|id| {
            *out = id;
            true
        })
    }
}

#[test]
fn fuzz_stack_buffers() {
    // Vmas do not overlap: each starts a gap after the previous one ends.
    let vma = (
        0u64..8,
        1u64..16,
        0u64..4,
        any::<bool>(),
        prop::option::of(any::<[u8; 20]>()),
    );
    let vmas = prop::collection::vec(vma, 0..6).prop_map(|v| {
        let mut at = 0;
        v.into_iter()
            .map(|(gap, len, pgoff, anon, id)| {
                let start = at + gap * 0x1000;
                at = start + len * 0x1000;
                (start, at, pgoff, anon, id)
            })
            .collect::<Vec<_>>()
    });
    let case = (
        vmas,
        prop::collection::vec(0u64..0x80000, 0..12),
        0usize..400,
        0usize..20,
        edgy_u32(&[0, 8, 32]),
    );
    fuzz(
        "stack finalize/build ids",
        case,
        |(vmas, ips, len, n, elem)| {
            // A buffer of `len` bytes that holds `ips` as build-id entries, where they fit.
            let mut buf = vec![0x5au8; len];
            for (i, &ip) in ips.iter().enumerate() {
                if (i + 1) * 32 <= len {
                    stack::set_entry_ip(&mut buf, i, ip);
                }
            }
            let before = buf.clone();
            let mut space = Space(vmas.clone());
            stack::resolve_build_ids(&mut space, &mut buf, n, 12);
            let done = n.min(len / 32);
            prop_assert_eq!(
                &buf[done * 32..],
                &before[done * 32..],
                "wrote past entry {}",
                done
            );
            for i in 0..done {
                let ip = stack::entry_ip(&before, i);
                let e = &buf[i * 32..(i + 1) * 32];
                let status = i32::from_ne_bytes(e[..4].try_into().unwrap());
                // As stack_map_get_build_id_offset(): the vma find_vma() gives, even when
                // it starts above the ip.
                let hit = space.find_vma(ip).filter(|v| !v.anonymous);
                match hit.and_then(|v| vmas[v.handle].4.map(|id| (v, id))) {
                    Some((v, id)) => {
                        prop_assert_eq!(status, stack::STATUS_VALID);
                        prop_assert_eq!(&e[4..24], &id[..]);
                        let off = (v.pgoff << 12).wrapping_add(ip).wrapping_sub(v.start);
                        prop_assert_eq!(stack::entry_ip(&buf, i), off);
                    }
                    None => {
                        prop_assert_eq!(status, stack::STATUS_IP);
                        prop_assert!(e[4..24].iter().all(|&b| b == 0));
                        prop_assert_eq!(stack::entry_ip(&buf, i), ip);
                    }
                }
            }
            // finalize(): the entries written are kept, the rest zeroed, the count returned.
            let mut fin = before.clone();
            let written = stack::finalize(&mut fin, n as u32, elem);
            let keep = (n * elem as usize).min(len);
            prop_assert_eq!(written, keep as i64);
            prop_assert_eq!(&fin[..keep], &before[..keep]);
            prop_assert!(fin[keep..].iter().all(|&b| b == 0));
            Ok(())
        },
    );
}

// ---- percpu::resolve ---------------------------------------------------------------

struct Cpus {
    nr: u32,
    possible: u64,
    offsets: Vec<usize>,
}

impl percpu::CpuLayout for Cpus {
    fn nr_cpu_ids(&self) -> u32 {
        self.nr
    }
    fn is_possible(&self, cpu: u32) -> bool {
        assert!(
            cpu < self.nr,
            "is_possible({cpu}) with nr_cpu_ids {}",
            self.nr
        );
        self.possible & (1 << cpu) != 0
    }
    fn offset(&self, cpu: u32) -> usize {
        assert!(self.is_possible(cpu), "offset() of impossible cpu {cpu}");
        self.offsets[cpu as usize]
    }
}

#[test]
fn fuzz_percpu_resolve() {
    let case = (
        0u32..=64,
        any::<u64>(),
        prop::collection::vec(any::<usize>(), 64),
        prop_oneof![Just(0usize), any::<usize>()],
        edgy_u32(&[0, 1, 63, 64]),
    );
    fuzz(
        "percpu::resolve",
        case,
        |(nr, possible, offsets, addr, cpu)| {
            let cpus = Cpus {
                nr,
                possible,
                offsets,
            };
            let want = (addr != 0 && cpu < nr && possible & (1 << cpu) != 0)
                .then(|| addr.wrapping_add(cpus.offsets[cpu as usize]));
            prop_assert_eq!(percpu::resolve(&cpus, addr, cpu), want);
            Ok(())
        },
    );
}

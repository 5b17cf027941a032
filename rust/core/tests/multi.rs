// SPDX-License-Identifier: GPL-2.0

//! Host tests of rkf_multi's rules: glob matching against a reference matcher, the table
//! order of overlapping links, and the ftrace updates of link operations.

use std::collections::BTreeSet;

use proptest::prelude::*;
use rkf_core::abi::Kind;
use rkf_core::multi::*;

/// A plain recursive matcher over `*`, `?` and literals, the reference for glob_match().
fn reference(pat: &[u8], name: &[u8]) -> bool {
    match (pat.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            reference(&pat[1..], name) || (!name.is_empty() && reference(pat, &name[1..]))
        }
        (Some(b'?'), Some(_)) => reference(&pat[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => reference(&pat[1..], &name[1..]),
        _ => false,
    }
}

#[test]
fn globs() {
    let yes: &[(&str, &str)] = &[
        ("vfs_*", "vfs_read"),
        ("vfs_*", "vfs_"),
        ("*", ""),
        ("*read*", "ksys_read"),
        ("tcp_v?_rcv", "tcp_v4_rcv"),
        ("bpf_fentry_test[1-3]", "bpf_fentry_test2"),
        ("bpf_fentry_test[!1-3]", "bpf_fentry_test7"),
        ("x[ab]y", "xby"),
        ("a\\*b", "a*b"),
        ("[]]", "]"),
        ("*a*b*c", "xxaxxbxxc"),
        ("[", "["),
    ];
    let no: &[(&str, &str)] = &[
        ("vfs_*", "vfsread"),
        ("bpf_fentry_test[1-3]", "bpf_fentry_test4"),
        ("bpf_fentry_test[!1-3]", "bpf_fentry_test1"),
        ("a\\*b", "axb"),
        ("?", ""),
        ("*a*b*c", "xxaxxbxx"),
        ("exact", "exactly"),
    ];
    for (p, n) in yes {
        assert!(
            glob_match(p.as_bytes(), n.as_bytes()),
            "{p} should match {n}"
        );
    }
    for (p, n) in no {
        assert!(
            !glob_match(p.as_bytes(), n.as_bytes()),
            "{p} should not match {n}"
        );
    }
    assert!(is_glob(b"vfs_*") && is_glob(b"a?") && !is_glob(b"vfs_read"));
}

#[test]
fn counts_and_duplicates() {
    assert_eq!(check_count(0), Err(EINVAL));
    assert_eq!(check_count(1), Ok(()));
    assert_eq!(check_count(MAX_FUNCS), Ok(()));
    assert_eq!(check_count(MAX_FUNCS + 1), Err(E2BIG));
    assert_eq!(first_duplicate(&[1, 2, 3], |&x| x), None);
    assert_eq!(first_duplicate(&[1, 2, 2, 3, 3], |&x| x), Some(2));
    assert_eq!(first_duplicate::<u32, u32>(&[], |&x| x), None);
    assert_eq!(first_duplicate(&[(1, 'a'), (1, 'b')], |&(k, _)| k), Some(1));
    assert_eq!(first_duplicate(&[(1, 'a'), (2, 'a')], |&(k, _)| k), None);
}

#[test]
fn refusals_round_trip() {
    for v in 1..=14 {
        let r = Reason::from_raw(v).unwrap();
        assert_eq!(r as u32, v);
        assert!(!r.describe().is_empty());
        assert!([EINVAL, E2BIG, ENOENT, EBUSY, EBADF].contains(&r.errno()));
    }
    assert_eq!(Reason::from_raw(0), None);
    assert_eq!(Reason::from_raw(15), None);
    assert_eq!(Reason::TooManySessions.errno(), E2BIG);
    assert_eq!(Reason::Busy.errno(), EBUSY);
    assert_eq!(Reason::MayNotSleep.errno(), EINVAL);
    assert_eq!(Reason::NotTraceable.errno(), ENOENT);
    assert!(denied(b"migrate_disable") && !denied(b"vfs_read"));
}

#[test]
fn sleepable_targets() {
    use ErrorInjection::*;
    for (v, ei) in [(0, Unconfigured), (1, Listed), (2, NotListed), (3, Unknown)] {
        assert_eq!(ErrorInjection::from_raw(v), ei);
        assert_eq!(ei as u32, v);
    }
    assert_eq!(ErrorInjection::from_raw(4), NotListed);
    // Without error injection: the verifier's has_arch_syscall_prefix(), any "__x64_".
    for name in ["__x64_sys_getpgid", "__x64_sys_write", "__x64_compat_sys_x"] {
        assert!(may_sleep(name.as_bytes(), Unconfigured), "{name}");
    }
    for name in [
        "vfs_write",
        "__ia32_sys_write",
        "__x64",
        "x64_sys_write",
        "",
    ] {
        assert!(!may_sleep(name.as_bytes(), Unconfigured), "{name}");
    }
    // With it: a module's list decides, whatever the name; of vmlinux, the syscalls.
    assert!(may_sleep(b"anything", Listed) && !may_sleep(b"__x64_sys_write", NotListed));
    assert!(may_sleep(b"__x64_sys_write", Unknown));
    assert!(!may_sleep(b"__x64_compat_sys_x", Unknown) && !may_sleep(b"vfs_write", Unknown));
}

#[test]
fn shapes() {
    use btf_kind::*;
    let k = |ret: u32, params: &[u32]| {
        let mut kind = [0; SHAPE_SLOTS];
        kind[0] = ret;
        kind[1..=params.len()].copy_from_slice(params);
        kind
    };
    let sizes = [8; SHAPE_SLOTS];
    for max in [TMPL6_ARGS, MAX_ARGS] {
        // int f(void *, long, enum e)
        assert_eq!(
            check_shape(max, 3, false, &k(INT, &[PTR, INT, ENUM]), &sizes),
            Ok(3)
        );
        // void f(void)
        assert_eq!(check_shape(max, 0, false, &k(0, &[]), &sizes), Ok(0));
        // six pointers: the registers
        assert_eq!(
            check_shape(max, 6, false, &k(PTR, &[PTR; 6]), &sizes),
            Ok(6)
        );
        // a struct by value, a float, a struct return, __int128, varargs
        assert_eq!(
            check_shape(max, 1, false, &k(INT, &[4]), &sizes),
            Err(Reason::NotInRegisters)
        );
        assert_eq!(
            check_shape(max, 1, false, &k(INT, &[16]), &sizes),
            Err(Reason::NotInRegisters)
        );
        assert_eq!(
            check_shape(max, 1, false, &k(4, &[PTR]), &sizes),
            Err(Reason::NotInRegisters)
        );
        let mut wide = sizes;
        wide[1] = 16;
        assert_eq!(
            check_shape(max, 1, false, &k(INT, &[INT]), &wide),
            Err(Reason::NotInRegisters)
        );
        assert_eq!(
            check_shape(max, 2, true, &k(INT, &[PTR, 0]), &sizes),
            Err(Reason::NotInRegisters)
        );
    }
    // Seven: only for rkf_multi_tmpl12's programs, which read the stack arguments too.
    assert_eq!(
        check_shape(TMPL6_ARGS, 7, false, &k(PTR, &[PTR; 7]), &sizes),
        Err(Reason::TooManyArgs)
    );
    assert_eq!(
        check_shape(MAX_ARGS, 7, false, &k(PTR, &[PTR; 7]), &sizes),
        Ok(7)
    );
    // Twelve, the most (MAX_BPF_FUNC_ARGS); a struct among them is still refused.
    assert_eq!(
        check_shape(MAX_ARGS, 12, false, &k(INT, &[INT; 12]), &sizes),
        Ok(12)
    );
    let mut params = [PTR; 12];
    params[11] = 4;
    assert_eq!(
        check_shape(MAX_ARGS, 12, false, &k(INT, &params), &sizes),
        Err(Reason::NotInRegisters)
    );
    assert_eq!(
        check_shape(MAX_ARGS, 13, false, &k(INT, &[INT; 12]), &sizes),
        Err(Reason::TooManyArgs)
    );
    // A template wider than twelve is held to twelve.
    assert_eq!(
        check_shape(u32::MAX, 13, false, &k(INT, &[INT; 12]), &sizes),
        Err(Reason::TooManyArgs)
    );
}

proptest! {
    #[test]
    fn glob_agrees_with_reference(pat in "[ab*?]{0,8}", name in "[ab]{0,10}") {
        prop_assert_eq!(glob_match(pat.as_bytes(), name.as_bytes()), reference(pat.as_bytes(), name.as_bytes()));
    }

    #[test]
    fn literal_globs_match_only_themselves(a in "[a-z_0-9]{1,12}", b in "[a-z_0-9]{1,12}") {
        prop_assert_eq!(glob_match(a.as_bytes(), b.as_bytes()), a == b);
    }

    /// Links in attach order, each on a set of sites with fentry, session or fexit: the
    /// table has one group per site, fentry before session before fexit, each in attach
    /// order, and holds every slot once.
    #[test]
    fn table_order(links in prop::collection::vec((prop::collection::btree_set(0u64..20, 1..8), 0u32..3), 1..6)) {
        let mut slots = Vec::new();
        for (seq, (sites, kind)) in links.iter().enumerate() {
            let kind = Kind::from_raw(*kind).unwrap();
            for &site in sites {
                slots.push(Slot { site, kind, seq: seq as u64, idx: slots.len() as u32 });
            }
        }
        let all = slots.clone();
        order_slots(&mut slots);
        let gs: Vec<Group> = groups(&slots).collect();
        let sites: BTreeSet<u64> = all.iter().map(|s| s.site).collect();
        prop_assert_eq!(gs.len(), sites.len());
        prop_assert!(gs.windows(2).all(|w| w[0].site < w[1].site && w[0].end == w[1].start));
        prop_assert_eq!(gs.first().map(|g| g.start), Some(0));
        prop_assert_eq!(gs.last().map(|g| g.end), Some(slots.len()));
        for g in &gs {
            let run = &slots[g.start..g.end];
            prop_assert!(run.iter().all(|s| s.site == g.site));
            let (fentry, session) = run.split_at(g.fentry);
            let (session, fexit) = session.split_at(g.session);
            prop_assert!(fentry.iter().all(|s| s.kind == Kind::Fentry));
            prop_assert!(session.iter().all(|s| s.kind == Kind::Session));
            prop_assert!(fexit.iter().all(|s| s.kind == Kind::Fexit));
            for part in [fentry, session, fexit] {
                prop_assert!(part.windows(2).all(|w| w[0].seq < w[1].seq));
            }
            let keys: Vec<u64> = gs.iter().map(|g| 0xffff_ffff_8100_0000 + g.site * 16 + 9).collect();
            let bits = index_bits(keys.len());
            let mut index = vec![0; 1 << bits];
            build_index(keys.iter().copied().map(Some), &mut index, bits);
            let key = 0xffff_ffff_8100_0000 + g.site * 16 + 9;
            prop_assert_eq!(lookup(&index, bits, &keys, key).map(|i| keys[i]), Some(key));
        }
        let mut seen: Vec<u32> = slots.iter().map(|s| s.idx).collect();
        seen.sort_unstable();
        prop_assert_eq!(seen, (0..all.len() as u32).collect::<Vec<_>>());
    }

    /// Each item's first alike is the least index of its kind, as a quadratic search
    /// finds it; items with no key are their own; keys that collide (the kinds of `kinds`
    /// share `nr_keys` keys, down to one for all: long probe runs through other kinds)
    /// keep their kinds apart.
    #[test]
    fn firsts_alike_are_the_least_of_their_kind(
        kinds in prop::collection::vec(prop::option::of(0u8..200), 0..300),
        nr_keys in 1u8..5,
    ) {
        let n = kinds.len();
        let key = |i: usize| kinds[i].map(|k| fold_key([u64::from(k % nr_keys)].into_iter()));
        let alike = |a: usize, b: usize| kinds[a].is_some() && kinds[a] == kinds[b];
        let bits = index_bits(n);
        let mut index = vec![0; 1 << bits];
        let mut first = vec![u32::MAX; n];
        firsts_alike(key, alike, &mut index, bits, &mut first);
        for i in 0..n {
            let want = match kinds[i] {
                None => i,
                Some(_) => (0..=i).find(|&j| alike(j, i)).unwrap(),
            };
            prop_assert_eq!(first[i] as usize, want, "item {} of {:?}", i, kinds);
        }
        // An index with no room to spare: nothing alike, every item its own.
        if n > 0 {
            // The most buckets that are not more than the items.
            let small = usize::BITS - 1 - n.leading_zeros();
            let mut index = vec![0; 1 << small];
            firsts_alike(key, alike, &mut index, small, &mut first);
            prop_assert_eq!(first.clone(), (0..n as u32).collect::<Vec<_>>());
        }
    }

    /// Sequences of one length that differ in one bit of one word have different keys:
    /// a fold that lost a bit (a step that is not a bijection) fails.
    #[test]
    fn fold_key_keeps_every_word(words in prop::collection::vec(any::<u64>(), 1..8), at in 0usize..8, bit in 0u32..64) {
        let at = at % words.len();
        let mut other = words.clone();
        other[at] ^= 1 << bit;
        prop_assert_eq!(fold_key(words.iter().copied()), fold_key(words.iter().copied()));
        prop_assert_ne!(fold_key(words.iter().copied()), fold_key(other.iter().copied()));
    }

    #[test]
    fn heapsort_sorts(mut v in prop::collection::vec((0u8..20, 0u32..1000), 0..200)) {
        let mut want = v.clone();
        want.sort_by_key(|x| x.0);
        sort_by_key(&mut v, |x| x.0);
        prop_assert_eq!(v.iter().map(|x| x.0).collect::<Vec<_>>(), want.iter().map(|x| x.0).collect::<Vec<_>>());
        let mut a: Vec<_> = v.clone();
        a.sort();
        want.sort();
        prop_assert_eq!(a, want);
    }

    /// The ftrace updates of an operation are the differences between its routes before
    /// and after: hook what is new, unhook what went, move what changed trampoline, and
    /// nothing else; a generated trampoline retires when its site moves off it or goes.
    #[test]
    fn plan_updates_is_the_route_difference(
        old in prop::collection::btree_map(0u64..40, 0u64..3, 0..20),
        new in prop::collection::btree_map(0u64..40, 0u64..3, 0..20),
    ) {
        let routes = |m: &std::collections::BTreeMap<u64, u64>| -> Vec<Route> {
            m.iter().map(|(&site, &tramp)| Route { site, tramp }).collect()
        };
        let mut got = Vec::new();
        let retired = plan_updates(
            routes(&old).into_iter(),
            routes(&new).into_iter(),
            |u, r| got.push((u, r.site, r.tramp)),
        );
        let mut want = Vec::new();
        let mut want_retired = false;
        let sites: BTreeSet<u64> = old.keys().chain(new.keys()).copied().collect();
        for s in sites {
            match (old.get(&s), new.get(&s)) {
                (None, Some(&t)) => want.push((Update::Hook, s, t)),
                (Some(&t), None) => {
                    want.push((Update::Unhook, s, t));
                    want_retired |= t != 0;
                }
                (Some(&o), Some(&t)) if o != t => {
                    want.push((Update::Move, s, t));
                    want_retired |= o != 0;
                }
                _ => {}
            }
        }
        prop_assert_eq!(got, want);
        prop_assert_eq!(retired, want_retired);
    }
}

/// The sizes of ftrace updates: exact values at the edges of the rule.
#[test]
fn batch_sizes() {
    // Very fast: eight times the size; fast: twice; never past the most.
    assert_eq!(next_batch(256, 0), 2048);
    assert_eq!(next_batch(256, BATCH_LEAP_NS - 1), 2048);
    assert_eq!(next_batch(256, BATCH_LEAP_NS), 512);
    assert_eq!(next_batch(256, BATCH_GROW_NS - 1), 512);
    assert_eq!(next_batch(BATCH_MAX, 1), BATCH_MAX);
    assert_eq!(next_batch(BATCH_MAX / 8 + 1, 1), BATCH_MAX);
    assert_eq!(next_batch(BATCH_MAX / 2 + 1, BATCH_LEAP_NS), BATCH_MAX);
    // In between: the same size.
    assert_eq!(next_batch(256, BATCH_GROW_NS), 256);
    assert_eq!(next_batch(256, BATCH_SHRINK_NS), 256);
    // Slow: what takes BATCH_GROW_NS at that rate, never under the fewest.
    assert_eq!(next_batch(1024, BATCH_SHRINK_NS + 1), 511);
    assert_eq!(next_batch(1024, 4 * BATCH_GROW_NS), 256);
    assert_eq!(next_batch(4096, 10 * BATCH_GROW_NS), 409);
    assert_eq!(next_batch(1024, 100 * BATCH_GROW_NS), BATCH_MIN);
    assert_eq!(next_batch(BATCH_MIN, u64::MAX), BATCH_MIN);
    // From the first size (256), updates of 100 ms reach the most (65,536) in three
    // steps, of 200 ms in eight.
    let mut n = BATCH_FIRST;
    for want in [2048, 16384, 65536, 65536] {
        n = next_batch(n, BATCH_GROW_NS / 10);
        assert_eq!(n, want);
    }
    let mut n = BATCH_FIRST;
    for want in [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 65536] {
        n = next_batch(n, BATCH_GROW_NS / 5);
        assert_eq!(n, want);
    }
}

/// The first update of a run, from the last one of the run before: exact values at the
/// edges of the rule.
#[test]
fn first_batch_sizes() {
    // 10,000 sites in 80 ms: 15,625 in BATCH_LEAP_NS (125 ms).
    assert_eq!(first_batch(10_000, 80_000_000), 15_625);
    // Exactly at BATCH_LEAP_NS: the same size.
    assert_eq!(first_batch(4096, BATCH_LEAP_NS), 4096);
    // Slow, or small and fixed-cost-bound: never under BATCH_FIRST.
    assert_eq!(first_batch(4096, 4 * BATCH_GROW_NS), BATCH_FIRST);
    assert_eq!(first_batch(3, 10_000_000), BATCH_FIRST);
    assert_eq!(first_batch(BATCH_MAX, u64::MAX), BATCH_FIRST);
    // Fast: never over BATCH_MAX, and a time of 0 divides by 1.
    assert_eq!(first_batch(BATCH_MAX, 1), BATCH_MAX);
    assert_eq!(first_batch(1, 0), BATCH_MAX);
}

/// Updates whose time is a fixed cost plus a cost per site, as ftrace's are.
fn settle(fixed_ns: u64, per_site_ns: u64, updates: usize) -> Vec<(usize, u64)> {
    let mut n = BATCH_FIRST;
    let mut seen = Vec::new();
    for _ in 0..updates {
        let took = fixed_ns + per_site_ns * n as u64;
        seen.push((n, took));
        n = next_batch(n, took);
    }
    seen
}

#[test]
fn batch_sizes_with_a_fixed_cost() {
    // Half a second of fixed cost (hooks with every function traced, under TCG): the
    // size doubles until an update takes over BATCH_GROW_NS, and stays there, instead of
    // shrinking with every update.
    let seen = settle(500_000_000, 100_000, 10);
    assert_eq!(seen[4], (4096, 500_000_000 + 100_000 * 4096));
    assert_eq!(seen.last(), Some(&(8192, 500_000_000 + 100_000 * 8192)));
    // Moves at 10 ms a site (return thunks, every function traced, a workload): no
    // update after the first takes over BATCH_SHRINK_NS, and the size settles.
    let seen = settle(500_000_000, 10_000_000, 20);
    assert_eq!(seen[0], (256, 3_060_000_000));
    assert!(
        seen[1..].iter().all(|&(_, took)| took <= BATCH_SHRINK_NS),
        "{seen:?}"
    );
    assert_eq!(seen[1].0, 83);
    assert_eq!(seen[19], seen[2]);
}

proptest! {
    /// Every size is legal; a fast update grows the next (at most eightfold below
    /// BATCH_LEAP_NS, twice above), one in between keeps it, a slow one shrinks it, and
    /// with a fixed cost under BATCH_SHRINK_NS plus a cost per site of up to 100 ms, no
    /// update after the first takes over twice BATCH_SHRINK_NS.
    #[test]
    fn batch_size_follows_the_time(size in 1usize..=BATCH_MAX, took in 0u64..=100 * BATCH_SHRINK_NS,
                                   fixed in 0u64..BATCH_SHRINK_NS, per_site in 0u64..100_000_000) {
        let next = next_batch(size, took);
        prop_assert!((BATCH_MIN..=BATCH_MAX).contains(&next));
        prop_assert!(next <= (BATCH_LEAP * size).max(BATCH_MIN));
        if took >= BATCH_LEAP_NS {
            prop_assert!(next <= (2 * size).max(BATCH_MIN));
        }
        if took < BATCH_GROW_NS {
            prop_assert!(next > size || next == BATCH_MAX, "{} after {}", next, size);
        } else if took <= BATCH_SHRINK_NS {
            prop_assert_eq!(next, size.clamp(BATCH_MIN, BATCH_MAX));
        } else {
            prop_assert!(next < size || next == BATCH_MIN, "{} after {}", next, size);
        }
        // The next run's first update, at the same costs, takes at most BATCH_LEAP_NS
        // past its fixed cost, unless it is BATCH_FIRST.
        let first = first_batch(size, fixed + per_site * size as u64);
        prop_assert!((BATCH_FIRST..=BATCH_MAX).contains(&first));
        let took_first = fixed + per_site * first as u64;
        prop_assert!(first == BATCH_FIRST || took_first <= BATCH_LEAP_NS + fixed,
                     "{} sites would take {}", first, took_first);
        let seen = settle(fixed, per_site, 12);
        for &(_, took) in &seen[1..] {
            prop_assert!(took <= 2 * BATCH_SHRINK_NS, "{:?}", seen);
        }
    }
}

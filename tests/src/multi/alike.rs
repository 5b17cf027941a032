// SPDX-License-Identifier: GPL-2.0

//! Functions that share their trampoline: in one image, the functions of one shape of
//! shared code (no exit, no sleepable program; the same argument count, ctx slots filled,
//! program count and ftrace site offset) whose slots hold the same programs and cookies,
//! and whose links count nothing, have one stub and one copy of their slots between them
//! (rust/multi/image.rs, `firsts_alike()`).  Their sites call the same address; each
//! program still sees its own function's address, arguments and cookie.  Only functions
//! of one image share: a function moved by a later operation gets a new image.

use std::collections::HashMap;

use anyhow::{Context, Result};

use super::{
    attach, attach_uncounted,
    basic::{check_args, reset, setup, trigger},
    tramps::Tramp,
};
use crate::{check, check_eq, diag, skel::multi::MultiSkel};
use rkf::multi::{self, DirectCall, Func};

/// The direct call of each hooked function's site, as ftrace's `enabled_functions` shows
/// it, by the function's name (`name`, or `name [module]`).
fn direct_targets() -> Result<HashMap<String, DirectCall>> {
    Ok(multi::parse_direct_calls(&multi::enabled_functions()?))
}

/// How far into each of `funcs` its ftrace site is (0, or 4 past an ENDBR), from ftrace's
/// `available_filter_functions_addrs`.
fn site_offsets(funcs: &[Func]) -> Result<Vec<u64>> {
    let path = multi::tracefs()?.join("available_filter_functions_addrs");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut sites = HashMap::new();
    for line in text.lines() {
        let mut words = line.splitn(2, ' ');
        let (Some(addr), Some(name)) = (words.next(), words.next()) else {
            continue;
        };
        let addr = u64::from_str_radix(addr, 16)
            .with_context(|| format!("{}: {line:?}", path.display()))?;
        sites.insert(name.to_string(), addr);
    }
    funcs
        .iter()
        .map(|f| {
            let site = *sites
                .get(&f.qualified_name())
                .with_context(|| format!("{} is not in {}", f.name, path.display()))?;
            let offset = site.wrapping_sub(f.addr);
            check!(
                offset < 16,
                "{}: its site {site:#x} is {offset:#x} past its address {:#x}",
                f.name,
                f.addr
            );
            Ok(offset)
        })
        .collect()
}

/// Checks that two of `funcs` call the same generated code exactly when their `keys` are
/// equal, and that some do (else the check shows nothing). Returns the distinct targets.
fn check_shared<K: Eq + std::fmt::Debug>(funcs: &[Func], keys: &[K], what: &str) -> Result<usize> {
    let targets = direct_targets()?;
    let target = |f: &Func| {
        targets
            .get(&f.qualified_name())
            .with_context(|| format!("{what}: {} has no direct caller", f.name))
    };
    for f in funcs {
        let t = target(f)?;
        check_eq!(
            Tramp::of(&t.sym),
            Some(Tramp::Generated),
            "{what}: the trampoline of {} ({t})",
            f.name
        );
        // Called, at a place in the image (an end would be the text after it).
        check!(
            !t.jmp && t.place.is_some() && !t.at_end(),
            "{what}: {}'s site calls {t}{}",
            f.name,
            if t.jmp { " by a jump" } else { "" }
        );
    }
    let mut distinct: Vec<&DirectCall> = Vec::new();
    for (i, a) in funcs.iter().enumerate() {
        let ta = target(a)?;
        if !distinct.contains(&ta) {
            distinct.push(ta);
        }
        for (j, b) in funcs.iter().enumerate().skip(i + 1) {
            let tb = target(b)?;
            check_eq!(
                ta == tb,
                keys[i] == keys[j],
                "{what}: {} ({:?}, through {ta}) and {} ({:?}, through {tb}) share their trampoline",
                a.name,
                keys[i],
                b.name,
                keys[j]
            );
        }
    }
    check!(
        distinct.len() < funcs.len(),
        "{what}: no two functions alike, nothing shared: {}",
        distinct
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    diag!(
        "{what}: {} functions through {} trampolines",
        funcs.len(),
        distinct.len()
    );
    Ok(distinct.len())
}

/// One BPF_PROG_TEST_RUN: each function's multi_fentry record holds its own arguments
/// and function address, and `cookies` (0 where none was given).
fn check_runs(skel: &mut MultiSkel<'_>, funcs: &[Func], cookies: &[u64], what: &str) -> Result<()> {
    reset(skel)?;
    trigger(skel)?;
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    check_eq!(
        bss.unknown_ip,
        0,
        "{what}: calls with an unexpected bpf_get_func_ip()"
    );
    for (i, f) in funcs.iter().enumerate() {
        let r = &bss.fentry_recs[i];
        check_args(what, f, r, i)?;
        check_eq!(
            r.cookie,
            cookies[i],
            "{what} {}: bpf_get_attach_cookie()",
            f.name
        );
    }
    Ok(())
}

pub(super) fn alike_functions_share_code() -> Result<()> {
    let mut obj = std::mem::MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    let offsets = site_offsets(&funcs)?;
    let n = funcs.len();
    // What makes two functions' code alike, but for their programs: the argument count
    // (every function reads six ctx slots, multi_fentry's) and the site offset.
    let shape: Vec<(u32, u64)> = funcs
        .iter()
        .zip(&offsets)
        .map(|(f, &o)| (f.nr_args, o))
        .collect();

    // One link that counts nothing, no cookies: alike by shape alone.
    let a = attach_uncounted(&skel.progs.multi_fentry, &funcs, None)?;
    check_shared(&funcs, &shape, "one link, no cookies")?;
    check_runs(&mut skel, &funcs, &vec![0; n], "one link, no cookies")?;

    // A second link, count_fentry0, on the first function and every function of
    // another argument count: alike by shape and links.
    let first = &funcs[0];
    let with_b: Vec<bool> = funcs
        .iter()
        .map(|f| f.nr_args != first.nr_args || f.name == first.name)
        .collect();
    let b_funcs: Vec<Func> = funcs
        .iter()
        .zip(&with_b)
        .filter(|(_, &b)| b)
        .map(|(f, _)| f.clone())
        .collect();
    let b = attach_uncounted(&skel.progs.count_fentry0, &b_funcs, None)?;
    let keys: Vec<_> = shape.iter().zip(&with_b).collect();
    check_shared(&funcs, &keys, "two links")?;
    check_runs(&mut skel, &funcs, &vec![0; n], "two links")?;
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    let want: Vec<u64> = with_b.iter().map(|&b| u64::from(b)).collect();
    check_eq!(
        bss.counts[0][..n].to_vec(),
        want,
        "two links: count_fentry0's runs on each function"
    );
    drop(b);
    // Every function changed (6 of 9 lost a program): all regenerated in one image.
    check_shared(&funcs, &shape, "the second link detached")?;

    // A function alike to others by shape and links, but in another image: a link on
    // bpf_fentry_test7 alone, then detached, moves it to an image of its own twice, while
    // the other eight keep theirs (most of their image's functions stay).
    let (t1, t7) = (&funcs[0], &funcs[6]);
    check_eq!(
        (t1.nr_args, offsets[0], t7.nr_args, offsets[6]),
        (1, offsets[0], 1, offsets[0]),
        "bpf_fentry_test1 and bpf_fentry_test7: (arguments, site offset) of each"
    );
    drop(attach_uncounted(
        &skel.progs.count_fentry0,
        std::slice::from_ref(t7),
        None,
    )?);
    let targets = direct_targets()?;
    let of = |f: &Func| targets.get(&f.qualified_name()).map(ToString::to_string);
    let image = |f: &Func| targets.get(&f.qualified_name()).map(|c| &c.sym);
    check!(
        image(t7).is_some() && image(t7) != image(t1),
        "after a link on {} alone came and went, it has a stub of its own, in another image than {}'s: {:?} and {:?}",
        t7.name,
        t1.name,
        of(t7),
        of(t1)
    );
    for f in [&funcs[7], &funcs[8]] {
        check_eq!(
            of(f),
            of(t1),
            "{} and {} stayed in their image, sharing a stub",
            f.name,
            t1.name
        );
    }
    check_runs(&mut skel, &funcs, &vec![0; n], "after the move")?;
    drop(a);

    // Cookies: functions with the same cookie are alike, those with another are not.
    // Two cookies per argument count, alternating.
    let cookies: Vec<u64> = funcs
        .iter()
        .enumerate()
        .map(|(i, f)| 0xc0c0_0000 + u64::from(f.nr_args) * 0x10 + (i as u64 % 2))
        .collect();
    let a = attach_uncounted(&skel.progs.multi_fentry, &funcs, Some(&cookies))?;
    let keys: Vec<_> = shape.iter().zip(&cookies).collect();
    check_shared(&funcs, &keys, "cookies")?;
    check_runs(&mut skel, &funcs, &cookies, "cookies")?;
    drop(a);

    // A link that counts: each function has its own counters, so its own slots and stub.
    let a = attach(&skel.progs.multi_fentry, &funcs, None)?;
    let targets = direct_targets()?;
    let mut distinct: Vec<&DirectCall> = funcs
        .iter()
        .filter_map(|f| targets.get(&f.qualified_name()))
        .collect();
    distinct.sort();
    distinct.dedup();
    check_eq!(
        distinct.len(),
        n,
        "a link that counts: a trampoline per function"
    );
    check_runs(&mut skel, &funcs, &vec![0; n], "a link that counts")?;
    let info = a.info()?;
    let hits: Vec<u64> = info.funcs.iter().map(|f| f.hits).collect();
    check_eq!(hits, vec![1; n], "a link that counts: its counts");
    Ok(())
}

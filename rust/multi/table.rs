// SPDX-License-Identifier: GPL-2.0

//! The table the trampolines read: every traced function with its programs in run order,
//! the hash index the shared trampoline finds the functions it serves by, and each
//! function's trampoline.  A table is built whole from the links and replaces the
//! published one under RCU.

use core::{ptr, slice};

use kernel::{
    prelude::*,
    sync::{atomic::Relaxed, Arc},
};

use super::{
    area::AreaVec,
    image::{self, FuncCode, Image},
    link::Link,
};
use crate::{
    multi_rules::MAX_LINKS_PER_FUNC,
    multi_table::{self as rules, Group, Route, Slot},
    rkf_h,
    tramp_core::{self, Mitigations},
};

// `struct rkf_multi_func`'s @nr_fentry and @nr_progs; one of them per traced function.
const _: () = assert!(MAX_LINKS_PER_FUNC <= u8::MAX as u32);
const _: () = assert!(size_of::<rkf_h::rkf_multi_func>() == 24);

/// The high 32 bits of every address of kernel, module and trampoline text (the top
/// 2 GiB): a table keeps the low 32 bits of return addresses and trampolines, and a
/// link those of its targets' sites.
const TEXT_HIGH: u64 = rkf_h::RKF_MULTI_TEXT_HIGH as u64;
const _: () = assert!(TEXT_HIGH == 0xffff_ffff_0000_0000);

/// Where text starts: `__START_KERNEL_map`, the top 2 GiB.
const TEXT_START: u64 = 0xffff_ffff_8000_0000;

/// The text address whose low 32 bits are `lo`.
pub(crate) fn text(lo: u32) -> u64 {
    TEXT_HIGH | u64::from(lo)
}

/// The low 32 bits of the text address `addr` (never 0), or `None` if it is not in the top
/// 2 GiB, where all text is.
pub(crate) fn text_lo_of(addr: u64) -> Option<u32> {
    (addr >= TEXT_START).then_some(addr as u32)
}

/// [`text_lo_of()`], or `EINVAL` for an address that no text has (which the callers'
/// addresses are not: sites and trampolines are text).
fn text_lo(addr: u64) -> Result<u32> {
    text_lo_of(addr).ok_or(EINVAL)
}

/// The return address into `f`.
fn ret_ip(f: &rkf_h::rkf_multi_func) -> u64 {
    text(f.ret_ip)
}

/// The trampoline of `f`: its generated one's address, or 0 for the shared one.
fn tramp(f: &rkf_h::rkf_multi_func) -> u64 {
    if f.tramp == 0 {
        0
    } else {
        text(f.tramp)
    }
}

/// How tables get generated trampolines: what the cpu wants of their code, and how many
/// images were generated so far, to name the next.
pub(crate) struct Generation {
    /// Whether functions get generated trampolines at all (the module parameter
    /// `generate`): if not, every function takes the shared one.
    pub(crate) enabled: bool,
    /// The mitigations the code carries.
    pub(crate) mitigations: Mitigations,
    /// Images generated so far.
    pub(crate) images: u64,
}

/// A table and its storage.
///
/// # Invariants
///
/// Every function's `ret_ip` and non-zero `tramp` are the low 32 bits of addresses of
/// text (`TEXT_HIGH` is their high 32 bits), sorted by `ret_ip`; every non-zero
/// trampoline is in one of `images`.  Every function of `funcs` points to its `nr_progs`
/// programs (`progs`), which do not change: a function with a generated trampoline, to
/// its slots in the image its trampoline is in, a copy of its programs, in order
/// (functions alike in that image may share it); one that takes the shared trampoline,
/// into `_progs`.  An image's slots are the programs the table would hold, so a
/// function's programs are kept once, not twice.  `_index` holds exactly the functions
/// whose trampoline is 0 (the shared one).
pub(crate) struct Table {
    raw: KBox<rkf_h::rkf_multi_table>,
    _index: AreaVec<u32>,
    funcs: AreaVec<rkf_h::rkf_multi_func>,
    /// The programs of the functions that take the shared trampoline.  Never resized.
    _progs: AreaVec<rkf_h::rkf_multi_prog>,
    /// The images the generated trampolines are in, which the table keeps, sorted by
    /// address.
    images: AreaVec<Arc<Image>>,
    /// Whether a function has a sleepable program.
    sleepable: bool,
}

// SAFETY: the raw pointers point into the vectors owned alongside them or into the
// images those keep, or to programs and counters that the links keep alive while the
// table is published and until it is freed after its grace periods.
unsafe impl Send for Table {}

impl Table {
    /// Builds the table of `links`, or `None` if there is nothing to trace.  Functions
    /// keep their trampoline from `old` if their programs did not change, or get a new
    /// one, generated in one image (with `generate=0`, the shared one).
    pub(crate) fn build(
        links: &[Link],
        old: Option<&Table>,
        gen: &mut Generation,
    ) -> Result<Option<Table>> {
        let total: usize = links.iter().map(|l| l.targets.len()).sum();
        if total == 0 {
            return Ok(None);
        }
        // Slot::idx indexes `refs`: (link, target).
        let mut refs = AreaVec::<(u32, u32)>::with_capacity(total, GFP_KERNEL)?;
        let mut slots = AreaVec::<Slot>::with_capacity(total, GFP_KERNEL)?;
        for (li, l) in links.iter().enumerate() {
            for (ti, t) in l.targets.iter().enumerate() {
                slots.push(
                    Slot {
                        site: t.site(),
                        kind: l.kind,
                        seq: l.id(),
                        idx: refs.len() as u32,
                    },
                    GFP_KERNEL,
                )?;
                refs.push((li as u32, ti as u32), GFP_KERNEL)?;
            }
        }
        rules::order_slots(&mut slots);
        // Every function's programs, in order, until their trampolines are known.
        let mut all = AreaVec::<rkf_h::rkf_multi_prog>::with_capacity(total, GFP_KERNEL)?;
        for s in slots.iter() {
            let (li, ti) = refs[s.idx as usize];
            let l = &links[li as usize];
            all.push(l.slot(ti as usize), GFP_KERNEL)?;
        }
        let nr_funcs = rules::groups(&slots).count();
        let mut funcs = AreaVec::<rkf_h::rkf_multi_func>::with_capacity(nr_funcs, GFP_KERNEL)?;
        // Where each function's programs start in `all`.
        let mut firsts = AreaVec::<u32>::with_capacity(nr_funcs, GFP_KERNEL)?;
        for Group {
            site,
            start,
            end,
            fentry,
            session,
        } in rules::groups(&slots)
        {
            let (li, ti) = refs[slots[start].idx as usize];
            let t = &links[li as usize].targets[ti as usize];
            let of = |s: &Slot| &links[refs[s.idx as usize].0 as usize];
            let sleepable = slots[start..end].iter().any(|s| of(s).sleepable);
            if sleepable {
                for s in &slots[start..end] {
                    of(s).beside_sleepable.store(true, Relaxed);
                }
            }
            // The slots its programs read, as far as the verifier saw (an argument read
            // through bpf_get_func_arg() is below `nr_args`): at most `MAX_ARGS`.
            let ctx_args = slots[start..end]
                .iter()
                .map(|s| of(s).prog.ctx_args())
                .fold(t.nr_args(), u32::max);
            funcs.push(
                rkf_h::rkf_multi_func {
                    ret_ip: text_lo(site + tramp_core::MCOUNT_INSN_SIZE)?,
                    // Set below, once its trampoline is known.
                    tramp: 0,
                    site_offset: t.offset(),
                    // At most `MAX_ARGS`: rules::check_shape().
                    nr_args: t.nr_args() as u8,
                    ctx_args: ctx_args as u8,
                    sleepable: sleepable.into(),
                    // At most `MAX_SESSIONS_PER_FUNC` and `MAX_LINKS_PER_FUNC`:
                    // Registry::check_against_links().
                    nr_session: session as u8,
                    nr_fentry: fentry as u8,
                    nr_progs: (end - start) as u8,
                    // Set below, once its trampoline is known.
                    progs: ptr::null(),
                },
                GFP_KERNEL,
            )?;
            firsts.push(start as u32, GFP_KERNEL)?;
        }
        let new = New {
            all: &all,
            firsts: &firsts,
        };
        // Points every function with a generated trampoline to its slots.
        let images = trampolines(gen, old, links, &mut funcs, new)?;
        // The others take the shared trampoline, which finds them through the index (and
        // the rest, while their sites move, by a binary search): their programs stay in
        // the table.
        let shared = |i: usize| funcs[i].tramp == 0;
        let bits = rules::index_bits((0..nr_funcs).filter(|&i| shared(i)).count());
        let mut index = AreaVec::<u32>::from_elem(0, 1 << bits, GFP_KERNEL)?;
        rules::build_index(
            funcs
                .iter()
                .enumerate()
                .map(|(i, f)| shared(i).then_some(ret_ip(f))),
            &mut index,
            bits,
        );
        let nr_shared = (0..nr_funcs)
            .filter(|&i| shared(i))
            .map(|i| usize::from(funcs[i].nr_progs))
            .sum();
        // Filled within its capacity, so never moved: its elements stay put.
        let mut progs = AreaVec::<rkf_h::rkf_multi_prog>::with_capacity(nr_shared, GFP_KERNEL)?;
        for (i, f) in funcs.iter_mut().enumerate() {
            if f.tramp == 0 {
                f.progs = progs.as_ptr().wrapping_add(progs.len());
                for p in new.progs(i, f) {
                    progs
                        .push_within_capacity(rkf_h::rkf_multi_prog { ..*p })
                        .map_err(|_| EINVAL)?;
                }
            }
        }
        let raw = KBox::new(
            rkf_h::rkf_multi_table {
                nr_funcs: nr_funcs as u32,
                bits,
                index: index.as_ptr(),
                funcs: funcs.as_ptr(),
            },
            GFP_KERNEL,
        )?;
        let sleepable = funcs.iter().any(|f| f.sleepable != 0);
        // INVARIANT: trampolines() gave the trampolines in `images`, and pointed their
        // functions to their slots; the others point into `progs`, and are those `index`
        // holds.
        Ok(Some(Table {
            raw,
            _index: index,
            funcs,
            _progs: progs,
            images,
            sleepable,
        }))
    }

    /// The programs of its function `i`.
    fn progs_of(&self, i: usize) -> &[rkf_h::rkf_multi_prog] {
        let f = &self.funcs[i];
        // SAFETY: `f.progs` points to `f.nr_progs` programs that the table keeps, unchanged
        // (type invariant).
        unsafe { slice::from_raw_parts(f.progs, f.nr_progs.into()) }
    }

    /// Whether a function of the table has a sleepable program: tasks may run its
    /// programs under RCU tasks trace, which freeing the table must wait for.
    pub(crate) fn sleepable(&self) -> bool {
        self.sleepable
    }

    /// Every function's route: its site and trampoline, sorted by site.
    pub(crate) fn routes(&self) -> impl Iterator<Item = Route> + '_ {
        self.funcs.iter().map(|f| Route {
            site: ret_ip(f) - tramp_core::MCOUNT_INSN_SIZE,
            tramp: tramp(f),
        })
    }

    /// The generated trampoline of the function `f` in this table, if it has one and it
    /// runs exactly `progs` on the same function: it can serve on (its fexit slots name
    /// the same links' flags).
    fn reusable(
        &self,
        f: &rkf_h::rkf_multi_func,
        progs: &[rkf_h::rkf_multi_prog],
    ) -> Option<Reuse> {
        let i = self
            .funcs
            .binary_search_by_key(&f.ret_ip, |o| o.ret_ip)
            .ok()?;
        let o = &self.funcs[i];
        let old = self.progs_of(i);
        let same = o.site_offset == f.site_offset
            && o.nr_args == f.nr_args
            && o.nr_fentry == f.nr_fentry
            && o.nr_session == f.nr_session
            && image::same_progs(old, progs);
        let addr = tramp(o) as usize;
        if !same || addr == 0 {
            return None;
        }
        let image = self
            .images
            .partition_point(|im| im.code() <= addr)
            .checked_sub(1)?;
        self.images[image].contains(addr).then_some(Reuse {
            addr,
            slots: o.progs,
            image,
        })
    }
}

/// Makes `new` the table the shared trampoline reads.
///
/// # Safety
///
/// The caller serialises publications, keeps `new` where it is until the next one, and
/// frees the table this one replaces only after its grace periods: the trampolines read
/// a published table under RCU, RCU tasks or RCU tasks trace.
pub(crate) unsafe fn publish(new: Option<&Table>) {
    let raw = new.map_or(ptr::null(), |t| {
        ptr::from_ref::<rkf_h::rkf_multi_table>(&t.raw)
    });
    // SAFETY: `raw` is NULL or a complete table whose storage the caller keeps until the
    // next publication (this function's safety contract).
    unsafe { rkf_h::rkf_multi_publish(raw) };
}

/// A generated trampoline of the old table that a function of a new table can keep.
#[derive(Clone, Copy)]
struct Reuse {
    /// Its address.
    addr: usize,
    /// The function's slots in its image.
    slots: *const rkf_h::rkf_multi_prog,
    /// Its image, in the old table's `images`.
    image: usize,
}

/// The programs of the functions of a table being built, before they know their
/// trampolines.
#[derive(Clone, Copy)]
struct New<'a> {
    /// Every function's programs, in order.
    all: &'a [rkf_h::rkf_multi_prog],
    /// Where each function's programs start in `all`.
    firsts: &'a [u32],
}

impl<'a> New<'a> {
    /// The programs of `f`, the function `i`.
    fn progs(&self, i: usize, f: &rkf_h::rkf_multi_func) -> &'a [rkf_h::rkf_multi_prog] {
        &self.all[self.firsts[i] as usize..][..f.nr_progs.into()]
    }
}

/// The trampoline of each of `funcs` (with their programs in `new`), for
/// [`Table::build()`], and the images the generated ones are in, sorted by address.
/// Points each function that gets a generated trampoline to it (`tramp`) and to its
/// slots in its image (and leaves the others' 0 and NULL).  A generation that fails does
/// not fail the operation: a function it fails for (no memory for an image,
/// rkf_multi_run_prog() out of reach, an image outside the top 2 GiB) takes the shared
/// trampoline.  Only this function's own bookkeeping fails it, for want of memory
/// (`ENOMEM`).
fn trampolines(
    gen: &mut Generation,
    old: Option<&Table>,
    links: &[Link],
    funcs: &mut [rkf_h::rkf_multi_func],
    new: New<'_>,
) -> Result<AreaVec<Arc<Image>>> {
    let old_images = old.map_or(&[][..], |o| &o.images[..]);
    // What each function could keep, and how many functions would keep each of the old
    // images: an image most of whose functions moved on is not kept alive by the few that
    // stay (they get new trampolines).  Functions are counted, not bytes: those that stay
    // may share one stub where those that went had one each.
    let mut kept = AreaVec::<u32>::from_elem(0, old_images.len(), GFP_KERNEL)?;
    let mut cands = AreaVec::<Option<Reuse>>::with_capacity(funcs.len(), GFP_KERNEL)?;
    // Every function gets its own trampoline, unless the module was told otherwise.
    let own = gen.enabled;
    for (i, f) in funcs.iter().enumerate() {
        let reuse = if own {
            old.and_then(|o| o.reusable(f, new.progs(i, f)))
        } else {
            None
        };
        if let Some(r) = reuse {
            kept[r.image] += 1;
        }
        cands.push(reuse, GFP_KERNEL)?;
    }
    let keeps = |k: usize| 2 * kept[k] >= old_images[k].funcs();
    let mut images = AreaVec::<Arc<Image>>::with_capacity(old_images.len() + 1, GFP_KERNEL)?;
    for (k, image) in old_images.iter().enumerate() {
        if keeps(k) {
            images.push(image.clone(), GFP_KERNEL)?;
        }
    }
    let mut fresh = AreaVec::<u32>::new();
    for (i, cand) in cands.iter().enumerate() {
        match cand {
            Some(r) if keeps(r.image) => {
                funcs[i].progs = r.slots;
                funcs[i].tramp = text_lo(r.addr as u64)?;
            }
            _ if own => fresh.push(i as u32, GFP_KERNEL)?,
            _ => {}
        }
    }
    if !fresh.is_empty() {
        gen.images += 1;
        let mut code = AreaVec::with_capacity(fresh.len(), GFP_KERNEL)?;
        for &i in fresh.iter() {
            let f = &funcs[i as usize];
            code.push(
                // INVARIANT: `progs` are the function's `nr_progs`, its `nr_fentry` fentry
                // and `nr_session` session programs first (`struct rkf_multi_func`).
                FuncCode {
                    nr_args: f.nr_args.into(),
                    ctx_args: f.ctx_args.into(),
                    site_offset: f.site_offset.into(),
                    ret_ip: ret_ip(f),
                    progs: new.progs(i as usize, f),
                    nr_fentry: f.nr_fentry.into(),
                    nr_session: f.nr_session.into(),
                    sleepable: f.sleepable != 0,
                },
                GFP_KERNEL,
            )?;
        }
        let mut states = AreaVec::with_capacity(links.len(), GFP_KERNEL)?;
        for l in links {
            states.push(&l.state, GFP_KERNEL)?;
        }
        match image::generate(gen.images, &code, &states, &gen.mitigations) {
            // Text is in the top 2 GiB: an image elsewhere is never made.
            Ok((image, addrs)) if addrs.iter().all(|p| text_lo_of(p.addr as u64).is_some()) => {
                for (&i, &image::Placed { addr, slots }) in fresh.iter().zip(addrs.iter()) {
                    funcs[i as usize].progs = slots;
                    funcs[i as usize].tramp = text_lo(addr as u64)?;
                }
                images.push(image, GFP_KERNEL)?;
            }
            Ok(_) => pr_warn!(
                "{} functions keep the shared trampoline: their image is not in the top 2 GiB\n",
                fresh.len()
            ),
            Err(e) => pr_warn!(
                "{} functions keep the shared trampoline: generating theirs failed: {:?}\n",
                fresh.len(),
                e
            ),
        }
    }
    rules::sort_by_key(&mut images, |im| im.code());
    Ok(images)
}

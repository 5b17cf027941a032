// SPDX-License-Identifier: GPL-2.0

//! The table the trampolines read: every traced function with its programs in run order,
//! the hash index the shared trampoline finds a function by, and each function's
//! trampoline.  A table is built whole from the links and replaces the published one
//! under RCU.

use core::ptr;

use kernel::{
    prelude::*,
    sync::{atomic::Relaxed, Arc},
};

use super::{
    area::AreaVec,
    image::{self, FuncCode, Image, Trampoline},
    link::Link,
};
use crate::{
    multi_table::{self as rules, Group, Route, Slot},
    rkf_h,
    tramp_core::Mitigations,
};

/// `MCOUNT_INSN_SIZE`: the return address into a traced function is its site plus the
/// call.
const MCOUNT_INSN_SIZE: u64 = 5;

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
pub(crate) struct Table {
    raw: KBox<rkf_h::rkf_multi_table>,
    _index: AreaVec<u32>,
    funcs: AreaVec<rkf_h::rkf_multi_func>,
    progs: AreaVec<rkf_h::rkf_multi_prog>,
    /// The trampoline of each function of `funcs`.
    tramps: AreaVec<Trampoline>,
    /// Whether a function has a sleepable program.
    sleepable: bool,
}

// SAFETY: the raw pointers point into the vectors owned alongside them, or to programs
// and counters that the links keep alive while the table is published and until it is
// freed after its grace periods.
unsafe impl Send for Table {}

/// The programs of `f`, a function whose programs are in `progs` (a table's).
fn progs_of<'a>(
    progs: &'a [rkf_h::rkf_multi_prog],
    f: &rkf_h::rkf_multi_func,
) -> &'a [rkf_h::rkf_multi_prog] {
    &progs[f.first as usize..][..f.nr_progs as usize]
}

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
                        site: t.site,
                        kind: l.kind,
                        seq: l.id,
                        idx: refs.len() as u32,
                    },
                    GFP_KERNEL,
                )?;
                refs.push((li as u32, ti as u32), GFP_KERNEL)?;
            }
        }
        rules::order_slots(&mut slots);
        let mut progs = AreaVec::<rkf_h::rkf_multi_prog>::with_capacity(total, GFP_KERNEL)?;
        for s in slots.iter() {
            let (li, ti) = refs[s.idx as usize];
            let l = &links[li as usize];
            progs.push(
                rkf_h::rkf_multi_prog {
                    prog: l.prog.as_ptr(),
                    cookie: l.targets[ti as usize].cookie,
                    stats: l.stats[ti as usize].get(),
                    link: l.id,
                    detached: l.detached.as_ptr(),
                },
                GFP_KERNEL,
            )?;
        }
        let nr_funcs = rules::groups(&slots).count();
        let mut funcs = AreaVec::<rkf_h::rkf_multi_func>::with_capacity(nr_funcs, GFP_KERNEL)?;
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
                .fold(t.nr_args, u32::max);
            funcs.push(
                rkf_h::rkf_multi_func {
                    ret_ip: (site + MCOUNT_INSN_SIZE) as usize,
                    addr: t.addr as usize,
                    // At most `MAX_ARGS`: rules::check_shape().
                    nr_args: t.nr_args as u8,
                    ctx_args: ctx_args as u8,
                    sleepable: sleepable.into(),
                    // At most `MAX_SESSIONS_PER_FUNC`: Registry::check_against_links().
                    nr_session: session as u8,
                    nr_fentry: fentry as u32,
                    nr_progs: (end - start) as u32,
                    first: start as u32,
                },
                GFP_KERNEL,
            )?;
        }
        let bits = rules::index_bits(nr_funcs);
        let mut index = AreaVec::<u32>::from_elem(0, 1 << bits, GFP_KERNEL)?;
        rules::build_index(funcs.iter().map(|f| f.ret_ip as u64), &mut index, bits);
        let tramps = trampolines(gen, old, links, &funcs, &progs)?;
        let raw = KBox::new(
            rkf_h::rkf_multi_table {
                nr_funcs: nr_funcs as u32,
                bits,
                index: index.as_ptr(),
                funcs: funcs.as_ptr(),
                progs: progs.as_ptr(),
            },
            GFP_KERNEL,
        )?;
        let sleepable = funcs.iter().any(|f| f.sleepable != 0);
        Ok(Some(Table {
            raw,
            _index: index,
            funcs,
            progs,
            tramps,
            sleepable,
        }))
    }

    /// Whether a function of the table has a sleepable program: tasks may run its
    /// programs under RCU tasks trace, which freeing the table must wait for.
    pub(crate) fn sleepable(&self) -> bool {
        self.sleepable
    }

    /// Every function's route: its site and trampoline, sorted by site.
    pub(crate) fn routes(&self) -> impl Iterator<Item = Route> + '_ {
        self.funcs
            .iter()
            .zip(self.tramps.iter())
            .map(|(f, t)| Route {
                site: f.ret_ip as u64 - MCOUNT_INSN_SIZE,
                tramp: t.route_addr(),
            })
    }

    /// The generated trampoline of the function `f` in this table, if it has one and it
    /// runs exactly `progs` on the same function: it can serve on (its fexit slots name
    /// the same links' flags).
    fn reusable(
        &self,
        f: &rkf_h::rkf_multi_func,
        progs: &[rkf_h::rkf_multi_prog],
    ) -> Option<Trampoline> {
        let i = self
            .funcs
            .binary_search_by_key(&f.ret_ip, |o| o.ret_ip)
            .ok()?;
        let o = &self.funcs[i];
        let old = progs_of(&self.progs, o);
        let same = o.addr == f.addr
            && o.nr_args == f.nr_args
            && o.nr_fentry == f.nr_fentry
            && o.nr_session == f.nr_session
            && old.len() == progs.len()
            && old.iter().zip(progs).all(|(a, b)| {
                a.prog == b.prog && a.cookie == b.cookie && ptr::eq(a.stats, b.stats)
            });
        match &self.tramps[i] {
            t @ Trampoline::Generated { .. } if same => Some(t.clone()),
            _ => None,
        }
    }
}

/// Makes `new` the table the shared trampoline reads.  The caller serialises
/// publications, keeps `new` until the next one, and frees what this returns, the table
/// it replaces, only after its grace periods.
pub(crate) fn publish(new: Option<&Table>) {
    let raw = new.map_or(ptr::null(), |t| {
        ptr::from_ref::<rkf_h::rkf_multi_table>(&t.raw)
    });
    // SAFETY: `raw` is NULL or a complete table whose storage the caller keeps until the
    // next publication (this function's contract).
    unsafe { rkf_h::rkf_multi_publish(raw) };
}

/// The trampoline of each of `funcs` (with `progs`), for [`Table::build()`].  Generation
/// never fails an operation: a function it fails for (no memory for an image, or
/// rkf_multi_run_prog() out of reach) takes the shared trampoline.
fn trampolines(
    gen: &mut Generation,
    old: Option<&Table>,
    links: &[Link],
    funcs: &[rkf_h::rkf_multi_func],
    progs: &[rkf_h::rkf_multi_prog],
) -> Result<AreaVec<Trampoline>> {
    let mut tramps = AreaVec::with_capacity(funcs.len(), GFP_KERNEL)?;
    // What each function could keep, and how many functions would keep each image: an
    // image most of whose functions moved on is not kept alive by the few that stay
    // (they get new trampolines), so images hold at most twice the live code.
    let mut kept = AreaVec::<(*const Image, u32)>::new();
    let mut cands = AreaVec::<Option<Trampoline>>::with_capacity(funcs.len(), GFP_KERNEL)?;
    // Every function gets its own trampoline, unless the module was told otherwise.
    let own = gen.enabled;
    for f in funcs {
        let cand = if own {
            old.and_then(|o| o.reusable(f, progs_of(progs, f)))
        } else {
            None
        };
        if let Some(Trampoline::Generated { image, .. }) = &cand {
            let p = Arc::as_ptr(image);
            match kept.iter_mut().find(|(q, _)| *q == p) {
                Some((_, n)) => *n += 1,
                None => kept.push((p, 1), GFP_KERNEL)?,
            }
        }
        cands.push(cand, GFP_KERNEL)?;
    }
    let mut fresh = AreaVec::<u32>::new();
    for (i, cand) in cands.into_iter().enumerate() {
        let t = match cand {
            Some(Trampoline::Generated { image, addr })
                if kept
                    .iter()
                    .any(|&(p, n)| p == Arc::as_ptr(&image) && 2 * n >= image.funcs()) =>
            {
                Trampoline::Generated { image, addr }
            }
            _ => {
                if own {
                    fresh.push(i as u32, GFP_KERNEL)?;
                }
                Trampoline::Shared
            }
        };
        tramps.push(t, GFP_KERNEL)?;
    }
    if !fresh.is_empty() {
        gen.images += 1;
        let mut code = AreaVec::with_capacity(fresh.len(), GFP_KERNEL)?;
        for &i in fresh.iter() {
            let f = &funcs[i as usize];
            code.push(
                FuncCode {
                    nr_args: f.nr_args.into(),
                    ctx_args: f.ctx_args.into(),
                    addr: f.addr as u64,
                    ret_ip: f.ret_ip as u64,
                    progs: progs_of(progs, f),
                    nr_fentry: f.nr_fentry as usize,
                    nr_session: f.nr_session.into(),
                    sleepable: f.sleepable != 0,
                },
                GFP_KERNEL,
            )?;
        }
        let mut detached = AreaVec::with_capacity(links.len(), GFP_KERNEL)?;
        for l in links {
            detached.push(&l.detached, GFP_KERNEL)?;
        }
        match image::generate(gen.images, &code, &detached, &gen.mitigations) {
            Ok((image, addrs)) => {
                for (&i, &addr) in fresh.iter().zip(addrs.iter()) {
                    tramps[i as usize] = Trampoline::Generated {
                        image: image.clone(),
                        addr,
                    };
                }
            }
            Err(e) => pr_warn!(
                "{} functions keep the shared trampoline: generating theirs failed: {:?}\n",
                fresh.len(),
                e
            ),
        }
    }
    Ok(tramps)
}

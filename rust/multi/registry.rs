// SPDX-License-Identifier: GPL-2.0

//! Every link, the table built from them, and the operations that change them: attach
//! (of a request checked on its own, before the lock is taken, then against the other
//! links, then committed) and detach.  One lock serialises them; the trampolines read
//! only published tables.

use kernel::{prelude::*, sync::atomic::Atomic};

use super::{
    area::AreaVec,
    deferred::Deferred,
    error::{AttachError, Refusal},
    ftrace::{self, FtraceOps, Updates},
    image,
    link::{Link, LinkState},
    refs::ModuleRef,
    request::Checked,
    table::{self, Generation, Table},
};
use crate::{
    abi::{Kind, LinkInfo},
    multi_rules::{Reason, MAX_LINKS_PER_FUNC, MAX_SESSIONS_PER_FUNC},
    rkf_h,
};

/// Every link, and the table built from them.
///
/// # Invariants
///
/// `links` is in id order (attach order: `info()` finds the next link by it), every id
/// below `next_id`; `table` is the table rkf_multi_publish() last made the shared
/// trampoline's (`None` when it published none), built from `links`.
pub(crate) struct Registry {
    /// In attach order (ids increase).
    links: AreaVec<Link>,
    next_id: u64,
    /// The published table.
    table: Option<Table>,
    gen: Generation,
    /// Set for good once an ftrace update failed and could not be undone: sites may stay
    /// on trampolines that no published table names, whose slots name links that may be
    /// detached later, so every later free waits for an RCU tasks grace period (a task
    /// may be in such a trampoline, before its run reads a slot's flag).
    diverged: bool,
}

/// What a publication replaced, freed once no cpu can read the old table (and, if it had
/// generated trampolines that sites stopped calling, no task runs them; if it had
/// sleepable programs, or the link ever shared a function with one, no task runs them
/// or a program after one either).
struct Garbage {
    _table: Option<Table>,
    _link: Option<Link>,
}

impl Garbage {
    /// Says its link is detached: generated trampolines run the link's program no more,
    /// calls in flight inside its functions included.
    fn mark_detached(&self) {
        if let Some(l) = &self._link {
            l.mark_detached();
        }
    }
}

/// What attach and detach need besides the registry: ftrace, and the deferred frees.
pub(crate) struct Services<'a> {
    /// rkf_multi's ftrace_ops.
    pub(crate) ops: &'a FtraceOps,
    /// Where garbage goes.
    pub(crate) deferred: &'a Deferred,
}

impl Services<'_> {
    /// Frees `garbage` after its grace periods (`tasks`: generated trampolines retired;
    /// an RCU tasks trace one if its table ran sleepable programs, or its link ever shared
    /// a function with one, and for such a link an RCU tasks one before it: a generated
    /// trampoline reads the link's flag, then passes its program to the kernel's
    /// sleepable program entry (`tramp_core::Direct`), and a task that saw the flag clear
    /// switches voluntarily only inside the program's RCU tasks trace read side).
    fn free_later(&self, garbage: Garbage, tasks: bool) {
        let link_trace = garbage._link.as_ref().is_some_and(Link::needs_trace_gp);
        let trace = garbage._table.as_ref().is_some_and(Table::sleepable) || link_trace;
        if garbage._table.is_some() || garbage._link.is_some() {
            self.deferred.defer(garbage, tasks || link_trace, trace);
        }
    }
}

impl Registry {
    /// No links; trampolines are generated if `generate` (the module parameter), and
    /// carry what this cpu wants.
    pub(crate) fn new(generate: bool) -> Self {
        Self {
            links: AreaVec::new(),
            next_id: 1,
            table: None,
            gen: Generation {
                enabled: generate,
                mitigations: image::mitigations(),
                images: 0,
            },
            diverged: false,
        }
    }

    /// Attaches a new link as `checked` (a request checked on its own) asks; returns its
    /// id.
    pub(crate) fn attach(
        &mut self,
        s: &Services<'_>,
        checked: Checked,
    ) -> Result<u64, AttachError> {
        self.check_against_links(&checked)?;
        self.commit(s, checked)
    }

    /// Limits per function, against the links already there, and in the same pass the
    /// functions no link holds yet: another direct trampoline must not own them.
    fn check_against_links(&self, c: &Checked) -> Result<(), Refusal> {
        let session = c.prog.kind == Kind::Session;
        for (t, i) in c.targets.iter() {
            let (mut on_site, mut sessions) = (0u32, 0u32);
            for l in self.links.iter().filter(|l| l.traces(t.site())) {
                if l.prog.as_ptr() == c.prog.prog.as_ptr() {
                    return Err(Refusal::new(*i as usize, Reason::SameProgram));
                }
                on_site += 1;
                sessions += u32::from(l.kind == Kind::Session);
            }
            if on_site >= MAX_LINKS_PER_FUNC {
                return Err(Refusal::new(*i as usize, Reason::TooManyLinks));
            }
            if session && sessions >= MAX_SESSIONS_PER_FUNC {
                return Err(Refusal::new(*i as usize, Reason::TooManySessions));
            }
            if on_site == 0 && ftrace::site_is_taken(t.site()) {
                return Err(Refusal::new(*i as usize, Reason::Busy));
            }
        }
        Ok(())
    }

    /// Adds the link of `c`, builds the next table, hooks the new functions, moves those
    /// whose trampoline changes, and publishes: a failure leaves nothing behind.
    fn commit(&mut self, s: &Services<'_>, c: Checked) -> Result<u64, AttachError> {
        let n = c.targets.len();
        let mut targets = AreaVec::with_capacity(n, GFP_KERNEL)?;
        for (t, _) in c.targets.iter() {
            targets.push(*t, GFP_KERNEL)?;
        }
        let id = self.next_id;
        let state = LinkState::new(id, &c.prog.prog, c.counted)?;
        // A link that counts keeps its cookies with its counters.
        let (stats, cookies) = if c.counted {
            (Link::new_stats(n, &c.cookies)?, AreaVec::new())
        } else {
            (AreaVec::new(), c.cookies)
        };
        self.links.push(
            Link {
                prog: c.prog.prog,
                prog_id: c.prog.id,
                kind: c.prog.kind,
                sleepable: c.prog.sleepable,
                targets,
                cookies,
                stats,
                modules: c.modules,
                state,
                beside_sleepable: Atomic::new(false),
            },
            GFP_KERNEL,
        )?;
        let (table, updates) = match self.next_table() {
            Ok(tu) => tu,
            Err(e) => {
                // Unpublished: the link was never visible, its program ref goes with it.
                drop(self.links.pop());
                return Err(e.into());
            }
        };
        // Hook first, and move the functions whose trampoline changes (the shared
        // trampoline finds them in the old table, with their old programs), then publish:
        // functions shared with other links never miss a call.  Attaching unhooks nothing.
        //
        // The routes' trampolines are in the images of the tables (`Arc<Image>`), or the
        // shared trampoline in the module's text: the new routes' in `table`'s, the old
        // routes' in the published table's.  A table goes only into the garbage, which
        // `free_later()` frees after an RCU tasks grace period (that follows the updates)
        // wherever an image may go with it (`updates.retired`), or which is kept for good
        // (`keep_loaded_forever()`); an image that counts its calls is freed only once
        // every call that entered it has left (rust/multi/image.rs), and the shared
        // trampoline's calls are waited for at unload (`rkf_multi_wait_frames()`).
        // SAFETY: `table` lives until it is published or goes into the garbage, as above.
        if let Err(f) = unsafe { updates.hook(s.ops) } {
            // Nothing stayed hooked; still, the new sites may have run the new table's
            // trampolines for a while: free them (and the link, whose program and
            // counters they name) only once no task can be running them.
            let garbage = Garbage {
                _table: table,
                _link: self.links.pop(),
            };
            // The link is not attached: where sites stay hooked (an undo that failed
            // otherwise than for memory), their trampolines' runs skip its program (the
            // runners check the flag), and the module stays loaded.
            garbage.mark_detached();
            if f.partial {
                pr_err!(
                    "unhooking functions after a failed attach of {}: they stay hooked\n",
                    updates.hooks()
                );
                self.diverged = true;
                keep_loaded_forever(garbage, AreaVec::new());
            } else {
                s.free_later(garbage, true);
            }
            // -EINVAL from update_ftrace_direct_add(): a site gained another direct
            // trampoline since it was checked.
            return Err(if f.err == EINVAL { EBUSY } else { f.err }.into());
        }
        // SAFETY: `table` and the published table live on, as above.
        if let Err(f) = unsafe { updates.move_sites(s.ops) } {
            // The new functions ran the new table's trampolines for a while: those, and
            // the link whose program and counters they name, go once no task runs them.
            let garbage = Garbage {
                _table: table,
                _link: self.links.pop(),
            };
            // The new sites are unhooked whatever became of the moves.
            // SAFETY: `table`, in the garbage, is freed by `free_later(garbage, true)` after
            // an RCU tasks grace period, or kept for good if the undo fails, as above.
            let unhooked = unsafe { updates.undo_hook(s.ops) };
            garbage.mark_detached();
            if f.partial || unhooked.is_err() {
                pr_err!(
                    "after a failed attach: moving {} functions back failed: {}; unhooking {}: {:?}; they stay on their trampolines\n",
                    updates.moves(),
                    f.partial,
                    updates.hooks(),
                    unhooked.err().map(|u| u.err)
                );
                self.diverged = true;
                keep_loaded_forever(garbage, AreaVec::new());
            } else {
                s.free_later(garbage, true);
            }
            return Err(f.err.into());
        }
        self.next_id += 1;
        let garbage = self.publish(table, None);
        s.free_later(garbage, updates.retired || self.diverged);
        Ok(id)
    }

    /// Detaches link `id`.
    pub(crate) fn detach(&mut self, s: &Services<'_>, id: u64) {
        let Some(pos) = self.links.iter().position(|l| l.id() == id) else {
            return;
        };
        let Ok(mut link) = self.links.remove(pos) else {
            return;
        };
        // The traced modules stay until their functions are unhooked, below.
        let modules = core::mem::replace(&mut link.modules, AreaVec::new());
        let (table, updates) = match until_memory(id, || Ok(self.next_table()?)) {
            Ok(tu) => tu,
            // Building fails only for want of memory, which is waited out (or for an
            // address that no text has, which a table's are not): defensive.
            Err(f) => {
                pr_err!("detaching link {}: {:?}; it stays attached\n", id, f.err);
                // Put it back where it was: `remove()` just made its room.  Were that to
                // fail, the link must still outlive the published table, which names its
                // program and counters: it is leaked.
                link.modules = modules;
                if let Err(e) = self.links.insert_within_capacity(pos, link) {
                    pr_err!("detaching link {}: cannot put it back; leaked\n", id);
                    core::mem::forget(e);
                }
                return;
            }
        };
        // Publish first: once no table names them, the functions the shared trampoline
        // serves run the link's program no more, and calls in flight in generated
        // trampolines (their exits, and whatever follows a sleepable program) run it no
        // more once it is marked detached.  Then move and unhook the others; the old
        // table and the link (its program and counters) go once no cpu reads that table
        // and no task runs a trampoline it had.
        link.mark_detached();
        let garbage = self.publish(table, Some(link));
        // SAFETY: the new routes' trampolines are in the published table's images or the
        // module's text, the old routes' in those of the table in `garbage`, which goes
        // only through `free_later()` after these updates (and after an RCU tasks grace
        // period wherever an image may go with it), or is kept for good, as in `commit()`.
        let moved = until_memory(id, || unsafe { updates.move_sites(s.ops) });
        // SAFETY: as for the moves.
        let unhooked = until_memory(id, || unsafe { updates.unhook(s.ops) });
        if moved.is_err() || unhooked.is_err() {
            pr_err!(
                "detaching link {}: moving {} functions: {:?}, unhooking {}: {:?}; they stay on their trampolines, with the link's program, and rkf_multi and their modules stay loaded\n",
                id,
                updates.moves(),
                moved,
                updates.unhooks(),
                unhooked
            );
            self.diverged = true;
            keep_loaded_forever(garbage, modules);
            return;
        }
        s.free_later(garbage, updates.retired || self.diverged);
        drop(modules);
    }

    /// The table of the links as they are now, and the ftrace updates from the published
    /// table to it.
    fn next_table(&mut self) -> Result<(Option<Table>, Updates)> {
        let table = Table::build(&self.links, self.table.as_ref(), &mut self.gen)?;
        let updates = Updates::between(
            self.table.iter().flat_map(|t| t.routes()),
            table.iter().flat_map(|t| t.routes()),
        )?;
        Ok((table, updates))
    }

    /// Makes `new` the table the trampolines read; returns what it replaced, with `gone`,
    /// to be freed after its grace periods.
    fn publish(&mut self, new: Option<Table>, gone: Option<Link>) -> Garbage {
        // SAFETY: publications are serialised by `&mut self` (the registry's lock); `new`
        // stays in `self.table` until the next one, and the table it replaces goes into
        // the garbage, which every caller frees after its grace periods (`free_later()`)
        // or keeps for good (`keep_loaded_forever()`).
        unsafe { table::publish(new.as_ref()) };
        Garbage {
            _table: core::mem::replace(&mut self.table, new),
            _link: gone,
        }
    }

    /// Fills `info` for link `info.id` (or `own`, the file's link, if it is 0), and
    /// returns the link, for its functions to be copied out.
    pub(crate) fn info(&self, own: u64, info: &mut LinkInfo) -> Result<&Link> {
        // Links are in id order.
        let l = if info.id == 0 {
            self.links.iter().find(|l| l.id() == own)
        } else {
            self.links.iter().find(|l| l.id() >= info.id)
        }
        .ok_or(ENOENT)?;
        info.id = l.id();
        info.prog_id = l.prog_id;
        info.kind = l.kind as u32;
        info.cnt = l.targets.len() as u32;
        info.flags = if l.counted() {
            rkf_h::RKF_MULTI_F_COUNT
        } else {
            0
        };
        info.pad = 0;
        info.next_id = self
            .links
            .iter()
            .map(|o| o.id())
            .find(|&i| i > l.id())
            .unwrap_or(0);
        Ok(l)
    }
}

/// Runs `step` of the detach of link `id` until it succeeds, or fails otherwise than for
/// want of memory with nothing changed: nobody can be told that a detach failed (the
/// link's file is gone; the kernel's own link release cannot fail either), so a lack of
/// memory is waited out, as at unload (`FtraceOps`' drop), under the registry's lock
/// (`ftrace::wait_out_enomem()`): the closing task, and every other operation of
/// rkf_multi, wait as long as memory stays short.  Each step changes
/// nothing when it fails for want of memory: building a table, and an ftrace update that
/// failed before changing a site or was undone.
fn until_memory<T>(
    id: u64,
    step: impl FnMut() -> Result<T, ftrace::Failed>,
) -> Result<T, ftrace::Failed> {
    ftrace::wait_out_enomem(
        format_args!("detaching link {id}"),
        |f: &ftrace::Failed| f.err == ENOMEM && !f.partial,
        step,
    )
}

/// Keeps rkf_multi, `garbage` and `modules` forever, after an ftrace update that failed
/// to take sites off trampolines that run their programs and code: the module's text,
/// the programs and the traced modules must stay for as long as those sites call them.
fn keep_loaded_forever(garbage: Garbage, modules: AreaVec<ModuleRef>) {
    // SAFETY: this module is alive (its code is running); the reference is never put.
    unsafe {
        kernel::bindings::__module_get(kernel::module::this_module::<crate::RkfMulti>().as_ptr())
    };
    core::mem::forget(garbage);
    core::mem::forget(modules);
}

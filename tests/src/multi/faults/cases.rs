// SPDX-License-Identifier: GPL-2.0

//! The kinds of link B the sweep attaches and detaches beside link A, each taking its
//! own paths through rkf_multi: an fentry on vmlinux functions; a session on vmlinux and
//! module functions (module references, session slots); a sleepable fentry (trampolines
//! that count calls around their programs, or with an exit beside an fexit; links freed
//! after RCU tasks trace).

use std::{
    mem::MaybeUninit,
    os::fd::{AsFd, AsRawFd, OwnedFd},
};

use anyhow::{Context, Result};

use super::{Case, Layout};
use crate::{
    check_eq,
    skel::{
        multi::MultiSkel, multi_sleepable::MultiSleepableSkel, multi_testmod::MultiTestmodSkel,
    },
};
use rkf::multi::{Func, Link};
use rkf_core::abi::AttachRequest;

/// multi.bpf.c's `count_fentry0` and `count_fexit0` counters.
const FENTRY0: usize = 0;
const FEXIT0: usize = 4;

/// multi_sleepable.bpf.c's `storm_fentry` (fentry.s) and `storm_plain` (fexit) counters.
const STORM_FENTRY_S: usize = 0;
const STORM_PLAIN: usize = 2;

/// Link B's functions, as its request sends them: the arrays the request points into.
pub(super) struct Request {
    ids: Vec<u32>,
    addrs: Vec<u64>,
    /// One BTF object fd per function (0: vmlinux), or empty: every one in vmlinux.
    btf_fds: Vec<i32>,
}

impl Request {
    pub(super) fn new(funcs: &[Func], module_btf: Option<&OwnedFd>) -> Self {
        let btf_fds = match module_btf {
            Some(fd) => funcs
                .iter()
                .map(|f| f.module.as_ref().map_or(0, |_| fd.as_raw_fd()))
                .collect(),
            None => Vec::new(),
        };
        Self {
            ids: funcs.iter().map(|f| f.btf_id).collect(),
            addrs: funcs.iter().map(|f| f.addr).collect(),
            btf_fds,
        }
    }

    pub(super) fn of(&self, prog: &impl AsFd) -> AttachRequest {
        AttachRequest {
            prog_fd: prog.as_fd().as_raw_fd() as u32,
            cnt: self.ids.len() as u32,
            btf_ids: self.ids.as_ptr() as u64,
            addrs: self.addrs.as_ptr() as u64,
            btf_fds: if self.btf_fds.is_empty() {
                0
            } else {
                self.btf_fds.as_ptr() as u64
            },
            ..AttachRequest::default()
        }
    }
}

/// Link A an fexit (`count_fexit0`) on bpf_fentry_test1..3, link B an fentry
/// (`count_fentry0`) on bpf_fentry_test2..5: two functions shared, whose generated
/// trampolines change (and bpf_fentry_test1's with them: one of the image's three
/// functions, fewer than half, does not keep it), two hooked anew; bpf_fentry_test6..9,
/// called by each run, in no link.
pub(super) struct Fentry<'o> {
    skel: MultiSkel<'o>,
    layout: Layout,
    b: Request,
}

impl<'o> Fentry<'o> {
    pub(super) fn load(obj: &'o mut MaybeUninit<libbpf_rs::OpenObject>) -> Result<Self> {
        let (skel, funcs) = crate::multi::basic::setup(obj)?;
        let layout = Layout {
            funcs,
            a_end: 3,
            b_start: 1,
            b_end: 5,
            moves: 0..3,
        };
        let b = Request::new(layout.b(), None);
        Ok(Self { skel, layout, b })
    }
}

impl Case for Fentry<'_> {
    fn name(&self) -> &'static str {
        "fentry"
    }

    fn layout(&self) -> &Layout {
        &self.layout
    }

    fn attach_a(&self) -> Result<Link> {
        crate::multi::attach(&self.skel.progs.count_fexit0, self.layout.a(), None)
    }

    fn request_b(&self) -> AttachRequest {
        self.b.of(&self.skel.progs.count_fentry0)
    }

    fn run(&mut self) -> Result<(Vec<u64>, Vec<u64>)> {
        let n = self.layout.funcs.len();
        let bss = crate::multi::basic::run_once(&mut self.skel)?;
        Ok((
            bss.counts[FEXIT0][..n].to_vec(),
            bss.counts[FENTRY0][..n].to_vec(),
        ))
    }
}

/// Link A an fexit (`count_fexit0`) on bpf_fentry_test1..3, link B a session
/// (`multi_session`) on bpf_fentry_test2..3 and the first two of rkf_testmod's four test
/// targets of up to six arguments, through rkf_testmod's BTF: the link holds a reference
/// on rkf_testmod, which every failed attach and every detach must give back.  The other
/// two targets, called by each run, are in no link.
pub(super) struct ModuleSession<'o> {
    skel: MultiSkel<'o>,
    testmod: MultiTestmodSkel<'o>,
    layout: Layout,
    b: Request,
    _btf: OwnedFd,
}

impl<'o> ModuleSession<'o> {
    pub(super) fn load(
        obj: &'o mut MaybeUninit<libbpf_rs::OpenObject>,
        tobj: &'o mut MaybeUninit<libbpf_rs::OpenObject>,
    ) -> Result<Self> {
        let mut funcs = crate::multi::basic::resolve_targets()?;
        funcs.truncate(3);
        let testmod: Vec<Func> = crate::multi::testmod::testmod_targets()?
            .into_iter()
            .filter(|f| f.nr_args <= 6)
            .collect();
        check_eq!(
            testmod.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
            [
                "rkf_testmod_multi_test1",
                "rkf_testmod_multi_test2",
                "rkf_testmod_multi_test3",
                "rkf_testmod_multi_test6"
            ],
            "rkf_testmod's test targets of up to six arguments"
        );
        funcs.extend(testmod);
        let skel = crate::multi::basic::load(obj, &funcs)?;
        let testmod = crate::multi::testmod::load_testmod(tobj)?;
        let btf = rkf::btf::object_fd("rkf_testmod")?;
        let layout = Layout {
            funcs,
            a_end: 3,
            b_start: 1,
            b_end: 5,
            moves: 0..3,
        };
        let b = Request::new(layout.b(), Some(&btf));
        Ok(Self {
            skel,
            testmod,
            layout,
            b,
            _btf: btf,
        })
    }
}

impl Case for ModuleSession<'_> {
    fn name(&self) -> &'static str {
        "session on module functions"
    }

    fn layout(&self) -> &Layout {
        &self.layout
    }

    fn attach_a(&self) -> Result<Link> {
        crate::multi::attach(&self.skel.progs.count_fexit0, self.layout.a(), None)
    }

    fn request_b(&self) -> AttachRequest {
        self.b.of(&self.skel.progs.multi_session)
    }

    /// B's runs are the session's entries; each must have had its exit, which found the
    /// cookie its entry wrote into a zeroed one.
    fn run(&mut self) -> Result<(Vec<u64>, Vec<u64>)> {
        let n = self.layout.funcs.len();
        crate::multi::basic::reset(&mut self.skel)?;
        crate::multi::basic::trigger(&self.skel)?;
        crate::multi::testmod::run_testmod_targets(&self.testmod)?;
        let bss = self.skel.maps.bss_data.as_deref().context("no .bss")?;
        check_eq!(bss.unknown_ip, 0, "session runs on an unexpected function");
        let recs = &bss.session_recs[..n];
        for (f, r) in self.layout.funcs.iter().zip(recs) {
            check_eq!(
                (r.exits, r.cookie_ok, r.nonzero_cookie, r.err),
                (r.entries, r.entries, 0, 0),
                "{}: the session's (exits, exits that found their cookie, entries that \
                 found a cookie set, helper errors) against its {} entries",
                f.name,
                r.entries
            );
        }
        Ok((
            bss.counts[FEXIT0][..n].to_vec(),
            recs.iter().map(|r| r.entries).collect(),
        ))
    }
}

/// Link A an fexit (`storm_plain`) on getpgid(2) and getsid(2)'s wrappers, link B a
/// sleepable fentry (`storm_fentry`) on getsid(2), getpriority(2) and
/// sched_getscheduler(2)'s: functions that may sleep, a program that may.  getsid(2)'s
/// trampoline has an exit, for A's fexit; the other two count their calls around B's
/// program.
pub(super) struct Sleepable<'o> {
    skel: MultiSleepableSkel<'o>,
    layout: Layout,
    b: Request,
}

impl<'o> Sleepable<'o> {
    pub(super) fn load(obj: &'o mut MaybeUninit<libbpf_rs::OpenObject>) -> Result<Self> {
        let funcs = crate::multi::sleepable::storm_targets()?;
        let skel = crate::multi::sleepable::load(obj, &funcs)?;
        let layout = Layout {
            b_end: funcs.len(),
            funcs,
            a_end: 2,
            b_start: 1,
            moves: 1..2,
        };
        let b = Request::new(layout.b(), None);
        Ok(Self { skel, layout, b })
    }
}

impl Case for Sleepable<'_> {
    fn name(&self) -> &'static str {
        "sleepable fentry"
    }

    fn layout(&self) -> &Layout {
        &self.layout
    }

    fn attach_a(&self) -> Result<Link> {
        crate::multi::attach(&self.skel.progs.storm_plain, self.layout.a(), None)
    }

    fn request_b(&self) -> AttachRequest {
        self.b.of(&self.skel.progs.storm_fentry)
    }

    /// The programs count this process's calls only.
    fn run(&mut self) -> Result<(Vec<u64>, Vec<u64>)> {
        let n = self.layout.funcs.len();
        let bss = self.skel.maps.bss_data.as_deref_mut().context("no .bss")?;
        for c in bss.storm_counts.iter_mut() {
            c.fill(0);
        }
        bss.unknown_ip = 0;
        // SAFETY: none of the four has a memory argument.
        unsafe {
            libc::getpgid(0);
            libc::getsid(0);
            libc::getpriority(libc::PRIO_PROCESS, 0);
            libc::sched_getscheduler(0);
        }
        let bss = self.skel.maps.bss_data.as_deref().context("no .bss")?;
        check_eq!(bss.unknown_ip, 0, "runs on an unexpected function");
        Ok((
            bss.storm_counts[STORM_PLAIN][..n].to_vec(),
            bss.storm_counts[STORM_FENTRY_S][..n].to_vec(),
        ))
    }
}

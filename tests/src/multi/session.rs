// SPDX-License-Identifier: GPL-2.0

//! Session programs (`RKF_MULTI_FSESSION`), after upstream's `test_session`
//! (tools/testing/selftests/bpf/prog_tests/tracing_multi.c and
//! progs/tracing_multi_session_attach.c): one program on entry and on exit of each
//! function, `bpf_session_is_return()` telling the runs apart and `bpf_session_cookie()`
//! carrying a value from the entry run to the exit run of the same call.  Each test runs
//! through generated session trampolines, then through the shared trampoline (rkf_multi
//! reloaded with `generate=0`).

use std::{mem::MaybeUninit, time::Duration};

use anyhow::{Context, Result};
use rkf::multi;
use rkf_core::{abi::Kind, multi::Reason};

use super::{
    attach,
    basic::{check_arg, reset, run_once, setup, Want, CALLS, NR_COUNTERS},
    refusal,
    testmod::{run_testmod_targets, testmod_targets, TESTMOD_CALLS},
    tramps::{check_tramps, Tramp},
};
use crate::{check, check_eq, skel::multi::types::srec};

/// What `multi_session` (tests/progs/multi.bpf.c) writes into the cookie on entry.
const SESSION_COOKIE: u64 = 0xbeaf_beaf_beaf_beaf;

/// The checks every function's record passes after one call: one entry and one exit run,
/// the entry's cookie zeroed and read back on exit, the return value 0 on entry both
/// through ctx and bpf_get_func_ret(), the helper's return value equal to ctx's on exit,
/// and the attach cookie.
fn check_runs(f: &multi::Func, r: &srec, cookie: u64) -> Result<()> {
    check_eq!(r.entries, 1, "{}: entry runs", f.name);
    check_eq!(r.exits, 1, "{}: exit runs", f.name);
    check_eq!(
        r.nonzero_cookie,
        0,
        "{}: entry runs that found a cookie set",
        f.name
    );
    check_eq!(
        r.cookie_ok,
        1,
        "{}: exit runs that read back the entry's cookie ({:#x} ^ ip)",
        f.name,
        SESSION_COOKIE
    );
    check_eq!(
        r.err,
        0,
        "{}: helper errors or a changed argument count",
        f.name
    );
    check_eq!(
        r.entry_ret,
        0,
        "{}: the return value on entry (ctx)",
        f.name
    );
    check_eq!(
        r.entry_helper_ret,
        0,
        "{}: the return value on entry (bpf_get_func_ret())",
        f.name
    );
    check_eq!(
        r.exit_helper_ret,
        r.exit_ret,
        "{}: bpf_get_func_ret() against ctx on exit",
        f.name
    );
    check_eq!(
        r.nr_args,
        u64::from(f.nr_args),
        "{}: bpf_get_func_arg_cnt()",
        f.name
    );
    check_eq!(
        r.attach_cookie,
        cookie,
        "{}: bpf_get_attach_cookie()",
        f.name
    );
    Ok(())
}

/// A session link on bpf_fentry_test1..9 beside an fentry and an fexit link on the same
/// functions, then on rkf_testmod's targets: each call runs the session once on entry
/// and once on exit with its own cookie, sees the arguments on both runs and the return
/// value on exit, each at its type; the other links count one call each.
pub(super) fn session_vmlinux_and_module() -> Result<()> {
    Tramp::run_both(vmlinux_and_module)
}

fn vmlinux_and_module(tramp: Tramp) -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    let cookies: Vec<u64> = (0..funcs.len() as u64).map(|i| 0x5e55_0000 + i).collect();
    let session = attach(&skel.progs.multi_session, &funcs, Some(&cookies))?;
    let _fentry = attach(&skel.progs.count_fentry0, &funcs, None)?;
    let _fexit = attach(&skel.progs.count_fexit1, &funcs, None)?;
    check_eq!(session.info()?.kind, Kind::Session, "the link's kind");
    check_tramps(&funcs, tramp, "session, fentry and fexit")?;
    let bss = run_once(&mut skel)?;
    check_eq!(
        bss.unknown_ip,
        0,
        "calls with an unexpected bpf_get_func_ip()"
    );
    for (i, f) in funcs.iter().enumerate() {
        let r = &bss.session_recs[i];
        check_runs(f, r, cookies[i])?;
        let (args, ret) = CALLS[i];
        for (j, &want) in args.iter().enumerate() {
            let (entry, exit) = (r.entry_args[j], r.exit_args[j]);
            let (pointee, err) = (r.pointee, r.pointee_err);
            check_arg(
                &format!("{} on entry", f.name),
                j,
                want,
                entry,
                pointee,
                err,
            )?;
            match want {
                // Read through on entry only: the same pointer on exit.
                Want::ZeroedLocal(_) => {
                    check_eq!(
                        exit,
                        entry,
                        "{}: argument {j} on exit against entry",
                        f.name
                    )
                }
                Want::Val(..) => check_arg(&format!("{} on exit", f.name), j, want, exit, 0, 0)?,
            }
        }
        // bpf_fentry_test*() return int, compared at that type (as in fexit_ret()).
        check_eq!(
            r.exit_ret as u32,
            ret as u32,
            "{}: the return value on exit",
            f.name
        );
        check_eq!(bss.counts[0][i], 1, "{}: the fentry link beside it", f.name);
        check_eq!(
            bss.counts[NR_COUNTERS + 1][i],
            1,
            "{}: the fexit link beside it",
            f.name
        );
    }
    drop(session);

    let funcs = testmod_targets()?;
    let mut obj = MaybeUninit::uninit();
    let mut skel = super::basic::load(&mut obj, &funcs)?;
    let mut tobj = MaybeUninit::uninit();
    let tm = super::testmod::load_testmod(&mut tobj)?;
    let cookies: Vec<u64> = (0..funcs.len() as u64).map(|i| 0x5e55_1000 + i).collect();
    let _session = attach(&skel.progs.multi_session, &funcs, Some(&cookies))?;
    check_tramps(&funcs, tramp, "a session on rkf_testmod's targets")?;
    reset(&mut skel)?;
    run_testmod_targets(&tm)?;
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    check_eq!(
        bss.unknown_ip,
        0,
        "calls with an unexpected bpf_get_func_ip()"
    );
    for (i, (f, (_, args, (rmask, ret)))) in funcs.iter().zip(TESTMOD_CALLS).enumerate() {
        let r = &bss.session_recs[i];
        check_runs(f, r, cookies[i])?;
        for (j, &(mask, v)) in args.iter().enumerate() {
            check_eq!(
                r.entry_args[j] & mask,
                v,
                "{}: argument {j} on entry",
                f.name
            );
            check_eq!(r.exit_args[j] & mask, v, "{}: argument {j} on exit", f.name);
        }
        check_eq!(
            r.exit_ret & rmask,
            ret,
            "{}: the return value on exit",
            f.name
        );
    }
    Ok(())
}

/// Releases a task blocked reading an eventfd when the test ends, also on failure.
struct Release(std::sync::Arc<nix::sys::eventfd::EventFd>);

impl Drop for Release {
    fn drop(&mut self) {
        let _ = self.0.write(1);
    }
}

/// A call in flight when sessions come and go: session 0 stays, session 2 detaches and
/// session 1 attaches while a task is blocked inside eventfd_read() (which nothing else
/// in the VM reads; only that task is counted).  Session 0 runs on entry and on exit with
/// its cookie; session 2 ran on entry and runs no more; session 1, attached after the
/// entry, does not run on that call's exit.
pub(super) fn session_in_flight() -> Result<()> {
    Tramp::run_both(in_flight)
}

fn in_flight(tramp: Tramp) -> Result<()> {
    use nix::sys::eventfd::EventFd;
    use std::sync::Arc;
    use std::time::Instant;

    let mut obj = MaybeUninit::uninit();
    let (mut skel, _) = setup(&mut obj)?;
    let read = multi::resolve(&["eventfd_read"])?.funcs;
    check_eq!(read.len(), 1, "eventfd_read resolved");
    let event = Arc::new(EventFd::new().context("eventfd")?);
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let ev = event.clone();
    let reader = std::thread::spawn(move || {
        let _ = tid_tx.send(nix::unistd::gettid().as_raw());
        let _ = go_rx.recv();
        ev.read()
    });
    let _release = Release(event.clone());
    let tid = tid_rx.recv().context("the reader's task id")?;
    reset(&mut skel)?;
    {
        let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
        bss.target_pid = tid as u32;
        bss.task_only = true;
    }
    // The one that goes first: on entry the one that stays has the second cookie, on
    // exit it is the first session of the function in the shared trampoline's table, so
    // there its exit run must find its cookie by its link, not by its place (a generated
    // trampoline's exit runs are those of its own code, the entry's).
    let goes = attach(&skel.progs.session2, &read, None)?;
    let _stays = attach(&skel.progs.session0, &read, None)?;
    check_tramps(&read, tramp, "two sessions")?;
    go_tx.send(()).context("starting the reader")?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !crate::lifecycle::blocked_in(tid, "eventfd_read")? {
        check!(
            Instant::now() < deadline,
            "the reader never blocked in eventfd_read()"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    check_eq!(
        (
            bss.sess_entry[0],
            bss.sess_entry[2],
            bss.sess_exit[0],
            bss.sess_exit[2]
        ),
        (1, 1, 0, 0),
        "entry runs of sessions 0 and 2, exit runs, while the reader is blocked"
    );
    let _late = attach(&skel.progs.session1, &read, None)?;
    drop(goes);
    event.write(1).context("releasing the reader")?;
    let value = reader
        .join()
        .expect("the reader panicked")
        .context("eventfd read")?;
    check_eq!(value, 1, "the value the reader read");
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    check_eq!(
        bss.sess_entry[..3],
        [1, 0, 1],
        "entry runs of sessions 0 (stays), 1 (attached in flight), 2 (detached in flight)"
    );
    check_eq!(
        bss.sess_exit[..3],
        [1, 0, 0],
        "exit runs of sessions 0, 1, 2"
    );
    check_eq!(
        bss.sess_cookie_ok[0],
        1,
        "session 0 read back its cookie on exit"
    );
    check_eq!(
        bss.sess_nonzero_cookie[..3],
        [0, 0, 0],
        "entry runs that found a cookie set"
    );
    Ok(())
}

/// Eight session programs on one function, each with its own cookie, beside fentry and
/// fexit programs; a ninth is refused with E2BIG naming the function
/// (`Reason::TooManySessions`), and the eight still run.
pub(super) fn session_limit() -> Result<()> {
    Tramp::run_both(limit)
}

fn limit(tramp: Tramp) -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    let one = &funcs[..1];
    let progs = [
        &skel.progs.session0,
        &skel.progs.session1,
        &skel.progs.session2,
        &skel.progs.session3,
        &skel.progs.session4,
        &skel.progs.session5,
        &skel.progs.session6,
        &skel.progs.session7,
    ];
    let mut links = Vec::new();
    for p in progs {
        links.push(attach(p, one, None)?);
    }
    let _fentry = attach(&skel.progs.count_fentry0, one, None)?;
    let _fexit = attach(&skel.progs.count_fexit1, one, None)?;
    check_tramps(one, tramp, "eight sessions, fentry and fexit")?;
    refusal(
        &skel.progs.session8,
        one,
        None,
        (libc::E2BIG, Some((0, Reason::TooManySessions))),
        "a ninth session program on one function",
    )?;
    let bss = run_once(&mut skel)?;
    let want: Vec<u64> = (0..9).map(|k| u64::from(k < 8)).collect();
    check_eq!(bss.sess_entry[..], want[..], "entry runs of sessions 0..8");
    check_eq!(bss.sess_exit[..], want[..], "exit runs of sessions 0..8");
    check_eq!(
        bss.sess_cookie_ok[..],
        want[..],
        "exit runs that read back their own session's cookie"
    );
    check_eq!(
        bss.sess_nonzero_cookie[..],
        [0; 9][..],
        "entry runs that found a cookie set"
    );
    check_eq!(
        (bss.counts[0][0], bss.counts[NR_COUNTERS + 1][0]),
        (1, 1),
        "the fentry and fexit links beside them"
    );
    drop(links);
    Ok(())
}

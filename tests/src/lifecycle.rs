// SPDX-License-Identifier: GPL-2.0

//! Module lifecycle: pinned while programs use it, refused when it cannot work, and
//! reloadable.  These tests unload and reload the modules, so they run last.

use std::{
    mem::MaybeUninit,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result};
use rkf::skeleton;

mod asleep;

use crate::{
    check, check_eq, diag,
    harness::Test,
    kmod::{insmod, moddir, rmmod, rmmod_wait, LogCursor},
    multi::tramps::with_shared_only,
    skel::percpu::PercpuSkelBuilder,
};

pub const TESTS: &[Test] = &[
    Test {
        name: "percpu_module_pinned_by_program",
        run: pinned_by_program,
    },
    Test {
        name: "percpu_module_without_btf_refused",
        run: without_btf_refused,
    },
    Test {
        name: "percpu_module_for_other_kernel_refused",
        run: other_kernel_refused,
    },
    Test {
        name: "stack_sysctl_busy_while_loaded",
        run: stack_sysctl_busy,
    },
    Test {
        name: "stack_module_reload_cycles",
        run: stack_reload_cycles,
    },
    Test {
        name: "multi_module_pinned_by_link",
        run: multi_pinned_by_link,
    },
    Test {
        name: "multi_traced_module_pinned_by_link",
        run: multi_traced_module_pinned,
    },
    Test {
        name: "multi_rmmod_with_shared_frame_in_flight",
        run: || with_shared_only(|| multi_rmmod_in_flight(InFlight::Shared)),
    },
    Test {
        name: "multi_rmmod_with_shared_fexit_frame_in_flight",
        run: || with_shared_only(|| multi_rmmod_in_flight(InFlight::SharedFexit)),
    },
    Test {
        name: "multi_rmmod_with_fexit_in_flight",
        run: || multi_rmmod_in_flight(InFlight::Fexit),
    },
    Test {
        name: "multi_rmmod_with_session_in_flight",
        run: || multi_rmmod_in_flight(InFlight::Session),
    },
    Test {
        name: "multi_sleepable_program_asleep_detach_and_rmmod",
        run: asleep::sleepable_program_asleep,
    },
    Test {
        name: "multi_sleepable_image_kept_by_its_count",
        run: asleep::image_kept_by_its_count,
    },
    Test {
        name: "multi_shared_exit_after_move_to_generated",
        run: asleep::shared_exit_after_move,
    },
];

/// Which trampoline the call in flight went through.
#[derive(Clone, Copy, PartialEq, Eq)]
enum InFlight {
    /// The shared one (a session program, rkf_multi loaded with `generate=0`): module
    /// text, which rmmod waits for.
    Shared,
    /// The same, through an fexit program.
    SharedFexit,
    /// A generated fexit trampoline, BPF text: rmmod leaves it behind, dead.
    Fexit,
    /// A generated session trampoline, the same.
    Session,
}

const STACK: &str = "rkf_stack";
const MAX_STACK: &str = "/proc/sys/kernel/perf_event_max_stack";

/// Writes `kernel.perf_event_max_stack` (its current value, so nothing changes).
fn write_max_stack() -> std::io::Result<()> {
    let v = std::fs::read_to_string(MAX_STACK)?;
    std::fs::write(MAX_STACK, v.trim())
}

/// rkf_stack holds the perf callchain buffers while it is loaded, as a program that calls
/// bpf_get_stack() does: the sysctl that sizes them cannot change meanwhile.
fn stack_sysctl_busy() -> Result<()> {
    rkf::modules::require(STACK)?;
    let ko = moddir()?.join(format!("{STACK}.ko"));
    let err = write_max_stack()
        .err()
        .context("kernel.perf_event_max_stack changed while rkf_stack holds the buffers")?;
    diag!("write {MAX_STACK} with rkf_stack loaded: {err}");
    check_eq!(
        err.raw_os_error(),
        Some(libc::EBUSY),
        "errno of the sysctl write"
    );
    rmmod_wait(STACK, Duration::from_secs(10))?;
    // Programs of earlier tests that called the helper may still be on their way out.
    let start = std::time::Instant::now();
    let res = loop {
        match write_max_stack() {
            Err(e)
                if e.raw_os_error() == Some(libc::EBUSY)
                    && start.elapsed() < Duration::from_secs(10) =>
            {
                std::thread::sleep(Duration::from_millis(50))
            }
            r => break r,
        }
    };
    insmod(&ko).context("insmod rkf_stack again")?;
    res.context("the sysctl write after rmmod rkf_stack")?;
    Ok(())
}

/// Loads and unloads rkf_stack repeatedly; the kmemleak scan after the run (guest script)
/// and the splat check catch what this leaks or breaks.
fn stack_reload_cycles() -> Result<()> {
    let ko = moddir()?.join(format!("{STACK}.ko"));
    for i in 0..5 {
        rmmod_wait(STACK, Duration::from_secs(10)).with_context(|| format!("cycle {i}"))?;
        insmod(&ko).with_context(|| format!("insmod, cycle {i}"))?;
    }
    rkf::modules::require(STACK)?;
    crate::stack::differential::smoke().context("the kfuncs after the cycles")
}

const MODULE: &str = "rkf_percpu";

fn ko() -> Result<PathBuf> {
    Ok(moddir()?.join(format!("{MODULE}.ko")))
}

fn pinned_by_program() -> Result<()> {
    rkf::modules::require(MODULE)?;
    {
        let mut obj = MaybeUninit::uninit();
        let _skel =
            skeleton::load::<PercpuSkelBuilder>(&mut obj, "percpu.bpf.c", skeleton::as_built)?;
        rmmod_refused(MODULE, "a program uses its kfuncs")?;
    }
    // The program is gone (its fd closed); the module goes once the kernel frees it.
    rmmod_wait(MODULE, Duration::from_secs(10))?;
    check!(
        !std::path::Path::new("/sys/module").join(MODULE).exists(),
        "{MODULE} is unloaded"
    );
    insmod(&ko()?).context("insmod again")?;
    rkf::modules::require(MODULE)?;
    // The reloaded module works.
    crate::percpu::run_all().context("kfuncs after reload")?;
    Ok(())
}

/// Unloads rkf_percpu, tries `candidate` in its place, loads the real module again
/// whatever happened, and checks that `candidate` was refused with ENOEXEC and a kernel
/// log line containing one of `reasons`.
fn expect_refused(candidate: &Path, what: &str, reasons: &[&str]) -> Result<()> {
    rmmod_wait(MODULE, Duration::from_secs(10))?;
    let mut log = LogCursor::now()?;
    let res = insmod(candidate);
    let log = log.since()?;
    insmod(&ko()?).context("insmod the real module again")?;
    let err = res.err().with_context(|| format!("{what} loaded"))?;
    diag!("insmod {}: {err}", candidate.display());
    check_eq!(
        err.raw_os_error(),
        Some(libc::ENOEXEC),
        "insmod errno of {what}"
    );
    let line = log.lines().find(|l| reasons.iter().any(|r| l.contains(r)));
    check!(
        line.is_some(),
        "dmesg explains the refusal; it says: {log:?}"
    );
    diag!("dmesg: {}", line.unwrap_or_default().trim());
    Ok(())
}

fn without_btf_refused() -> Result<()> {
    // Made by `make vm-test` with llvm-objcopy --remove-section=.BTF, like a module built
    // against a tree without vmlinux.
    let stripped = moddir()?.join(format!("{MODULE}-nobtf.ko"));
    check!(
        stripped.exists(),
        "{} exists (made by make vm-test)",
        stripped.display()
    );
    expect_refused(&stripped, "a module without BTF", &["has no .BTF section"])
}

fn other_kernel_refused() -> Result<()> {
    let foreign: PathBuf = std::env::var_os("RKF_FOREIGN_MODDIR")
        .context(
            "RKF_FOREIGN_MODDIR is not set: it names modules built for the other kernel flavour",
        )?
        .into();
    // The kernel checks the size of struct module first (it differs between the flavours:
    // lockdep grows it), then the version magic; either must explain the refusal.
    expect_refused(
        &foreign.join(format!("{MODULE}.ko")),
        "a module built for another kernel",
        &["version magic", "struct module size"],
    )
}

pub(crate) const MULTI: &str = "rkf_multi";

/// rmmod of `module` must fail with EAGAIN ("in use") because `why`.
fn rmmod_refused(module: &str, why: &str) -> Result<()> {
    let err = rmmod(module)
        .err()
        .with_context(|| format!("rmmod {module} succeeded while {why}"))?;
    diag!("rmmod {module} while {why}: {err}");
    check_eq!(
        err.raw_os_error(),
        Some(libc::EAGAIN),
        "rmmod {module} errno while {why}"
    );
    Ok(())
}

/// A link pins rkf_multi (through its program); after close the module unloads and
/// reloads, and works.
fn multi_pinned_by_link() -> Result<()> {
    rkf::modules::require(MULTI)?;
    let ko = moddir()?.join(format!("{MULTI}.ko"));
    {
        let mut obj = MaybeUninit::uninit();
        let (skel, funcs) = crate::multi::basic::setup(&mut obj)?;
        let _link = rkf::multi::Link::attach(&skel.progs.count_fentry0, &funcs, None)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        rmmod_refused(MULTI, "a link exists")?;
    }
    rmmod_wait(MULTI, Duration::from_secs(20))?;
    insmod(&ko).context("insmod rkf_multi again")?;
    crate::multi::basic::smoke().context("rkf_multi after reload")
}

/// A link on functions of another module (rkf_testmod) pins that module, as a BPF
/// trampoline on a module function does; after close it unloads, reloads, and its
/// functions can be traced again.
fn multi_traced_module_pinned() -> Result<()> {
    const TESTMOD: &str = "rkf_testmod";
    const TARGETS: &str = "rkf_testmod:rkf_testmod_multi_test*";
    rkf::modules::require(MULTI)?;
    rkf::modules::require(TESTMOD)?;
    let ko = moddir()?.join(format!("{TESTMOD}.ko"));
    let mut obj = MaybeUninit::uninit();
    let (skel, _) = crate::multi::basic::setup(&mut obj)?;
    {
        let funcs = rkf::multi::resolve(&[TARGETS])?.funcs;
        let _link = rkf::multi::Link::attach(&skel.progs.count_fentry0, &funcs, None)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        rmmod_refused(TESTMOD, "rkf_multi traces its functions")?;
    }
    rmmod_wait(TESTMOD, Duration::from_secs(20))?;
    insmod(&ko).context("insmod rkf_testmod again")?;
    // The reloaded module's functions (new addresses, new BTF object) attach, and run
    // the program once for each call.
    crate::multi::testmod::testmod_smoke().context("rkf_testmod's functions after its reload")
}

/// rmmod right after heavy fexit traffic, with a task blocked inside a traced function,
/// its call in flight.
///
/// Through the shared trampoline (`Shared` with a session program, `SharedFexit` with an
/// fexit one: rkf_multi loaded with `generate=0`), the
/// unload waits for the task to come back through the trampoline's module text, which
/// then runs no program, and nothing breaks.
/// Through a generated fexit or session trampoline (`Fexit`, `Session`), BPF text
/// outside the module, the unload does not wait: the image is declared dead and left
/// behind (kallsyms names it `rkf_multi_leaked_<n>`, dmesg says so), and the task comes
/// back through it later, with the value it read, after rkf_multi is gone, calling
/// nothing of it.
///
/// The task blocks reading an eventfd (in `eventfd_read()`, which nothing else in the VM
/// reads) until the test writes to it, which it does only once rmmod is seen waiting
/// (the module is `going`) or, for `Generated`, done: no step depends on how fast the
/// machine is.
fn multi_rmmod_in_flight(via: InFlight) -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    use nix::sys::eventfd::EventFd;

    rkf::modules::require(MULTI)?;
    let ko = moddir()?.join(format!("{MULTI}.ko"));
    let generated = !matches!(via, InFlight::Shared | InFlight::SharedFexit);
    let mut log_since = LogCursor::now()?;
    let event = Arc::new(EventFd::new().context("eventfd")?);
    /// Releases the reader when the test ends, also on failure: a task left blocked in a
    /// traced function would hold up rmmod, and the runner's exit, for good.
    struct Release(Arc<EventFd>);
    impl Drop for Release {
        fn drop(&mut self) {
            let _ = self.0.write(1);
        }
    }
    let release;
    let sleeper = {
        let mut obj = MaybeUninit::uninit();
        let (skel, funcs) = crate::multi::basic::setup(&mut obj)?;
        let read = rkf::multi::resolve(&["eventfd_read"])?.funcs;
        let _traffic = rkf::multi::Link::attach(&skel.progs.count_fexit2, &funcs, None)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let blocked = match via {
            InFlight::Shared | InFlight::Session => {
                rkf::multi::Link::attach(&skel.progs.session0, &read, None)
            }
            InFlight::SharedFexit | InFlight::Fexit => {
                rkf::multi::Link::attach(&skel.progs.count_fexit3, &read, None)
            }
        }
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let tramp = if generated {
            crate::multi::tramps::Tramp::Generated
        } else {
            crate::multi::tramps::Tramp::Shared
        };
        crate::multi::tramps::check_tramps(&read, tramp, "the blocked reader's function")?;
        // Enters eventfd_read() through the trampoline, fexit pending, until the test
        // writes the eventfd.
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let ev = event.clone();
        let sleeper = std::thread::spawn(move || {
            let _ = tid_tx.send(nix::unistd::gettid().as_raw());
            ev.read()
        });
        let tid = tid_rx.recv().context("the reader's task id")?;
        release = Release(event.clone());
        // It cannot return before the write: wait until it sleeps in eventfd_read().
        let deadline = Instant::now() + Duration::from_secs(120);
        while !blocked_in(tid, "eventfd_read")? {
            check!(
                Instant::now() < deadline,
                "the reader never blocked in eventfd_read()"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if generated {
            let stack = kernel_stack(tid)?;
            check!(
                stack.iter().any(|f| f.starts_with("rkf_multi_image_")),
                "the reader's stack shows no generated trampoline: {stack:?}"
            );
        }
        let stop = AtomicBool::new(false);
        let fd =
            std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(&skel.progs.plain_fentry));
        std::thread::scope(|s| -> Result<()> {
            let t: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| -> Result<u64> {
                        let mut n = 0;
                        while !stop.load(Ordering::Relaxed) {
                            crate::multi::test_run_fd(fd)?;
                            n += 1;
                        }
                        Ok(n)
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(1000));
            stop.store(true, Ordering::Relaxed);
            let mut runs = 0;
            for t in t {
                let n = t.join().expect("traffic thread panicked")?;
                diag!("fexit traffic: {n} runs of {} functions", funcs.len());
                check!(n > 0, "a traffic thread ran nothing");
                runs += n;
            }
            // Only these runs call bpf_fentry_testN: the fexit program ran on each of
            // them, on every function.
            let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
            check_eq!(
                bss.counts[crate::multi::basic::NR_COUNTERS + 2][..funcs.len()],
                vec![runs; funcs.len()][..],
                "the fexit traffic's program runs on each function"
            );
            Ok(())
        })?;
        drop(blocked);
        sleeper
    };
    // Links closed, programs released, the reader still inside eventfd_read(): nothing
    // wrote.
    check!(
        !sleeper.is_finished(),
        "the reader came back before anything was written"
    );
    let leaked_before = leaked_images()?;
    let rmmod = std::thread::spawn(|| {
        // The links' programs are released after grace periods: rmmod is refused (EAGAIN)
        // until then.
        let r = rmmod_wait(MULTI, Duration::from_secs(120));
        (r, Instant::now())
    });
    if generated {
        // rkf_multi unloads with the reader still inside: its image stays, dead.
        let (unloaded, _) = rmmod.join().expect("the rmmod thread panicked");
        unloaded?;
        check!(
            !sleeper.is_finished(),
            "the reader came back before anything was written"
        );
        check_eq!(module_state(MULTI)?, None, "rkf_multi's state after rmmod");
        let leaked: Vec<String> = leaked_images()?
            .into_iter()
            .filter(|l| !leaked_before.contains(l))
            .map(|(n, _)| n)
            .collect();
        check!(
            !leaked.is_empty(),
            "no image left behind in kallsyms with a call in flight"
        );
        let log = log_since.since()?;
        check!(
            leaked.iter().any(|l| log.contains(&format!(
                "{}: 1 calls never came back; left behind, dead",
                l.replace("leaked", "image")
            ))),
            "dmesg does not name the image left behind ({leaked:?}): {log}"
        );
        event.write(7).context("releasing the reader")?;
        let r = sleeper.join().expect("the reader panicked");
        drop(release);
        check_eq!(
            r,
            Ok(7),
            "eventfd read() back through the dead image: the value written"
        );
        insmod(&ko).context("insmod rkf_multi again")?;
        return crate::multi::basic::smoke().context("rkf_multi after reload");
    }
    // rmmod runs the module's exit, which waits for the reader's frame: the module is
    // going, and stays so while the reader is blocked.
    let deadline = Instant::now() + Duration::from_secs(120);
    while module_state(MULTI)?.as_deref() != Some("going") {
        check!(
            !rmmod.is_finished(),
            "rmmod finished with a session frame in flight"
        );
        check!(
            Instant::now() < deadline,
            "rmmod never started unloading rkf_multi"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    check!(
        !rmmod.is_finished(),
        "rmmod finished while a task was still inside a traced function"
    );
    // The frame cannot return before this write: rmmod, still running above with the
    // reader blocked, finishes after it (how long after, for the log).
    let released = Instant::now();
    event.write(7).context("releasing the reader")?;
    let r = sleeper.join().expect("the reader panicked");
    drop(release);
    let (unloaded, unloaded_at) = rmmod.join().expect("the rmmod thread panicked");
    unloaded?;
    diag!(
        "rkf_multi unloaded {:?} after the reader was released",
        unloaded_at.saturating_duration_since(released)
    );
    check_eq!(
        r,
        Ok(7),
        "eventfd read() through the trampoline: the value written"
    );
    insmod(&ko).context("insmod rkf_multi again")?;
    crate::multi::basic::smoke().context("rkf_multi after reload")
}

/// The images of generated trampolines rkf_multi left behind when it unloaded with calls
/// in flight inside them: BPF text that kallsyms names `rkf_multi_leaked_<n>`, by name and
/// address (the numbers start again at each load of rkf_multi).
pub(crate) fn leaked_images() -> Result<Vec<(String, u64)>> {
    bpf_text_symbols(|name| name.starts_with("rkf_multi_leaked_"))
}

/// The BPF text symbols in kallsyms (module `bpf`) whose name passes `keep`, by name and
/// address.
pub(crate) fn bpf_text_symbols(keep: impl Fn(&str) -> bool) -> Result<Vec<(String, u64)>> {
    Ok(rkf::kallsyms::Kallsyms::load()?
        .symbols()
        .iter()
        .filter(|s| s.module.as_deref() == Some("bpf") && keep(&s.name))
        .map(|s| (s.name.clone(), s.addr))
        .collect())
}

/// Runs task `tid` of this process (0: the calling thread) on cpu `cpu` only.
pub(crate) fn pin(tid: i32, cpu: usize) -> Result<()> {
    use nix::{sched::CpuSet, unistd::Pid};
    let mut set = CpuSet::new();
    set.set(cpu).context("CpuSet::set")?;
    nix::sched::sched_setaffinity(Pid::from_raw(tid), &set)
        .with_context(|| format!("pinning task {tid} to cpu {cpu}"))
}

/// The fields of /proc/self/task/TID/stat from the third, the state, on: they follow the
/// command's closing parenthesis.
pub(crate) fn task_stat(tid: i32) -> Result<Vec<String>> {
    stat_fields(&format!("/proc/self/task/{tid}/stat"))
}

/// The fields of a proc(5) stat file (/proc/PID/stat, /proc/PID/task/TID/stat) from the
/// third, the state, on: field N is at N - 3.
pub(crate) fn stat_fields(path: &str) -> Result<Vec<String>> {
    let stat = std::fs::read_to_string(path).with_context(|| path.to_owned())?;
    let (_, rest) = stat
        .rsplit_once(") ")
        .with_context(|| format!("no fields in {path}: {stat}"))?;
    Ok(rest.split(' ').map(str::to_owned).collect())
}

/// Whether task `tid` of this process sleeps (state `S`) with the kernel function `func`
/// on its kernel stack (/proc/self/task/TID/stat and stack).
pub(crate) fn blocked_in(tid: i32, func: &str) -> Result<bool> {
    // S is an interruptible sleep.
    let sleeping = task_stat(tid)?.first().is_some_and(|state| state == "S");
    // Not the wait channel: that is the first frame outside the scheduler, which can be a
    // helper the function sleeps in (GCC's build sleeps in do_wait_intr_irq() for
    // eventfd_read()).
    let in_func = kernel_stack(tid)?
        .iter()
        .any(|f| f.split_once('+').is_some_and(|(name, _)| name == func));
    Ok(sleeping && in_func)
}

/// The kernel stack of task `tid` of this process (/proc/self/task/TID/stack), one
/// `function+0xoffset` a frame.
pub(crate) fn kernel_stack(tid: i32) -> Result<Vec<String>> {
    let stack = std::fs::read_to_string(format!("/proc/self/task/{tid}/stack"))
        .with_context(|| format!("the kernel stack of task {tid}"))?;
    // Lines read "[<0>] name+0x1c/0x40", with " [module]" behind for a module's.
    Ok(stack
        .lines()
        .filter_map(|l| l.split_once("] "))
        .map(|(_, s)| s.split(['/', ' ']).next().unwrap_or(s).to_owned())
        .collect())
}

/// The state of module `name` (/sys/module/NAME/initstate: live, coming, going), or
/// `None` once it is gone.
pub(crate) fn module_state(name: &str) -> Result<Option<String>> {
    match std::fs::read_to_string(format!("/sys/module/{name}/initstate")) {
        Ok(s) => Ok(Some(s.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("/sys/module/{name}/initstate")),
    }
}

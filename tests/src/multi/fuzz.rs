// SPDX-License-Identifier: GPL-2.0

//! The ioctl fuzz: random and mutated requests to `/dev/rkf_multi` on both vCPUs, and what
//! each may give.

use std::{mem::MaybeUninit, os::fd::AsFd};

use anyhow::Result;

use super::{basic::setup, held::Held, kmemleak_kernel, sleepable, test_run_fd};
use crate::{check, check_eq, diag, lifecycle::MULTI};
use rkf::{multi, skeleton};
use rkf_core::{
    abi::{self, AttachRequest},
    multi::Reason,
};

/// A raw ioctl of `cmd` with `req`: for the commands and sizes that
/// [`multi::ioctl`] does not define.
fn junk_ioctl(file: &std::fs::File, cmd: u32, req: &mut AttachRequest) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `req` is a whole request; a wrong command or size only makes the kernel read
    // less of it, or refuse.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), cmd as _, req as *mut AttachRequest) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Checks what one request of [`ioctl_fuzz`], command `cmd`, gave: `code` (0 or an
/// errno) and the request as the kernel left it.  An attach gives 0 or an errno of the
/// README's table for `/dev/rkf_multi` attach.  Where the order in which the kernel reads
/// a request fixes the errno, it must be that one: junk in `flags` (a bit other than
/// `F_COUNT`) or `pad` is `EINVAL`
/// whatever else the request holds; then a count of 0 is `EINVAL` and one past
/// `MAX_FUNCS` `E2BIG`; then, with a count in range, a `bad_ptr` (an array at an address
/// no mapping holds) is `EFAULT` (every array is read before anything in them is
/// checked; a read past the end of a good one may fault first, with the same errno).
/// The kernel overwrites `bad_index` and
/// `reason` of every attach it reads, with `u32::MAX` and 0, or with the refused
/// function's index in the request (below `cnt`) and its reason.  Any other command or
/// size is `ENOTTY`.
fn check_fuzz_outcome(
    cmd: u32,
    code: i32,
    junk_fields: bool,
    bad_ptr: bool,
    cnt: u32,
    req: &AttachRequest,
) -> Result<()> {
    if cmd == abi::IOC_INFO {
        // A random command that happens to be INFO's: any outcome of a read of a link.
        return Ok(());
    }
    if cmd != abi::IOC_ATTACH {
        check_eq!(code, libc::ENOTTY, "ioctl command {cmd:#x}: errno");
        return Ok(());
    }
    const TABLE: [i32; 7] = [
        0,
        libc::EINVAL,
        libc::ENOENT,
        libc::EBUSY,
        libc::E2BIG,
        libc::EBADF,
        libc::EFAULT,
    ];
    check!(
        TABLE.contains(&code),
        "attach of {cnt} functions: errno {code}, not one of the table's {TABLE:?}"
    );
    let fixed = if junk_fields {
        Some((libc::EINVAL, "junk in flags or pad"))
    } else if cnt == 0 {
        Some((libc::EINVAL, "a count of 0"))
    } else if cnt > rkf_core::multi::MAX_FUNCS {
        Some((libc::E2BIG, "a count past MAX_FUNCS"))
    } else if bad_ptr {
        Some((libc::EFAULT, "an array at a bad address"))
    } else {
        None
    };
    if let Some((want, why)) = fixed {
        check_eq!(code, want, "attach of {cnt} functions with {why}: errno");
    }
    let refused = req.bad_index != u32::MAX;
    check!(
        if refused {
            code != 0 && req.bad_index < cnt && req.reason != 0
        } else {
            req.reason == 0
        },
        "attach of {cnt} functions gave errno {code}, bad_index {} and reason {}",
        req.bad_index,
        req.reason
    );
    if refused {
        // A function refused: the errno is its reason's.
        check_eq!(
            Reason::from_raw(req.reason).map(Reason::errno),
            Some(code),
            "attach of {cnt} functions refused for reason {}: errno",
            req.reason
        );
    }
    Ok(())
}

/// 50,000 random and mutated requests on both vCPUs (10,000 on a kernel with kmemleak,
/// where 30,000, about 900 of them attaching, took 435 to 616 s of the test kernel's run
/// under TCG, see [`kmemleak_kernel`]; 100,000 took 300 s on the distro kernel): bad fds,
/// wrong program types, fentry, fexit and session programs of six and twelve arguments,
/// sleepable ones among them, on bpf_fentry_test1..9 (which a sleepable program may not
/// trace) or on three syscalls (which it may), huge and short counts, bad pointers, random
/// ids and addresses, random commands, closes of files another thread attaches through.
/// Passes only if the kernel stays quiet (the run's splat check), every program that can
/// attach was attached by some request (and plain_fentry, no template's, by none), no
/// link is left, every program is freed once its fds are closed and rkf_multi's reference
/// count comes back (no leaked reference), and, later, the module unloads (lifecycle
/// tests) and kmemleak finds nothing.
pub(super) fn ioctl_fuzz() -> Result<()> {
    use std::os::fd::AsRawFd;
    use std::sync::Mutex;

    let per_thread: u64 = if kmemleak_kernel() { 5_000 } else { 25_000 };
    // The programs (the first of the fds below), each of which some request must attach:
    // all but plain_fentry, an fentry program of bpf_fentry_test1 and no template's.
    const PROGS: usize = 8;
    const NEVER: usize = 3;
    // What a thread saw: errno -> count, and the requests that attached, by program.
    type Outcomes = (std::collections::BTreeMap<i32, u64>, [u64; PROGS]);

    let held = Held::now(&[MULTI])?;
    let mut outcomes = std::collections::BTreeMap::<i32, u64>::new();
    let mut attached_by = [0u64; PROGS];
    {
        let mut obj = MaybeUninit::uninit();
        let (skel, funcs) = setup(&mut obj)?;
        // Sleepable programs too, which may not trace bpf_fentry_testN but may trace
        // syscalls: a request names the first functions of one of two sets, those or
        // three syscalls nothing in the VM calls meanwhile (the sleepable storm's cold
        // ones and getsid(2)), which every program may trace.
        let mut sobj = MaybeUninit::uninit();
        let sskel = sleepable::load(&mut sobj, &[])?;
        let sets = [funcs.clone(), sleepable::storm_targets()?[1..].to_vec()];
        // Programs of twelve arguments (rkf_multi_tmpl12()): a wider frame to fill, in a
        // generated trampoline (fexit, session).
        let mut wobj = MaybeUninit::uninit();
        let wide = skeleton::load::<crate::skel::multi_wide::MultiWideSkelBuilder>(
            &mut wobj,
            "multi_wide.bpf.c",
            skeleton::as_built,
        )?;
        let null = std::fs::File::open("/dev/null")?;
        let fds: Vec<i32> = vec![
            skel.progs.count_fentry0.as_fd().as_raw_fd(),
            skel.progs.count_fexit2.as_fd().as_raw_fd(),
            skel.progs.multi_fentry.as_fd().as_raw_fd(),
            skel.progs.plain_fentry.as_fd().as_raw_fd(),
            sskel.progs.storm_fentry.as_fd().as_raw_fd(),
            sskel.progs.storm_fexit.as_fd().as_raw_fd(),
            wide.progs.wide_fexit.as_fd().as_raw_fd(),
            wide.progs.wide_session.as_fd().as_raw_fd(),
            skel.maps.bss.as_fd().as_raw_fd(),
            null.as_raw_fd(),
            9999,
            -1,
        ];
        let ids: Vec<Vec<u32>> = sets
            .iter()
            .map(|s| s.iter().map(|f| f.btf_id).collect())
            .collect();
        let addrs: Vec<Vec<u64>> = sets
            .iter()
            .map(|s| s.iter().map(|f| f.addr).collect())
            .collect();
        let cookies: Vec<u64> = (0..funcs.len() as u64).collect();

        // BTF fds for the functions: a module's (rkf_multi's own, which resolves vmlinux
        // ids too), vmlinux's (not a module's), and non-BTF fds.
        let module_btf = rkf::btf::object_fd("rkf_multi")?;
        let vmlinux_btf = rkf::btf::object_fd("vmlinux")?;
        let btf_fds: Vec<i32> = vec![
            module_btf.as_raw_fd(),
            vmlinux_btf.as_raw_fd(),
            fds[0],
            fds[4],
            9999,
            -1,
        ];
        let pool: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());
        let trigger_fd = skel.progs.plain_fentry.as_fd().as_raw_fd();
        let results = std::thread::scope(|s| {
            let workers: Vec<_> = (0..2u64)
                .map(|t| {
                    let (fds, ids, addrs, cookies, pool, btf_fds) =
                        (&fds, &ids, &addrs, &cookies, &pool, &btf_fds);
                    s.spawn(move || -> Result<Outcomes> {
                        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15 ^ (t + 1));
                        let mut seen = std::collections::BTreeMap::new();
                        let mut attached_by = [0u64; PROGS];
                        let mut info_buf = vec![multi::FuncInfo::default(); 64];
                        for i in 0..per_thread {
                            let file = std::fs::OpenOptions::new()
                                .read(true)
                                .write(true)
                                .open(multi::DEVICE)?;
                            let set = rng.usize(..ids.len());
                            let (ids, addrs) = (&ids[set], &addrs[set]);
                            // Mutable copies the request points into, some entries
                            // mutated.
                            let mut ids_buf = ids.clone();
                            let mut addrs_buf = addrs.clone();
                            let mut btf_fds_buf = vec![0i32; ids.len()];
                            let n = ids.len();
                            for k in 0..n {
                                ids_buf[k] = match rng.u64(..8) {
                                    0 => rng.u32(..),
                                    1 => ids[rng.usize(..n)],
                                    _ => ids[k],
                                };
                                addrs_buf[k] = match rng.u64(..8) {
                                    0 => rng.u64(..),
                                    1 => addrs[rng.usize(..n)] + rng.u64(..16),
                                    _ => addrs[k],
                                };
                                btf_fds_buf[k] = match rng.u64(..4) {
                                    0 => btf_fds[rng.usize(..btf_fds.len())],
                                    _ => 0,
                                };
                            }
                            let cnt: u32 = match rng.u64(..10) {
                                0 => 0,
                                1 => u32::MAX,
                                2 => rkf_core::multi::MAX_FUNCS + 1,
                                3 => n as u32 + 1 + rng.u32(..64), // past the buffers
                                _ => 1 + rng.u32(..n as u32),
                            };
                            let ptr = |valid: u64, rng: &mut fastrand::Rng| match rng.u64(..12) {
                                0 => 0,
                                1 => 0x1000,
                                2 => u64::MAX - 7,
                                _ => valid,
                            };
                            let prog = rng.usize(..fds.len());
                            let prog_fd = fds[prog];
                            let mut req = AttachRequest {
                                prog_fd: prog_fd as u32,
                                cnt,
                                btf_ids: ptr(ids_buf.as_ptr() as u64, &mut rng),
                                addrs: ptr(addrs_buf.as_ptr() as u64, &mut rng),
                                cookies: match rng.u64(..3) {
                                    0 => 0,
                                    _ => ptr(cookies.as_ptr() as u64, &mut rng),
                                },
                                btf_fds: match rng.u64(..3) {
                                    0 => ptr(btf_fds_buf.as_ptr() as u64, &mut rng),
                                    _ => 0,
                                },
                                // Sometimes junk in `flags` and `bad_index` (which the
                                // kernel must refuse, and overwrite), and in the rest;
                                // sometimes the one flag there is.
                                flags: match rng.u64(..20) {
                                    0 => rng.u32(..),
                                    1 => abi::F_COUNT,
                                    _ => 0,
                                },
                                bad_index: if rng.u64(..20) == 0 { rng.u32(..) } else { 0 },
                                reason: if rng.u64(..40) == 0 { rng.u32(..) } else { 0 },
                                pad: if rng.u64(..40) == 0 { rng.u32(..) } else { 0 },
                            };
                            let junk_fields = req.flags & !abi::F_COUNT != 0 || req.pad != 0;
                            let cnt = req.cnt;
                            // An array the kernel reads at an address no mapping holds.
                            let bad_ptr = req.btf_ids != ids_buf.as_ptr() as u64
                                || req.addrs != addrs_buf.as_ptr() as u64
                                || (req.cookies != 0 && req.cookies != cookies.as_ptr() as u64)
                                || (req.btf_fds != 0 && req.btf_fds != btf_fds_buf.as_ptr() as u64);
                            // Mostly the request as RKF_MULTI_IOC_ATTACH; sometimes a random
                            // command, or ATTACH's number with a wrong size.
                            let cmd = match rng.u64(..20) {
                                0 => rng.u32(..),
                                1 => nix::request_code_readwrite!(
                                    abi::IOC_TYPE,
                                    abi::IOC_NR_ATTACH,
                                    rng.usize(..64)
                                ) as u32,
                                _ => abi::IOC_ATTACH,
                            };
                            let res = junk_ioctl(&file, cmd, &mut req);
                            let code = res.map_or_else(|e| e.raw_os_error().unwrap_or(-1), |()| 0);
                            check_fuzz_outcome(cmd, code, junk_fields, bad_ptr, cnt, &req)?;
                            *seen.entry(code).or_insert(0u64) += 1;
                            // Sometimes read it back, with a random buffer.
                            let attached = cmd == abi::IOC_ATTACH && code == 0;
                            if attached {
                                check!(
                                    prog < PROGS && prog != NEVER,
                                    "fd {prog_fd} (entry {prog} of the fds) attached"
                                );
                                attached_by[prog] += 1;
                            }
                            if rng.u64(..4) == 0 {
                                let valid = info_buf.as_mut_ptr() as u64;
                                let mut info = abi::LinkInfo {
                                    id: if rng.u64(..2) == 0 {
                                        0
                                    } else {
                                        rng.u64(..1 << 20)
                                    },
                                    // Room for 64 entries at most, or a bad pointer.
                                    buf_cnt: rng.u32(..64),
                                    funcs: ptr(valid, &mut rng),
                                    ..Default::default()
                                };
                                let (id, buf_cnt, bad) =
                                    (info.id, info.buf_cnt, info.funcs != valid);
                                // SAFETY: `funcs` is `info_buf`, with room for the
                                // `buf_cnt` entries the kernel may write, or an address no
                                // mapping can hold (0, 0x1000, the top of the address
                                // space), which the kernel refuses with EFAULT.
                                let r = unsafe { multi::ioctl::info(file.as_raw_fd(), &mut info) };
                                // Every link has a function: the kernel writes at least
                                // one entry when there is room for one.
                                let faults = buf_cnt > 0 && bad;
                                let what = format!(
                                    "RKF_MULTI_IOC_INFO of id {id} (this file attached: \
                                     {attached}) with room for {buf_cnt} at {:#x}",
                                    info.funcs
                                );
                                if id == 0 {
                                    // This file's own link: there exactly when this
                                    // request attached (a new file each time).
                                    let want = match (attached, faults) {
                                        (false, _) => Err(nix::errno::Errno::ENOENT),
                                        (true, true) => Err(nix::errno::Errno::EFAULT),
                                        (true, false) => Ok(()),
                                    };
                                    check_eq!(
                                        r.as_ref().map(|_| ()).map_err(|e| *e),
                                        want,
                                        "{what}"
                                    );
                                    if r.is_ok() {
                                        check_eq!(info.cnt, cnt, "{what}: the link's functions");
                                    }
                                } else {
                                    // Any link of either thread may have that id.
                                    let want: &[nix::errno::Errno] = if faults {
                                        &[nix::errno::Errno::ENOENT, nix::errno::Errno::EFAULT]
                                    } else {
                                        &[nix::errno::Errno::ENOENT]
                                    };
                                    check!(
                                        r.as_ref().map_or_else(|e| want.contains(e), |_| !faults),
                                        "{what}: {r:?}"
                                    );
                                }
                            }
                            // Keep some links open for a while; close others' links too.
                            let mut p = pool.lock().unwrap();
                            if rng.u64(..3) == 0 {
                                p.push(file);
                            }
                            if p.len() > 8 || rng.u64(..4) == 0 {
                                let victim = rng.usize(..p.len().max(1));
                                if victim < p.len() {
                                    p.swap_remove(victim);
                                }
                            }
                            drop(p);
                            if i % 1000 == 0 {
                                test_run_fd(trigger_fd)?;
                            }
                        }
                        Ok((seen, attached_by))
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("a fuzz thread panicked"))
                .collect::<Result<Vec<_>>>()
        })?;
        for (seen, by) in results {
            for (k, v) in seen {
                *outcomes.entry(k).or_insert(0) += v;
            }
            for (sum, n) in attached_by.iter_mut().zip(by) {
                *sum += n;
            }
        }
        pool.into_inner().unwrap().clear();
        check!(
            multi::links()?.is_empty(),
            "links left after every file was closed"
        );
    }
    diag!("{} requests; errno -> count: {outcomes:?}", 2 * per_thread);
    diag!("attaches by program: {attached_by:?}");
    for (i, &n) in attached_by.iter().enumerate() {
        if i == NEVER {
            check_eq!(n, 0, "attaches of plain_fentry, no template's program");
        } else {
            check!(n > 0, "no request attached program {i} (the fds' order)");
        }
    }
    // Every program of the skeleton goes once its fds are closed, and rkf_multi's
    // references with the links: none leaked.
    held.released()
}

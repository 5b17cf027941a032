// SPDX-License-Identifier: GPL-2.0

//! Names for the addresses of stacks, through blazesym, given after the run.
//!
//! User stacks come from the kernel as build id + file offset (`BPF_F_USER_BUILD_ID`),
//! so a frame stays nameable after its process has exited: all it needs is a file with
//! that build id.  The files are found in the mappings of processes while they run (the
//! process of the frame first, then every process); an entry the kernel could only give
//! as an address (no build id at hand) is turned into file + offset while its process
//! still runs.  Everything is symbolised at the end: user frames from the files, kernel
//! frames through /proc/kallsyms.

use std::{
    collections::{HashMap, HashSet},
    fs,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Result;
use blazesym::{
    helper::read_elf_build_id,
    normalize::{Normalizer, UserMeta},
    symbolize::{
        source::{Elf, Source},
        Input, Symbolized, Symbolizer,
    },
    Pid,
};

use super::{stack::Counts, Frame, Kind, Stack, Stacks};
use crate::kallsyms::KernelSymbolizer;

const UNKNOWN: &str = "[unknown]";
/// The frame that stands for a kernel stack the kfunc could not take (any negative
/// return), named as bcc's profile and offcputime name a stack their stack map lost (they
/// leave out `-EFAULT`, which a stack map gives for no stack): the sample or interval
/// still counts, under it.  (A kernel thread's user stack is taken, and empty.)
const MISSED_KERNEL: &str = "[Missed Kernel Stack]";
/// The frame that stands for a user stack the kfunc could not take.
const MISSED_USER: &str = "[Missed User Stack]";
/// The kernel's object, as perf names it.
const KERNEL: &str = "[kernel.kallsyms]";
/// `BPF_BUILD_ID_SIZE`: build ids are zero-padded to it.
const BUILD_ID_SIZE: usize = 20;
/// `sizeof(struct bpf_stack_build_id)`.
pub(super) const BUILD_ID_ENTRY: usize = 32;
/// `BPF_STACK_BUILD_ID_VALID` and `BPF_STACK_BUILD_ID_IP` (include/uapi/linux/bpf.h).
const STATUS_VALID: i32 = 1;
const STATUS_IP: i32 = 2;
/// The least time between two scans of every process's mappings.
const RESCAN: Duration = Duration::from_millis(500);

type BuildId = [u8; BUILD_ID_SIZE];

/// A user frame, kept until the end of the run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum UserAddr {
    /// A file offset in the ELF file with this build id.
    BuildId(BuildId, u64),
    /// A file offset in the ELF file at this path.
    File(Arc<str>, u64),
    /// An address that no file was found for.
    Unknown,
}

/// A stack as the kernel gave it, with its user frames made lasting.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct RawStack {
    comm: Vec<u8>,
    /// Innermost first; `None` where the kfunc failed.
    kernel: Option<Vec<u64>>,
    /// Innermost first; `None` where the kfunc failed.
    user: Option<Vec<UserAddr>>,
}

/// Raw stacks and their counts, until they are symbolised.
pub(super) type RawStacks = HashMap<RawStack, Counts>;

/// Adds `value` to the counts of `stack` in `raw`.
pub(super) fn add(raw: &mut RawStacks, stack: RawStack, value: u64) {
    raw.entry(stack).or_default().add(Counts::one(value));
}

/// Turns raw stacks into named ones.
pub(super) struct Names {
    kernel_symbolizer: KernelSymbolizer,
    normalizer: Normalizer,
    /// Build id to a file that has it.
    files: HashMap<BuildId, Arc<str>>,
    /// Executable files whose build id was read.
    read: HashSet<String>,
    /// Build ids not found in any mapping yet.
    missing: HashSet<BuildId>,
    last_scan: Option<Instant>,
    /// When each process's mappings were last read for a build id.
    scanned: HashMap<u32, Instant>,
    /// What each (process, ip) given without a build id was turned into.
    ips: HashMap<(u32, u64), UserAddr>,
    /// Whether each kernel address looked up is in `__schedule()`.
    in_schedule: HashMap<u64, bool>,
}

impl Names {
    /// Reads the kernel's symbols now: under a slow kernel (KASAN, TCG) reading
    /// /proc/kallsyms takes seconds, during which a ring buffer would fill.
    pub(super) fn new() -> Result<Self> {
        let kernel_symbolizer = KernelSymbolizer::new();
        kernel_symbolizer.preload()?;
        Ok(Self {
            kernel_symbolizer,
            normalizer: Normalizer::new(),
            files: HashMap::new(),
            read: HashSet::new(),
            missing: HashSet::new(),
            last_scan: None,
            scanned: HashMap::new(),
            ips: HashMap::new(),
            in_schedule: HashMap::new(),
        })
    }

    /// Reads the build ids of the executable files that process `pid` maps and that were
    /// not read yet.
    fn scan(&mut self, pid: u32) {
        let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return;
        };
        for line in maps.lines() {
            // start-end perms offset dev inode path (which may hold spaces)
            let mut f = line.splitn(6, ' ');
            let (Some(perms), Some(path)) = (f.nth(1), f.nth(3).map(str::trim_start)) else {
                continue;
            };
            if !perms.contains('x') || !path.starts_with('/') || self.read.contains(path) {
                continue;
            }
            self.read.insert(path.to_string());
            if let Ok(Some(id)) = read_elf_build_id(&Path::new(path)) {
                let mut padded = [0; BUILD_ID_SIZE];
                let n = id.len().min(BUILD_ID_SIZE);
                padded[..n].copy_from_slice(&id[..n]);
                self.missing.remove(&padded);
                self.files.entry(padded).or_insert_with(|| path.into());
            }
        }
    }

    /// Looks for the missing build ids in every process, at most once every [`RESCAN`].
    fn scan_all(&mut self) {
        if self.missing.is_empty() || self.last_scan.is_some_and(|t| t.elapsed() < RESCAN) {
            return;
        }
        self.last_scan = Some(Instant::now());
        let Ok(dir) = fs::read_dir("/proc") else {
            return;
        };
        let pids: Vec<u32> = dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        for pid in pids {
            self.scan(pid);
            if self.missing.is_empty() {
                break;
            }
        }
    }

    /// The frames of the kernel stack `ips` (innermost first) from the innermost one in
    /// `__schedule()` outwards: what a stack taken in a program on `sched_switch` has above
    /// it is the tracing machinery's.  All of them if none is in `__schedule()`.  Each
    /// address is looked up once in a run.
    pub(super) fn outward_from_schedule<'a>(&mut self, ips: &'a [u64]) -> &'a [u64] {
        let (symbolizer, known) = (&self.kernel_symbolizer, &mut self.in_schedule);
        outward_from(ips, |ip| {
            *known
                .entry(ip)
                .or_insert_with(|| symbolizer.name(ip).as_deref() == Some("__schedule"))
        })
    }

    /// The raw stack of a task of process `tgid` named `comm` (NUL-padded): its kernel
    /// return addresses and its user `struct bpf_stack_build_id` entries, innermost first,
    /// each `None` where the kfunc failed ([`taken()`]).  Called while the run goes on, so
    /// that the files of the frames are found while their processes still run.
    pub(super) fn raw(
        &mut self,
        comm: &[u8],
        tgid: u32,
        kernel: Option<&[u64]>,
        user: Option<&[u8]>,
    ) -> RawStack {
        let user = user.map(|user| self.user_addrs(tgid, user));
        self.scan_all();
        RawStack {
            comm: comm.iter().copied().take_while(|&b| b != 0).collect(),
            kernel: kernel.map(<[u64]>::to_vec),
            user,
        }
    }

    /// The user frames of process `tgid` from its `struct bpf_stack_build_id` entries,
    /// made lasting.
    fn user_addrs(&mut self, tgid: u32, user: &[u8]) -> Vec<UserAddr> {
        let entries: Vec<(i32, BuildId, u64)> = user
            .chunks_exact(BUILD_ID_ENTRY)
            .map(|e| {
                let status = i32::from_ne_bytes(e[0..4].try_into().expect("4 bytes"));
                let id: BuildId = e[4..24].try_into().expect("20 bytes");
                let off = u64::from_ne_bytes(e[24..32].try_into().expect("8 bytes"));
                (status, id, off)
            })
            .collect();
        // A process's mappings are read at most once every RESCAN for build ids: one whose
        // build id no mapping gives would be read on every record otherwise.
        if entries
            .iter()
            .any(|&(s, id, _)| s == STATUS_VALID && !self.files.contains_key(&id))
            && self
                .scanned
                .get(&tgid)
                .is_none_or(|t| t.elapsed() >= RESCAN)
        {
            self.scanned.insert(tgid, Instant::now());
            self.scan(tgid);
        }
        let mut ips: Vec<u64> = entries
            .iter()
            .filter(|&&(s, _, ip)| s == STATUS_IP && !self.ips.contains_key(&(tgid, ip)))
            .map(|&(.., ip)| ip)
            .collect();
        if !ips.is_empty() {
            ips.sort_unstable();
            ips.dedup();
            let mut found = vec![UserAddr::Unknown; ips.len()];
            if let Ok(out) = self.normalizer.normalize_user_addrs(Pid::from(tgid), &ips) {
                for (f, &(off, meta)) in found.iter_mut().zip(&out.outputs) {
                    if let Some(UserMeta::Elf(elf)) = out.meta.get(meta) {
                        let path = elf.path.to_string_lossy();
                        *f = UserAddr::File(path.as_ref().into(), off);
                    }
                }
            }
            self.ips
                .extend(ips.into_iter().map(|ip| (tgid, ip)).zip(found));
        }
        entries
            .iter()
            .map(|&(status, id, off)| match status {
                STATUS_VALID => {
                    if !self.files.contains_key(&id) {
                        self.missing.insert(id);
                    }
                    UserAddr::BuildId(id, off)
                }
                STATUS_IP => self.ips[&(tgid, off)].clone(),
                _ => UserAddr::Unknown,
            })
            .collect()
    }

    /// Names every frame of `raw`.
    pub(super) fn finish(mut self, kind: Kind, raw: RawStacks) -> Stacks {
        self.last_scan = None;
        self.scan_all();
        let unknown: Arc<str> = UNKNOWN.into();
        let unknown_user = Frame {
            name: unknown.clone(),
            kernel: false,
            object: unknown.clone(),
        };

        // User frames: the offsets of each file, symbolised together.
        let mut offsets: HashMap<Arc<str>, Vec<u64>> = HashMap::new();
        for a in raw.keys().flat_map(|r| r.user.iter().flatten()) {
            let (file, off) = match a {
                UserAddr::BuildId(id, off) => match self.files.get(id) {
                    Some(f) => (f.clone(), *off),
                    None => continue,
                },
                UserAddr::File(f, off) => (f.clone(), *off),
                UserAddr::Unknown => continue,
            };
            offsets.entry(file).or_default().push(off);
        }
        let symbolizer = Symbolizer::new();
        let mut user: HashMap<(Arc<str>, u64), Frame> = HashMap::new();
        for (file, mut offs) in offsets {
            offs.sort_unstable();
            offs.dedup();
            let mut elf = Elf::new(file.as_ref());
            elf.debug_syms = false;
            let syms = symbolizer
                .symbolize(&Source::Elf(elf), Input::FileOffset(&offs))
                .unwrap_or_default();
            for (i, off) in offs.into_iter().enumerate() {
                let name = match syms.get(i) {
                    Some(Symbolized::Sym(s)) => s.name.as_ref().into(),
                    _ => unknown.clone(),
                };
                let frame = Frame {
                    name,
                    kernel: false,
                    object: file.clone(),
                };
                user.insert((file.clone(), off), frame);
            }
        }
        let user_frame = |a: &UserAddr| -> Frame {
            let key = match a {
                UserAddr::BuildId(id, off) => self.files.get(id).map(|f| (f.clone(), *off)),
                UserAddr::File(f, off) => Some((f.clone(), *off)),
                UserAddr::Unknown => None,
            };
            key.and_then(|k| user.get(&k).cloned())
                .unwrap_or_else(|| unknown_user.clone())
        };

        // Kernel frames.
        let mut addrs: Vec<u64> = raw
            .keys()
            .flat_map(|r| r.kernel.iter().flatten().copied())
            .collect();
        addrs.sort_unstable();
        addrs.dedup();
        let object: Arc<str> = KERNEL.into();
        let names = self
            .kernel_symbolizer
            .symbolize(&addrs)
            .unwrap_or_else(|_| vec![None; addrs.len()]);
        let kernel: HashMap<u64, Frame> = addrs
            .into_iter()
            .zip(names)
            .map(|(a, f)| {
                let name = f.map_or_else(|| unknown.clone(), |f| f.name.into());
                let frame = Frame {
                    name,
                    kernel: true,
                    object: object.clone(),
                };
                (a, frame)
            })
            .collect();

        let mut stacks = Stacks::new(kind);
        for (r, c) in raw {
            let frames = frames(&r, user_frame, |a| kernel[&a].clone());
            let stack = Stack {
                comm: String::from_utf8_lossy(&r.comm).into_owned(),
                frames,
            };
            stacks.add_counts(stack, c);
        }
        stacks
    }
}

/// The frames of `r`, outermost first: its user frames, then its kernel frames, each
/// named by `user` or `kernel`, and a placeholder for a part the kfunc failed to take.
fn frames(
    r: &RawStack,
    user: impl Fn(&UserAddr) -> Frame,
    kernel: impl Fn(u64) -> Frame,
) -> Vec<Frame> {
    let mut frames = Vec::new();
    match &r.user {
        Some(addrs) => frames.extend(addrs.iter().rev().map(user)),
        None => frames.push(Frame {
            name: MISSED_USER.into(),
            kernel: false,
            object: UNKNOWN.into(),
        }),
    }
    match &r.kernel {
        Some(ips) => frames.extend(ips.iter().rev().map(|&a| kernel(a))),
        None => frames.push(Frame {
            name: MISSED_KERNEL.into(),
            kernel: true,
            object: KERNEL.into(),
        }),
    }
    frames
}

/// The frames of `ips` (innermost first) from the innermost one that `is_cut` takes
/// outwards, or all of them if it takes none.
fn outward_from(ips: &[u64], mut is_cut: impl FnMut(u64) -> bool) -> &[u64] {
    ips.iter()
        .position(|&ip| is_cut(ip))
        .map_or(ips, |i| &ips[i..])
}

/// The first `ret` bytes of a stack buffer, in whole entries of `entry` bytes, or `None`
/// for an error (a negative `ret`).
pub(super) fn taken<T>(stack: &[T], ret: i32, entry: usize) -> Option<&[T]> {
    let n = usize::try_from(ret).ok()? / entry * entry / std::mem::size_of::<T>();
    Some(&stack[..n.min(stack.len())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outward_from_the_innermost_cut() {
        let ips = [1u64, 2, 30, 4, 31, 6];
        assert_eq!(outward_from(&ips, |ip| ip >= 30), &[30, 4, 31, 6]);
        assert_eq!(outward_from(&ips, |ip| ip == 1), &ips);
        assert_eq!(outward_from(&ips, |ip| ip == 6), &[6]);
        assert_eq!(outward_from(&ips, |_| false), &ips);
        assert!(outward_from(&[], |_| true).is_empty());
    }

    #[test]
    fn missed_parts_stand_in_place() {
        let named = |name: &str, kernel| Frame {
            name: name.into(),
            kernel,
            object: if kernel { KERNEL } else { UNKNOWN }.into(),
        };
        let user = |a: &UserAddr| match a {
            UserAddr::File(f, off) => named(&format!("{f}+{off}"), false),
            _ => named(UNKNOWN, false),
        };
        let kernel = |ip: u64| named(&format!("k{ip}"), true);
        let raw = |kernel: Option<Vec<u64>>, user: Option<Vec<UserAddr>>| RawStack {
            comm: b"cat".to_vec(),
            kernel,
            user,
        };
        let main = || {
            Some(vec![
                UserAddr::File("a".into(), 2),
                UserAddr::File("a".into(), 1),
            ])
        };
        let names = |r: &RawStack| -> Vec<(String, bool)> {
            frames(r, user, kernel)
                .into_iter()
                .map(|f| (f.name.to_string(), f.kernel))
                .collect()
        };
        let want = |v: &[(&str, bool)]| -> Vec<(String, bool)> {
            v.iter().map(|&(n, k)| (n.to_string(), k)).collect()
        };
        assert_eq!(
            names(&raw(Some(vec![3, 4]), main())),
            want(&[("a+1", false), ("a+2", false), ("k4", true), ("k3", true)])
        );
        assert_eq!(
            names(&raw(None, main())),
            want(&[("a+1", false), ("a+2", false), (MISSED_KERNEL, true)])
        );
        assert_eq!(
            names(&raw(Some(vec![3]), None)),
            want(&[(MISSED_USER, false), ("k3", true)])
        );
        assert_eq!(
            names(&raw(None, None)),
            want(&[(MISSED_USER, false), (MISSED_KERNEL, true)])
        );
        // Not taken at all (an empty part) is no miss.
        assert!(names(&raw(Some(vec![]), Some(vec![]))).is_empty());
        // In a folded line, the kernel's placeholder is marked as a kernel frame.
        let stack = Stack {
            comm: "cat".into(),
            frames: frames(&raw(None, None), user, kernel),
        };
        assert_eq!(
            stack.folded(),
            "cat;[Missed User Stack];[Missed Kernel Stack]_[k]"
        );
    }

    #[test]
    fn taken_whole_entries_only() {
        let ips = [1u64, 2, 3];
        assert_eq!(taken(&ips, 16, 8), Some(&ips[..2]));
        assert_eq!(taken(&ips, 23, 8), Some(&ips[..2]));
        assert_eq!(taken(&ips, 64, 8), Some(&ips[..]));
        assert_eq!(taken(&ips, -14, 8), None);
        let ids = [0u8; 3 * BUILD_ID_ENTRY];
        assert_eq!(
            taken(&ids, 2 * 32, BUILD_ID_ENTRY).map(<[u8]>::len),
            Some(64)
        );
        assert_eq!(
            taken(&ids, 2 * 32 + 31, BUILD_ID_ENTRY).map(<[u8]>::len),
            Some(64)
        );
        assert_eq!(taken(&ids, 0, BUILD_ID_ENTRY), Some(&ids[..0]));
        assert_eq!(taken(&ids, -22, BUILD_ID_ENTRY), None);
    }
}

// SPDX-License-Identifier: GPL-2.0

//! The checks of the kfunc's results against the helper's: the same bytes, nothing
//! written past the size, the same return value a row wants.

use anyhow::Result;

use super::{
    samples::{words, Kind, Sample},
    F_USER_BUILD_ID, F_USER_STACK,
};
use crate::{check, check_eq};
use rkf::kallsyms::KernelSymbolizer;

pub(super) fn sym(k: &KernelSymbolizer, addr: u64) -> String {
    k.describe(addr)
}

/// Fails unless the kfunc's bytes `kf` and the helper's `h` are equal, naming the first
/// entry that differs (an ip, or a `struct bpf_stack_build_id` in build-id stacks) and
/// both values.
pub(super) fn check_same(
    what: &str,
    kf: &[u8],
    h: &[u8],
    build_id: bool,
    k: &KernelSymbolizer,
) -> Result<()> {
    check_eq!(kf.len(), h.len(), "{what}: bytes compared");
    let entry = if build_id { 32 } else { 8 };
    let Some(i) = kf
        .chunks(entry)
        .zip(h.chunks(entry))
        .position(|(a, b)| a != b)
    else {
        return Ok(());
    };
    let show = |e: &[u8]| match e.len() {
        32 => format!(
            "status {}, build id {}, offset {:#x}",
            i32::from_ne_bytes(e[0..4].try_into().unwrap()),
            hex(&e[4..24]),
            u64::from_ne_bytes(e[24..32].try_into().unwrap())
        ),
        8 if !build_id => {
            let ip = u64::from_ne_bytes(e.try_into().unwrap());
            format!("{ip:#x} ({})", sym(k, ip))
        }
        _ => format!("bytes {}", hex(e)),
    };
    let at = |b: &[u8]| show(&b[i * entry..b.len().min((i + 1) * entry)]);
    anyhow::bail!(
        "{what}: kfunc and helper differ first at entry {i} of {} ({entry} bytes each): \
         kfunc {}, helper {}",
        kf.len().div_ceil(entry),
        at(kf),
        at(h)
    )
}

/// Fails unless the first `zeroed` bytes of the kfunc's buffer `kf` are zero and those
/// past `size` still hold the 0xaa pattern the runs fill it with.
pub(super) fn check_untouched_past(
    what: &str,
    kf: &[u8],
    zeroed: usize,
    size: usize,
) -> Result<()> {
    check!(
        kf[..zeroed].iter().all(|&b| b == 0),
        "{what}: buffer zeroed"
    );
    check!(
        kf[size..].iter().all(|&b| b == 0xaa),
        "{what}: nothing written past size"
    );
    Ok(())
}

/// Checks that one sample is the helper's: the same return value and the same `size`
/// bytes, and nothing past them written.  The one documented exception: for programs
/// whose kernel stack starts at the program, frame 0 is the return address of the call,
/// which differs between the two calls; it must name the same program for both.
/// (Tracepoint programs skip the frames above the tracepoint for the kfunc, see
/// [`calibrate_tracepoint`](super::samples::calibrate_tracepoint), and compare whole.)
pub(super) fn compare(s: &Sample, flags: u64, size: usize, k: &KernelSymbolizer) -> Result<()> {
    let kind = s.kind;
    let (skip, user, build_id) = (
        flags & 0xff,
        flags & F_USER_STACK != 0,
        flags & F_USER_BUILD_ID != 0,
    );
    check_eq!(
        s.kf_ret,
        s.h_ret,
        "{kind:?}: return value (kfunc vs helper)"
    );
    check!(
        s.kf[size..].iter().all(|&b| b == 0xaa),
        "{kind:?}: the kfunc wrote past its {size} bytes"
    );
    let (kf, h) = (&s.kf[..size], &s.h[..size]);
    let starts_at_program = matches!(
        kind,
        Kind::Fentry | Kind::Fexit | Kind::TpBtf | Kind::RawTp | Kind::Syscall
    );
    if !user && skip == 0 && starts_at_program && s.h_ret > 0 {
        let (a, b) = (words(&kf[..8])[0], words(&h[..8])[0]);
        let (na, nb) = (k.name(a), k.name(b));
        let same_prog =
            matches!((&na, &nb), (Some(x), Some(y)) if x == y && x.starts_with("bpf_prog_"));
        check!(
            same_prog,
            "{kind:?}: frame 0 is the program for both: {} vs {}",
            sym(k, a),
            sym(k, b)
        );
        return check_same(
            &format!("{kind:?}: frames 1.."),
            &kf[8..],
            &h[8..],
            false,
            k,
        );
    }
    check_same(&format!("{kind:?}"), kf, h, build_id, k)
}

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What the helper returns for a row of a differential test, which the kfunc must then
/// return too: rows where both fail alike, or both find no stack, pass only where the
/// row says so.
#[derive(Clone, Copy, Debug)]
pub(super) enum Want {
    /// A stack of at least one frame.
    Frames,
    /// A stack, perhaps empty (0 bytes), or -EFAULT where the skip passes its end
    /// (bpf_get_stack() in kernel/bpf/stackmap.c).
    Skipped,
    /// This error.
    Error(i64),
}

impl Want {
    pub(super) fn check(self, ret: i64, what: &str) -> Result<()> {
        let ok = match self {
            Self::Frames => ret > 0,
            Self::Skipped => ret >= 0 || ret == -i64::from(libc::EFAULT),
            Self::Error(e) => ret == e,
        };
        check!(ok, "{what} returned {ret}, not {self:?}");
        Ok(())
    }
}

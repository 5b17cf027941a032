// SPDX-License-Identifier: GPL-2.0

//! `/dev/rkf_multi`: each open file is one link, attached once by `RKF_MULTI_IOC_ATTACH`
//! and detached when the file goes; `RKF_MULTI_IOC_INFO` describes links.

use core::{
    mem::size_of,
    sync::atomic::{AtomicU64, Ordering},
};

use kernel::{
    bindings,
    fs::File,
    ioctl::{_IOC_SIZE, _IOWR},
    miscdevice::{MiscDevice, MiscDeviceRegistration},
    prelude::*,
    transmute::{AsBytes, FromBytes},
    uaccess::{UserPtr, UserSlice},
};

use super::{area::AreaVec, error::AttachError, registry::Services, request};
use crate::{
    abi::{self, AttachRequest, FuncInfo, LinkInfo},
    rkf_h, RkfMulti,
};

// SAFETY: plain integers, any bit pattern is valid, no padding (each struct's size is
// asserted below to be the sum of its fields').
unsafe impl FromBytes for AttachRequest {}
// SAFETY: plain integers without padding.
unsafe impl AsBytes for AttachRequest {}
// SAFETY: plain integers, any bit pattern is valid, no padding.
unsafe impl FromBytes for LinkInfo {}
// SAFETY: plain integers without padding.
unsafe impl AsBytes for LinkInfo {}
// SAFETY: plain integers without padding.
unsafe impl AsBytes for FuncInfo {}

// The ABI of rust/core/src/abi.rs is the one c-shim/rkf.h defines for C.
crate::abi_check::assert_same_layout!(
    abi::AttachRequest,
    rkf_h::rkf_multi_attach_request,
    prog_fd,
    cnt,
    btf_ids,
    addrs,
    cookies,
    btf_fds,
    flags,
    bad_index,
    reason,
    pad
);
crate::abi_check::assert_same_layout!(
    abi::FuncInfo,
    rkf_h::rkf_multi_func_info,
    addr,
    cookie,
    hits,
    misses
);
crate::abi_check::assert_same_layout!(
    abi::LinkInfo,
    rkf_h::rkf_multi_link_info,
    id,
    prog_id,
    kind,
    cnt,
    buf_cnt,
    funcs,
    next_id,
    flags,
    pad
);
// No padding: each struct's size is the sum of its fields' (listed above, at C's offsets).
const _: () = {
    use core::mem::size_of;
    assert!(size_of::<abi::AttachRequest>() == 2 * 4 + 4 * 8 + 4 * 4);
    assert!(size_of::<abi::FuncInfo>() == 4 * 8);
    assert!(size_of::<abi::LinkInfo>() == 8 + 4 * 4 + 2 * 8 + 2 * 4);
};
const _: () = {
    assert!(abi::IOC_TYPE == rkf_h::RKF_MULTI_IOC_TYPE);
    assert!(abi::IOC_NR_ATTACH as u32 == rkf_h::RKF_MULTI_IOC_NR_ATTACH);
    assert!(abi::IOC_NR_INFO as u32 == rkf_h::RKF_MULTI_IOC_NR_INFO);
    assert!(abi::Kind::Fentry as u32 == rkf_h::RKF_MULTI_KIND_FENTRY);
    assert!(abi::Kind::Fexit as u32 == rkf_h::RKF_MULTI_KIND_FEXIT);
    assert!(abi::Kind::Session as u32 == rkf_h::RKF_MULTI_KIND_SESSION);
    assert!(abi::F_COUNT == rkf_h::RKF_MULTI_F_COUNT);
};

const IOC_ATTACH: u32 = _IOWR::<AttachRequest>(abi::IOC_TYPE as u32, abi::IOC_NR_ATTACH as u32);
const IOC_INFO: u32 = _IOWR::<LinkInfo>(abi::IOC_TYPE as u32, abi::IOC_NR_INFO as u32);
const _: () = assert!(IOC_ATTACH == abi::IOC_ATTACH && IOC_INFO == abi::IOC_INFO);

/// An open file of `/dev/rkf_multi`: at most one link, detached when the file goes.
///
/// # Invariants
///
/// `multi` is the module state whose device the file was opened on.  An open file holds
/// a reference on the module (the device's file operations name it as their owner), so
/// the module state outlives the file.
pub(crate) struct LinkFile {
    multi: *const RkfMulti,
    /// The link's id, or 0.
    id: AtomicU64,
}

// SAFETY: the state it points to is shared by every file and task (it is `Sync`).
unsafe impl Send for LinkFile {}
// SAFETY: as above; the id is atomic.
unsafe impl Sync for LinkFile {}

impl LinkFile {
    fn multi(&self) -> &RkfMulti {
        // SAFETY: the module state outlives the file (type invariant).
        unsafe { &*self.multi }
    }

    fn services(&self) -> Services<'_> {
        let m = self.multi();
        Services {
            ops: &m.ops,
            deferred: &m.deferred,
        }
    }

    fn detach(&self, id: u64) {
        self.multi().registry.lock().detach(&self.services(), id);
    }

    fn attach(&self, user: UserSlice) -> Result<isize> {
        let (mut r, mut w) = user.reader_writer();
        let mut req: AttachRequest = r.read()?;
        if self.id.load(Ordering::Acquire) != 0 {
            return Err(EBUSY);
        }
        req.bad_index = u32::MAX;
        req.reason = 0;
        // The request's arrays are read before the registry is locked: a caller whose
        // memory is slow to fault in holds up no other attach, detach or close.
        let res = request::check(&req)
            .and_then(|c| self.multi().registry.lock().attach(&self.services(), c));
        let ret = match res {
            Ok(id) => {
                if self
                    .id
                    .compare_exchange(0, id, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    // Two attaches raced on one file: keep the first.
                    self.detach(id);
                    return Err(EBUSY);
                }
                Ok(0)
            }
            Err(AttachError::Errno(e)) => Err(e),
            Err(AttachError::Refusal(r)) => {
                req.bad_index = r.index;
                req.reason = r.reason as u32;
                Err(Error::from_errno(-r.reason.errno()))
            }
        };
        if let Err(e) = w.write(&req) {
            // The caller cannot be told that its link is attached: it is not, then.
            if ret.is_ok() {
                let id = self.id.swap(0, Ordering::AcqRel);
                self.detach(id);
            }
            return Err(e);
        }
        ret
    }

    fn info(&self, user: UserSlice) -> Result<isize> {
        let (mut r, mut w) = user.reader_writer();
        let mut info: LinkInfo = r.read()?;
        // Copied out once the registry is unlocked, as the request was read before.
        let funcs = {
            let reg = self.multi().registry.lock();
            let link = reg.info(self.id.load(Ordering::Acquire), &mut info)?;
            let n = (info.buf_cnt as usize).min(link.targets.len());
            let mut funcs = AreaVec::with_capacity(n, GFP_KERNEL)?;
            for i in 0..n {
                funcs.push(link.func_info(i), GFP_KERNEL)?;
            }
            funcs
        };
        if !funcs.is_empty() {
            let mut out = UserSlice::new(
                UserPtr::from_addr(info.funcs as usize),
                funcs.len() * size_of::<FuncInfo>(),
            )
            .writer();
            for f in funcs.iter() {
                out.write(f)?;
            }
        }
        w.write(&info)?;
        Ok(0)
    }
}

/// Whether the caller may use rkf_multi: CAP_BPF and CAP_PERFMON, as attaching a BPF
/// tracing program takes.
fn capable() -> bool {
    // SAFETY: capable() may be called from any task; the capabilities are valid numbers.
    unsafe {
        bindings::capable(bindings::CAP_BPF as i32)
            && bindings::capable(bindings::CAP_PERFMON as i32)
    }
}

#[vtable]
impl MiscDevice for LinkFile {
    type Ptr = KBox<Self>;

    fn open(_file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<KBox<Self>> {
        // SAFETY: every registration of this device is the `dev` field of the module state
        // (`RkfMulti::dev` is the only one), so the containing object is an `RkfMulti`.
        let multi = unsafe { kernel::container_of!(core::ptr::from_ref(misc), RkfMulti, dev) };
        // INVARIANT: the file's module reference keeps the module state alive.
        Ok(KBox::new(
            Self {
                multi,
                id: AtomicU64::new(0),
            },
            GFP_KERNEL,
        )?)
    }

    fn release(me: KBox<Self>, _file: &File) {
        let id = me.id.load(Ordering::Acquire);
        if id != 0 {
            me.detach(id);
        }
    }

    fn ioctl(me: &LinkFile, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        if !capable() {
            return Err(EPERM);
        }
        let user = UserSlice::new(UserPtr::from_addr(arg), _IOC_SIZE(cmd));
        match cmd {
            IOC_ATTACH => me.attach(user),
            IOC_INFO => me.info(user),
            _ => Err(ENOTTY),
        }
    }
}

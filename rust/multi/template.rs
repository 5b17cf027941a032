// SPDX-License-Identifier: GPL-2.0

//! The templates rkf_multi programs are verified against, `rkf_multi_tmpl6()` and
//! `rkf_multi_tmpl12()` (c-shim/rkf_multi_run.c), as functions sleepable programs may be
//! verified against.

use kernel::{bindings, error::to_result, prelude::*};

use crate::rkf_h;

/// The templates in the verifier's fmodret set with `KF_SLEEPABLE`
/// (`btf_id_allow_sleepable()` in kernel/bpf/verifier.c), which lets `fentry.s` and
/// `fexit.s` programs load against them; which functions they may then trace is checked
/// at attach time (rkf_core::multi::may_sleep()).
///
/// There is nothing to unregister: the kernel drops a module's sets together with the
/// module's BTF when the module goes away.
pub(crate) struct SleepableTemplate {
    _private: (),
}

impl SleepableTemplate {
    /// Registers the set; fails if resolve_btfids did not patch its BTF id, or the kernel
    /// refuses it.
    pub(crate) fn register() -> Result<Self> {
        // SAFETY: the shim defines `rkf_multi_fmodret_set` as a const object, never
        // written.
        let set = unsafe { &rkf_h::rkf_multi_fmodret_set };
        if !crate::kfunc::ids_resolved(set) {
            pr_err!(
                "the templates' BTF ids are unresolved: resolve_btfids did not run on the module\n"
            );
            return Err(EINVAL);
        }
        // SAFETY: `set` is a valid, 'static set owned by this module, and this runs from
        // module init, as register_btf_fmodret_id_set() requires.
        to_result(unsafe { bindings::register_btf_fmodret_id_set(set) })
            .inspect_err(|e| pr_err!("cannot register the sleepable templates: {:?}\n", e))?;
        Ok(Self { _private: () })
    }
}

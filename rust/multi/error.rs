// SPDX-License-Identifier: GPL-2.0

//! How an attach fails: with a plain errno, or with the refusal of one function, which
//! user space gets back as the function's index and the reason.

use kernel::prelude::*;

use crate::multi_rules::Reason;

/// The refusal of one function of a request.
#[derive(Clone, Copy)]
pub(crate) struct Refusal {
    /// The function, by its index in the request.
    pub(crate) index: u32,
    /// Why.
    pub(crate) reason: Reason,
}

impl Refusal {
    /// The refusal of the function at `index` of the request, for `reason`.
    pub(crate) fn new(index: usize, reason: Reason) -> Self {
        Self {
            index: index as u32,
            reason,
        }
    }
}

/// How an attach failed.
pub(crate) enum AttachError {
    /// With an errno about the whole request (no memory, a bad program, ...).
    Errno(Error),
    /// One function was refused.
    Refusal(Refusal),
}

impl From<Error> for AttachError {
    fn from(e: Error) -> Self {
        Self::Errno(e)
    }
}

impl From<kernel::alloc::AllocError> for AttachError {
    fn from(_: kernel::alloc::AllocError) -> Self {
        Self::Errno(ENOMEM)
    }
}

impl From<Refusal> for AttachError {
    fn from(r: Refusal) -> Self {
        Self::Refusal(r)
    }
}

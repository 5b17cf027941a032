// SPDX-License-Identifier: GPL-2.0

//! What user space needs of the request rules: the refusal numbers of the ABI decoded
//! and described.  Not built into rkf_multi.

use super::Reason;
use crate::abi::Kind;

impl Kind {
    /// Its name, as the program's section names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fentry => "fentry",
            Self::Fexit => "fexit",
            Self::Session => "fsession",
        }
    }
}

impl Reason {
    /// Decodes the ABI number.
    pub fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::NotAFunction,
            2 => Self::WrongAddress,
            3 => Self::TooManyArgs,
            4 => Self::NotInRegisters,
            5 => Self::NotTraceable,
            6 => Self::Busy,
            7 => Self::Duplicate,
            8 => Self::Denied,
            9 => Self::TooManyLinks,
            10 => Self::SameProgram,
            11 => Self::NotModuleBtf,
            12 => Self::BadFd,
            13 => Self::MayNotSleep,
            14 => Self::TooManySessions,
            _ => return None,
        })
    }

    /// What to tell the user.
    pub fn describe(self) -> &'static str {
        match self {
            Self::NotAFunction => "the BTF id is not a function",
            Self::WrongAddress => "the address is not the start of the function its BTF id names",
            Self::TooManyArgs => {
                "more arguments than the program reads (6 through rkf_multi_tmpl6, RKF_MULTI_FENTRY and the like; 12 through rkf_multi_tmpl12, RKF_MULTI_FENTRY12)"
            }
            Self::NotInRegisters => {
                "a struct, union or floating-point argument or return value, or variable arguments"
            }
            Self::NotTraceable => {
                "not traceable (not in available_filter_functions: notrace, inlined or init)"
            }
            Self::Busy => "another direct trampoline (e.g. an in-kernel BPF trampoline) owns it",
            Self::Duplicate => "listed twice",
            Self::Denied => "the trampoline needs it, or it never returns (deny list)",
            Self::TooManyLinks => "already 38 links on it",
            Self::SameProgram => "the program is attached to it through another link",
            Self::NotModuleBtf => "its BTF object is not the BTF of a loaded module",
            Self::BadFd => "the fd of its BTF object is not open",
            Self::MayNotSleep => {
                "the program is sleepable and the function may not sleep (the verifier's rule: a syscall wrapper __x64_*, or on the error injection list)"
            }
            Self::TooManySessions => {
                const { assert!(super::MAX_SESSIONS_PER_FUNC == 8) };
                "already 8 session programs on it"
            }
        }
    }
}

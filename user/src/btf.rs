// SPDX-License-Identifier: GPL-2.0

//! Kernel BTF: the functions rkf_multi can trace, per-cpu variables and the fields inside
//! them, and the fds of kernel BTF objects.
//!
//! BTF is decoded by the btf-rs crate: libbpf-rs 0.27 (its newest release) cannot parse a
//! module's BTF, which is split BTF on top of vmlinux's, and its `Btf` cannot be made
//! from a libbpf object that can.  The fds of kernel BTF objects come from libbpf-rs's
//! [`BtfInfoIter`].

use std::{
    fmt,
    ops::RangeInclusive,
    os::fd::{FromRawFd, OwnedFd},
    path::Path,
};

use anyhow::{anyhow, bail, Context, Result};
use btf_rs::{Backend, Btf, BtfSection, BtfType, Member, Type};
use libbpf_rs::{libbpf_sys, query::BtfInfoIter};
use rkf_core::multi::{btf_kind, SHAPE_SLOTS};

const PERCPU_SECTION: &str = ".data..percpu";
const SYSFS_BTF: &str = "/sys/kernel/btf";

/// The kind [`FuncShape`] gives a type that `rkf_core::multi::check_shape()` does not
/// tell apart from the others it refuses (struct, union, array, float, ...).
pub const OTHER_KIND: u32 = u32::MAX;

/// A function of a BTF object, reduced to what decides whether rkf_multi can trace it.
#[derive(Clone, Debug)]
pub struct FuncShape {
    /// Its BTF id.
    pub btf_id: u32,
    /// Its name.
    pub name: String,
    /// Its parameter count (varargs count as one).
    pub nr_params: u32,
    /// Whether it takes varargs.
    pub varargs: bool,
    /// BTF kinds (`rkf_core::multi::btf_kind`, or [`OTHER_KIND`]) of the return type
    /// (`[0]`, 0 for void) and of up to 12 parameters.
    pub kind: [u32; SHAPE_SLOTS],
    /// Their sizes.
    pub size: [u32; SHAPE_SLOTS],
}

/// A kernel BTF object: vmlinux's, or a module's (split BTF on top of vmlinux's).
pub struct KernelBtf {
    btf: Btf,
    /// `None` for vmlinux.
    module: Option<String>,
}

impl fmt::Debug for KernelBtf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KernelBtf({})", self.object())
    }
}

impl KernelBtf {
    /// vmlinux's BTF, from /sys/kernel/btf/vmlinux (memory-mapped and decoded on demand).
    pub fn vmlinux() -> Result<Self> {
        let path = Path::new(SYSFS_BTF).join("vmlinux");
        // Where the file cannot be mapped, it is read and decoded whole (slower).
        let btf = Btf::from_file_with_backend(&path, Backend::Mmap)
            .or_else(|_| Btf::from_file(&path))
            .with_context(|| format!("loading vmlinux BTF ({})", path.display()))?;
        Ok(Self { btf, module: None })
    }

    /// A module's BTF, from /sys/kernel/btf/`module`, on top of `vmlinux`.
    pub fn module(vmlinux: &KernelBtf, module: &str) -> Result<Self> {
        if vmlinux.module.is_some() {
            bail!("the base of module {module}'s BTF must be vmlinux's, not {vmlinux:?}");
        }
        let path = Path::new(SYSFS_BTF).join(module);
        let btf = Btf::from_split_file(&path, &vmlinux.btf)
            .with_context(|| format!("parsing the BTF of module {module} ({})", path.display()))?;
        Ok(Self {
            btf,
            module: Some(module.to_owned()),
        })
    }

    /// `vmlinux`, or the module's name.
    pub fn object(&self) -> &str {
        self.module.as_deref().unwrap_or("vmlinux")
    }

    /// The part of the BTF that is this object's own: a module's, without vmlinux's.
    fn own(&self) -> &BtfSection {
        self.btf.split().unwrap_or_else(|| self.btf.base())
    }

    /// The type ids of this object's own types.
    fn own_ids(&self) -> RangeInclusive<u32> {
        let (start, end) = self.own().type_id_range();
        start..=end
    }

    fn ty(&self, id: u32) -> Result<Type> {
        self.btf
            .resolve_type_by_id(id)
            .with_context(|| format!("{}: BTF type {id}", self.object()))
    }

    /// The name of `t`: empty for an anonymous type.
    fn name_of(&self, t: &dyn BtfType) -> String {
        if t.get_name_offset().is_none() {
            return String::new();
        }
        self.btf.resolve_name(t).unwrap_or_else(|_| "?".to_owned())
    }

    /// The id of this object's own type `name` for which `is` holds.
    fn find(&self, name: &str, is: impl Fn(&Type) -> bool) -> Result<Option<u32>> {
        for id in self.own().resolve_ids_by_name(name)? {
            if is(&self.ty(id)?) {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// The BTF id of this object's function `name`, if it has one.
    pub fn find_func(&self, name: &str) -> Result<Option<u32>> {
        self.find(name, |t| matches!(t, Type::Func(_)))
    }

    /// Type `id` with typedefs, qualifiers and type tags skipped (libbpf's
    /// `btf__resolve_type()`, which skips a VAR too).
    fn resolve(&self, mut id: u32) -> Result<(u32, Type)> {
        loop {
            let t = self.ty(id)?;
            match &t {
                Type::Typedef(x) => id = self.next(x, id)?,
                Type::Volatile(x) | Type::Const(x) | Type::Restrict(x) => id = self.next(x, id)?,
                Type::TypeTag(x) => id = self.next(x, id)?,
                Type::Var(x) => id = self.next(x, id)?,
                _ => return Ok((id, t)),
            }
        }
    }

    /// The type `t` (type `id`) refers to.
    fn next(&self, t: &dyn BtfType, id: u32) -> Result<u32> {
        t.get_type_id()
            .ok_or_else(|| anyhow!("{}: BTF type {id} refers to no type", self.object()))
    }

    /// The size of type `id` in bytes (libbpf's `btf__resolve_size()`).
    fn size(&self, id: u32) -> Result<u64> {
        let (rid, t) = self.resolve(id)?;
        let size = match &t {
            Type::Int(x) => x.size(),
            Type::Enum(x) => x.size(),
            Type::Enum64(x) => x.size(),
            Type::Struct(x) | Type::Union(x) => x.size(),
            Type::Float(x) => x.size(),
            Type::Datasec(x) => x.size(),
            Type::Ptr(_) => 8,
            Type::Array(a) => {
                let elem = self.size(self.next(a, rid)?)?;
                return elem
                    .checked_mul(a.len() as u64)
                    .ok_or_else(|| anyhow!("BTF type {rid}: an array too large"));
            }
            _ => bail!("{} has no size", self.type_name(rid)),
        };
        Ok(size as u64)
    }

    /// Every function of this object (its own types only), with its shape as
    /// `rkf_core::multi::check_shape()` takes it: the kinds and sizes of the return type and
    /// of up to twelve parameters, typedefs and qualifiers skipped, as rkf_multi's shim
    /// reads them in the kernel.
    pub fn funcs(&self) -> Result<Vec<FuncShape>> {
        let mut out = Vec::new();
        for id in self.own_ids() {
            let Type::Func(func) = self.ty(id)? else {
                continue;
            };
            let Type::FuncProto(proto) = self.ty(self.next(&func, id)?)? else {
                continue;
            };
            let params = &proto.parameters;
            let mut f = FuncShape {
                btf_id: id,
                name: self.name_of(&func),
                nr_params: params.len() as u32,
                varargs: params.last().is_some_and(|p| p.is_variadic()),
                kind: [0; SHAPE_SLOTS],
                size: [0; SHAPE_SLOTS],
            };
            (f.kind[0], f.size[0]) = self.shape(proto.return_type_id())?;
            for (i, p) in params.iter().take(SHAPE_SLOTS - 1).enumerate() {
                if !p.is_variadic() {
                    (f.kind[i + 1], f.size[i + 1]) = self.shape(self.next(p, id)?)?;
                }
            }
            out.push(f);
        }
        Ok(out)
    }

    /// The kind and size of a return value or parameter of type `id` (0: void).
    fn shape(&self, id: u32) -> Result<(u32, u32)> {
        let (_, t) = self.resolve(id)?;
        let size = |s: usize| u32::try_from(s).unwrap_or(u32::MAX);
        Ok(match &t {
            Type::Void => (0, 0),
            Type::Ptr(_) => (btf_kind::PTR, 8),
            Type::Int(x) => (btf_kind::INT, size(x.size())),
            Type::Enum(x) => (btf_kind::ENUM, size(x.size())),
            Type::Enum64(x) => (btf_kind::ENUM64, size(x.size())),
            Type::Struct(x) | Type::Union(x) => (OTHER_KIND, size(x.size())),
            Type::Float(x) => (OTHER_KIND, size(x.size())),
            _ => (OTHER_KIND, 0),
        })
    }

    /// Whether VAR `var_id` is in this object's per-cpu section.
    ///
    /// The section is looked up among this object's own types: a module's BTF has a
    /// `.data..percpu` of its own besides the one of its base, vmlinux.
    fn is_percpu(&self, var_id: u32) -> Result<bool> {
        for id in self.own().resolve_ids_by_name(PERCPU_SECTION)? {
            if let Type::Datasec(sec) = self.ty(id)? {
                if sec
                    .variables
                    .iter()
                    .any(|v| v.get_type_id() == Some(var_id))
                {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// A readable name for type `id` (`struct rq`, `unsigned int`, `u64 *`, ...).
    pub fn type_name(&self, id: u32) -> String {
        let Ok(t) = self.ty(id) else {
            return format!("type {id}");
        };
        let inner = |x: &dyn BtfType| match x.get_type_id() {
            Some(next) => self.type_name(next),
            None => format!("type {id}"),
        };
        match &t {
            Type::Void => "void".to_owned(),
            Type::Struct(x) => format!("struct {}", self.name_of(x)),
            Type::Union(x) => format!("union {}", self.name_of(x)),
            Type::Enum(x) => format!("enum {}", self.name_of(x)),
            Type::Enum64(x) => format!("enum {}", self.name_of(x)),
            Type::Ptr(x) => format!("{} *", inner(x)),
            Type::Const(x) => format!("const {}", inner(x)),
            Type::Volatile(x) => format!("volatile {}", inner(x)),
            Type::Array(_) => "array".to_owned(),
            t => match t.as_btf_type().map(|x| self.name_of(x)) {
                Some(name) if !name.is_empty() => name,
                _ => format!("type {id}"),
            },
        }
    }
}

/// An fd of the kernel BTF object `name` (`vmlinux` or a module), as BPF_PROG_LOAD takes
/// in `attach_btf_obj_fd` and `fd_array`.
///
/// Walking the BTF ids needs CAP_SYS_ADMIN; the fd, once open, needs nothing.
pub fn object_fd(name: &str) -> Result<OwnedFd> {
    let mut objects = BtfInfoIter::default();
    let Some(info) = objects.find(|i| i.name.as_encoded_bytes() == name.as_bytes()) else {
        // The walk stops at its first error: ENOENT past the last id, or why it failed.
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOENT) {
            bail!("no kernel BTF object named {name} (is the module loaded?)");
        }
        return Err(e).context("walking the kernel BTF objects (BPF_BTF_GET_NEXT_ID)");
    };
    // SAFETY: no pointer arguments.
    let fd = unsafe { libbpf_sys::bpf_btf_get_fd_by_id(info.id) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("BPF_BTF_GET_FD_BY_ID of {name} (BTF id {})", info.id));
    }
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// How to show a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    /// An integer or enum of `size` bytes.
    Int {
        /// Whether it is signed.
        signed: bool,
    },
    /// A pointer: shown in hex.
    Ptr,
    /// A bitfield of `bits` bits at bit `shift` of the bytes read.
    Bitfield {
        /// The bit offset within the bytes read.
        shift: u32,
        /// The width.
        bits: u32,
        /// Whether it is signed.
        signed: bool,
    },
    /// Anything else (struct, union, array, float): shown as bytes.
    Bytes,
}

/// A field of a per-cpu variable, resolved to what must be read.
#[derive(Clone, Debug)]
pub struct Field {
    /// Byte offset from the start of the variable.
    pub offset: u64,
    /// How many bytes to read.
    pub size: u64,
    /// The field's type, as C would name it.
    pub type_name: String,
    /// How to show it.
    pub kind: ValueKind,
    /// For a struct or union: the names of its members (anonymous ones flattened).
    pub members: Vec<String>,
}

/// Where a per-cpu variable lives.
#[derive(Debug)]
pub struct PercpuVar {
    /// `None` for vmlinux, else the module.
    pub module: Option<String>,
    /// The variable's name.
    pub name: String,
    /// The variable's type, as C would name it.
    pub type_name: String,
    btf: KernelBtf,
    type_id: u32,
}

/// A member found inside a struct or union: its type, bit offset and bitfield width.
struct FoundMember {
    type_id: u32,
    bit_offset: u64,
    bitfield: Option<u32>,
}

impl PercpuVar {
    /// Finds the per-cpu variable `name` in vmlinux, or else in a loaded module.
    pub fn find(name: &str) -> Result<Self> {
        let is_var = |t: &Type| matches!(t, Type::Var(_));
        let vmlinux = KernelBtf::vmlinux()?;
        if let Some(var) = vmlinux.find(name, is_var)? {
            if !vmlinux.is_percpu(var)? {
                bail!(
                    "{name} is a vmlinux variable but not a per-cpu one (not in {PERCPU_SECTION})"
                );
            }
            return Self::new(name, vmlinux, var);
        }
        let mut mods: Vec<String> = std::fs::read_dir(SYSFS_BTF)
            .with_context(|| format!("reading {SYSFS_BTF}"))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|m| m != "vmlinux")
            .collect();
        mods.sort();
        for m in mods {
            // A module that went away meanwhile has nothing to offer.
            let Ok(btf) = KernelBtf::module(&vmlinux, &m) else {
                continue;
            };
            if let Some(var) = btf.find(name, is_var)? {
                if !btf.is_percpu(var)? {
                    bail!("{name} is a variable of module {m} but not a per-cpu one");
                }
                return Self::new(name, btf, var);
            }
        }
        bail!("no per-cpu variable {name} in the BTF of vmlinux or of any loaded module")
    }

    fn new(name: &str, btf: KernelBtf, var: u32) -> Result<Self> {
        let Type::Var(v) = btf.ty(var)? else {
            bail!(
                "{}: BTF type {var} ({name}) is not a variable",
                btf.object()
            );
        };
        let type_id = btf.next(&v, var)?;
        Ok(Self {
            module: btf.module.clone(),
            name: name.to_owned(),
            type_name: btf.type_name(type_id),
            btf,
            type_id,
        })
    }

    /// Resolves `path` (field names, possibly nested) inside the variable.  An empty path
    /// is the whole variable.
    pub fn field(&self, path: &[&str]) -> Result<Field> {
        let btf = &self.btf;
        let mut id = self.type_id;
        let mut bit_off = 0u64;
        let mut bitfield = None;
        let mut walked = self.name.clone();
        for &want in path {
            let (rid, t) = btf.resolve(id)?;
            if !matches!(t, Type::Struct(_) | Type::Union(_)) {
                bail!("{walked} is {}, which has no fields", btf.type_name(rid));
            }
            let m = self
                .find_member(&t, want)?
                .ok_or_else(|| anyhow!("{} has no field {want}", btf.type_name(rid)))?;
            bit_off += m.bit_offset;
            bitfield = m.bitfield;
            id = m.type_id;
            walked = format!("{walked}.{want}");
        }
        let (rid, t) = btf.resolve(id)?;
        let size = btf.size(rid)?;
        let int_signed = match &t {
            Type::Int(x) => Some(x.is_signed()),
            Type::Enum(x) => Some(x.is_signed()),
            Type::Enum64(x) => Some(x.is_signed()),
            _ => None,
        };
        let mut kind = match (&t, int_signed) {
            (_, Some(signed)) if matches!(size, 1 | 2 | 4 | 8) => ValueKind::Int { signed },
            (Type::Ptr(_), _) => ValueKind::Ptr,
            _ => ValueKind::Bytes,
        };
        let (mut offset, mut read) = (bit_off / 8, size);
        if let Some(bits) = bitfield {
            // Read the whole storage unit that holds the bitfield, 8-byte aligned.
            offset = bit_off / 64 * 8;
            read = 8;
            kind = ValueKind::Bitfield {
                shift: (bit_off % 64) as u32,
                bits,
                signed: int_signed.unwrap_or(false),
            };
        } else if !bit_off.is_multiple_of(8) {
            bail!("{walked} is not byte aligned");
        }
        let members = match &t {
            Type::Struct(_) | Type::Union(_) => self.member_names(&t)?,
            _ => Vec::new(),
        };
        Ok(Field {
            offset,
            size: read,
            type_name: btf.type_name(id),
            kind,
            members,
        })
    }

    /// The members of struct or union `t`.
    fn members(t: &Type) -> &[Member] {
        match t {
            Type::Struct(s) | Type::Union(s) => &s.members,
            _ => &[],
        }
    }

    // The member names of struct/union `t`, with anonymous members flattened.
    fn member_names(&self, t: &Type) -> Result<Vec<String>> {
        let btf = &self.btf;
        let mut names = Vec::new();
        for m in Self::members(t) {
            match btf.name_of(m).as_str() {
                "" => {
                    let (_, inner) = btf.resolve(btf.next(m, 0)?)?;
                    names.extend(self.member_names(&inner)?);
                }
                n => names.push(n.to_owned()),
            }
        }
        Ok(names)
    }

    // Finds `want` among the members of struct/union `t`, looking into anonymous ones.
    fn find_member(&self, t: &Type, want: &str) -> Result<Option<FoundMember>> {
        let btf = &self.btf;
        for m in Self::members(t) {
            let type_id = btf.next(m, 0)?;
            let bit_offset = u64::from(m.bit_offset());
            let name = btf.name_of(m);
            if name == want {
                return Ok(Some(FoundMember {
                    type_id,
                    bit_offset,
                    // A struct with the kind flag gives every member a width, 0 for
                    // members that are not bitfields.
                    bitfield: m.bitfield_size().filter(|&bits| bits != 0),
                }));
            }
            if name.is_empty() {
                let (_, inner) = btf.resolve(type_id)?;
                if let Some(found) = self.find_member(&inner, want)? {
                    return Ok(Some(FoundMember {
                        bit_offset: bit_offset + found.bit_offset,
                        ..found
                    }));
                }
            }
        }
        Ok(None)
    }
}

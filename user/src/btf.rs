// SPDX-License-Identifier: GPL-2.0

//! Kernel BTF: finding per-cpu variables and the fields inside them.
//!
//! libbpf-rs cannot parse split (module) BTF, so this goes through libbpf's C API, with
//! the unsafe parts kept to the small [`RawBtf`] wrapper.

use std::{
    ffi::{CStr, CString},
    fmt,
    os::fd::{FromRawFd, OwnedFd},
    path::Path,
    ptr::NonNull,
};

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::libbpf_sys as sys;

const PERCPU_SECTION: &str = ".data..percpu";

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
    /// BTF kinds of the return type (`[0]`, 0 for void) and of up to 7 parameters.
    pub kind: [u32; 8],
    /// Their sizes.
    pub size: [u32; 8],
}

/// A parsed BTF object, vmlinux's or a module's (split on top of vmlinux's).
pub struct RawBtf {
    ptr: NonNull<sys::btf>,
    /// The first type id that belongs to this object (1 for vmlinux).
    start_id: u32,
}

// The kind of a BTF type: bits 24-28 of `info`.
fn kind(t: &sys::btf_type) -> u32 {
    (t.info >> 24) & 0x1f
}

fn vlen(t: &sys::btf_type) -> usize {
    (t.info & 0xffff) as usize
}

fn kflag(t: &sys::btf_type) -> bool {
    t.info >> 31 != 0
}

impl RawBtf {
    /// vmlinux's BTF, from /sys/kernel/btf/vmlinux.
    pub fn vmlinux() -> Result<Self> {
        // SAFETY: no arguments; returns an owned object or an error pointer.
        let p = unsafe { sys::btf__load_vmlinux_btf() };
        Self::from_ret(p, 1).context("loading vmlinux BTF (/sys/kernel/btf/vmlinux)")
    }

    /// A module's BTF, from /sys/kernel/btf/`module`, on top of `vmlinux`.
    pub fn module(vmlinux: &RawBtf, module: &str) -> Result<Self> {
        let path = Path::new("/sys/kernel/btf").join(module);
        let cpath = CString::new(path.to_string_lossy().as_bytes())?;
        // SAFETY: `cpath` is a valid C string; `vmlinux` outlives the split object, which
        // only reads its base (both are owned by the caller, base declared first).
        let p = unsafe { sys::btf__parse_split(cpath.as_ptr(), vmlinux.ptr.as_ptr()) };
        Self::from_ret(p, vmlinux.type_cnt())
            .with_context(|| format!("parsing the BTF of module {module} ({})", path.display()))
    }

    /// The BTF id of the function `name`, if this object (or, for a module, vmlinux
    /// under it) has one.
    pub fn find_func(&self, name: &str) -> Option<u32> {
        let cname = CString::new(name).ok()?;
        // SAFETY: `self.ptr` is a valid BTF object and `cname` a valid C string.
        let id = unsafe {
            sys::btf__find_by_name_kind(self.ptr.as_ptr(), cname.as_ptr(), sys::BTF_KIND_FUNC)
        };
        u32::try_from(id).ok()
    }

    fn from_ret(p: *mut sys::btf, start_id: u32) -> Result<Self> {
        // libbpf returns NULL with errno set, or an error pointer, on failure.
        let ptr = NonNull::new(p).ok_or_else(std::io::Error::last_os_error)?;
        let err = p as isize;
        if (-4095..0).contains(&err) {
            return Err(std::io::Error::from_raw_os_error(-err as i32).into());
        }
        Ok(Self { ptr, start_id })
    }

    fn type_cnt(&self) -> u32 {
        // SAFETY: `self.ptr` is a valid BTF object.
        unsafe { sys::btf__type_cnt(self.ptr.as_ptr()) }
    }

    fn ty(&self, id: u32) -> Result<&sys::btf_type> {
        // SAFETY: `self.ptr` is valid; the result is NULL or points into the object,
        // which lives as long as `self`.
        unsafe { sys::btf__type_by_id(self.ptr.as_ptr(), id).as_ref() }
            .ok_or_else(|| anyhow!("BTF has no type {id}"))
    }

    fn name(&self, off: u32) -> &str {
        // SAFETY: `self.ptr` is valid; the string table lives as long as `self`.
        let p = unsafe { sys::btf__name_by_offset(self.ptr.as_ptr(), off) };
        if p.is_null() {
            return "";
        }
        // SAFETY: libbpf returns a NUL-terminated string from the string table.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("?")
    }

    fn find(&self, name: &str, kind: u32) -> Option<u32> {
        let c = CString::new(name).ok()?;
        // SAFETY: `self.ptr` and `c` are valid.
        let id = unsafe { sys::btf__find_by_name_kind(self.ptr.as_ptr(), c.as_ptr(), kind) };
        u32::try_from(id).ok().filter(|&id| id >= self.start_id)
    }

    fn resolve(&self, id: u32) -> Result<u32> {
        // SAFETY: `self.ptr` is valid.
        let r = unsafe { sys::btf__resolve_type(self.ptr.as_ptr(), id) };
        u32::try_from(r).map_err(|_| anyhow!("cannot resolve BTF type {id}"))
    }

    fn size(&self, id: u32) -> Result<u64> {
        // SAFETY: `self.ptr` is valid.
        let r = unsafe { sys::btf__resolve_size(self.ptr.as_ptr(), id) };
        u64::try_from(r).map_err(|_| anyhow!("BTF type {id} has no size"))
    }

    /// The members of a struct or union.
    fn members(&self, t: &sys::btf_type) -> &[sys::btf_member] {
        // SAFETY: a struct/union `btf_type` is followed in the object by `vlen` members.
        unsafe {
            std::slice::from_raw_parts(
                (t as *const sys::btf_type).add(1).cast::<sys::btf_member>(),
                vlen(t),
            )
        }
    }

    /// The variables of a DATASEC.
    fn secinfos(&self, t: &sys::btf_type) -> &[sys::btf_var_secinfo] {
        // SAFETY: a DATASEC `btf_type` is followed in the object by `vlen` secinfos.
        unsafe {
            std::slice::from_raw_parts(
                (t as *const sys::btf_type)
                    .add(1)
                    .cast::<sys::btf_var_secinfo>(),
                vlen(t),
            )
        }
    }

    /// Every function of this object (its own type ids only), with its shape as
    /// `rkf_core::multi::check_shape()` takes it: the kinds and sizes of the return type and
    /// of up to seven parameters, typedefs and qualifiers skipped, as rkf_multi's shim
    /// reads them in the kernel.
    pub fn funcs(&self) -> Result<Vec<FuncShape>> {
        const FUNC: u32 = 12;
        const FUNC_PROTO: u32 = 13;
        let mut out = Vec::new();
        for id in self.start_id..self.type_cnt() {
            let t = self.ty(id)?;
            if kind(t) != FUNC {
                continue;
            }
            // SAFETY: the union's `type_` member is what FUNC types use.
            let proto_id = unsafe { t.__bindgen_anon_1.type_ };
            let proto = self.ty(proto_id)?;
            if kind(proto) != FUNC_PROTO {
                continue;
            }
            // SAFETY: a FUNC_PROTO `btf_type` is followed in the object by `vlen` params.
            let params = unsafe {
                std::slice::from_raw_parts(
                    (proto as *const sys::btf_type)
                        .add(1)
                        .cast::<sys::btf_param>(),
                    vlen(proto),
                )
            };
            let mut f = FuncShape {
                btf_id: id,
                name: self.name(t.name_off).to_string(),
                nr_params: params.len() as u32,
                varargs: params.last().is_some_and(|p| p.type_ == 0),
                kind: [0; 8],
                size: [0; 8],
            };
            // SAFETY: the union's `type_` member is what FUNC_PROTO types use.
            let ret = unsafe { proto.__bindgen_anon_1.type_ };
            self.shape_of(ret, 0, &mut f)?;
            for (i, p) in params.iter().take(7).enumerate() {
                self.shape_of(p.type_, i + 1, &mut f)?;
            }
            out.push(f);
        }
        Ok(out)
    }

    fn shape_of(&self, mut id: u32, slot: usize, f: &mut FuncShape) -> Result<()> {
        // TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG.
        const MODIFIERS: [u32; 5] = [8, 9, 10, 11, 18];
        if id == 0 {
            return Ok(());
        }
        let mut t = self.ty(id)?;
        while MODIFIERS.contains(&kind(t)) {
            // SAFETY: modifiers use the union's `type_` member.
            id = unsafe { t.__bindgen_anon_1.type_ };
            if id == 0 {
                return Ok(());
            }
            t = self.ty(id)?;
        }
        f.kind[slot] = kind(t);
        f.size[slot] = match kind(t) {
            // PTR
            2 => 8,
            // INT, STRUCT, UNION, ENUM, FLOAT, ENUM64: sized
            1 | 4 | 5 | 6 | 16 | 19 => {
                // SAFETY: sized kinds use the union's `size` member.
                unsafe { t.__bindgen_anon_1.size }
            }
            _ => 0,
        };
        Ok(())
    }

    /// Whether VAR `var_id` is in this object's per-cpu section.
    ///
    /// The section is looked up among this object's own types: a module's BTF has a
    /// `.data..percpu` of its own besides the one of its base, vmlinux.
    fn is_percpu(&self, var_id: u32) -> Result<bool> {
        for id in self.start_id..self.type_cnt() {
            let t = self.ty(id)?;
            if kind(t) == sys::BTF_KIND_DATASEC
                && self.name(t.name_off) == PERCPU_SECTION
                && self.secinfos(t).iter().any(|v| v.type_ == var_id)
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// A readable name for type `id` (`struct rq`, `unsigned int`, `u64 *`, ...).
    pub fn type_name(&self, id: u32) -> String {
        let Ok(t) = self.ty(id) else {
            return format!("type {id}");
        };
        let name = self.name(t.name_off);
        // SAFETY: every kind below uses the `type_` arm of the union.
        let inner = || unsafe { t.__bindgen_anon_1.type_ };
        match kind(t) {
            sys::BTF_KIND_STRUCT => format!("struct {name}"),
            sys::BTF_KIND_UNION => format!("union {name}"),
            sys::BTF_KIND_ENUM | sys::BTF_KIND_ENUM64 => format!("enum {name}"),
            sys::BTF_KIND_PTR => format!("{} *", self.type_name(inner())),
            sys::BTF_KIND_CONST => format!("const {}", self.type_name(inner())),
            sys::BTF_KIND_VOLATILE => format!("volatile {}", self.type_name(inner())),
            sys::BTF_KIND_ARRAY => "array".to_owned(),
            0 => "void".to_owned(),
            _ if name.is_empty() => format!("type {id}"),
            _ => name.to_owned(),
        }
    }
}

impl Drop for RawBtf {
    fn drop(&mut self) {
        // SAFETY: `self.ptr` is owned and freed exactly once.
        unsafe { sys::btf__free(self.ptr.as_ptr()) };
    }
}

/// An fd of the kernel BTF object `name` (`vmlinux` or a module), as BPF_PROG_LOAD takes
/// in `attach_btf_obj_fd` and `fd_array`.
///
/// Walking the BTF ids needs CAP_SYS_ADMIN; the fd, once open, needs nothing.
pub fn object_fd(name: &str) -> Result<OwnedFd> {
    let mut id = 0u32;
    loop {
        let mut next = 0u32;
        // SAFETY: `next` is a valid out pointer.
        if unsafe { sys::bpf_btf_get_next_id(id, &mut next) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOENT) {
                bail!("no kernel BTF object named {name} (is the module loaded?)");
            }
            return Err(e).context("BPF_BTF_GET_NEXT_ID");
        }
        id = next;
        // SAFETY: no pointer arguments.
        let fd = unsafe { sys::bpf_btf_get_fd_by_id(id) };
        if fd < 0 {
            continue; // freed meanwhile
        }
        // SAFETY: a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut buf = [0u8; 64];
        // SAFETY: all-zero is a valid bpf_btf_info.
        let mut info: sys::bpf_btf_info = unsafe { std::mem::zeroed() };
        info.name = buf.as_mut_ptr() as u64;
        info.name_len = buf.len() as u32;
        let mut len = std::mem::size_of::<sys::bpf_btf_info>() as u32;
        // SAFETY: `info` and `buf` outlive the call, with their sizes given.
        let r = unsafe {
            sys::bpf_btf_get_info_by_fd(std::os::fd::AsRawFd::as_raw_fd(&fd), &mut info, &mut len)
        };
        if r == 0 && CStr::from_bytes_until_nul(&buf).is_ok_and(|n| n.to_bytes() == name.as_bytes())
        {
            return Ok(fd);
        }
    }
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
pub struct PercpuVar {
    /// `None` for vmlinux, else the module.
    pub module: Option<String>,
    /// The variable's name.
    pub name: String,
    /// The variable's type, as C would name it.
    pub type_name: String,
    btf: RawBtf,
    type_id: u32,
    // Declared after `btf`, so dropped after it: a module's BTF refers to its base.
    _base: Option<RawBtf>,
}

impl fmt::Debug for PercpuVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PercpuVar")
            .field("module", &self.module)
            .field("name", &self.name)
            .field("type_name", &self.type_name)
            .finish()
    }
}

impl PercpuVar {
    /// Finds the per-cpu variable `name` in vmlinux, or else in a loaded module.
    pub fn find(name: &str) -> Result<Self> {
        let vmlinux = RawBtf::vmlinux()?;
        if let Some(var) = vmlinux.find(name, sys::BTF_KIND_VAR) {
            if !vmlinux.is_percpu(var)? {
                bail!(
                    "{name} is a vmlinux variable but not a per-cpu one (not in {PERCPU_SECTION})"
                );
            }
            return Self::new(None, name, vmlinux, var, None);
        }
        let mut mods: Vec<String> = std::fs::read_dir("/sys/kernel/btf")
            .context("reading /sys/kernel/btf")?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|m| m != "vmlinux")
            .collect();
        mods.sort();
        for m in mods {
            let Ok(btf) = RawBtf::module(&vmlinux, &m) else {
                continue;
            };
            if let Some(var) = btf.find(name, sys::BTF_KIND_VAR) {
                if !btf.is_percpu(var)? {
                    bail!("{name} is a variable of module {m} but not a per-cpu one");
                }
                return Self::new(Some(m), name, btf, var, Some(vmlinux));
            }
        }
        bail!("no per-cpu variable {name} in the BTF of vmlinux or of any loaded module")
    }

    fn new(
        module: Option<String>,
        name: &str,
        btf: RawBtf,
        var: u32,
        base: Option<RawBtf>,
    ) -> Result<Self> {
        // SAFETY: a VAR uses the `type_` arm of the union.
        let type_id = unsafe { btf.ty(var)?.__bindgen_anon_1.type_ };
        Ok(Self {
            module,
            name: name.to_owned(),
            type_name: btf.type_name(type_id),
            btf,
            type_id,
            _base: base,
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
            let rid = btf.resolve(id)?;
            let t = btf.ty(rid)?;
            if !matches!(kind(t), sys::BTF_KIND_STRUCT | sys::BTF_KIND_UNION) {
                bail!("{walked} is {}, which has no fields", btf.type_name(rid));
            }
            let (m_id, m_bits, m_size) = self
                .find_member(rid, want)?
                .ok_or_else(|| anyhow!("{} has no field {want}", btf.type_name(rid)))?;
            bit_off += m_bits;
            bitfield = (m_size != 0).then_some(m_size);
            id = m_id;
            walked = format!("{walked}.{want}");
        }
        let rid = btf.resolve(id)?;
        let t = btf.ty(rid)?;
        let size = btf.size(rid)?;
        let int_signed = match kind(t) {
            // SAFETY: an INT type is followed by its u32 encoding word.
            sys::BTF_KIND_INT => {
                Some(unsafe { *(t as *const sys::btf_type).add(1).cast::<u32>() } >> 24 & 1 != 0)
            }
            sys::BTF_KIND_ENUM | sys::BTF_KIND_ENUM64 => Some(kflag(t)),
            _ => None,
        };
        let kind_of = kind;
        let mut kind = match (kind_of(t), int_signed) {
            (_, Some(signed)) if matches!(size, 1 | 2 | 4 | 8) => ValueKind::Int { signed },
            (sys::BTF_KIND_PTR, _) => ValueKind::Ptr,
            _ => ValueKind::Bytes,
        };
        let (mut offset, mut read) = (bit_off / 8, size);
        if let Some(bits) = bitfield {
            // Read the whole storage unit that holds the bitfield, 8-byte aligned.
            offset = bit_off / 64 * 8;
            read = 8;
            kind = ValueKind::Bitfield {
                shift: (bit_off % 64) as u32,
                bits: bits as u32,
                signed: int_signed.unwrap_or(false),
            };
        } else if !bit_off.is_multiple_of(8) {
            bail!("{walked} is not byte aligned");
        }
        let members = if matches!(kind_of(t), sys::BTF_KIND_STRUCT | sys::BTF_KIND_UNION) {
            self.member_names(rid)?
        } else {
            Vec::new()
        };
        Ok(Field {
            offset,
            size: read,
            type_name: btf.type_name(id),
            kind,
            members,
        })
    }

    // The member names of struct/union `id`, with anonymous members flattened.
    fn member_names(&self, id: u32) -> Result<Vec<String>> {
        let btf = &self.btf;
        let mut names = Vec::new();
        for m in btf.members(btf.ty(id)?) {
            match btf.name(m.name_off) {
                "" => names.extend(self.member_names(btf.resolve(m.type_)?)?),
                n => names.push(n.to_owned()),
            }
        }
        Ok(names)
    }

    // Finds `want` among the members of struct/union `id`, looking into anonymous ones.
    // Returns (type, bit offset, bitfield size or 0).
    fn find_member(&self, id: u32, want: &str) -> Result<Option<(u32, u64, u64)>> {
        let btf = &self.btf;
        let t = btf.ty(id)?;
        for m in btf.members(t) {
            let (bits, bsize) = if kflag(t) {
                (u64::from(m.offset & 0xff_ffff), u64::from(m.offset >> 24))
            } else {
                (u64::from(m.offset), 0)
            };
            let name = btf.name(m.name_off);
            if name == want {
                return Ok(Some((m.type_, bits, bsize)));
            }
            if name.is_empty() {
                let rid = btf.resolve(m.type_)?;
                if matches!(
                    kind(btf.ty(rid)?),
                    sys::BTF_KIND_STRUCT | sys::BTF_KIND_UNION
                ) {
                    if let Some((ty, inner, bs)) = self.find_member(rid, want)? {
                        return Ok(Some((ty, bits + inner, bs)));
                    }
                }
            }
        }
        Ok(None)
    }
}

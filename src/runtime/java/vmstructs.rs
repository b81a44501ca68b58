//! HotSpot's Serviceability Agent tables, read out of a live JVM.
//!
//! libjvm exports `gHotSpotVMStructs`, `gHotSpotVMTypes` and the int and
//! long constant tables: arrays of entries (type name, field name, offset
//! or address; type name and size; constant name and value) that end at
//! an entry with no type name, plus variables saying each entry's stride
//! and where in it each member lies. The strings they point at are
//! relocated when libjvm is loaded, so the tables are read from the
//! process's memory, never from the file. Every read is bounded: a table
//! that does not end, or a name that does not, is an error.

use std::collections::HashMap;
use std::io;

use crate::runtime::memory::Memory;

/// Entries read of one table at most (JDK 17 has about 1,100 fields).
const MAX_ENTRIES: u64 = 20_000;
/// Bytes of a name read at most.
const MAX_NAME: usize = 256;
/// An entry is at most this long (JDK 17: 48 bytes).
const MAX_STRIDE: u64 = 256;

/// A field as the tables give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// A member's offset in its type.
    Offset(u64),
    /// A static member's address in the process.
    Address(u64),
}

/// What the tables say, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmStructs {
    /// (type, field) → where it lies.
    pub fields: HashMap<(String, String), Field>,
    /// Type → its size in bytes.
    pub sizes: HashMap<String, u64>,
    /// Int and long constants.
    pub constants: HashMap<String, i64>,
}

impl VmStructs {
    /// A member's offset.
    pub fn offset(&self, ty: &str, field: &str) -> Option<u64> {
        match self.fields.get(&(ty.to_string(), field.to_string()))? {
            Field::Offset(o) => Some(*o),
            Field::Address(_) => None,
        }
    }

    /// A static member's address.
    pub fn address(&self, ty: &str, field: &str) -> Option<u64> {
        match self.fields.get(&(ty.to_string(), field.to_string()))? {
            Field::Address(a) => Some(*a),
            Field::Offset(_) => None,
        }
    }

    pub fn size(&self, ty: &str) -> Option<u64> {
        self.sizes.get(ty).copied()
    }

    pub fn constant(&self, name: &str) -> Option<i64> {
        self.constants.get(name).copied()
    }

    /// Reads the tables through `mem`; `symbol` gives the address in the
    /// process of each exported `gHotSpot*` variable.
    pub fn read(mem: &dyn Memory, symbol: &dyn Fn(&str) -> Option<u64>) -> io::Result<VmStructs> {
        let var = |name: &str| -> io::Result<u64> {
            let at = symbol(name).ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("libjvm exports no {name}"))
            })?;
            mem.read_u64(at)
        };
        let mut out = VmStructs::default();

        let s = Table::new(
            &var,
            "gHotSpotVMStructs",
            "gHotSpotVMStructEntryArrayStride",
        )?;
        let type_name = var("gHotSpotVMStructEntryTypeNameOffset")?;
        let field_name = var("gHotSpotVMStructEntryFieldNameOffset")?;
        let is_static = var("gHotSpotVMStructEntryIsStaticOffset")?;
        let offset = var("gHotSpotVMStructEntryOffsetOffset")?;
        let address = var("gHotSpotVMStructEntryAddressOffset")?;
        s.each(mem, |e| {
            let Some(ty) = string_at(mem, word(e, type_name)?)? else {
                return Ok(false);
            };
            let field = string_at(mem, word(e, field_name)?)?.unwrap_or_default();
            let value = if int(e, is_static)? != 0 {
                Field::Address(word(e, address)?)
            } else {
                Field::Offset(word(e, offset)?)
            };
            out.fields.insert((ty, field), value);
            Ok(true)
        })?;

        let t = Table::new(&var, "gHotSpotVMTypes", "gHotSpotVMTypeEntryArrayStride")?;
        let type_name = var("gHotSpotVMTypeEntryTypeNameOffset")?;
        let size = var("gHotSpotVMTypeEntrySizeOffset")?;
        t.each(mem, |e| {
            let Some(ty) = string_at(mem, word(e, type_name)?)? else {
                return Ok(false);
            };
            out.sizes.insert(ty, word(e, size)?);
            Ok(true)
        })?;

        for (kind, long) in [("Int", false), ("Long", true)] {
            let c = Table::new(
                &var,
                &format!("gHotSpotVM{kind}Constants"),
                &format!("gHotSpotVM{kind}ConstantEntryArrayStride"),
            )?;
            let name = var(&format!("gHotSpotVM{kind}ConstantEntryNameOffset"))?;
            let value = var(&format!("gHotSpotVM{kind}ConstantEntryValueOffset"))?;
            c.each(mem, |e| {
                let Some(n) = string_at(mem, word(e, name)?)? else {
                    return Ok(false);
                };
                let v = if long {
                    word(e, value)? as i64
                } else {
                    i64::from(int(e, value)? as i32)
                };
                out.constants.insert(n, v);
                Ok(true)
            })?;
        }
        Ok(out)
    }
}

/// One of the tables: where its entries start and their stride.
struct Table {
    start: u64,
    stride: u64,
}

impl Table {
    fn new(var: &dyn Fn(&str) -> io::Result<u64>, array: &str, stride: &str) -> io::Result<Table> {
        let start = var(array)?;
        let stride = var(stride)?;
        if start == 0 || stride == 0 || stride > MAX_STRIDE {
            return Err(bad(&format!(
                "{array}: no table, or an entry of {stride} bytes"
            )));
        }
        Ok(Table { start, stride })
    }

    /// Calls `f` on each entry's bytes, 64 entries read at a time, until
    /// it returns false (the end entry).
    fn each(
        &self,
        mem: &dyn Memory,
        mut f: impl FnMut(&[u8]) -> io::Result<bool>,
    ) -> io::Result<()> {
        const BATCH: u64 = 64;
        let mut buf = vec![0u8; (self.stride * BATCH) as usize];
        let mut i = 0;
        while i < MAX_ENTRIES {
            let at = self.start + i * self.stride;
            // A batch may run past the table's mapping: read less then.
            if mem.read(at, &mut buf).is_err() {
                buf.truncate(self.stride as usize);
                mem.read(at, &mut buf)?;
            }
            for e in buf.chunks_exact(self.stride as usize) {
                if !f(e)? {
                    return Ok(());
                }
                i += 1;
            }
        }
        Err(bad("a table with no end"))
    }
}

fn bad(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

fn word(e: &[u8], at: u64) -> io::Result<u64> {
    let at = usize::try_from(at).map_err(|_| bad("offset"))?;
    e.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_ne_bytes)
        .ok_or_else(|| bad("an entry member past the entry's end"))
}

fn int(e: &[u8], at: u64) -> io::Result<u32> {
    let at = usize::try_from(at).map_err(|_| bad("offset"))?;
    e.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_ne_bytes)
        .ok_or_else(|| bad("an entry member past the entry's end"))
}

/// The NUL-terminated string at `addr` (None for a null pointer), read in
/// pieces that do not cross a 64-byte boundary (so a string at the end
/// of a mapping is read whole).
pub fn string_at(mem: &dyn Memory, addr: u64) -> io::Result<Option<String>> {
    if addr == 0 {
        return Ok(None);
    }
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < MAX_NAME {
        let mut chunk = [0u8; 64];
        let n = (64 - (at % 64)) as usize;
        mem.read(at, &mut chunk[..n])?;
        if let Some(end) = chunk[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Ok(Some(String::from_utf8_lossy(&out).into_owned()));
        }
        out.extend_from_slice(&chunk[..n]);
        at += n as u64;
    }
    Err(bad("a name with no end"))
}

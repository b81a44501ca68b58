//! What a node binary says of its V8 through its symbols: the `v8dbg_*`
//! constants V8's postmortem generator (`gen-postmortem-metadata.py`)
//! writes into every Node.js build (offsets of fields, instance types,
//! frame types, tag values), V8's version, and where the few variables
//! the walk needs lie (the embedded builtins' code, the bytecode sizes,
//! leaptiering's isolate group, and the two functions whose code says
//! where in it the dispatch table is).
//!
//! The file is another user's: it is read in bounded pieces through
//! [`crate::elf`], and a symbol whose size is not that of the value it
//! names (an `int` or a `long`) is left out, never read at a guessed
//! width. Both `.dynsym` and `.symtab` are read: from Node 24 (built with
//! `-fvisibility=hidden`) some of the variables are in `.symtab` only.

use std::collections::HashMap;
use std::fs::File;

use crate::elf::{each_symbol, Elf, FileSource, Source, EM_AARCH64, EM_X86_64};
use crate::elf::{SHT_DYNSYM, SHT_NOBITS, SHT_SYMTAB};

/// A symbol table and its names read at most (Node 26's `.strtab` is
/// 18 MiB, its `.symtab` 4 MiB).
const MAX_TABLE: u64 = 64 << 20;

/// The prefix of V8's postmortem constants.
const DBG: &[u8] = b"v8dbg_";

/// `v8::internal::Version::{major_,minor_,build_,patch_}`, in that order.
const VERSION: [&[u8]; 4] = [
    b"_ZN2v88internal7Version6major_E",
    b"_ZN2v88internal7Version6minor_E",
    b"_ZN2v88internal7Version6build_E",
    b"_ZN2v88internal7Version6patch_E",
];

/// `v8::internal::IsolateGroup::default_isolate_group_` (V8 13 on).
const ISOLATE_GROUP: &[u8] = b"_ZN2v88internal12IsolateGroup22default_isolate_group_E";
/// The embedded builtins' first instruction (a label in `.text`).
const BLOB_CODE: &[u8] = b"v8_Default_embedded_blob_code_";
/// A `uint32_t` in `.rodata`: the embedded builtins' code size.
const BLOB_CODE_SIZE: &[u8] = b"v8_Default_embedded_blob_code_size_";
/// `v8::internal::interpreter::Bytecodes::kBytecodeSizes`: a
/// `uint8_t[3][kBytecodeCount]`.
const BYTECODE_SIZES: &[u8] = b"_ZN2v88internal11interpreter9Bytecodes14kBytecodeSizesE";
/// `ExternalReference::js_dispatch_table_address()` (V8 13: reads the
/// table of the isolate group).
const DISPATCH_TABLE_ADDRESS: &[u8] =
    b"_ZN2v88internal17ExternalReference25js_dispatch_table_addressEv";
/// `ExternalReference::js_dispatch_table_address(Isolate*)` (V8 14: reads
/// the table of an isolate).
const DISPATCH_TABLE_ADDRESS_OF_ISOLATE: &[u8] =
    b"_ZN2v88internal17ExternalReference25js_dispatch_table_addressEPNS0_7IsolateE";
/// `IsolateGroup::AddIsolate(Isolate*)`: keeps the first isolate added.
const ADD_ISOLATE: &[u8] = b"_ZN2v88internal12IsolateGroup10AddIsolateEPNS0_7IsolateE";

/// The embedded builtins' symbols' prefix (`.symtab` labels, one per
/// builtin, in the order the builtins are laid out).
const BUILTIN: &[u8] = b"Builtins_";
/// The interpreter's builtins that run on an interpreted frame (its
/// entry trampoline, the calls it makes, its re-entries): named
/// `Builtins_Interpreter*`, laid out together.
const INTERPRETER: &[u8] = b"Builtins_Interpreter";
/// The first of the bytecode handlers (`Builtins_*Handler`, laid out
/// together, last in the official builds of Node.js 20 to 26).
const FIRST_HANDLER: &[u8] = b"Builtins_WideHandler";

/// A variable of the binary: its virtual address in the file (official
/// node binaries are not position-independent: the process's address;
/// else add the load bias) and size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variable {
    pub addr: u64,
    pub size: u64,
}

/// What a node binary's symbols say of its V8.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Symbols {
    /// `e_machine`: x86-64 or arm64.
    pub machine: u16,
    /// Each `v8dbg_*` constant's value, by its name without `v8dbg_`.
    pub dbg: HashMap<String, i64>,
    /// `Version::{major_,minor_,build_,patch_}`'s values, when all four
    /// are there.
    pub version: Option<[u32; 4]>,
    /// `IsolateGroup::default_isolate_group_` (a pointer variable).
    pub isolate_group: Option<Variable>,
    /// The embedded builtins' code: the label's address (the blob is
    /// there, not pointed to) and the size its size variable holds. V8
    /// 12 on remaps the blob at run time (beside its code range): there,
    /// a mapping of the binary at the blob's file offset.
    pub blob_code: Option<Variable>,
    /// `v8_Default_embedded_blob_code_size_` itself.
    pub blob_code_size: Option<Variable>,
    /// `Bytecodes::kBytecodeSizes`.
    pub bytecode_sizes: Option<Variable>,
    /// The function `js_dispatch_table_address` (its code: address and
    /// size), and whether it takes the isolate (V8 14) or reads the
    /// isolate group's table (V8 13).
    pub dispatch_table_address: Option<(Variable, bool)>,
    /// The function `IsolateGroup::AddIsolate`.
    pub add_isolate: Option<Variable>,
    /// Where the builtins that run on an interpreted frame are (virtual
    /// addresses, as `blob_code`'s): the interpreter's trampolines and
    /// its bytecode handlers. Empty without `.symtab`'s labels, or where
    /// they are not laid out together ([`interpreter_code`]).
    pub interpreter: Vec<std::ops::Range<u64>>,
}

impl Symbols {
    /// Reads the symbols of the ELF file `file`; `None` unless it is a
    /// 64-bit little-endian x86-64 or arm64 object with a symbol table.
    pub fn read(file: &File) -> Option<Symbols> {
        let elf = Elf::parse(FileSource::new(file)?)?;
        if !elf.layout.is64 || !elf.layout.little || ![EM_X86_64, EM_AARCH64].contains(&elf.machine)
        {
            return None;
        }
        let mut found = Found::default();
        let mut any = false;
        for kind in [SHT_DYNSYM, SHT_SYMTAB] {
            if let Some((syms, strs)) = elf.symbol_table(kind, MAX_TABLE) {
                any = true;
                found.scan(&elf, &syms, &strs);
            }
        }
        if !any {
            return None;
        }
        let int = |v: Option<Variable>| {
            v.and_then(|v| value_at(&elf, v))
                .and_then(|v| u32::try_from(v).ok())
        };
        let version = match found.version.map(int) {
            [Some(a), Some(b), Some(c), Some(d)] => Some([a, b, c, d]),
            _ => None,
        };
        let blob_code = found
            .blob_code
            .zip(int(found.blob_code_size))
            .map(|(label, size)| Variable {
                addr: label.addr,
                size: u64::from(size),
            });
        Some(Symbols {
            machine: elf.machine,
            dbg: found.dbg,
            version,
            isolate_group: found.isolate_group,
            blob_code,
            blob_code_size: found.blob_code_size,
            bytecode_sizes: found.bytecode_sizes,
            dispatch_table_address: found
                .dispatch_table_address
                .map(|v| (v, false))
                .or(found.dispatch_table_address_of_isolate.map(|v| (v, true))),
            add_isolate: found.add_isolate,
            interpreter: interpreter_code(found.builtins, blob_code),
        })
    }

    /// The constant `v8dbg_<name>`.
    pub fn value(&self, name: &str) -> Option<i64> {
        self.dbg.get(name).copied()
    }

    /// The one value of the constants whose names start with `prefix`
    /// (a field's type suffix changes across versions:
    /// `name_or_scope_info__Object`, `__Tagged_Object_`,
    /// `__Tagged_NameOrScopeInfoT_`). `Ok(None)` if none does; an error
    /// naming them if they disagree.
    pub fn by_prefix(&self, prefix: &str) -> Result<Option<i64>, String> {
        let mut matches: Vec<(&String, i64)> = self
            .dbg
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k, *v))
            .collect();
        matches.sort();
        match matches.as_slice() {
            [] => Ok(None),
            [(_, v), rest @ ..] if rest.iter().all(|(_, w)| w == v) => Ok(Some(*v)),
            _ => Err(format!(
                "v8dbg_{prefix}* disagree: {}",
                matches
                    .iter()
                    .map(|(k, v)| format!("{k} = {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// The constants whose names start with `prefix`, the prefix cut off.
    pub fn each_with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, i64)> {
        self.dbg
            .iter()
            .filter_map(move |(k, v)| Some((k.strip_prefix(prefix)?, *v)))
    }
}

/// What a scan of the symbol tables found: variables by address, the
/// `v8dbg_*` values read.
#[derive(Default)]
struct Found {
    dbg: HashMap<String, i64>,
    version: [Option<Variable>; 4],
    isolate_group: Option<Variable>,
    blob_code: Option<Variable>,
    blob_code_size: Option<Variable>,
    bytecode_sizes: Option<Variable>,
    dispatch_table_address: Option<Variable>,
    dispatch_table_address_of_isolate: Option<Variable>,
    add_isolate: Option<Variable>,
    /// Each `Builtins_*` label: its address and what it is.
    builtins: Vec<(u64, Builtin)>,
}

/// What a `Builtins_*` label names, as [`interpreter_code`] reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Builtin {
    /// `Builtins_Interpreter*`.
    Interpreter,
    /// `Builtins_WideHandler`, the first bytecode handler.
    FirstHandler,
    /// Any other `Builtins_*Handler`.
    Handler,
    Other,
}

impl Builtin {
    fn of(name: &[u8]) -> Builtin {
        if name.starts_with(INTERPRETER) {
            Builtin::Interpreter
        } else if name == FIRST_HANDLER {
            Builtin::FirstHandler
        } else if name.ends_with(b"Handler") {
            Builtin::Handler
        } else {
            Builtin::Other
        }
    }
}

/// At most this many ranges of the interpreter's code are kept (what
/// `struct v8_proc` holds): Node.js 20 to 26 have three.
pub const MAX_INTERPRETER_RANGES: usize = 4;

/// The code that runs on an interpreted frame, from the builtins' labels
/// (`builtins`, any order) and the builtins' code `blob`: each run of
/// `Builtins_Interpreter*` builtins laid out together (the entry
/// trampoline to the re-entries; `InterpreterOnStackReplacement_ToBaseline`
/// on its own), and the bytecode handlers from `Builtins_WideHandler` to
/// the next label that is not a handler (or the blob's end). Labels
/// outside the blob are left out; without the blob, or with more runs
/// than [`MAX_INTERPRETER_RANGES`], nothing (the walk then tells frames
/// apart as it did without).
pub(super) fn interpreter_code(
    mut builtins: Vec<(u64, Builtin)>,
    blob: Option<Variable>,
) -> Vec<std::ops::Range<u64>> {
    let Some(blob) = blob else {
        return Vec::new();
    };
    let blob = blob.addr..blob.addr.saturating_add(blob.size);
    builtins.retain(|(addr, _)| blob.contains(addr));
    builtins.sort_unstable_by_key(|(addr, _)| *addr);
    builtins.dedup_by_key(|(addr, _)| *addr);
    let next = |i: usize| builtins.get(i).map_or(blob.end, |(addr, _)| *addr);
    let mut out = Vec::new();
    let mut i = 0;
    while i < builtins.len() {
        let member: fn(Builtin) -> bool = match builtins[i].1 {
            Builtin::Interpreter => |b| b == Builtin::Interpreter,
            Builtin::FirstHandler => |b| matches!(b, Builtin::FirstHandler | Builtin::Handler),
            _ => {
                i += 1;
                continue;
            }
        };
        let first = i;
        while i < builtins.len() && member(builtins[i].1) {
            i += 1;
        }
        out.push(builtins[first].0..next(i));
    }
    if out.len() > MAX_INTERPRETER_RANGES {
        return Vec::new();
    }
    out
}

impl Found {
    /// Records the symbols of one table (`syms`, names in `strs`); what an
    /// earlier table gave stays.
    fn scan<S: Source>(&mut self, elf: &Elf<S>, syms: &[u8], strs: &[u8]) {
        each_symbol(elf.layout, syms, strs, |s| {
            if !s.defined {
                return;
            }
            let var = Variable {
                addr: s.value,
                size: s.size,
            };
            if let Some(name) = s.name.strip_prefix(DBG) {
                let Ok(name) = std::str::from_utf8(name) else {
                    return;
                };
                if !self.dbg.contains_key(name) {
                    if let Some(v) = value_at(elf, var) {
                        self.dbg.insert(name.to_string(), v);
                    }
                }
                return;
            }
            if s.name.starts_with(BUILTIN) {
                self.builtins.push((s.value, Builtin::of(s.name)));
                return;
            }
            let slot = match s.name {
                ISOLATE_GROUP => &mut self.isolate_group,
                BLOB_CODE => &mut self.blob_code,
                BLOB_CODE_SIZE => {
                    // An assembler label: its size is not in the table.
                    let var = Variable { size: 4, ..var };
                    self.blob_code_size.get_or_insert(var);
                    return;
                }
                BYTECODE_SIZES => &mut self.bytecode_sizes,
                DISPATCH_TABLE_ADDRESS => &mut self.dispatch_table_address,
                DISPATCH_TABLE_ADDRESS_OF_ISOLATE => &mut self.dispatch_table_address_of_isolate,
                ADD_ISOLATE => &mut self.add_isolate,
                name => match VERSION.iter().position(|v| *v == name) {
                    Some(i) => &mut self.version[i],
                    None => return,
                },
            };
            slot.get_or_insert(var);
        });
    }
}

/// The signed `int` (4 bytes) or `long` (8 bytes) variable `v` holds in
/// the file: 0 in `.bss` (the constants that are 0 are there); `None`
/// for another size or where the file has no bytes.
fn value_at<S: Source>(elf: &Elf<S>, v: Variable) -> Option<i64> {
    if !matches!(v.size, 4 | 8) {
        return None;
    }
    let Some(bytes) = elf.bytes_at_vaddr(v.addr, v.size, 8) else {
        let end = v.addr.checked_add(v.size)?;
        let zeroed = elf.sections.iter().any(|s| {
            s.kind == SHT_NOBITS
                && s.addr <= v.addr
                && s.addr.checked_add(s.size).is_some_and(|e| end <= e)
        });
        return zeroed.then_some(0);
    };
    match v.size {
        4 => elf.layout.u32(&bytes, 0).map(|x| i64::from(x as i32)),
        8 => elf.layout.u64(&bytes, 0).map(|x| x as i64),
        _ => None,
    }
}

#[cfg(test)]
#[path = "symbols_tests.rs"]
pub(super) mod tests;

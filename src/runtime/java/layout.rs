//! Where a JVM keeps what flare reads, from its own tables
//! ([`VmStructs`]): the code heaps BPF finds code blobs in, the members
//! of code blobs, nmethods, methods and their constant pools, and the
//! interpreter's frame slots.
//!
//! Three shapes are known, each taken from the members the tables have:
//! JDK 8's (one code heap; code blobs and nmethods with offsets to their
//! sections), JDK 11 to 22's (several heaps; code blobs with `_code_begin`,
//! compiled methods with their sections inside them) and JDK 23 on's (code
//! blobs with offsets again, nmethods with their debug information in an
//! immutable data block, from 25 their metadata in a mutable one). A JVM
//! whose tables lack a member of each is named once and walked natively,
//! never read with offsets guessed.

use super::vmstructs::VmStructs;
use super::BLOB_HEADER;
use crate::unwind::elf::Machine;

/// Offsets (bytes) and values flare reads a JVM with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// The JDK's feature version (17 for 17.0.15).
    pub major: u32,
    /// Where the code heaps are.
    pub code_cache: CodeCacheAt,
    pub growable_len: u16,
    pub growable_data: u16,
    pub heap_memory: u16,
    pub heap_segmap: u16,
    pub heap_log2_segment: u16,
    pub space_low: u16,
    pub space_high: u16,
    /// `sizeof(HeapBlock)`: a code blob starts this far into its block.
    pub heap_block: u16,

    pub blob_name: u16,
    /// `_size`: the blob's bytes, header included.
    pub blob_size: u16,
    /// `_code_begin` (an address) or, with [`Layout::blob_offsets`],
    /// `_code_offset` (an `int` from the blob).
    pub blob_code_begin: u16,
    pub blob_frame_size: u16,
    /// `_frame_complete_offset`: an `int`, or an `int16_t` from JDK 23;
    /// read as its low 16 bits (a small offset or -1) either way.
    pub blob_frame_complete: u16,
    /// JDK 23 on: the code's start and the deoptimization handler are
    /// `int` offsets from the blob, not addresses.
    pub blob_offsets: bool,

    pub nm_method: u16,
    pub nm_compile_id: u16,
    pub nm_orig_pc: u16,
    /// `_deopt_handler_begin` (an address) or, with
    /// [`Layout::blob_offsets`], `_deopt_handler_offset` (from the blob).
    pub nm_deopt: u16,
    /// Where an nmethod's `PcDesc`s, scopes and metadata are.
    pub nm_data: NmethodData,

    pub method_const: u16,
    pub const_constants: u16,
    pub const_flags: u16,
    pub const_code_size: u16,
    pub const_name_index: u16,
    pub const_signature_index: u16,
    /// `sizeof(ConstMethod)`: the bytecodes follow it.
    pub const_size: u16,
    /// The flag saying a line table follows the bytecodes.
    pub has_line_table: u16,

    pub pool_holder: u16,
    /// Where a class keeps its source file's constant pool index.
    pub source_file: SourceFileAt,
    /// `sizeof(ConstantPool)`: its entries follow it.
    pub pool_size: u16,
    pub klass_name: u16,
    pub symbol_length: u16,
    pub symbol_body: u16,

    pub pc_desc_size: u16,
    pub pc_desc_pc: u16,
    pub pc_desc_scope: u16,
    /// Bytes below this are not used by the compressed streams (1 from
    /// JDK 19, which keeps zero bytes out of them).
    pub unsigned5_excess: u8,

    /// Interpreter frame slots, in words from the frame pointer: the
    /// caller's stack pointer, the `Method*` and the bytecode pointer.
    pub interp_sender_sp: i8,
    pub interp_method: i8,
    pub interp_bcp: i8,
}

/// Where a JVM's code heaps are (statics: addresses in the process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeCacheAt {
    /// JDK 9 on: `CodeCache::_heaps` (a `GrowableArray<CodeHeap*>*`)
    /// splitting the code cache between `_low_bound` and `_high_bound`.
    Heaps { heaps: u64, low: u64, high: u64 },
    /// JDK 8: one heap (`CodeCache::_heap`, a `CodeHeap*`), the code
    /// cache its reserved space.
    One { heap: u64 },
}

impl Default for CodeCacheAt {
    fn default() -> Self {
        CodeCacheAt::One { heap: 0 }
    }
}

/// Where an nmethod keeps the sections its inlined scopes are read from
/// (offsets of its members).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NmethodData {
    /// JDK 8 to 22: inside the nmethod, one after another: the metadata
    /// (at `_metadata_offset` from the nmethod), the scopes data (at
    /// `_scopes_data_begin`, an address, or JDK 8's `_scopes_data_offset`
    /// from the nmethod, with `scopes_offset`), the `PcDesc`s (at
    /// `_scopes_pcs_offset`) up to `_dependencies_offset`.
    Inline {
        metadata: u16,
        scopes_data: u16,
        scopes_offset: bool,
        scopes_pcs: u16,
        dependencies: u16,
    },
    /// JDK 23 on: the `PcDesc`s and then the scopes data in the immutable
    /// data block (`_immutable_data`, an address; `_scopes_pcs_offset` and
    /// `_scopes_data_offset` from it; it ends at `_immutable_data_size`,
    /// or at JDK 26's reference count before it).
    Immutable {
        data: u16,
        size: u16,
        ref_count: Option<u16>,
        scopes_pcs: u16,
        scopes_data: u16,
        metadata: MetadataAt,
    },
}

impl Default for NmethodData {
    fn default() -> Self {
        NmethodData::Inline {
            metadata: 0,
            scopes_data: 0,
            scopes_offset: false,
            scopes_pcs: 0,
            dependencies: 0,
        }
    }
}

/// Where a class's source file name (an index into its constant pool,
/// a `u2`) is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceFileAt {
    /// In the constant pool (`ConstantPool::_source_file_name_index`):
    /// JDK 17 on.
    Pool(u16),
    /// In the class (`InstanceKlass::_source_file_name_index`, the
    /// constant pool's holder): JDK 11.
    Klass(u16),
}

impl Default for SourceFileAt {
    fn default() -> Self {
        SourceFileAt::Pool(0)
    }
}

/// Where a JDK 23+ nmethod's metadata (`Metadata*` array) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetadataAt {
    /// JDK 23 and 24: after the code, at the blob's `_data_offset` plus
    /// the nmethod's `_metadata_offset` (a `u16`), up to the blob's
    /// `_size`.
    AfterCode {
        data_offset: u16,
        metadata: u16,
        blob_size: u16,
    },
    /// JDK 25 on: in the mutable data block (`_mutable_data`, an
    /// address) after its relocations (`_relocation_size`), up to
    /// `_mutable_data_size`.
    Mutable {
        data: u16,
        size: u16,
        relocation_size: u16,
    },
}

/// The JDK's feature version of the JVM whose tables are `vm` and whose
/// `Abstract_VM_Version::_vm_major_version` is `vm_major` (`None` while a
/// JDK 8 has not set it yet), or why flare does not read it. JDK 8 and
/// before have one code heap (`CodeCache::_heap`) and HotSpot's own
/// version where later JDKs have theirs (a constant from JDK 9; JDK 8
/// sets it as it starts): 25 is JDK 8; older ones (JDK 7's permanent
/// generation) are named by what they are, not by a member they lack.
pub fn feature_version(vm: &VmStructs, vm_major: u32) -> Result<Option<u32>, &'static str> {
    match (one_heap(vm).is_some(), vm_major) {
        (false, major) => Ok(Some(major)),
        (true, 25) => Ok(Some(8)),
        (true, 0) => Ok(None),
        (true, _) => Err("Java 7 or older: flare reads JDK 8 on"),
    }
}

/// `CodeCache::_heap`'s address where `vm` has one code heap (JDK 8 and
/// older), not `_heaps`.
fn one_heap(vm: &VmStructs) -> Option<u64> {
    vm.address("CodeCache", "_heap")
        .filter(|_| vm.address("CodeCache", "_heaps").is_none())
}

/// The members flare needs that `vm` lacks, or the layout.
pub fn from_vmstructs(vm: &VmStructs, major: u32) -> Result<Layout, String> {
    let mut missing: Vec<String> = Vec::new();
    // The first of `names` (type::field, alternatives across versions)
    // the tables have, with the index of the one found.
    let mut find = |names: &[(&str, &str)]| -> (u16, usize) {
        for (i, (ty, field)) in names.iter().enumerate() {
            if let Some(o) = vm.offset(ty, field).and_then(|o| u16::try_from(o).ok()) {
                return (o, i);
            }
        }
        let all: Vec<String> = names.iter().map(|(t, f)| format!("{t}::{f}")).collect();
        missing.push(all.join(" or "));
        (0, 0)
    };
    let mut off = |ty: &str, field: &str| find(&[(ty, field)]).0;
    let mut l = Layout {
        major,
        growable_data: off("GrowableArray<int>", "_data"),
        heap_memory: off("CodeHeap", "_memory"),
        heap_segmap: off("CodeHeap", "_segmap"),
        heap_log2_segment: off("CodeHeap", "_log2_segment_size"),
        space_low: off("VirtualSpace", "_low_boundary"),
        space_high: off("VirtualSpace", "_high_boundary"),
        blob_name: off("CodeBlob", "_name"),
        blob_frame_size: off("CodeBlob", "_frame_size"),
        blob_frame_complete: off("CodeBlob", "_frame_complete_offset"),
        blob_size: off("CodeBlob", "_size"),
        nm_compile_id: off("nmethod", "_compile_id"),
        nm_orig_pc: off("nmethod", "_orig_pc_offset"),
        method_const: off("Method", "_constMethod"),
        const_constants: off("ConstMethod", "_constants"),
        const_code_size: off("ConstMethod", "_code_size"),
        const_name_index: off("ConstMethod", "_name_index"),
        const_signature_index: off("ConstMethod", "_signature_index"),
        pool_holder: off("ConstantPool", "_pool_holder"),
        klass_name: off("Klass", "_name"),
        symbol_length: off("Symbol", "_length"),
        symbol_body: off("Symbol", "_body"),
        pc_desc_pc: off("PcDesc", "_pc_offset"),
        pc_desc_scope: off("PcDesc", "_scope_decode_offset"),
        // The excess byte of HotSpot's UNSIGNED5 streams came with JDK 20.
        unsigned5_excess: u8::from(major >= 20),
        ..Layout::default()
    };
    // JDK 17 renamed GrowableArray's base class.
    l.growable_len = find(&[
        ("GrowableArrayBase", "_len"),
        ("GenericGrowableArray", "_len"),
    ])
    .0;
    // JDK 11 keeps a class's source file in the class, 17 in its pool.
    let (source, at) = find(&[
        ("ConstantPool", "_source_file_name_index"),
        ("InstanceKlass", "_source_file_name_index"),
    ]);
    l.source_file = if at == 0 {
        SourceFileAt::Pool(source)
    } else {
        SourceFileAt::Klass(source)
    };
    // JDK 21 made the method flags a struct of its own.
    l.const_flags = find(&[("ConstMethod", "_flags"), ("ConstMethod", "_flags._flags")]).0;
    // JDK 23 folded CompiledMethod into nmethod.
    l.nm_method = find(&[("CompiledMethod", "_method"), ("nmethod", "_method")]).0;
    // ... and made the code blob's addresses offsets from it.
    let (code, shape) = find(&[("CodeBlob", "_code_begin"), ("CodeBlob", "_code_offset")]);
    l.blob_code_begin = code;
    l.blob_offsets = shape == 1;
    l.nm_deopt = if l.blob_offsets {
        find(&[
            ("nmethod", "_deopt_handler_offset"),
            ("nmethod", "_deopt_handler_entry_offset"),
            ("nmethod", "_deoptimize_offset"),
        ])
        .0
    } else {
        find(&[("CompiledMethod", "_deopt_handler_begin")]).0
    };
    let mut off = |ty: &str, field: &str| find(&[(ty, field)]).0;
    l.nm_data = if vm.offset("nmethod", "_immutable_data").is_some() {
        let metadata = if vm.offset("CodeBlob", "_mutable_data").is_some() {
            MetadataAt::Mutable {
                data: off("CodeBlob", "_mutable_data"),
                size: off("CodeBlob", "_mutable_data_size"),
                relocation_size: off("CodeBlob", "_relocation_size"),
            }
        } else {
            MetadataAt::AfterCode {
                data_offset: off("CodeBlob", "_data_offset"),
                metadata: off("nmethod", "_metadata_offset"),
                blob_size: off("CodeBlob", "_size"),
            }
        };
        NmethodData::Immutable {
            data: off("nmethod", "_immutable_data"),
            size: off("nmethod", "_immutable_data_size"),
            ref_count: vm
                .offset("nmethod", "_immutable_data_ref_count_offset")
                .and_then(|o| u16::try_from(o).ok()),
            scopes_pcs: off("nmethod", "_scopes_pcs_offset"),
            scopes_data: off("nmethod", "_scopes_data_offset"),
            metadata,
        }
    } else {
        // JDK 8 keeps an offset where 9 to 22 keep an address.
        let (scopes_data, at) = find(&[
            ("CompiledMethod", "_scopes_data_begin"),
            ("nmethod", "_scopes_data_offset"),
        ]);
        let mut off = |ty: &str, field: &str| find(&[(ty, field)]).0;
        NmethodData::Inline {
            metadata: off("nmethod", "_metadata_offset"),
            scopes_data,
            scopes_offset: at == 1,
            scopes_pcs: off("nmethod", "_scopes_pcs_offset"),
            dependencies: off("nmethod", "_dependencies_offset"),
        }
    };
    let mut stat = |ty: &str, field: &str| -> u64 {
        vm.address(ty, field).unwrap_or_else(|| {
            missing.push(format!("{ty}::{field}"));
            0
        })
    };
    l.code_cache = match one_heap(vm) {
        Some(heap) => CodeCacheAt::One { heap },
        None => CodeCacheAt::Heaps {
            heaps: stat("CodeCache", "_heaps"),
            low: stat("CodeCache", "_low_bound"),
            high: stat("CodeCache", "_high_bound"),
        },
    };
    let mut size = |ty: &str| -> u16 {
        match vm.size(ty).and_then(|s| u16::try_from(s).ok()) {
            Some(s) => s,
            None => {
                missing.push(format!("sizeof({ty})"));
                0
            }
        }
    };
    l.heap_block = size("HeapBlock");
    l.const_size = size("ConstMethod");
    l.pool_size = size("ConstantPool");
    l.pc_desc_size = size("PcDesc");
    // JDK 21 moved the method flags' constants with them.
    l.has_line_table = vm
        .constant("ConstMethod::_has_linenumber_table")
        .or_else(|| vm.constant("ConstMethodFlags::_misc_has_linenumber_table"))
        .unwrap_or_else(|| {
            missing.push("ConstMethod::_has_linenumber_table".into());
            0
        }) as u16;
    let mut constant = |name: &str| -> i64 {
        vm.constant(name).unwrap_or_else(|| {
            missing.push(name.to_string());
            0
        })
    };
    // The interpreter's frame, below the saved frame pointer: the caller's
    // sp, the last sp, then the method; x86-64 (frame_x86.hpp, JDK 9+)
    // then has the mirror, method data, cache and locals, then the
    // bytecode pointer; arm64 (frame_aarch64.hpp, JDK 17 on) the method
    // data, a padding word (the extended sp from JDK 22), the mirror,
    // cache and locals, then the bytecode pointer, one word lower. JDK 8
    // has no mirror (nor padding) on either: the method data, cache and
    // locals, then the bytecode pointer.
    // x86-64's tables give the first two (vmStructs_x86.hpp, JDK 9 on),
    // to check the layout by; arm64's give none (vmStructs_aarch64.hpp),
    // nor JDK 8's x86-64, and their layouts have held from JDK 8 to 25.
    let (sender_sp, last_sp) = match Machine::HOST {
        _ if major <= 8 => (-1, -2),
        Machine::Aarch64 => (
            vm.constant("frame::interpreter_frame_sender_sp_offset")
                .unwrap_or(-1),
            vm.constant("frame::interpreter_frame_last_sp_offset")
                .unwrap_or(-2),
        ),
        _ => (
            constant("frame::interpreter_frame_sender_sp_offset"),
            constant("frame::interpreter_frame_last_sp_offset"),
        ),
    };
    if !missing.is_empty() {
        return Err(format!("its tables lack {}", missing.join(", ")));
    }
    if sender_sp != -1 || last_sp != -2 {
        return Err(format!(
            "its interpreter frames have another layout (sender sp at {sender_sp}, last sp at {last_sp})"
        ));
    }
    // BPF, the user-space step and the namer read a blob's header whole.
    let header = [
        l.blob_name,
        l.blob_size,
        l.blob_code_begin,
        l.blob_frame_size,
        l.blob_frame_complete,
        l.nm_method,
        l.nm_compile_id,
        l.nm_orig_pc,
        l.nm_deopt,
    ];
    if header.iter().any(|&o| usize::from(o) + 8 > BLOB_HEADER) {
        return Err(format!(
            "its code blobs' members lie past the {BLOB_HEADER} bytes of them flare reads"
        ));
    }
    l.interp_sender_sp = -1;
    l.interp_method = -3;
    l.interp_bcp = match Machine::HOST {
        _ if major <= 8 => -7,
        Machine::Aarch64 => -9,
        _ => -8,
    };
    Ok(l)
}

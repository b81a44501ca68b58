//! Where a JVM keeps what flare reads, from its own tables
//! ([`VmStructs`]): the code heaps BPF finds code blobs in, the members
//! of code blobs, nmethods, methods and their constant pools, and the
//! interpreter's frame slots.
//!
//! The layout is the one of JDK 9 to 22 (code blobs with `_code_begin`,
//! compiled methods with `_scopes_data_begin`): a JVM whose tables lack
//! one of its members is named once and walked natively, never read with
//! offsets guessed.

use super::vmstructs::VmStructs;

/// Offsets (bytes) and values flare reads a JVM with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// The JDK's feature version (17 for 17.0.15).
    pub major: u32,
    /// Statics: `CodeCache::_heaps` (a `GrowableArray<CodeHeap*>*`),
    /// `_low_bound`, `_high_bound` (addresses in the process).
    pub code_cache_heaps: u64,
    pub code_cache_low: u64,
    pub code_cache_high: u64,
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
    pub blob_size: u16,
    pub blob_code_begin: u16,
    pub blob_code_end: u16,
    pub blob_frame_size: u16,
    pub blob_frame_complete: u16,

    pub nm_method: u16,
    pub nm_compile_id: u16,
    pub nm_orig_pc: u16,
    pub nm_deopt: u16,
    /// `_scopes_data_begin` (an address), `_scopes_pcs_offset`,
    /// `_dependencies_offset` and `_metadata_offset` (from the blob).
    pub nm_scopes_data: u16,
    pub nm_scopes_pcs: u16,
    pub nm_dependencies: u16,
    pub nm_metadata: u16,

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
    pub pool_source_file: u16,
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

impl Layout {
    /// Moves the statics' addresses by `delta` (a load bias, or its
    /// negation to make them relative to the library).
    pub fn rebase(&mut self, delta: u64) {
        for a in [
            &mut self.code_cache_heaps,
            &mut self.code_cache_low,
            &mut self.code_cache_high,
        ] {
            *a = a.wrapping_add(delta);
        }
    }
}

/// The members flare needs that `vm` lacks, or the layout.
pub fn from_vmstructs(vm: &VmStructs, major: u32) -> Result<Layout, String> {
    let mut missing: Vec<String> = Vec::new();
    let mut off = |ty: &str, field: &str| -> u16 {
        match vm.offset(ty, field).and_then(|o| u16::try_from(o).ok()) {
            Some(o) => o,
            None => {
                missing.push(format!("{ty}::{field}"));
                0
            }
        }
    };
    let mut l = Layout {
        major,
        growable_len: off("GrowableArrayBase", "_len"),
        growable_data: off("GrowableArray<int>", "_data"),
        heap_memory: off("CodeHeap", "_memory"),
        heap_segmap: off("CodeHeap", "_segmap"),
        heap_log2_segment: off("CodeHeap", "_log2_segment_size"),
        space_low: off("VirtualSpace", "_low_boundary"),
        space_high: off("VirtualSpace", "_high_boundary"),
        blob_name: off("CodeBlob", "_name"),
        blob_size: off("CodeBlob", "_size"),
        blob_code_begin: off("CodeBlob", "_code_begin"),
        blob_code_end: off("CodeBlob", "_code_end"),
        blob_frame_size: off("CodeBlob", "_frame_size"),
        blob_frame_complete: off("CodeBlob", "_frame_complete_offset"),
        nm_method: off("CompiledMethod", "_method"),
        nm_compile_id: off("nmethod", "_compile_id"),
        nm_orig_pc: off("nmethod", "_orig_pc_offset"),
        nm_deopt: off("CompiledMethod", "_deopt_handler_begin"),
        nm_scopes_data: off("CompiledMethod", "_scopes_data_begin"),
        nm_scopes_pcs: off("nmethod", "_scopes_pcs_offset"),
        nm_dependencies: off("nmethod", "_dependencies_offset"),
        nm_metadata: off("nmethod", "_metadata_offset"),
        method_const: off("Method", "_constMethod"),
        const_constants: off("ConstMethod", "_constants"),
        const_flags: off("ConstMethod", "_flags"),
        const_code_size: off("ConstMethod", "_code_size"),
        const_name_index: off("ConstMethod", "_name_index"),
        const_signature_index: off("ConstMethod", "_signature_index"),
        pool_holder: off("ConstantPool", "_pool_holder"),
        pool_source_file: off("ConstantPool", "_source_file_name_index"),
        klass_name: off("Klass", "_name"),
        symbol_length: off("Symbol", "_length"),
        symbol_body: off("Symbol", "_body"),
        pc_desc_pc: off("PcDesc", "_pc_offset"),
        pc_desc_scope: off("PcDesc", "_scope_decode_offset"),
        unsigned5_excess: u8::from(major >= 19),
        ..Layout::default()
    };
    let mut stat = |ty: &str, field: &str| -> u64 {
        vm.address(ty, field).unwrap_or_else(|| {
            missing.push(format!("{ty}::{field}"));
            0
        })
    };
    l.code_cache_heaps = stat("CodeCache", "_heaps");
    l.code_cache_low = stat("CodeCache", "_low_bound");
    l.code_cache_high = stat("CodeCache", "_high_bound");
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
    let mut constant = |name: &str| -> i64 {
        vm.constant(name).unwrap_or_else(|| {
            missing.push(name.to_string());
            0
        })
    };
    l.has_line_table = constant("ConstMethod::_has_linenumber_table") as u16;
    // x86-64's interpreter frame (frame_x86.hpp, JDK 9+): below the saved
    // frame pointer, the caller's sp, the last sp, then the method; the
    // mirror, method data, cache and locals; then the bytecode pointer.
    let sender_sp = constant("frame::interpreter_frame_sender_sp_offset");
    let last_sp = constant("frame::interpreter_frame_last_sp_offset");
    if !missing.is_empty() {
        return Err(format!("its tables lack {}", missing.join(", ")));
    }
    if sender_sp != -1 || last_sp != -2 {
        return Err(format!(
            "its interpreter frames have another layout (sender sp at {sender_sp}, last sp at {last_sp})"
        ));
    }
    l.interp_sender_sp = -1;
    l.interp_method = -3;
    l.interp_bcp = -8;
    Ok(l)
}

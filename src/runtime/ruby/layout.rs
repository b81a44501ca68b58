//! The layouts of CRuby's structures that flare reads, per version:
//! Ruby keeps no introspection data (no `_Py_DebugOffsets`, no
//! `gHotSpotVMStructs`) and Debian strips its libraries, so these are
//! tables, from each release's headers (vm_core.h, iseq.h, method.h,
//! internal/class.h, symbol.h, rstring.h, rarray.h; 3.1.2, 3.3.8 and
//! 3.4.5), the same on x86-64 and arm64 for every field here; the walk
//! and the namer check what they read before they trust it.

/// Offsets (bytes) and flags of one Ruby version's structures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `sizeof(rb_control_frame_t)`: 64 in 3.1, 56 in 3.3 and 3.4.
    pub cfp_size: u16,

    /// `rb_iseq_t.body` (`struct rb_iseq_constant_body *`).
    pub iseq_body: u16,
    /// `body->type` (`enum rb_iseq_type`, 4 bytes).
    pub body_type: u16,
    /// `body->iseq_size` (unsigned int, in words of code).
    pub body_iseq_size: u16,
    /// `body->iseq_encoded` (`VALUE *`): the code, BPF's cookie.
    pub body_iseq_encoded: u16,
    /// `body->location.pathobj`: a String, or an Array `[path, realpath]`.
    pub body_pathobj: u16,
    /// `body->location.base_label` (String: `outer`).
    pub body_base_label: u16,
    /// `body->location.label` (String: `block in outer`).
    pub body_label: u16,
    /// `body->location.first_lineno`: an int from 3.2, a Fixnum
    /// `VALUE` (`line << 1 | 1`) in 3.1 ([`Layout::first_lineno_fixnum`]).
    pub body_first_lineno: u16,
    pub first_lineno_fixnum: bool,
    /// `body->insns_info.body` (`struct iseq_insn_info_entry *`).
    pub body_insns_info: u16,
    /// `body->insns_info.size` (unsigned int, entries).
    pub body_insns_info_size: u16,
    /// `body->insns_info.succ_index_table`.
    pub body_succ_index_table: u16,
    /// `body->local_iseq` (`rb_iseq_t *`: the method a block is in).
    pub body_local_iseq: u16,
    /// `sizeof(struct iseq_insn_info_entry)`.
    pub insn_info_size: u16,
    /// `iseq_insn_info_entry.line_no` (int).
    pub insn_info_line_no: u16,

    /// `rb_callable_method_entry_t.flags`.
    pub cme_flags: u16,
    /// `rb_callable_method_entry_t.defined_class`: the class (or
    /// `T_ICLASS` of a module) Ruby's profiler names a method by.
    pub cme_defined_class: u16,
    /// `rb_callable_method_entry_t.def` (`rb_method_definition_t *`).
    pub cme_def: u16,
    /// `rb_callable_method_entry_t.called_id` (ID).
    pub cme_called_id: u16,
    /// `rb_callable_method_entry_t.owner`.
    pub cme_owner: u16,
    /// `rb_method_definition_t.type`: the low [`Layout::def_type_mask`]
    /// bits of this byte (a bit-field).
    pub def_type: u16,
    pub def_type_mask: u8,
    /// `rb_method_definition_t.body.iseq.iseqptr` (an ISEQ method's
    /// `rb_iseq_t *`).
    pub def_iseqptr: u16,
    /// `rb_method_definition_t.original_id` (ID).
    pub def_original_id: u16,

    /// `RString`: the length when not embedded (3.1), or always (3.3+).
    pub rstring_len: u16,
    /// `RString.as.heap.ptr`, when [`Layout::rstring_noembed`] is set.
    pub rstring_ptr: u16,
    /// Where an embedded string's characters start.
    pub rstring_embed: u16,
    /// 3.1: an embedded string's length is `(flags >> shift) & mask`
    /// (`RSTRING_EMBED_LEN_SHIFT`, `RSTRING_EMBED_LEN_MASK >> shift`);
    /// `None` from 3.2, which keeps it at [`Layout::rstring_len`].
    pub rstring_embed_len: Option<(u8, u64)>,
    /// `RSTRING_NOEMBED` (`FL_USER1`).
    pub rstring_noembed: u64,

    /// `RARRAY_EMBED_FLAG` (`FL_USER1`).
    pub rarray_embed_flag: u64,
    /// `RARRAY_EMBED_LEN_MASK`; the length is `(flags & mask) >> shift`.
    pub rarray_embed_len_mask: u64,
    pub rarray_embed_len_shift: u8,
    /// Where an embedded array's elements start (`as.ary`).
    pub rarray_embed: u16,
    /// `RArray.as.heap.len`.
    pub rarray_len: u16,
    /// `RArray.as.heap.ptr`.
    pub rarray_ptr: u16,

    /// Where a class's path String lies (`RCLASS_EXT(klass)->classpath`,
    /// 3.3+: the class extension is inside `RClass`); `None` for 3.1,
    /// which keeps it in a hidden instance variable.
    pub class_path: Option<u16>,
    /// Where a singleton class's attached object lies
    /// (`RCLASS_EXT(klass)->as.singleton_class.attached_object`, 3.3+).
    pub class_attached: Option<u16>,
    /// 3.1: where a class's extension (`RClass.ptr`, a
    /// `rb_classext_t *`) lies; `None` from 3.3 on, which keep it inside
    /// the class.
    pub class_ext: Option<u16>,
    /// 3.1: the extension's instance-variable table (`iv_tbl`, an
    /// `st_table *`), which holds a class's path and a singleton class's
    /// object as hidden instance variables (`__classpath__`,
    /// `__attached__`).
    pub ext_iv_tbl: u16,
    /// `RUBY_FL_SINGLETON`: `FL_USER0` up to 3.3, `FL_USER1` in 3.4.
    pub fl_singleton: u64,

    /// `tLAST_OP_ID`: an ID above it is `serial << 4 | scope`, one up to
    /// it is the serial itself (an operator).
    pub last_op_id: u64,
    /// `idEach` (`tEach << 4 | ID_LOCAL`), to check a
    /// `ruby_global_symbols` candidate: its name is `each`.
    pub each_id: u64,
    /// `rb_symbols_t.last_id` (u32).
    pub symbols_last_id: u16,
    /// `rb_symbols_t.ids`: an Array of Arrays, 512 ids' (String, Symbol)
    /// pairs each.
    pub symbols_ids: u16,
}

impl Layout {
    /// The layout of Ruby `version` ("3.3.8"), if flare knows it.
    pub fn for_version(version: &str) -> Option<Layout> {
        let mut parts = version.split('.');
        let major: u32 = parts.next()?.parse().ok()?;
        let minor: u32 = parts.next()?.parse().ok()?;
        match (major, minor) {
            (3, 1) => Some(Layout {
                cfp_size: 64,
                first_lineno_fixnum: true,
                body_insns_info: 120,
                body_insns_info_size: 136,
                body_succ_index_table: 144,
                body_local_iseq: 176,
                rstring_embed: 16,
                rstring_embed_len: Some((14, 0x1f)),
                rarray_embed_len_mask: 0x18000,
                class_path: None,
                class_attached: None,
                // RClass { basic (16), super }; rb_classext_t
                // { iv_index_tbl, iv_tbl } (internal/class.h, with
                // USE_RVARGC 0, 3.1's default).
                class_ext: Some(24),
                ext_iv_tbl: 8,
                each_id: 3009,
                ..Layout::V3_3
            }),
            (3, 3) => Some(Layout::V3_3),
            (3, 4) => Some(Layout {
                fl_singleton: 0x2000,
                last_op_id: 170,
                each_id: 3073,
                ..Layout::V3_3
            }),
            _ => None,
        }
    }

    /// Ruby 3.3's layout, which 3.1's and 3.4's differ from in a few
    /// fields.
    const V3_3: Layout = Layout {
        cfp_size: 56,
        iseq_body: 16,
        body_type: 0,
        body_iseq_size: 4,
        body_iseq_encoded: 8,
        body_pathobj: 64,
        body_base_label: 72,
        body_label: 80,
        body_first_lineno: 88,
        first_lineno_fixnum: false,
        body_insns_info: 112,
        body_insns_info_size: 128,
        body_succ_index_table: 136,
        body_local_iseq: 168,
        insn_info_size: 12,
        insn_info_line_no: 0,
        cme_flags: 0,
        cme_defined_class: 8,
        cme_def: 16,
        cme_called_id: 24,
        cme_owner: 32,
        def_type: 0,
        def_type_mask: 0xf,
        def_iseqptr: 8,
        def_original_id: 32,
        rstring_len: 16,
        rstring_ptr: 24,
        rstring_embed: 24,
        rstring_embed_len: None,
        rstring_noembed: 0x2000,
        rarray_embed_flag: 0x2000,
        rarray_embed_len_mask: 0x3f_8000,
        rarray_embed_len_shift: 15,
        rarray_embed: 16,
        rarray_len: 16,
        rarray_ptr: 32,
        // RClass_and_rb_classext_t.classext (32) + classpath (120) and
        // + as.singleton_class.attached_object (96).
        class_path: Some(32 + 120),
        class_attached: Some(32 + 96),
        class_ext: None,
        ext_iv_tbl: 0,
        fl_singleton: 0x1000,
        last_op_id: 169,
        each_id: 3041,
        symbols_last_id: 0,
        symbols_ids: 16,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fact sheet's table (offsets.c compiled against each release's
    /// headers), field by field.
    #[test]
    fn tables_match_the_headers() {
        let v31 = Layout::for_version("3.1.2").unwrap();
        let v33 = Layout::for_version("3.3.8").unwrap();
        let v34 = Layout::for_version("3.4.11").unwrap();
        let all = [&v31, &v33, &v34];
        let each = |f: fn(&Layout) -> u64| all.map(f);
        assert_eq!(each(|l| l.cfp_size.into()), [64, 56, 56]);
        assert_eq!(each(|l| l.iseq_body.into()), [16; 3]);
        assert_eq!(each(|l| l.body_type.into()), [0; 3]);
        assert_eq!(each(|l| l.body_iseq_size.into()), [4; 3]);
        assert_eq!(each(|l| l.body_iseq_encoded.into()), [8; 3]);
        assert_eq!(each(|l| l.body_pathobj.into()), [64; 3]);
        assert_eq!(each(|l| l.body_base_label.into()), [72; 3]);
        assert_eq!(each(|l| l.body_label.into()), [80; 3]);
        assert_eq!(each(|l| l.body_first_lineno.into()), [88; 3]);
        assert_eq!(all.map(|l| l.first_lineno_fixnum), [true, false, false]);
        assert_eq!(each(|l| l.body_insns_info.into()), [120, 112, 112]);
        assert_eq!(each(|l| l.body_insns_info_size.into()), [136, 128, 128]);
        assert_eq!(each(|l| l.body_succ_index_table.into()), [144, 136, 136]);
        assert_eq!(each(|l| l.body_local_iseq.into()), [176, 168, 168]);
        assert_eq!(each(|l| l.insn_info_size.into()), [12; 3]);
        assert_eq!(each(|l| l.insn_info_line_no.into()), [0; 3]);
        assert_eq!(each(|l| l.cme_flags.into()), [0; 3]);
        assert_eq!(each(|l| l.cme_defined_class.into()), [8; 3]);
        assert_eq!(each(|l| l.cme_def.into()), [16; 3]);
        assert_eq!(each(|l| l.cme_called_id.into()), [24; 3]);
        assert_eq!(each(|l| l.cme_owner.into()), [32; 3]);
        assert_eq!(each(|l| l.def_type.into()), [0; 3]);
        assert_eq!(each(|l| l.def_type_mask.into()), [0xf; 3]);
        assert_eq!(each(|l| l.def_iseqptr.into()), [8; 3]);
        assert_eq!(each(|l| l.def_original_id.into()), [32; 3]);
        assert_eq!(each(|l| l.rstring_len.into()), [16; 3]);
        assert_eq!(each(|l| l.rstring_ptr.into()), [24; 3]);
        assert_eq!(each(|l| l.rstring_embed.into()), [16, 24, 24]);
        assert_eq!(v31.rstring_embed_len, Some((14, 0x7c000 >> 14)));
        assert_eq!(v33.rstring_embed_len, None);
        assert_eq!(v34.rstring_embed_len, None);
        assert_eq!(each(|l| l.rstring_noembed), [0x2000; 3]);
        assert_eq!(each(|l| l.rarray_embed_flag), [0x2000; 3]);
        assert_eq!(each(|l| l.rarray_embed_len_mask), [98304, 4161536, 4161536]);
        assert_eq!(each(|l| l.rarray_embed_len_shift.into()), [15; 3]);
        assert_eq!(each(|l| l.rarray_embed.into()), [16; 3]);
        assert_eq!(each(|l| l.rarray_len.into()), [16; 3]);
        assert_eq!(each(|l| l.rarray_ptr.into()), [32; 3]);
        assert_eq!(all.map(|l| l.class_path), [None, Some(152), Some(152)]);
        assert_eq!(all.map(|l| l.class_attached), [None, Some(128), Some(128)]);
        assert_eq!(all.map(|l| l.class_ext), [Some(24), None, None]);
        assert_eq!(v31.ext_iv_tbl, 8);
        assert_eq!(each(|l| l.fl_singleton), [0x1000, 0x1000, 0x2000]);
        assert_eq!(each(|l| l.last_op_id), [169, 169, 170]);
        assert_eq!(each(|l| l.each_id), [3009, 3041, 3073]);
        assert_eq!(each(|l| l.symbols_last_id.into()), [0; 3]);
        assert_eq!(each(|l| l.symbols_ids.into()), [16; 3]);
    }

    #[test]
    fn only_known_versions_have_a_layout() {
        assert_eq!(Layout::for_version("3.3.0"), Layout::for_version("3.3.8"));
        for v in ["3.0.6", "3.2.4", "3.5.0", "2.7.8", "4.0.0", "3", "", "x.y"] {
            assert_eq!(Layout::for_version(v), None, "{v}");
        }
    }
}

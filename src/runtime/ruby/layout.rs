//! The layouts of CRuby's structures that flare reads, per version:
//! Ruby keeps no introspection data (no `_Py_DebugOffsets`, no
//! `gHotSpotVMStructs`) and Debian strips its libraries, so these are
//! tables, from each release's headers (vm_core.h, iseq.h, method.h),
//! the same on x86-64 and arm64 for every field here; the walk and the
//! namer check what they read before they trust it.

/// Offsets (bytes) of one Ruby version's structures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `sizeof(rb_control_frame_t)`: 64 in 3.1, 56 in 3.3 and 3.4.
    pub cfp_size: u16,
}

impl Layout {
    /// The layout of Ruby `version` ("3.3.8"), if flare knows it.
    pub fn for_version(version: &str) -> Option<Layout> {
        let mut parts = version.split('.');
        let major: u32 = parts.next()?.parse().ok()?;
        let minor: u32 = parts.next()?.parse().ok()?;
        match (major, minor) {
            (3, 1) => Some(Layout { cfp_size: 64 }),
            (3, 3) | (3, 4) => Some(Layout { cfp_size: 56 }),
            _ => None,
        }
    }
}

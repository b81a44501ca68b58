//! Two builds of every BPF object: the full one, with the table unwinder,
//! and one that walks user stacks by frame pointers only.
//!
//! The unwinder runs under `bpf_loop` with callback functions, and kernels
//! before 5.13 reject any object that holds callbacks, whether or not they
//! would run ("number of funcs in func_info doesn't match number of
//! subprogs"). build.rs therefore compiles each `bpf/<tool>.bpf.c` twice
//! (`-DFLARE_FP_ONLY` leaves the walk out) and makes the skeleton ask
//! [`pick`] which bytes to open. Both builds have the same maps, programs
//! and globals, so one skeleton type serves either; a test checks that.
//!
//! Tools open their skeleton inside [`open`] with the [`Build`] their
//! unwinding mode needs (`unwind::Mode::build`): frame pointers open the
//! small build (smaller and faster to verify, and the only one old kernels
//! load), tables the full one.

use std::cell::Cell;

/// Which of the two builds to open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// With the table unwinder.
    Full,
    /// User stacks by frame pointers only.
    FramePointers,
}

thread_local! {
    static FP_ONLY: Cell<bool> = const { Cell::new(false) };
}

/// Runs `open` (a skeleton's `open`) with `build`.
pub fn open<R>(build: Build, open: impl FnOnce() -> R) -> R {
    let before = FP_ONLY.replace(build == Build::FramePointers);
    let result = open();
    FP_ONLY.set(before);
    result
}

/// The object a skeleton opens: called from the generated skeletons (see
/// build.rs) with their full build and their frame-pointer build.
pub fn pick(full: &'static [u8], fp_only: &'static [u8]) -> &'static [u8] {
    if FP_ONLY.get() {
        fp_only
    } else {
        full
    }
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use libbpf_rs::skel::{OpenSkel, SkelBuilder};
    use libbpf_rs::OpenObject;

    use super::*;
    use crate::bpf::skel;

    /// What must be the same in both builds for one skeleton to open
    /// either: map names, types and value sizes (globals live in the
    /// `.rodata`/`.bss` maps), and program names and types.
    fn shape(object: &OpenObject) -> (Vec<String>, Vec<String>) {
        let maps = object
            .maps()
            .map(|m| {
                format!(
                    "{} {:?} {} {}",
                    m.name().to_string_lossy(),
                    m.map_type(),
                    m.key_size(),
                    m.value_size()
                )
            })
            .collect();
        let progs = object
            .progs()
            .map(|p| format!("{} {:?}", p.name().to_string_lossy(), p.prog_type()))
            .collect();
        (maps, progs)
    }

    macro_rules! same_shape {
        ($test:ident, $builder:ty) => {
            #[test]
            fn $test() {
                let mut full_obj = MaybeUninit::<OpenObject>::uninit();
                let mut fp_obj = MaybeUninit::<OpenObject>::uninit();
                let full = open(Build::Full, || <$builder>::default().open(&mut full_obj))
                    .expect("opening the full build");
                let fp = open(Build::FramePointers, || {
                    <$builder>::default().open(&mut fp_obj)
                })
                .expect("opening the frame-pointer build");
                let (full_maps, full_progs) = shape(full.open_object());
                let (fp_maps, fp_progs) = shape(fp.open_object());
                assert_eq!(full_maps, fp_maps);
                assert_eq!(full_progs, fp_progs);
                assert!(!full_progs.is_empty());
                // Two builds: the full one holds the walk.
                let insns = |o: &OpenObject| o.progs().map(|p| p.insn_cnt()).sum::<usize>();
                assert!(insns(full.open_object()) > insns(fp.open_object()) + 100);
            }
        };
    }

    same_shape!(profile_builds_match, skel::profile::ProfileSkelBuilder);
    same_shape!(
        stackcount_builds_match,
        skel::stackcount::StackcountSkelBuilder
    );
    same_shape!(offcpu_builds_match, skel::offcpu::OffcpuSkelBuilder);
    same_shape!(
        wallclock_builds_match,
        skel::wallclock::WallclockSkelBuilder
    );

    #[test]
    fn the_choice_does_not_outlive_open() {
        assert_eq!(open(Build::FramePointers, || pick(b"full", b"fp")), b"fp");
        assert_eq!(open(Build::Full, || pick(b"full", b"fp")), b"full");
        assert_eq!(pick(b"full", b"fp"), b"full");
    }
}

//! The binaries and libraries processes map, each held open once for the
//! whole run however many processes map it: libc mapped by 500 processes
//! is one [`Object`], one descriptor, parsed once by the symbolizer.
//!
//! An object is found again by its build id (which the kernel reports with
//! each mapping) or by its device and inode, so that a new process mapping
//! a known file costs no `open`. The open descriptor keeps the file
//! readable after the process that mapped it has exited, after the file
//! was deleted or replaced, and outside the mount namespace it lives in.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use crate::profile::ObjectRef;

/// A mapped file, open for as long as any mapping refers to it.
#[derive(Debug)]
pub struct Object {
    id: u64,
    path: Arc<str>,
    dev: u64,
    ino: u64,
    file: Option<File>,
    build_id: OnceLock<Option<Arc<[u8]>>>,
    reference: OnceLock<Arc<ObjectRef>>,
}

impl Object {
    /// A number that tells this object from every other one of the run.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The path as the mapping process saw it.
    pub fn path(&self) -> &Arc<str> {
        &self.path
    }

    /// Device and inode of the file (0, 0 when it could not be opened).
    pub fn dev_ino(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// The open file, when flare could open it.
    pub fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// A path that opens this very file from flare's process, whatever
    /// happened to the original path (`/proc/self/fd/N`).
    pub fn open_path(&self) -> Option<PathBuf> {
        let fd = self.file.as_ref()?.as_raw_fd();
        Some(PathBuf::from(format!("/proc/self/fd/{fd}")))
    }

    /// The GNU build id: as the kernel reported it, else read from the
    /// file (once).
    pub fn build_id(&self) -> Option<&Arc<[u8]>> {
        self.build_id
            .get_or_init(|| {
                let path = self.open_path()?;
                let id = blazesym::helper::read_elf_build_id(&path).ok()??;
                Some(Arc::from(&*id))
            })
            .as_ref()
    }

    /// The model's reference to this object (path and build id), shared by
    /// every frame in it.
    pub fn reference(&self) -> Arc<ObjectRef> {
        self.reference
            .get_or_init(|| {
                Arc::new(ObjectRef {
                    path: self.path.clone(),
                    build_id: self.build_id().cloned(),
                })
            })
            .clone()
    }
}

impl Object {
    /// The vDSO, which no file holds: the same image in every process of a
    /// kernel, copied from flare's own into an anonymous memory file so
    /// that it can be named like any object.
    pub(crate) fn vdso() -> Option<Object> {
        let data = vdso_image()?;
        // SAFETY: memfd_create takes a NUL-terminated name and flags; the
        // descriptor it returns is new and owned by nothing else.
        let fd = unsafe { libc::memfd_create(c"flare-vdso".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just created and is owned here alone.
        let mut file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        std::io::Write::write_all(&mut file, data).ok()?;
        Some(Object {
            // Apart from the store's ids, which count up from 1.
            id: u64::MAX,
            path: Arc::from("[vdso]"),
            dev: 0,
            ino: 0,
            file: Some(file),
            build_id: OnceLock::new(),
            reference: OnceLock::new(),
        })
    }
}

/// flare's own vDSO, as bytes: its ELF image, up to the end of the section
/// headers.
pub(crate) fn vdso_image() -> Option<&'static [u8]> {
    // SAFETY: getauxval has no preconditions.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
    if base == 0 {
        return None;
    }
    // SAFETY: the vDSO is mapped readable for the life of the process; the
    // ELF header (64 bytes) is read first, then the length it declares.
    let head = unsafe { std::slice::from_raw_parts(base as *const u8, 64) };
    let shoff = u64::from_le_bytes(head.get(40..48)?.try_into().ok()?) as usize;
    let shentsize = u16::from_le_bytes(head.get(58..60)?.try_into().ok()?) as usize;
    let shnum = u16::from_le_bytes(head.get(60..62)?.try_into().ok()?) as usize;
    let len = shoff.checked_add(shentsize.checked_mul(shnum)?)?;
    if !(64..=1 << 20).contains(&len) {
        return None;
    }
    // SAFETY: as above; the section headers end the vDSO image.
    Some(unsafe { std::slice::from_raw_parts(base as *const u8, len) })
}

/// Every object seen in a run, found by build id or by device and inode.
#[derive(Default)]
pub(crate) struct ObjectStore {
    by_inode: HashMap<(u64, u64), Arc<Object>>,
    by_build_id: HashMap<Arc<[u8]>, Arc<Object>>,
    next_id: u64,
}

/// At most this many objects stay open; past it, objects no mapping
/// refers to any more are closed.
const MAX_OPEN: usize = 4096;

impl ObjectStore {
    pub(crate) fn by_build_id(&self, id: &[u8]) -> Option<Arc<Object>> {
        self.by_build_id.get(id).cloned()
    }

    pub(crate) fn by_inode(&self, dev: u64, ino: u64) -> Option<Arc<Object>> {
        self.by_inode.get(&(dev, ino)).cloned()
    }

    /// The object for an opened file (a known one if the file's device
    /// and inode are known), remembering `build_id` for it.
    pub(crate) fn intern(
        &mut self,
        path: &str,
        file: Option<File>,
        build_id: Option<&[u8]>,
    ) -> Arc<Object> {
        let (dev, ino) = file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map(|m| (m.dev(), m.ino()))
            .unwrap_or((0, 0));
        let known = (ino != 0)
            .then(|| self.by_inode.get(&(dev, ino)).cloned())
            .flatten();
        let object = match known {
            Some(o) => o,
            None => {
                self.prune();
                self.next_id += 1;
                let o = Arc::new(Object {
                    id: self.next_id,
                    path: path.into(),
                    dev,
                    ino,
                    file,
                    build_id: OnceLock::new(),
                    reference: OnceLock::new(),
                });
                if let Some(id) = build_id {
                    let _ = o.build_id.set(Some(Arc::from(id)));
                }
                if ino != 0 {
                    self.by_inode.insert((dev, ino), o.clone());
                }
                o
            }
        };
        if let Some(id) = build_id.or_else(|| object.build_id().map(|b| &**b)) {
            self.by_build_id
                .entry(Arc::from(id))
                .or_insert_with(|| object.clone());
        }
        object
    }

    /// Closes objects that nothing but this store refers to, once too
    /// many are open.
    fn prune(&mut self) {
        if self.by_inode.len() < MAX_OPEN {
            return;
        }
        // Each object is held once per index it is in.
        let held = |o: &Arc<Object>, by_build_id: &HashMap<Arc<[u8]>, Arc<Object>>| {
            1 + o
                .build_id
                .get()
                .and_then(|b| b.as_ref())
                .map_or(0, |b| by_build_id.contains_key(b) as usize)
        };
        let unused: Vec<(u64, u64)> = self
            .by_inode
            .iter()
            .filter(|(_, o)| Arc::strong_count(o) <= held(o, &self.by_build_id))
            .map(|(k, _)| *k)
            .collect();
        for k in unused {
            if let Some(o) = self.by_inode.remove(&k) {
                if let Some(Some(b)) = o.build_id.get() {
                    self.by_build_id.remove(b);
                }
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_inode.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_object_per_file() {
        let mut store = ObjectStore::default();
        let exe = std::env::current_exe().expect("own executable");
        let a = store.intern("a", File::open(&exe).ok(), None);
        let b = store.intern("b", File::open(&exe).ok(), None);
        assert!(Arc::ptr_eq(&a, &b), "same inode, same object");
        assert_eq!(store.len(), 1);
        assert_eq!(&**a.path(), "a");
        // The test binary has a build id (rustc asks the linker for one).
        if let Some(id) = a.build_id().cloned() {
            let c = store.by_build_id(&id).expect("found by build id");
            assert!(Arc::ptr_eq(&a, &c));
            assert_eq!(a.reference().build_id.as_deref(), Some(&*id));
        }
    }
}

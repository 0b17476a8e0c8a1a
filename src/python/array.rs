//! A row of a caller's numpy array, written in place: `Matcher.fill_mask`'s destination.
//!
//! The buffer protocol joined the stable ABI only in Python 3.11 and this module is built for
//! 3.10's, so the row is found through NumPy's array interface instead: `__array_struct__`, a
//! capsule of a `PyArrayInterface` (shape, strides, flags and the data pointer; documented by
//! NumPy as "The array interface protocol"). Getting it costs ~80 ns, against 1.3 us for
//! `ndarray.ctypes.data`; writing the row here spares the bytes object, the numpy wrapper and the
//! numpy copy a mask otherwise took on its way into the array (about 2 us of a first visit).

use std::ffi::{c_char, c_int, c_void};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};

/// NumPy's `PyArrayInterface` (numpy/ndarrayobject.h), as the capsule holds it.
#[repr(C)]
struct ArrayInterface {
    two: c_int,
    nd: c_int,
    typekind: c_char,
    itemsize: c_int,
    flags: c_int,
    shape: *const isize,
    strides: *const isize,
    data: *mut c_void,
    descr: *mut c_void,
}

const ALIGNED: c_int = 0x0100;
const NOTSWAPPED: c_int = 0x0200;
const WRITEABLE: c_int = 0x0400;

/// Row `row` of a writeable 2-D array of native-order 4-byte integers with `n_words` columns, its
/// words next to each other. Holds the capsule, which holds a reference to the array: the memory
/// stays the array's while this lives (NumPy refuses to resize an array others refer to).
pub struct ArrayRow<'py> {
    _capsule: Bound<'py, PyCapsule>,
    data: *mut u32,
    len: usize,
}

impl ArrayRow<'_> {
    /// The row's words.
    pub fn words(&mut self) -> &mut [u32] {
        // SAFETY: `find` checked that `len` aligned 4-byte words from `data` lie inside the array
        // (row `row` < shape[0], shape[1] == len, strides[1] == 4), that the array is writeable,
        // and the capsule keeps the array and its memory alive. The GIL is held by the caller
        // (the 'py lifetime), so no other Python code writes the array while this borrow lives.
        unsafe { std::slice::from_raw_parts_mut(self.data, self.len) }
    }
}

/// Row `row` of `words`, when `words` is a NumPy array of that layout (2-D, int32 or uint32 in
/// native order, writeable, aligned, `n_words` columns next to each other, `row` in range); None
/// otherwise (the caller checks the array itself and says what is wrong).
pub fn find<'py>(words: &Bound<'py, PyAny>, row: i64, n_words: usize) -> Option<ArrayRow<'py>> {
    let capsule = words
        .getattr(intern!(words.py(), "__array_struct__"))
        .ok()?
        .cast_into::<PyCapsule>()
        .ok()?;
    let at = capsule.pointer_checked(None).ok()?;
    // SAFETY: NumPy's capsule points at a `PyArrayInterface` it owns while the capsule lives;
    // `two == 2` is the struct's own sanity check, read before anything else is trusted.
    let inter = unsafe { &*(at.as_ptr() as *const ArrayInterface) };
    let need = ALIGNED | NOTSWAPPED | WRITEABLE;
    if inter.two != 2
        || inter.nd != 2
        || !matches!(inter.typekind as u8, b'i' | b'u')
        || inter.itemsize != 4
        || inter.flags & need != need
        || inter.data.is_null()
    {
        return None;
    }
    // SAFETY: with nd == 2, shape and strides point at two entries each.
    let (shape, strides) = unsafe {
        (
            std::slice::from_raw_parts(inter.shape, 2),
            std::slice::from_raw_parts(inter.strides, 2),
        )
    };
    let row = usize::try_from(row).ok()?;
    if row >= usize::try_from(shape[0]).ok()?
        || usize::try_from(shape[1]).ok()? != n_words
        || strides[1] != 4
        || strides[0] % 4 != 0
        || (inter.data as usize) % 4 != 0
    {
        return None;
    }
    // the row's first word: the data pointer is element [0, 0], rows `strides[0]` bytes apart
    // (negative for a reversed view)
    let offset = (row as isize).checked_mul(strides[0])?;
    let data = (inter.data as *mut u8).wrapping_offset(offset) as *mut u32;
    Some(ArrayRow {
        _capsule: capsule,
        data,
        len: n_words,
    })
}

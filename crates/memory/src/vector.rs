//! Vector helpers, and sqlite-vec's registration with SQLite.

use std::sync::Once;

/// Makes sqlite-vec's `vec0` tables and `vec_*` functions available on
/// every SQLite connection this process opens from now on. Idempotent.
pub fn register_sqlite_vec() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: `sqlite3_vec_init` is sqlite-vec's extension entry point,
        // a C function with the signature SQLite expects of one
        // (`int(sqlite3*, char**, const sqlite3_api_routines*)`); the crate
        // declares it without parameters, hence the transmute to the
        // pointer type `sqlite3_auto_extension` takes. It is linked into
        // this binary and lives as long as the process.
        #[allow(unsafe_code)]
        let status = unsafe {
            type EntryPoint = unsafe extern "C" fn(
                *mut libsqlite3_sys::sqlite3,
                *mut *mut std::os::raw::c_char,
                *const libsqlite3_sys::sqlite3_api_routines,
            ) -> std::os::raw::c_int;
            let init = std::mem::transmute::<*const (), EntryPoint>(
                sqlite_vec::sqlite3_vec_init as *const (),
            );
            libsqlite3_sys::sqlite3_auto_extension(Some(init))
        };
        if status != 0 {
            tracing::error!(
                status,
                "sqlite-vec could not be registered; memory search falls back to keywords"
            );
        }
    });
}

/// Scales `vector` to length 1 (a zero vector is left alone), so L2
/// distance ranks like cosine similarity.
pub fn normalise(vector: &mut [f32]) {
    let norm: f32 = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > f32::EPSILON {
        for x in vector.iter_mut() {
            *x /= norm;
        }
    }
}

/// Cosine similarity of two unit vectors from their L2 distance.
pub fn cosine_from_distance(distance: f64) -> f64 {
    1.0 - distance * distance / 2.0
}

/// Cosine similarity of two vectors of equal length.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na <= f32::EPSILON || nb <= f32::EPSILON {
        0.0
    } else {
        dot / (na * nb)
    }
}

/// The little-endian `float32` blob sqlite-vec reads.
pub fn to_blob(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The inverse of [`to_blob`]; `None` when the length is not a multiple
/// of four.
pub fn from_blob(blob: &[u8]) -> Option<Vec<f32>> {
    if !blob.len().is_multiple_of(4) {
        return None;
    }
    Some(
        blob.chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

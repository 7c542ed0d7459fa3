//! Locking a `std` mutex whose holder may have panicked.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking the data as the panicking holder left it: the
/// daemon keeps going after a panic in one task (see [`crate::fault`]),
/// and the state behind these locks is kept consistent at every step.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_mutex_still_locks() {
        let mutex = std::sync::Arc::new(Mutex::new(1));
        let held = mutex.clone();
        let _ = std::thread::spawn(move || {
            let _guard = held.lock();
            panic!("poison it");
        })
        .join();
        assert!(mutex.is_poisoned());
        *lock(&mutex) += 1;
        assert_eq!(*lock(&mutex), 2);
    }
}

//! Which thread is running, cheaply.

/// A number identifying the calling thread among the live threads of the process (its
/// `pthread_t`): two threads alive at the same time never share it, a thread that ended may
/// pass it on. One read of the thread pointer, no thread-local lookup: hot paths use it (a
/// `thread_local!` in a shared object goes through `__tls_get_addr` on every access).
#[inline]
pub fn current_id() -> usize {
    // SAFETY: pthread_self has no preconditions and always succeeds.
    unsafe { libc::pthread_self() as usize }
}

#[cfg(test)]
mod tests {
    use super::current_id;

    #[test]
    fn threads_alive_together_have_different_ids_and_one_thread_keeps_its_own() {
        let me = current_id();
        assert_eq!(me, current_id());
        let other = std::thread::scope(|s| s.spawn(current_id).join().unwrap());
        assert_ne!(me, other);
    }
}

import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A condition variable with its mutex, for the engine's dedicated threads to sleep on.
/// Only background threads wait here; the hot path at most signals it.
///
/// `@unchecked Sendable`: the state is a pthread mutex and condition allocated once and never moved
/// (they live behind stable pointers); pthread primitives are designed to be shared between threads.
final class Wakeup: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let cond: UnsafeMutablePointer<pthread_cond_t>

    init() {
        mutex = .allocate(capacity: 1)
        cond = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        // Timed waits on the monotonic clock: a wall-clock jump must not stall the flusher.
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        pthread_cond_init(cond, &attr)
        pthread_condattr_destroy(&attr)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        cond.deallocate()
        mutex.deallocate()
    }

    /// Runs `body` with the mutex held.
    func locked<R>(_ body: () -> R) -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return body()
    }

    /// Waits (mutex must be held, i.e. call inside `locked`) until signalled or `seconds` pass.
    func waitLocked(seconds: Double) {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        let ns = Int(ts.tv_nsec) + Int(seconds * 1e9)
        ts.tv_sec += ns / 1_000_000_000
        ts.tv_nsec = ns % 1_000_000_000
        pthread_cond_timedwait(cond, mutex, &ts)
    }

    func waitLocked() { pthread_cond_wait(cond, mutex) }

    func broadcast() {
        pthread_mutex_lock(mutex)
        pthread_cond_broadcast(cond)
        pthread_mutex_unlock(mutex)
    }
}

/// A one-shot gate: `open()` once, `wait()` blocks until then. Used to join threads and to block a
/// caller until a background thread finished its request.
final class Latch: Sendable {
    private let opened = Atomic<Bool>(false)
    private let wakeup = Wakeup()

    init() {}

    func open() {
        wakeup.locked { opened.store(true, ordering: .sequentiallyConsistent) }
        wakeup.broadcast()
    }

    func wait() {
        wakeup.locked {
            while !opened.load(ordering: .sequentiallyConsistent) { wakeup.waitLocked() }
        }
    }

    var isOpen: Bool { opened.load(ordering: .sequentiallyConsistent) }
}

/// Moves a non-Sendable value (a SQLite connection) to exactly one new thread.
///
/// `@unchecked Sendable`: the creator hands the value over before the thread starts and never
/// touches it again, so only one thread ever uses it; the connection itself is single-threaded.
struct ThreadHandoff<T>: @unchecked Sendable {
    let value: T
}

/// Starts a named dedicated thread running `body`; the returned latch opens when it has returned.
func startThread(name: String, _ body: @escaping @Sendable () -> Void) -> Latch {
    let done = Latch()
    let thread = Thread {
        body()
        done.open()
    }
    thread.name = name
    // 8 MiB: SQLite and LZ4 are called from these threads; be generous.
    thread.stackSize = 8 << 20
    thread.start()
    return done
}

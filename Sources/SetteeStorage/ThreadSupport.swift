import CMalloc
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

    /// Waits (mutex must be held, i.e. call inside `locked`) until signalled or `seconds` pass (clamped by
    /// `deadline(after:from:)`, so no caller's arithmetic can make this trap).
    func waitLocked(seconds: Double) {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        var ts = Self.deadline(after: seconds, from: now)
        pthread_cond_timedwait(cond, mutex, &ts)
    }

    /// Waits (mutex held) until signalled or the monotonic clock (`monotonicNanos()`) reaches `deadline`; at once if
    /// it already has. The engine's threads keep their deadlines on that clock, so nothing is subtracted here that
    /// could wrap.
    func waitLocked(untilMonotonicNanos deadline: UInt64) {
        var ts = timespec(
            tv_sec: Int(clamping: deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        pthread_cond_timedwait(cond, mutex, &ts)
    }

    /// The longest timed wait: every caller waits in a loop that looks again when it wakes, so a longer one (a
    /// huge `expiryPagerInterval`) only wakes up once a day for nothing.
    static let maxWaitSeconds: Double = 86_400

    /// `now` plus `seconds`, taken as 0 when negative or NaN and as `maxWaitSeconds` past that. Before this clamp a
    /// window deadline that passed between the flusher's check and its wait made `seconds` a wrapped 1.8e10, and
    /// `Int(seconds * 1e9)` trapped: the node crashed under load (stop 54; the flusher now waits for its deadlines
    /// with `waitLocked(untilMonotonicNanos:)`).
    static func deadline(after seconds: Double, from now: timespec) -> timespec {
        let wait = seconds.isNaN ? 0 : min(max(seconds, 0), maxWaitSeconds)
        let ns = Int(now.tv_nsec) + Int(wait * 1e9)
        var ts = now
        ts.tv_sec += ns / 1_000_000_000
        ts.tv_nsec = ns % 1_000_000_000
        return ts
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
/// The nice value (Linux: per thread) given to the engine's background threads (flusher, expiry pager):
/// above 0 they yield the CPU to the KV event loops when both want it, which keeps request latency tails
/// short on small machines at the cost of persistence lag under saturation. Set once at start-up
/// (`settee-server --background-nice`), before buckets open.
public enum BackgroundPriority {
    public static let nice = Atomic<Int32>(0)

    /// Applies `nice` to the calling thread (no-op at 0; failures are ignored: it is only a hint).
    static func applyToCurrentThread() {
        let n = nice.load(ordering: .relaxed)
        guard n != 0 else { return }
        // Linux applies PRIO_PROCESS with a thread id to that thread alone. The id comes from
        // /proc/thread-self ("PID/task/TID"): gettid(2) has no Swift-importable wrapper here.
        #if os(Linux)
            var link = [CChar](repeating: 0, count: 64)
            let length = readlink("/proc/thread-self", &link, link.count - 1)
            guard length > 0,
                let tid = String(decoding: link[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
                    .split(separator: "/").last.flatMap({ id_t($0) })
            else { return }
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), tid, n)
        #endif
    }
}

/// glibc malloc's arenas for the server process (ADR 0108).
///
/// glibc gives a thread an arena of its own only while the process has fewer than 8 per core (16 on 2 cores); a
/// later thread shares one. A node has more long-lived threads than that (event loops, each bucket's flusher,
/// reader and pager, the HTTP servers' pools), so which threads share is decided by the order they first allocate
/// in. When a bucket's flusher or another busy thread lands in the arena of the event loop that allocates the items,
/// its transient allocations interleave with the items' and leave holes the items cannot reuse: after the same load
/// of 1,000,000 1 KiB items the bytes in use were the same to 0.01 %, while the free bytes the arena kept varied from
/// 7 to 32 MB.
public enum MallocArenas {
    /// The most arenas the process may create: enough for each of a node's long-lived threads to keep its own.
    public static let limit: Int32 = 64

    /// Raises the arena limit; call before the node starts its threads (threads that allocated already keep theirs).
    /// False if glibc refused it (the process runs on with its default).
    @discardableResult
    public static func giveEachThreadItsOwn() -> Bool {
        #if os(Linux)
            return mallopt(M_ARENA_MAX, limit) == 1
        #else
            return false
        #endif
    }
}

func startThread(name: String, background: Bool = false, _ body: @escaping @Sendable () -> Void) -> Latch {
    let done = Latch()
    let thread = Thread {
        #if os(Linux)
            // Foundation's `Thread.name` does not reach the kernel here; top -H and perf show this one (15 bytes).
            // (pthread_setname_np and prctl are not importable; the kernel takes the name from /proc too.)
            let fd = open("/proc/thread-self/comm", O_WRONLY)
            if fd >= 0 {
                let bytes = Array(name.utf8.prefix(15))
                _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                close(fd)
            }
        #endif
        if background { BackgroundPriority.applyToCurrentThread() }
        body()
        done.open()
    }
    thread.name = name
    // 8 MiB: SQLite and LZ4 are called from these threads; be generous.
    thread.stackSize = 8 << 20
    thread.start()
    return done
}

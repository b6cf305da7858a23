import Foundation

/// A non-Sendable value (a SQLite connection and its statements) used by one thread at a time.
/// Every access holds the lock for its whole duration, so writes are serialised on this one object.
final class Guarded<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value?

    init(_ value: Value) { self.value = value }

    /// Runs `body` with exclusive access; throws `LiteError.closed` after `close()`.
    func with<R>(_ body: (Value) throws -> R) throws(LiteError) -> R {
        lock.lock()
        defer { lock.unlock() }
        guard let value else { throw .closed }
        do { return try body(value) } catch { throw LiteError.wrap(error) }
    }

    /// Drops the value (its deinit closes the connection) once no one is using it.
    func close() {
        lock.lock()
        value = nil
        lock.unlock()
    }
}

import Foundation
import SetteeLite

/// A thread-safe counter for closures the database calls (map functions).
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    func increment() {
        lock.lock()
        n += 1
        lock.unlock()
    }
    var value: Int {
        lock.lock()
        defer { lock.unlock() }
        return n
    }
}

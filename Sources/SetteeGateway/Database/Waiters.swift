import SetteeJSON
import Synchronization

/// Feeds waiting for a change (longpoll, continuous, websocket). A waiter is registered before its
/// owner checks for changes, so a change that lands between the check and the wait still wakes it.
struct WaiterTable: Sendable {
    struct Waiter: Sendable {
        /// The reader's name (nil: admin).
        var user: String?
        /// Channels whose writes wake it; nil: every write (admin, `*` readers).
        var channels: Set<String>?
        var notified = false
        var continuation: CheckedContinuation<Void, Never>?
    }
    var next: UInt64 = 0
    var waiting: [UInt64: Waiter] = [:]
}

extension GatewayDatabase {
    func register(user: String?, channels: Set<String>?) -> UInt64 {
        waiters.withLock { t in
            t.next += 1
            t.waiting[t.next] = WaiterTable.Waiter(user: user, channels: channels)
            return t.next
        }
    }

    func unregister(_ id: UInt64) {
        let c = waiters.withLock { $0.waiting.removeValue(forKey: id)?.continuation }
        c?.resume()
    }

    /// Suspends until the waiter is notified (returns at once if it already was).
    func suspend(_ id: UInt64) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = waiters.withLock { t -> Bool in
                guard var w = t.waiting[id], !w.notified else { return true }
                w.continuation = c
                t.waiting[id] = w
                return false
            }
            if now { c.resume() }
        }
    }

    /// Marks waiters notified and resumes them (removing the ones resumed).
    private func fire(_ pick: (WaiterTable.Waiter) -> Bool) {
        let resume = waiters.withLock { t -> [CheckedContinuation<Void, Never>] in
            var out: [CheckedContinuation<Void, Never>] = []
            for (id, var w) in t.waiting where !w.notified && pick(w) {
                w.notified = true
                if let c = w.continuation {
                    w.continuation = nil
                    out.append(c)
                }
                t.waiting[id] = w
            }
            return out
        }
        for c in resume { c.resume() }
    }

    func wakeAll() { fire { _ in true } }

    func wake(users: Set<String>) {
        guard !users.isEmpty else { return }
        let all = users.contains { $0.hasPrefix("role:") }
        fire { w in w.user == nil || all || users.contains(w.user!) }
    }

    func notify(_ change: IndexChange) {
        if change.stableMoved {
            wakeAll()
            return
        }
        if !change.principals.isEmpty { wake(users: change.principals) }
        guard change.document || !change.channels.isEmpty else { return }
        fire { w in w.channels.map { !$0.isDisjoint(with: change.channels) } ?? change.document }
    }
}

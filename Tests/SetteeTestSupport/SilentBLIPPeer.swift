import SetteeBLIP
import Synchronization

/// A BLIP peer that never answers: every request sent to it waits, cancellation or not, until `release()` (then it,
/// and every later one, is answered with an empty response). Stands for a client that stopped reading, to prove what
/// a handler holds while its requests cannot go out.
public final class SilentBLIPPeer: BLIPPeer {
    private let waiting = Mutex<[CheckedContinuation<Void, Never>]>([])
    private let released = Mutex(false)

    public init() {}

    public func send(_ request: BLIPMessage) async throws -> BLIPMessage? {
        await withCheckedContinuation { c in
            let now = released.withLock { $0 }
            if now { c.resume() } else { waiting.withLock { $0.append(c) } }
        }
        return BLIPMessage(type: .response)
    }

    /// Requests waiting for an answer.
    public var waiters: Int { waiting.withLock { $0.count } }

    /// Answers every waiting request, and every later one at once.
    public func release() {
        released.withLock { $0 = true }
        let all = waiting.withLock { w -> [CheckedContinuation<Void, Never>] in
            defer { w = [] }
            return w
        }
        for c in all { c.resume() }
    }
}

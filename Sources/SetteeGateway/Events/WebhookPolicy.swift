import SetteeCore

/// The decisions of webhook delivery, as pure values (the dispatcher only interprets them): which lane an
/// event goes to, whether the bounded queue takes it, and what to do after an attempt.
public enum WebhookPolicy {
    /// The lane of a document: every event of one document goes to the same lane, whose single worker posts
    /// them one after the other, so a document's changes arrive in the order they were made.
    public static func lane(of docID: String, lanes: Int) -> Int {
        guard lanes > 1 else { return 0 }
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in docID.utf8 {
            h ^= UInt64(b)
            h = h &* 0x0000_0100_0000_01b3
        }
        return Int(h % UInt64(lanes))
    }

    /// Lanes for a handler: `max_processes`, bounded by `Limits.webhookMaxLanes`.
    public static func lanes(maxProcesses: Int) -> Int { min(max(1, maxProcesses), Limits.webhookMaxLanes) }

    /// What an attempt came to.
    public enum Outcome: Sendable, Equatable {
        /// The endpoint answered this HTTP status.
        case status(Int)
        /// No answer: connection refused, reset, or the handler's timeout.
        case noAnswer
    }

    /// What to do next.
    public enum Next: Sendable, Equatable {
        case delivered
        case retry(afterMs: Int)
        case giveUp
    }

    /// After attempt number `attempt` (1-based): 2xx is delivered; no answer, 408, 429 and 5xx are retried with a
    /// doubling delay until `Limits.webhookMaxAttempts`; any other status is the endpoint refusing this event,
    /// which sending it again would not change.
    public static func next(after outcome: Outcome, attempt: Int) -> Next {
        switch outcome {
        case .status(let s) where (200..<300).contains(s): return .delivered
        case .status(let s) where s == 408 || s == 429 || s >= 500: break
        case .status: return .giveUp
        case .noAnswer: break
        }
        guard attempt < Limits.webhookMaxAttempts, attempt >= 1 else { return .giveUp }
        return .retry(afterMs: Limits.webhookRetryBaseMs << min(attempt - 1, 10))
    }
}

/// One handler's queue of events, lane by lane, bounded as a whole by `capacity`.
public struct WebhookQueue<Event> {
    public private(set) var lanes: [[Event]]
    public let capacity: Int
    public private(set) var count = 0

    public init(lanes: Int, capacity: Int) {
        self.lanes = Array(repeating: [], count: max(1, lanes))
        self.capacity = capacity
    }

    /// Appends `event` to `lane` unless the queue is full (then false: the caller waits or drops it).
    public mutating func offer(_ event: Event, lane: Int) -> Bool {
        guard count < capacity, lanes.indices.contains(lane) else { return false }
        lanes[lane].append(event)
        count += 1
        return true
    }

    /// The oldest event of `lane`, removed.
    public mutating func take(lane: Int) -> Event? {
        guard lanes.indices.contains(lane), !lanes[lane].isEmpty else { return nil }
        count -= 1
        return lanes[lane].removeFirst()
    }
}

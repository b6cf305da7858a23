/// What a fault-test client did, in Jepsen's terms: every operation is *invoked* and then *completes* as
/// `ok` (it happened), `fail` (it certainly did not happen) or `info` (unknown: a timeout, a lost
/// connection, an ambiguous durable write). The checkers judge a run from its history alone, so the same
/// rules apply to our smart client, the official SDK or a recorded file.
///
/// Times are nanoseconds on one monotonic clock of the process that recorded the history.

/// One operation a client invoked.
public enum TortureOperation: Hashable, Sendable, Codable {
    /// Write `value` to the register `key` (durable upsert).
    case write(key: String, value: Int)
    /// Read the register `key`; the outcome carries the value seen (nil: the key did not exist).
    case read(key: String)
    /// Create the document `key` once (durable insert); the lost-write check looks for every acknowledged one.
    case insert(key: String)
    /// Add `delta` to the counter `key` (durable read-modify-write).
    case add(key: String, delta: Int)

    public var key: String {
        switch self {
        case .write(let k, _), .read(let k), .insert(let k), .add(let k, _): return k
        }
    }
}

/// How an operation ended.
public enum TortureOutcome: Hashable, Sendable, Codable {
    /// It happened; for a read, the value seen (nil when the key was missing).
    case ok(read: Int?)
    /// It certainly did not happen (the server refused it before applying anything).
    case fail
    /// Unknown: it may or may not have happened.
    case info

    public static let ok = TortureOutcome.ok(read: nil)
}

/// One operation: invoked at `invokeNs`, completed at `completeNs` with `outcome`.
public struct TortureEntry: Hashable, Sendable, Codable {
    /// The client (logical process) that ran it; one operation at a time per process.
    public var process: Int
    public var operation: TortureOperation
    public var invokeNs: UInt64
    public var completeNs: UInt64
    public var outcome: TortureOutcome

    public init(
        process: Int, operation: TortureOperation, invokeNs: UInt64, completeNs: UInt64, outcome: TortureOutcome
    ) {
        self.process = process
        self.operation = operation
        self.invokeNs = invokeNs
        self.completeNs = completeNs
        self.outcome = outcome
    }
}

/// A named stretch of a run (e.g. "steady", "fault: kill n2", "healed") for availability per phase.
public struct TorturePhase: Hashable, Sendable, Codable {
    public var name: String
    public var startNs: UInt64
    public var endNs: UInt64

    public init(name: String, startNs: UInt64, endNs: UInt64) {
        self.name = name
        self.startNs = startNs
        self.endNs = endNs
    }
}

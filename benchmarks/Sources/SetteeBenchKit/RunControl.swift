import Synchronization

/// State shared by every connection of one phase: the op budget, the stop flag and live counters
/// for the progress line. Atomics only, so the hot path never takes a lock.
public final class RunControl: Sendable {
    /// Ops still allowed to start; `Int.max` when the phase is bounded by time only.
    private let budget: Atomic<Int>
    private let stopFlag = Atomic<Bool>(false)
    let completed = Atomic<Int>(0)
    let failed = Atomic<Int>(0)

    public init(opLimit: Int?) {
        budget = Atomic(opLimit ?? Int.max)
    }

    /// Claims one op from the budget; false once it is spent.
    @inline(__always)
    func takeOne() -> Bool {
        if budget.load(ordering: .relaxed) == Int.max { return true }
        return budget.subtract(1, ordering: .relaxed).oldValue > 0
    }

    public func stop() { stopFlag.store(true, ordering: .relaxed) }
    var isStopped: Bool { stopFlag.load(ordering: .relaxed) }

    public var completedCount: Int { completed.load(ordering: .relaxed) }
    public var failedCount: Int { failed.load(ordering: .relaxed) }
}

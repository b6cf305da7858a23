/// Capped exponential back-off, the one every retry loop uses: the smart client's `RetryPolicy` and `ChangeStream`
/// reopens, the replica's `RefusedApplyRetry` and consumer reconnects, the flusher's failed commits, the replicator's
/// `ReplicationState`, the gateway's restart rechecks, the bench's preload retry. No jitter: every caller is one
/// process's own loop, not a herd of clients, and the tests read the delays exactly. A loop keeps a count of its
/// failures since the last success, not the last delay.
public enum Backoff {
    /// `first` doubled `attempt` times (`attempt` 0 is `first`), never above `cap`. Never traps: the doubling
    /// stops at the cap before a shift could leave the type, and a negative `attempt` counts as 0.
    @inlinable
    public static func doubling<T: FixedWidthInteger>(_ first: T, attempt: Int, cap: T) -> T {
        let shift = min(max(attempt, 0), T.bitWidth - 2)
        return first > (cap >> shift) ? cap : min(cap, first << shift)
    }
}
